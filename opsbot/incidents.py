"""The incident's lifecycle, its one owner: an alert's probe that names a class opens (or joins) the
incident and takes the restart its finding asks for; approvals, restarts and their outcomes are its
timeline; resolved alerts close it, as does the end of a verified restart of its roles (whoever ran it),
or nothing naming it for ``incident_stale_s`` (it closes itself, saying so). After each change the
notifier (the Slack message) is told.

    open → (join | reclass while its alerts fire) → held for a restart → resolved → (reopen, same class)

The guards are decided here; each transition is one store transaction (``opsbot.store.incidents``),
which also supersedes the incident's waiting restart plans when it resolves. Every surface reaches
this through the flow, never directly.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from opsbot.contracts import LIVE_ACTIONS, RUNNING_ACTIONS, ActionState, IncidentState

log = logging.getLogger(__name__)
AFTERMATH = timedelta(minutes=5)  # after our restart verified, what its stop caused may still be firing
CATCH_UP = timedelta(hours=1)  # how far back the notifier catches up with incidents moved by another process
CATCH_UP_AFTER = timedelta(seconds=3)  # left alone this long to the process that moved it


class IncidentNotifier(Protocol):
    def notify(self, incident_id: str) -> None: ...


class Incidents:
    """The incident steps of the flow; ``db`` runs store calls off the event loop."""

    def __init__(self, store: Any, db: Callable[..., Awaitable[Any]], *, reopen_s: float = 600.0,
                 stale_s: float = 0.0) -> None:
        self.store = store
        self.db = db
        self.reopen = timedelta(seconds=reopen_s)
        self.stale = timedelta(seconds=stale_s)  # 0: an open incident never closes itself
        self.notifier: IncidentNotifier | None = None

    def _tell(self, incident_id: str) -> None:
        if self.notifier is not None:
            self.notifier.notify(incident_id)

    async def sighted(self, result: Any, alerts: list[Any], *, via: str | None = None) -> str | None:
        """A probe triggered by firing alerts (or by the watchdog, ``via`` saying why): open or join the
        incident its top finding names, and take the restart the flow planned for that finding (unless one
        of the incident's is under way). The incident id, or None."""
        from opsbot.act.ladder import STEP_KINDS, said
        from opsbot.store import Sighting

        findings = result.diagnosis.findings
        if not findings:
            return None
        f = findings[0]  # diagnose orders them, most likely first
        into, caused_by = await self.db(self.home, result.bundle.cluster, f.incident, list(f.roles))
        reopen = False
        if into is None:
            into = await self.db(self.recent, result.bundle.cluster, f.incident)
            reopen = into is not None
        sighting = Sighting(
            cluster=result.bundle.cluster, incident=f.incident, severity=str(f.severity), roles=list(f.roles),
            title=f.title, summary=f.summary, confidence=f.confidence, probe_id=str(result.probe_id),
            alert_ids=[a.id for a in alerts], fingerprints=sorted({a.fingerprint for a in alerts}),
            alertnames=sorted({a.labels.get("alertname", "alert") for a in alerts}), via=via,
            into=into, caused_by=caused_by, reopen=reopen)
        row, opened = await self.db(self.store.record_sighting, sighting)
        for remedy in [] if caused_by else f.remedies:
            if remedy.kind not in STEP_KINDS or remedy.approval != "required" or not remedy.role:
                continue
            action_id = result.plans.get(remedy.role)
            if action_id is None:
                why = next((r for r in result.refused if r.startswith(f"{remedy.kind} {remedy.role}:")),
                           "not planned" if remedy.kind == "restart" else None)
                if opened and why:
                    await self.db(self.store.incident_event, row.id, "action", f"{remedy.kind} not offered: {why}")
            elif result.kinds.get(remedy.role, "restart") != remedy.kind:
                continue  # ladder: another step is the one offered for this role
            elif not await self._restart_under_way(row, remedy.role):
                await self.db(self.store.incident_event, row.id, "action",
                              f"approval asked: {said(remedy.kind, remedy.role)} (plan {action_id})", action_id,
                              action_id=action_id)
        self._tell(row.id)
        return str(row.id)

    def home(self, cluster: str, incident: str, roles: list[str]) -> tuple[str | None, str | None]:
        """Where a sighting of ``incident`` on ``roles`` goes when no incident of its class is open (runs in a
        thread): (id, why) of the open incident whose restart (running, or verified in the last minutes)
        caused it, as a role being down explains it; else (id, why) of the open incident whose class explains
        ``incident`` (an effect of a cause already named); else (id, None) of the open incident whose class
        ``incident`` explains (the cause named later); else (None, None): its own incident."""
        rows = self.store.incidents(cluster=cluster, state=IncidentState.open, limit=200)
        if any(r.incident == incident for r in rows):
            return None, None
        at = datetime.now(timezone.utc)
        for r in rows:
            for a in (self.store.action(x) for x in r.actions):
                restarted = set(a.roles) & set(roles)
                ours = a.state in RUNNING_ACTIONS or (
                    a.state == ActionState.succeeded and a.finished_at is not None and at - a.finished_at < AFTERMATH)
                if ours and (explains("role-down", incident, bool(restarted)) or (incident == "role-down" and restarted)):
                    return r.id, f"caused by our restart of {a.role} ({a.id}, {a.state})"
        for r in rows:
            if not takes_another_class(r):
                continue
            shared = bool(set(r.roles) & set(roles))
            if explains(r.incident, incident, shared):
                return r.id, f"explained by {r.incident}"
            if explains(incident, r.incident, shared):
                return r.id, None
        return None, None

    def recent(self, cluster: str, incident: str) -> str | None:
        """When no open incident takes the sighting (runs in a thread): the incident of the same class resolved
        within the reopen window, to be reopened. A crash loop's alerts resolve each time the unit comes up for
        a moment, and the next flap is the same incident. Only the same class: an effect named after its cause
        resolved may be a new incident (a role stopped by hand), whose own remedy must be offered."""
        since = datetime.now(timezone.utc) - self.reopen
        for r in self.store.incidents(cluster=cluster, state="resolved", incident=incident, since=since, limit=5):
            if r.resolved_at is not None and r.resolved_at >= since:
                return str(r.id)
        return None

    async def watched(self, result: Any, why: str, *, chain_up: bool = False) -> list[str]:
        """A watchdog probe while the alert chain is down (``why``): its top finding opens or joins an incident
        as an alert's probe would; the incidents the watchdog sighted whose class this probe no longer finds
        (nor explains) close, since no resolved alert will come to close them. The incidents changed."""
        from opsbot.act import named_classes

        changed = [i for i in [await self.sighted(result, [], via=why)] if i]
        seen = named_classes(result.diagnosis)
        cluster = result.bundle.cluster
        hold = frozenset(await self.db(self._restarting, cluster))
        for row in await self.db(self.store.clear_watched, cluster, seen, str(result.probe_id), hold=hold,
                                 chain_up=chain_up):
            self._tell(row.id)
            changed.append(row.id)
        return changed

    async def _restart_under_way(self, row: Any, role: str) -> bool:
        for action_id in row.actions:
            action = await self.db(self.store.action, action_id)
            if action.state in LIVE_ACTIONS and role in action.roles:
                return True
        return False

    async def resolved(self, cluster: str, alerts: list[Any]) -> list[str]:
        """Resolved alerts: the incidents holding them close once none of their alerts fires and no
        restart of theirs runs (stopping a role ends its alert's series: that is not a recovery)."""
        hold = frozenset(await self.db(self._restarting, cluster))
        rows = await self.db(self.store.resolve_alerts, cluster, sorted({a.fingerprint for a in alerts}),
                             sorted({a.labels.get("alertname", "alert") for a in alerts}), hold=hold)
        for row in rows:
            self._tell(row.id)
        return [r.id for r in rows]

    def _restarting(self, cluster: str) -> list[str]:
        """Open incidents of the cluster with an approved or running restart (runs in a worker thread)."""
        return [r.id for r in self.store.incidents(cluster=cluster, state=IncidentState.open)
                if any(self.store.action(a).state in RUNNING_ACTIONS for a in r.actions)]

    async def next_step(self, failed_id: str, planned_id: str, what: str) -> None:
        """Ladder: the incident of a step that failed takes the next step offered (its button, its timeline entry)."""
        row = await self.db(self.store.incident_for_action, failed_id)
        if row is None or planned_id in row.actions:
            return
        await self.db(self.store.incident_event, row.id, "action", what, planned_id, action_id=planned_id)
        self._tell(row.id)

    async def action_moved(self, action_id: str, what: str, probe_id: str | None = None) -> None:
        """An action of an incident moved (approved, running, verified, failed, dismissed); once it
        ended, an incident whose alerts all resolved meanwhile closes."""
        row = await self.db(self.store.incident_for_action, action_id)
        if row is None:
            return
        await self.db(self.store.incident_event, row.id, "action", what, probe_id, probe_id=probe_id)
        if (await self.db(self.store.action, action_id)).state not in LIVE_ACTIONS and not await self.db(
                self._running, row.actions):
            await self.db(self.store.close_if_quiet, row.id)
        self._tell(row.id)

    def _running(self, action_ids: list[str]) -> bool:
        """Whether any of these actions is approved or executing (runs in a thread): their incident stays held."""
        return any(self.store.action(a).state in RUNNING_ACTIONS for a in action_ids)

    async def restart_ended(self, action: Any, what: str, probe_id: str | None = None) -> list[str]:
        """A restart ended, whatever surface ran it: its own incident hears it (``action_moved``); once verified,
        so do the open incidents of its roles whose alerts all resolved while it ran (they waited for it), and
        those close. The incidents changed."""
        await self.action_moved(action.id, what, probe_id)
        if action.state != ActionState.succeeded:
            return []
        held: list[str] = await self.db(self._held_by, action.cluster, action.roles, action.id)
        for incident_id in held:
            await self.db(self.store.incident_event, incident_id, "action",
                          f"restart of {action.role} by {action.approved_by or action.requested_by} via "
                          f"{action.approved_surface or action.surface} (action {action.id}) {what}", probe_id,
                          action_id=action.id, probe_id=probe_id)
            await self.db(self.store.close_if_quiet, incident_id)
            self._tell(incident_id)
        return held

    def _held_by(self, cluster: str, roles: list[str], action_id: str) -> list[str]:
        """Open incidents of ``roles`` with every alert resolved and no restart of theirs running, that do not hold
        ``action_id`` (runs in a thread)."""
        return [r.id for r in self.store.incidents(cluster=cluster, state=IncidentState.open, limit=200)
                if action_id not in r.actions and r.alerts and not r.firing and _overlap(r.roles, roles)
                and not self._running(r.actions)]

    async def close_stale(self, at: datetime | None = None) -> list[str]:
        """Open incidents that went stale (``stale_reason``) close themselves, saying why; the ids closed."""
        if not self.stale:
            return []
        at = at or datetime.now(timezone.utc)
        closed = []
        for row in await self.db(self.store.incidents, state=IncidentState.open, limit=500):
            why = stale_reason(row, await self.db(self._running, row.actions), self.stale, at)
            if why and await self.db(self.store.close_stale, row.id, why, at - self.stale) is not None:
                self._tell(row.id)
                closed.append(row.id)
        return closed


    async def catch_up(self, at: datetime | None = None) -> list[str]:
        """Tell the notifier of incidents another process moved (``opsbot restart`` closing the incident its
        restart ended): those changed in the last hour, not in the last few seconds (the process that moved
        them is telling), whose posted message shows fewer timeline entries than they have."""
        if self.notifier is None:
            return []
        at = at or datetime.now(timezone.utc)
        rows = await self.db(self.store.incidents, since=at - CATCH_UP, limit=200)
        behind = [r.id for r in rows if r.slack_ts and r.slack_version < len(r.timeline or [])
                  and at - r.last_seen > CATCH_UP_AFTER]
        for incident_id in behind:
            self._tell(incident_id)
        return behind


def stale_reason(row: Any, running: bool, stale: timedelta, at: datetime) -> str | None:
    """Why an open incident is stale, or None: no alert of it firing, no restart of it running, and nothing
    (no alert, no probe naming its class, no action) for ``stale``."""
    if row.state != IncidentState.open or row.firing or running or at - row.last_seen < stale:
        return None
    return (f"stale: no alert firing and nothing named {row.incident} for "
            f"{int((at - row.last_seen).total_seconds() // 60)} min (incident_stale_s {stale.total_seconds():g} s); "
            "closed by opsbot")


def takes_another_class(row: Any) -> bool:
    """Whether an open incident may take a sighting of another class (as its effect or its cause): not once every
    alert it had resolved (it is only waiting to close): what breaks next is a new incident."""
    return not (row.alerts and not row.firing)


def _overlap(a: list[str], b: list[str]) -> bool:
    """Whether two lists of role keys name a common role (``decode`` covers ``decode-0``)."""
    return any(x == y or x.startswith(f"{y}-") or y.startswith(f"{x}-") for x in a for y in b)


def explains(cause: str, effect: str, shared_role: bool) -> bool:
    """Whether the runbook of ``cause`` accounts for a finding of ``effect`` (diagnose's ``explains``)."""
    from opsbot.diagnose.evaluate import default_runbooks

    runbook = next((r for r in default_runbooks().runbooks if r.id == cause), None)
    return runbook is not None and runbook.explains(effect, shared_role)
