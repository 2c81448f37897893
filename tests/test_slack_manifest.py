"""The Slack app manifest against the code: its URLs are opsbot's routes, its events and command are the ones
bolt is given, and its bot scopes are exactly those of the Web API methods the code calls."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from typer.testing import CliRunner

from opsbot.cli import app
from opsbot.settings import Settings
from opsbot.slack.app import router
from opsbot.slack.manifest import (
    BOT_EVENTS,
    EVENTS_PATH,
    METHOD_SCOPES,
    bot_scopes,
    manifest,
)

PACKAGE = Path(__file__).resolve().parent.parent / "opsbot"
WEB_API = re.compile(r"^(admin|apps|assistant|auth|bookmarks|bots|calls|canvases|chat|conversations|dnd|emoji|files|"
                     r"functions|pins|reactions|reminders|search|stars|team|usergroups|users|views|workflows)_[a-zA-Z0-9_]+$")


def _calls(predicate) -> set[str]:
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                hit = predicate(node)
                if hit:
                    found.add(hit)
    return found


def _web_api_method(node: ast.Call) -> str | None:
    """``<something>client.<method>(...)``: a slack_sdk Web API call."""
    receiver = node.func.value  # type: ignore[attr-defined]
    name = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", "")
    return node.func.attr if name.endswith("client") and WEB_API.match(node.func.attr) else None  # type: ignore[attr-defined]


def _bolt_events(node: ast.Call) -> str | None:
    func = node.func
    if func.attr == "event" and isinstance(func.value, ast.Attribute) and func.value.attr == "bolt":  # type: ignore[attr-defined]
        return ast.literal_eval(node.args[0])
    return None


def test_scopes_are_those_of_the_methods_the_code_calls():
    called = _calls(_web_api_method)
    assert {"chat_postMessage", "chat_update", "users_info"} <= called, called  # the scan finds the calls
    assert called == set(METHOD_SCOPES), f"calls without a scope: {called - set(METHOD_SCOPES)}; " \
                                         f"scopes for calls that are gone: {set(METHOD_SCOPES) - called}"
    assert bot_scopes(called) == manifest(Settings(), "https://o.example")["oauth_config"]["scopes"]["bot"]


def test_events_and_urls_are_the_routes_bolt_and_the_service_answer():
    assert _calls(_bolt_events) == set(BOT_EVENTS)
    assert EVENTS_PATH in {route.path for route in router.routes}
    m = manifest(Settings(slack_command="/oncall"), "https://opsbot.example.com/")
    url = "https://opsbot.example.com" + EVENTS_PATH
    assert (m["features"]["slash_commands"][0]["command"], m["features"]["slash_commands"][0]["url"]) == ("/oncall", url)
    assert m["settings"]["interactivity"] == {"is_enabled": True, "request_url": url}
    assert m["settings"]["event_subscriptions"] == {"bot_events": ["app_mention"], "request_url": url}
    assert m["settings"]["socket_mode_enabled"] is False


def test_the_command_prints_it_and_refuses_bad_urls():
    runner = CliRunner()
    result = runner.invoke(app, ["slack", "manifest", "--url", "https://opsbot.example.com"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["settings"]["interactivity"]["request_url"] == "https://opsbot.example.com/slack/events"
    socket = json.loads(runner.invoke(app, ["slack", "manifest", "--socket-mode"]).output)
    assert socket["settings"]["socket_mode_enabled"] is True and "request_url" not in socket["settings"]["interactivity"]
    for bad in (["--url", "http://plain.example"], ["--url", "https://x.example/?a=1"], []):
        refused = runner.invoke(app, ["slack", "manifest", *bad])
        assert refused.exit_code == 2 and "error:" in refused.output
