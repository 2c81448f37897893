"""One Slack message per incident, kept current: posted once when the incident opens, then edited in
place (``chat.update``) as it moves (alerts coalesced, a second probe, approval asked, restart running,
verified, resolved); each timeline entry is also a reply in its thread.

``incident_blocks`` is pure (the incident, its actions and its latest finding in, blocks out).
``IncidentMessages`` does the I/O through the one notifier (``opsbot.slack.notifier``): a claim in the
store makes the message posted at most once across instances; the notifier retries Slack's errors, and
looks a post that may have reached Slack (a timeout) up by its metadata before sending it again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any


from opsbot.contracts import ActionState, IncidentState, RestartPlan
from opsbot.slack.blocks import context, cost_blocks, escape, restart_buttons, section
from opsbot.slack.notifier import SlackNotifier
from opsbot.store.incidents import duration_text

log = logging.getLogger(__name__)
Block = dict[str, Any]
ICON = {"critical": ":red_circle:", "high": ":large_red_square:", "warning": ":large_orange_circle:",
        "info": ":large_blue_circle:"}
EVENT_TYPE = "opsbot_incident"
CLAIM_STALE = timedelta(minutes=2)


def stage(incident: Any, actions: list[Any], restart_helps: bool) -> str:
    """Where the incident stands, in one line (the message's status line)."""
    if incident.state == IncidentState.resolved:
        return (f":white_check_mark: *Resolved*: its alerts resolved; time to recovery "
                f"*{duration_text(incident.time_to_recovery_s or 0)}*")
    reopened = sum(1 for e in incident.timeline or [] if e.get("kind") == "reopened")
    again = f":repeat: reopened {reopened}x (named again after it resolved) · " if reopened else ""
    return again + _open_stage(actions, restart_helps)


def _open_stage(actions: list[Any], restart_helps: bool) -> str:
    latest = actions[0] if actions else None
    if latest is None:
        return (":rotating_light: *Open*: a restart would help but was not offered (the thread says why)"
                if restart_helps else ":rotating_light: *Open*: a restart does not help this class; see what to do")
    who = f" (approved by {escape(latest.approved_by)})" if latest.approved_by else ""
    return {
        ActionState.planned: (f":raising_hand: *Approval asked*: re-register the workers of {escape(latest.role)} (the "
                              "ladder's cheapest step); an approver clicks Re-register" if latest.kind == "reregister"
                              else f":raising_hand: *Approval asked*: restart {escape(latest.role)}; an approver clicks Restart"),
        ActionState.approved: f":hourglass_flowing_sand: *Restart approved*{who}; starting",
        ActionState.executing: f":hourglass_flowing_sand: *Restart running*{who}",
        ActionState.succeeded: f":large_green_circle: *Verified*: {escape(latest.outcome or 'restarted')}; waiting for the alerts to resolve",
        ActionState.failed: f":x: *Restart failed*: {escape(latest.outcome or '')}",
        ActionState.refused: f":no_entry: *Restart not done*: {escape(latest.outcome or '')}",
        ActionState.expired: f":zzz: *Restart plan expired*: {escape(latest.outcome or '')}",
        ActionState.superseded: f":fast_forward: *Restart plan superseded*: {escape(latest.outcome or '')}",
    }.get(latest.state, f"*{escape(latest.state)}*")


def incident_blocks(incident: Any, actions: list[Any], finding: Any | None, evidence_url: str) -> list[Block]:
    """The message: what, where, confidence, alerts and probes, evidence, what to do, where it stands,
    and a Restart button only while a restart the finding asks for waits for approval."""
    icon = ICON.get(incident.severity, ":grey_question:")
    head = (f"{icon} *{escape(incident.title or incident.incident)}* (`{incident.incident}`) on "
            f"*{escape(', '.join(incident.roles))}* in `{escape(incident.cluster)}`")
    facts = (f"confidence *{(incident.confidence or 0):.0%}* · first seen {incident.first_seen:%H:%M:%S} UTC · "
             f"{len(incident.alertnames)} alert(s): {escape(', '.join(incident.alertnames) or 'none')} · "
             f"{len(incident.probes)} probe(s)")
    blocks = [section(head + (f"\n{escape(incident.summary)}" if incident.summary else "")), context(facts)]
    if finding is not None and finding.evidence:
        blocks.append(section("*Evidence*\n" + "\n".join(f"• {escape(e)}" for e in finding.evidence[:8])))
    remedies = list(finding.detail.get("remedies") or []) if finding is not None else []
    if remedies:
        blocks.append(section("*What to do*\n" + "\n".join(f"• {escape(r.get('text'))}" for r in remedies if r.get("text"))))
    blocks.append(section(stage(incident, actions, any(r.get("kind") == "restart" for r in remedies))))
    waiting = [a for a in actions if a.state == ActionState.planned] if incident.state == IncidentState.open else []
    for a in waiting[:1]:  # ladder: what the restart costs, above its button
        blocks += [*cost_blocks(a.role, RestartPlan.model_validate(a.plan).cost), restart_buttons(a.role, a.id, a.kind)]
    blocks.append(context(f"<{evidence_url}|evidence: probe {incident.probes[-1]}> · incident `{incident.id}` · "
                          "timeline in the thread"))
    return blocks


def headline(incident: Any) -> str:
    word = "resolved" if incident.state == "resolved" else "open"
    return f"[{word}] {incident.incident} on {', '.join(incident.roles)} ({incident.cluster})"


Snapshot = tuple[Any, list[Any], Any | None]


class IncidentMessages:
    """Keeps each incident's message current; ``changed(id)`` after every change (from the flow)."""

    def __init__(self, notifier: SlackNotifier, store: Any, db: Callable[..., Awaitable[Any]], channel: str | None,
                 page_url: Callable[[str], str], *, instance: str | None = None, lease: timedelta | None = None) -> None:
        self.notifier, self.store, self.db, self.channel = notifier, store, db, channel
        self.page_url = page_url
        self.instance, self.lease = instance, lease  # whose claims these are; a dead instance's are free
        self.resync_delays_s = [5.0, 15.0, 30.0, 60.0, 120.0, 300.0]  # Slack still down: try again later
        self._dirty: set[str] = set()
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def notify(self, incident_id: str) -> None:
        """The incident changed: bring its message up to date in the background, one sync at a time."""
        if not self.channel:
            return
        self._dirty.add(incident_id)
        if incident_id not in self._tasks:
            self._tasks[incident_id] = asyncio.create_task(self._drive(incident_id), name=f"incident:{incident_id}")

    async def _drive(self, incident_id: str) -> None:
        try:
            failures = 0
            while incident_id in self._dirty:
                self._dirty.discard(incident_id)
                if await self.changed(incident_id):
                    failures = 0
                    continue
                if failures < len(self.resync_delays_s):
                    await asyncio.sleep(self.resync_delays_s[failures])
                    failures += 1
                    self._dirty.add(incident_id)
        finally:
            del self._tasks[incident_id]

    async def drain(self) -> None:
        """Until every pending message is up to date or given up on (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    async def resume(self) -> int:
        """A lease sweep: post the messages of incidents whose instance died before posting them."""
        if not self.channel or self.lease is None:
            return 0
        orphaned = [i for i in await self.db(self.store.unposted_incidents, self.lease) if i not in self._tasks]
        for incident_id in orphaned:
            self.notify(incident_id)
        return len(orphaned)

    async def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
        await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    async def changed(self, incident_id: str) -> bool:
        """Post or edit the message and add the new timeline entries to its thread; False when Slack failed."""
        try:
            await self._sync(incident_id)
            return True
        except Exception as exc:  # noqa: BLE001 - Slack down must not stop the incident; the store says why
            log.warning("incident %s: Slack message not up to date: %s", incident_id, exc)
            await self.db(self.store.slack_failed, incident_id, f"{type(exc).__name__}: {exc}")
            return False

    async def _snapshot(self, incident_id: str) -> Snapshot:
        return await self.db(_snapshot, self.store, incident_id)

    async def _sync(self, incident_id: str) -> None:
        incident, actions, finding = await self._snapshot(incident_id)
        if incident is None or not self.channel:
            return
        blocks = incident_blocks(incident, actions, finding, self.page_url(f"/probes/{incident.probes[-1]}"))
        text = headline(incident)

        async def noted(why: str) -> None:  # Slack is being retried: the status page shows why meanwhile
            await self.db(self.store.slack_failed_attempt, incident_id, why)

        if incident.slack_ts is None:
            if not await self.db(self.store.claim_slack_post, incident_id, CLAIM_STALE, self.instance, self.lease):
                return  # posted meanwhile, or another instance is posting it
            # an earlier claim (a killed instance's, a timed-out post) may have reached Slack: the notifier looks first
            posted = await self.notifier.post(
                self.channel, text, blocks, metadata={"event_type": EVENT_TYPE, "event_payload": {"incident": incident_id}},
                maybe_sent=incident.slack_attempts > 0, on_retry=noted)
            assert posted is not None  # no dedup key: never skipped
            await self.db(self.store.slack_posted, incident_id, self.channel, posted.ts, 0)
            channel, ts, shown = self.channel, posted.ts, 0
        else:
            channel, ts, shown = incident.slack_channel, incident.slack_ts, incident.slack_version
            await self.notifier.update(channel, ts, text, blocks, on_retry=noted)
        for i, event in enumerate(incident.timeline[shown:], start=shown):
            await self.notifier.post(channel, f"{event['at'][11:19]} UTC · {escape(event['what'])}", thread_ts=ts,
                                     on_retry=noted)
            await self.db(self.store.slack_updated, incident_id, i + 1)


def _snapshot(store: Any, incident_id: str) -> Snapshot:
    incident = store.incident(incident_id)
    if incident is None:
        return None, [], None
    actions = sorted((store.action(a) for a in incident.actions), key=lambda a: a.created_at, reverse=True)
    findings = [f for p in reversed(incident.probes) for f in store.probe_findings(p) if f.incident == incident.incident]
    return incident, actions, findings[0] if findings else None
