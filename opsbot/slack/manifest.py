"""The Slack app's manifest (``opsbot slack manifest``): what opsbot answers and the bot scopes its calls need.

Manifest fields as in Slack's schema (@slack/web-api ``src/types/request/manifest.ts``: ``display_information``,
``features.slash_commands[].url``, ``settings.interactivity.request_url``, ``settings.event_subscriptions``,
``oauth_config.scopes.bot``). Every Web API method opsbot calls is in ``METHOD_SCOPES`` with the bot scope
Slack's method reference names for it; tests/test_slack_manifest.py finds the calls in the code, so a new
call without its scope here fails the tests.
"""

from __future__ import annotations

from typing import Any

from opsbot.settings import Settings

EVENTS_PATH = "/slack/events"  # opsbot/slack/app.py: commands, interactivity and events share one Request URL
BOT_EVENTS = ("app_mention",)  # SlackSurface registers these with bolt

# slack_sdk client method -> the bot scope it needs (docs.slack.dev/reference/methods/<method>)
METHOD_SCOPES: dict[str, tuple[str, ...]] = {
    "chat_postMessage": ("chat:write",),
    "chat_update": ("chat:write",),
    "chat_postEphemeral": ("chat:write",),
    # the incident message looked up by metadata after a timeout: public or private alert channel
    "conversations_history": ("channels:history", "groups:history"),
    "usergroups_users_list": ("usergroups:read",),
    "users_info": ("users:read",),
    # files.getUploadURLExternal + files.completeUploadExternal: the weekly report's charts
    "files_upload_v2": ("files:write",),
}
EVENT_SCOPES = {"app_mention": "app_mentions:read"}


def bot_scopes(methods: set[str] | None = None) -> list[str]:
    """The bot scopes of these methods (all opsbot calls by default), its events', and ``commands``."""
    chosen = METHOD_SCOPES if methods is None else {m: METHOD_SCOPES[m] for m in methods}
    scopes = {scope for needed in chosen.values() for scope in needed}
    scopes |= {EVENT_SCOPES[event] for event in BOT_EVENTS}
    scopes.add("commands")  # the slash command
    return sorted(scopes)


def manifest(settings: Settings, url: str | None, *, name: str = "opsbot") -> dict[str, Any]:
    """The app manifest; ``url`` is opsbot's public base URL (None: Socket Mode, Slack needs no Request URL)."""
    request_url = url.rstrip("/") + EVENTS_PATH if url else None
    command: dict[str, Any] = {
        "command": settings.slack_command,
        "description": "Ask opsbot: probe, diagnose, status, restart",
        "usage_hint": "decode is stuck | status | probe prefill | restart decode | report weekly | help",
        "should_escape": False,
    }
    events: dict[str, Any] = {"bot_events": list(BOT_EVENTS)}
    interactivity: dict[str, Any] = {"is_enabled": True}
    if request_url:
        command["url"] = request_url
        events["request_url"] = request_url
        interactivity["request_url"] = request_url
    return {
        "_metadata": {"major_version": 1, "minor_version": 1},
        "display_information": {"name": name, "description": "Incident response for SGLang prefill/decode"},
        "features": {
            "bot_user": {"display_name": name, "always_online": True},
            "slash_commands": [command],
        },
        "oauth_config": {"scopes": {"bot": bot_scopes()}},
        "settings": {
            "event_subscriptions": events,
            "interactivity": interactivity,
            "org_deploy_enabled": False,
            "socket_mode_enabled": request_url is None,
            "token_rotation_enabled": False,
        },
    }
