"""The Slack surface: a slack-bolt AsyncApp on the service's FastAPI app (``POST /slack/events``).

Every request's signature is verified on the raw bytes (and its replay refused) before it is parsed;
bolt verifies it again before a listener runs.
Listeners acknowledge at once (Slack allows 3 s), then do the work and post the answer to the channel
through the one notifier (``opsbot.slack.notifier``); the Web API base URL comes from settings, so
tests point it at a local recording server. Socket Mode (``OPSBOT_SLACK_SOCKET_MODE=true`` + an ``xapp-`` token)
connects out to Slack instead, for clusters with no public ingress.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import timedelta
from typing import Any

from anyio import to_thread
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from slack_bolt.adapter.starlette.async_handler import AsyncSlackRequestHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from opsbot.bundle import Trigger
from opsbot.chat.intents import Intent, TooLong, bounded, parse_intent
from opsbot.flow import Flow, InventoryUnavailable, ProbeResult
from opsbot.parse.lines import linear
from opsbot.slack.blocks import context, decided_blocks, escape, finding_blocks, help_blocks, plan_blocks, section
from opsbot.slack.commands import Command, parse_command
from opsbot.slack.incident import IncidentMessages
from opsbot.slack.notifier import SlackNotifier
from opsbot.slack.signing import WINDOW_S, body_problem, signature_problem
from opsbot.slack.threads import AlertThreads

log = logging.getLogger(__name__)
router = APIRouter()
REPLAY_WINDOW = timedelta(seconds=WINDOW_S + 60)  # a signature older than Slack's window is refused anyway
_MENTION = linear(r"<@[A-Z0-9]+>")


@router.post("/slack/events", include_in_schema=False)
async def slack_events(request: Request) -> Response:
    """Slash commands, interactivity and events all arrive here (one Request URL in the Slack app).

    The signature is checked first, on the raw bytes (401); a signed request is refused when its
    signature was already used (a replay, 401) or when its body does not parse (400). Only then
    does bolt see it.
    """
    surface: SlackSurface = request.app.state.slack
    flow = surface.flow
    body = await request.body()
    h = request.headers
    problem = signature_problem(flow.settings.slack_signing_secret or "", h.get("x-slack-request-timestamp"),
                                h.get("x-slack-signature"), body, time.time())
    if problem is None and not await flow.db(flow.store.first_use, h["x-slack-signature"], REPLAY_WINDOW):
        problem = "this signed request was already received (a replay)"
    if problem is not None:
        return JSONResponse({"detail": problem}, 401)
    malformed = body_problem(h.get("content-type", ""), body)
    if malformed is not None:
        return JSONResponse({"detail": malformed}, 400)
    return await surface.handler.handle(request)


class SlackSurface:
    def __init__(self, flow: Flow) -> None:
        s = flow.settings
        self.flow = flow
        self.client = AsyncWebClient(token=s.slack_bot_token, base_url=s.slack_api_url)
        self.notifier = SlackNotifier.from_settings(s, self.client)  # every message goes out through it
        self.bolt = AsyncApp(client=self.client, signing_secret=s.slack_signing_secret, process_before_response=False)
        self.handler = AsyncSlackRequestHandler(self.bolt)
        self.threads = AlertThreads(self)
        self.incidents = IncidentMessages(self.notifier, flow.store, flow.db, s.slack_alert_channel, s.page_url,
                                          instance=flow.instance, lease=timedelta(seconds=s.instance_lease_s))
        flow.incidents.notifier = self.incidents
        self.bolt.command(s.slack_command)(self._command)
        self.bolt.event("app_mention")(self._mention)
        self.bolt.action("restart_approve")(self._approve)
        self.bolt.action("restart_dismiss")(self._dismiss)

    async def start_socket_mode(self) -> Any:
        """Connect out over a websocket when configured; returns the handler to close, or None."""
        s = self.flow.settings
        if not s.slack_socket_mode:
            return None
        if not s.slack_app_token:
            raise ValueError("OPSBOT_SLACK_SOCKET_MODE needs OPSBOT_SLACK_APP_TOKEN (an xapp- token with connections:write)")
        from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

        handler = AsyncSocketModeHandler(self.bolt, s.slack_app_token)
        await handler.connect_async()
        return handler

    # -- slash command ------------------------------------------------------------------------
    async def _command(self, ack: Any, command: dict[str, Any], respond: Any) -> None:
        try:
            cmd = parse_command(bounded(command.get("text", "")))
        except TooLong as exc:  # answered at once: no pattern reads it
            await ack(text=f":warning: {exc}")
            return
        if cmd.verb == "help":
            await ack(blocks=help_blocks(self.flow.settings.slack_command), text="opsbot help")
            return
        await ack(text=f"opsbot: working on `{escape(cmd.text or cmd.verb)}`…")
        user, channel = command.get("user_id", "?"), command["channel_id"]
        try:
            blocks, text = await self._answer(cmd, user)
        except Exception as exc:  # the operator sees why; the next command still works
            log.info("slack command %r failed: %s", cmd.text, exc)
            await respond(text=f":warning: {escape(exc)}", response_type="ephemeral")
            return
        await self.notifier.post(channel, text, blocks)

    async def _answer(self, cmd: Command, user: str) -> tuple[list[dict[str, Any]], str]:
        flow = self.flow
        if cmd.verb == "status":
            from opsbot.report.render import render
            from opsbot.report.status import build_status

            report = await flow.db(build_status, flow.store, None, flow.settings)
            return json.loads(await to_thread.run_sync(render, report, "blocks")), report.title
        if cmd.verb == "report":
            from opsbot.report.render import render
            from opsbot.report.weekly import build_weekly

            if cmd.args[:1] != ["weekly"]:
                raise ValueError("say `report weekly`")
            weekly = await build_weekly(flow.store, flow.settings.prometheus_url, None, settings=flow.settings)
            return json.loads(await to_thread.run_sync(render, weekly, "blocks")), weekly.title
        if cmd.verb == "restart":
            if len(cmd.args) != 1:
                raise ValueError("say which role: `restart decode`")
            action, plan = await flow.request_restart(cmd.args[:1], None, actor=f"slack:{user}", surface="slack",
                                                         reason=f"/opsbot restart by <@{user}>")
            commands = [" ".join(step.argv) + f"   # {step.node}" for step in plan.steps]
            return (plan_blocks(cmd.args[0], action.id, commands, f"{action.expires_at:%H:%M:%S} UTC", plan.cost),
                    f"restart {cmd.args[0]}?")
        intent = parse_intent(cmd.text) if cmd.verb == "ask" else None
        if intent is not None and intent.kind != "probe":
            return await self._intent_answer(intent, user)
        roles = cmd.args if cmd.verb == "probe" else flow.roles_for_words(cmd.text)
        result = await flow.run_probe(None, roles or None, Trigger(kind="slack", user=user, text=cmd.text))
        said = [context(intent.understood())] if intent is not None else []
        return said + self.result_blocks(result), _headline(result)

    async def _intent_answer(self, intent: Intent, user: str) -> tuple[list[dict[str, Any]], str]:
        """A question the store answers, with times in the asker's zone (Slack profile, else the report zone)."""
        from datetime import datetime, timezone

        from opsbot.chat.answers import answer, zone

        flow = self.flow
        try:
            inventory = flow.inventory()
        except InventoryUnavailable:
            inventory = None
        tz = zone(await self._user_zone(user), flow.settings.report_timezone)
        said = await flow.db(answer, intent, flow.store, inventory, flow.settings, tz, datetime.now(timezone.utc))
        if said is None:  # a probe request: the caller probes it; nothing for the store to answer
            return [section("That asks for a probe: `/opsbot probe`")], "That asks for a probe"
        lines = "\n".join(f"• {escape(line)}" for line in said.lines)
        return [context(said.understood), section(f"*{escape(said.title)}*\n{lines}")], said.title

    async def _user_zone(self, user: str) -> str | None:
        """The IANA zone of the user's Slack profile (``users.info``), None when Slack does not say."""
        try:
            info = await self.client.users_info(user=user)
        except Exception:  # noqa: BLE001 - no profile: the report zone is used
            return None
        return ((info.get("user") or {}).get("tz")) or None

    async def _mention(self, event: dict[str, Any], say: Any) -> None:
        """``@opsbot what happened since 02:00`` in a channel or an incident's thread: answered in the thread."""
        user, thread = event.get("user", "?"), event.get("thread_ts") or event.get("ts")
        try:
            text = _MENTION.sub(" ", bounded(event.get("text", ""))).strip()
            cmd = parse_command(text)
            blocks, title = ((help_blocks(self.flow.settings.slack_command), "opsbot help") if cmd.verb == "help"
                             else await self._answer(cmd, user))
        except Exception as exc:  # noqa: BLE001 - the operator sees why, escaped (it may quote their words)
            blocks, title = [section(f":warning: {escape(str(exc))}")], escape(str(exc))
        await self.notifier.post(event["channel"], title, blocks, thread_ts=thread)

    def result_blocks(self, result: ProbeResult) -> list[dict[str, Any]]:
        """The findings, with the flow's planned restart (buttons) for each remedy that needs approval."""
        blocks = finding_blocks(result.bundle.cluster, str(result.probe_id), result.diagnosis.findings, result.plans,
                                costs=result.costs, kinds=result.kinds, unknown=result.diagnosis.unknown_roles)
        return blocks + [section(f":no_entry: {escape(n)}") for n in result.refused]

    # -- buttons ------------------------------------------------------------------------------
    async def allowed(self, user: str) -> bool:
        """In the allow-list of users, or a member of an allowed user group (usergroups.users.list)."""
        s = self.flow.settings
        if user in s.slack_approvers:
            return True
        for group in s.slack_approver_groups:
            members = await self.client.usergroups_users_list(usergroup=group)
            if user in (members.get("users") or []):
                return True
        return False

    async def _approve(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        from opsbot.act import ApprovalRefused

        user, action_id = body["user"]["id"], action["value"]
        channel, ts = body["container"]["channel_id"], body["container"]["message_ts"]
        original = (body.get("message") or {}).get("blocks", [])
        label = action.get("text", {}).get("text", "Restart")
        if not await self.allowed(user):
            await self.flow.db(self.flow.store.audit, f"slack:{user}", "slack", "approval refused: not allowed",
                                  {"action": action_id})
            await self.notifier.ephemeral(
                channel, user, f":no_entry: <@{user}> is not allowed to approve restarts (ask someone in the approvers list).")
            return
        if await self.flow.db(self.flow.store.incident_for_action, action_id) is not None:
            try:  # the incident's message follows the restart (the flow tells it)
                await self.flow.approve_and_execute(action_id, approver=f"slack:{user}", surface="slack")
            except ApprovalRefused as exc:
                await self.notifier.ephemeral(channel, user, f":warning: not done: {escape(exc)}")
            return
        running = f":hourglass_flowing_sand: *{escape(label)}* approved by <@{user}>; running…"
        await self.notifier.update(channel, ts, label, decided_blocks(original, running))
        try:
            outcome = await self.flow.approve_and_execute(action_id, approver=f"slack:{user}", surface="slack")
        except ApprovalRefused as exc:
            await self.notifier.update(channel, ts, escape(exc), decided_blocks(original, f":warning: not done: {escape(exc)}"))
            return
        icon = ":white_check_mark:" if outcome.ok else ":x:"
        line = f"{icon} *{escape(label)}* approved by <@{user}>: *{outcome.state}*. {escape(outcome.message)}"
        await self.notifier.update(channel, ts, line, decided_blocks(original, line))

    async def _dismiss(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Dismissing a plan cancels a restart: it takes an approver, as approving does."""
        await ack()
        user, action_id = body["user"]["id"], action["value"]
        channel, ts = body["container"]["channel_id"], body["container"]["message_ts"]
        if not await self.allowed(user):
            await self.flow.db(self.flow.store.audit, f"slack:{user}", "slack", "dismissal refused: not allowed",
                                  {"action": action_id})
            await self.notifier.ephemeral(
                channel, user, f":no_entry: <@{user}> is not allowed to dismiss restarts (ask someone in the approvers list).")
            return
        row = await self.flow.dismiss(action_id, actor=f"slack:{user}", surface="slack")
        if row is None:
            await self.notifier.ephemeral(channel, user, await self._not_pending(action_id))
            return
        if await self.flow.db(self.flow.store.incident_for_action, action_id) is not None:
            return  # the incident's message says it
        line = f":heavy_multiplication_x: dismissed by <@{user}>"
        await self.notifier.update(channel, ts, line, decided_blocks((body.get("message") or {}).get("blocks", []), line))


    async def _not_pending(self, action_id: str) -> str:
        """Why a dismissal changed nothing: no such action, or it is no longer waiting for approval."""
        try:
            row = await self.flow.db(self.flow.store.action, action_id)
        except KeyError:
            return f":warning: no restart plan {escape(action_id[:40])}: nothing dismissed"
        return f":warning: restart plan {row.id} is {row.state}, not waiting for approval: nothing dismissed"


def _headline(result: ProbeResult) -> str:
    d = result.diagnosis
    if d.findings:
        return f"{d.findings[0].incident} on {', '.join(d.findings[0].roles)}"
    if d.healthy:
        return f"{result.bundle.cluster}: healthy"
    unknown = "; ".join(f"{r.role}: {', '.join(r.reasons)}" for r in d.unknown_roles)
    return f"{result.bundle.cluster}: unknown (not healthy) ({unknown})"
