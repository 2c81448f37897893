"""The incident aggregate: open, join, move along, resolve, and the Slack message's claim, each one
transaction. Mixed into ``Store`` (it needs ``write`` and ``read``).

An incident opens when an alert's probe names a class, and at most one is open per (cluster, class)
(``open_key``, unique); later alerts and probes naming it join it; resolved alerts close it once none
of its alerts fires. Every change appends a timeline entry, which the Slack message and the CLI show.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from opsbot.contracts import IncidentState
from opsbot.store.actions import supersede_in
from opsbot.store.gateway import Gateway
from opsbot.store.models import IncidentRow, Instance, now

T = TypeVar("T")


@dataclass(frozen=True)
class Sighting:
    """A probe that named an incident class, with the alerts that triggered it (none for a manual probe)."""

    cluster: str
    incident: str
    severity: str
    roles: list[str]
    title: str | None
    summary: str | None
    confidence: float | None
    probe_id: str
    alert_ids: list[int] = field(default_factory=list)
    fingerprints: list[str] = field(default_factory=list)
    alertnames: list[str] = field(default_factory=list)
    via: str | None = None  # the alert chain's watchdog probed (why: what in the chain does not answer)
    into: str | None = None  # an open incident of another class this sighting belongs to (``Incidents.home``)
    caused_by: str | None = None  # with ``into``: our action of that incident caused it (else: it names the cause)
    reopen: bool = False  # ``into``, of the same class, resolved a short while ago: reopen it (``Incidents.recent``)


WATCHDOG = "watchdog"  # the timeline kind of the watchdog's sightings: the incidents it may close


def _event(kind: str, what: str, ref: str | None = None, at: datetime | None = None) -> dict[str, Any]:
    return {"at": (at or now()).isoformat(), "kind": kind, "what": what, "ref": ref}


def _merge(old: list[Any], new: list[Any]) -> list[Any]:
    return old + [x for x in new if x not in old]


class IncidentRecords(Gateway):
    def record_sighting(self, s: Sighting) -> tuple[IncidentRow, bool]:
        """Open an incident for the sighting, or join the open one of its class; (row, opened)."""
        key = f"{s.cluster}/{s.incident}"

        def _join(session: Session) -> tuple[IncidentRow, bool] | None:
            row = session.scalar(select(IncidentRow).where(IncidentRow.open_key == key).with_for_update())
            if row is None and s.into:
                row = session.get(IncidentRow, s.into, with_for_update=True)
                if row is not None and s.reopen and row.state == IncidentState.resolved and row.incident == s.incident:
                    _reopen(row, s)  # then joined below, as an open incident of its class
                if row is None or row.state != IncidentState.open:
                    row = None
                elif row.incident != s.incident:
                    return (_coalesce(row, s) if s.caused_by else _reclass(row, s, key)), False
            if row is None:
                return None
            at = now()
            more = [a for a in s.alertnames if a not in row.alertnames] or (
                s.fingerprints and not set(s.fingerprints) <= set(row.firing))
            what = (f"more alerts coalesced: {', '.join(s.alertnames)}" if more
                    else f"probe {s.probe_id} names it again")
            kind = "alert" if more else "probe"
            if s.via:
                kind, what = WATCHDOG, f"watchdog ({s.via}): {what}"
            row.alerts = _merge(row.alerts, s.alert_ids)
            row.alertnames = _merge(row.alertnames, s.alertnames)
            row.firing = _merge(row.firing, s.fingerprints)
            row.probes = _merge(row.probes, [s.probe_id])
            row.roles = sorted(set(row.roles) | set(s.roles))
            row.confidence = max(row.confidence or 0.0, s.confidence or 0.0)
            row.summary = s.summary or row.summary
            row.last_seen = at
            row.timeline = [*row.timeline, _event(kind, what, s.probe_id, at)]
            return row, False

        def _open(session: Session) -> tuple[IncidentRow, bool]:
            at = now()
            first = (f"{', '.join(s.alertnames)} fired; probe {s.probe_id} names {s.incident}" if s.alertnames
                     else f"probe {s.probe_id} names {s.incident}")
            events = [_event("opened", first, s.probe_id, at)]
            if s.via:
                events.append(_event(WATCHDOG, f"opened by opsbot's watchdog: {s.via}", s.probe_id, at))
            row = IncidentRow(
                id=uuid.uuid4().hex[:10], open_key=key, cluster=s.cluster, incident=s.incident, severity=s.severity,
                roles=sorted(s.roles), title=s.title, summary=s.summary, confidence=s.confidence, state=IncidentState.open,
                first_seen=at, last_seen=at, alerts=list(s.alert_ids), alertnames=list(s.alertnames),
                firing=list(s.fingerprints), probes=[s.probe_id], actions=[], timeline=events,
                slack_attempts=0, slack_version=0)
            session.add(row)
            session.flush()
            return row, True

        for _ in range(3):  # two instances opening (or reopening) the same class at once: the loser joins
            try:
                joined = self.write(_join, "join incident")
            except IntegrityError:
                continue
            if joined is not None:
                return joined
            try:
                return self.write(_open, "open incident")
            except IntegrityError:
                continue
        raise RuntimeError(f"could not open or join the incident {key}")

    def incident_event(self, incident_id: str, kind: str, what: str, ref: str | None = None, *,
                       action_id: str | None = None, probe_id: str | None = None) -> IncidentRow | None:
        """Append to the timeline (and the actions or probes list); None when there is no such incident."""

        def _go(session: Session) -> IncidentRow | None:
            row = session.get(IncidentRow, incident_id, with_for_update=True)
            if row is None:
                return None
            if action_id:
                row.actions = _merge(row.actions, [action_id])
            if probe_id:
                row.probes = _merge(row.probes, [probe_id])
            row.timeline = [*row.timeline, _event(kind, what, ref)]
            row.last_seen = now()
            return row

        return self.write(_go, "incident event")

    def resolve_alerts(self, cluster: str, fingerprints: list[str], alertnames: list[str], *,
                       hold: frozenset[str] = frozenset()) -> list[IncidentRow]:
        """Mark the fingerprints resolved in the open incidents holding them; those left with none firing
        close, except the ``hold`` ones (a restart of theirs still runs: ``close_if_quiet`` closes them after)."""
        fps = set(fingerprints)

        def _go(session: Session) -> list[IncidentRow]:
            out = []
            for row in session.scalars(select(IncidentRow).where(IncidentRow.cluster == cluster,
                                                                 IncidentRow.state == IncidentState.open).with_for_update()):
                if not fps & set(row.firing):
                    continue
                at = now()
                row.firing = [f for f in row.firing if f not in fps]
                events = [_event("alert", f"resolved: {', '.join(alertnames) or 'alert'}", None, at)]
                if not row.firing and row.id not in hold:
                    events.append(_close(session, row, at))
                elif not row.firing:
                    events.append(_event("alert", "every alert resolved; closing when the restart ends", None, at))
                row.timeline = [*row.timeline, *events]
                row.last_seen = at
                out.append(row)
            return out

        return self.write(_go, "resolve incident alerts")

    def watched(self, cluster: str | None = None) -> list[IncidentRow]:
        """Open incidents the watchdog has sighted: its later probes close them when their class is gone."""
        return [r for r in self.incidents(cluster=cluster, state=IncidentState.open, limit=500)
                if any(e.get("kind") == WATCHDOG for e in r.timeline)]

    def clear_watched(self, cluster: str, seen: set[str], probe_id: str, *, hold: frozenset[str] = frozenset(),
                      chain_up: bool = False) -> list[IncidentRow]:
        """A watchdog probe of the cluster found none of these incidents' classes (``seen``: the classes it
        found or explained): they close, except the ``hold`` ones (a restart of theirs runs) and, with the
        alert chain back (``chain_up``), those with alerts firing (their resolved alerts close them)."""

        def _go(session: Session) -> list[IncidentRow]:
            out = []
            for row in session.scalars(select(IncidentRow).where(IncidentRow.cluster == cluster,
                                                                 IncidentRow.state == IncidentState.open).with_for_update()):
                if row.incident in seen or row.id in hold or not any(e.get("kind") == WATCHDOG for e in row.timeline):
                    continue
                if chain_up and row.firing:
                    continue
                at = now()
                row.probes = _merge(row.probes, [probe_id])
                row.firing = []  # the alert chain is down: its alerts' state is unknown; the probe says it is gone
                row.timeline = [*row.timeline, _event(WATCHDOG, f"watchdog probe {probe_id} no longer finds it",
                                                      probe_id, at), _close(session, row, at)]
                out.append(row)
            return out

        return self.write(_go, "watchdog clears incidents")

    def close_if_quiet(self, incident_id: str) -> IncidentRow | None:
        """Close the incident if none of its alerts fires any more (after a held restart ended); the row if closed."""

        def _go(session: Session) -> IncidentRow | None:
            row = session.get(IncidentRow, incident_id, with_for_update=True)
            if row is None or row.state != IncidentState.open or row.firing or not row.alerts:
                return None
            row.timeline = [*row.timeline, _close(session, row, now())]
            return row

        return self.write(_go, "close incident")

    def close_stale(self, incident_id: str, why: str, quiet_since: datetime) -> IncidentRow | None:
        """Close an open incident with no alert firing that nothing named since ``quiet_since`` (``Incidents``
        decides that it is stale and says ``why``); None when it moved meanwhile (an alert or a probe came)."""

        def _go(session: Session) -> IncidentRow | None:
            row = session.get(IncidentRow, incident_id, with_for_update=True)
            if row is None or row.state != IncidentState.open or row.firing or row.last_seen > quiet_since:
                return None
            at = now()
            row.timeline = [*row.timeline, _event("stale", why, None, at), _close(session, row, at)]
            return row

        return self.write(_go, "close stale incident")

    def incident(self, incident_id: str) -> IncidentRow | None:
        return self.read(lambda s: s.get(IncidentRow, incident_id))

    def incidents(self, *, since: datetime | None = None, until: datetime | None = None, cluster: str | None = None,
                  state: str | None = None, incident: str | None = None, role: str | None = None,
                  limit: int = 100) -> list[IncidentRow]:
        """Newest first; ``since``/``until`` select incidents that were open at some time in the window."""
        q = select(IncidentRow).order_by(IncidentRow.first_seen.desc()).limit(limit)
        if since:
            q = q.where(or_(IncidentRow.resolved_at.is_(None), IncidentRow.resolved_at >= since))
        if until:
            q = q.where(IncidentRow.first_seen < until)
        if cluster:
            q = q.where(IncidentRow.cluster == cluster)
        if state:
            q = q.where(IncidentRow.state == state)
        if incident:
            q = q.where(IncidentRow.incident == incident)
        rows = list(self.read(lambda s: s.scalars(q).all()))
        return [r for r in rows if role is None or any(k == role or k.startswith(f"{role}-") for k in r.roles)]

    def incident_for_probe(self, probe_id: str, cluster: str) -> IncidentRow | None:
        """The incident a probe belongs to (its evidence), if any; the newest first."""
        rows = self.incidents(cluster=cluster, limit=200)
        return next((r for r in rows if probe_id in r.probes), None)

    def incident_for_action(self, action_id: str) -> IncidentRow | None:
        rows = self.incidents(limit=500)
        return next((r for r in rows if action_id in r.actions), None)

    # -- its Slack message: posted at most once, then edited ----------------------------------

    def claim_slack_post(self, incident_id: str, stale_after: timedelta, claimer: str | None = None,
                         lease: timedelta | None = None) -> bool:
        """Take the right to post the message (compare-and-set); False when it exists or another post runs.

        A claim goes stale after ``stale_after``; with ``lease``, at once when its ``claimer`` instance
        stopped beating (killed mid-post), so the message waits a lease, not minutes."""
        at = now()
        free = or_(IncidentRow.slack_state.is_(None), IncidentRow.slack_state == "failed",
                   IncidentRow.slack_claimed_at < at - stale_after)
        if lease is not None:
            live = select(Instance.id).where(Instance.heartbeat_at >= at - lease)
            free = or_(free, IncidentRow.slack_claimed_by.not_in(live))

        def _go(session: Session) -> bool:
            res = session.execute(update(IncidentRow).where(
                IncidentRow.id == incident_id, IncidentRow.slack_ts.is_(None), free,
            ).values(slack_state="posting", slack_claimed_at=at, slack_claimed_by=claimer,
                     slack_attempts=IncidentRow.slack_attempts + 1))
            return bool(res.rowcount == 1)  # type: ignore[attr-defined]

        return self.write(_go, "claim incident message")

    def unposted_incidents(self, lease: timedelta) -> list[str]:
        """Open incidents older than ``lease`` whose message is not posted and that no live instance is
        posting: their instance died between opening them and posting (or mid-post)."""
        at = now()
        live = select(Instance.id).where(Instance.heartbeat_at >= at - lease)
        q = select(IncidentRow.id).where(
            IncidentRow.state == IncidentState.open, IncidentRow.slack_ts.is_(None), IncidentRow.first_seen < at - lease,
            or_(IncidentRow.slack_claimed_by.is_(None), IncidentRow.slack_claimed_by.not_in(live)))
        return list(self.read(lambda s: s.scalars(q).all()))

    def slack_posted(self, incident_id: str, channel: str, ts: str, version: int) -> None:
        self.write(lambda s: s.execute(update(IncidentRow).where(IncidentRow.id == incident_id).values(
            slack_channel=channel, slack_ts=ts, slack_state="posted", slack_error=None, slack_version=version)))

    def slack_updated(self, incident_id: str, version: int) -> None:
        self.write(lambda s: s.execute(update(IncidentRow).where(
            IncidentRow.id == incident_id, IncidentRow.slack_version < version).values(
            slack_version=version, slack_error=None, slack_state="posted")))

    def slack_failed(self, incident_id: str, error: str) -> None:
        """The post (or an edit) failed; a failed post may be claimed again, a posted message stays posted."""
        def _go(session: Session) -> None:
            row = session.get(IncidentRow, incident_id, with_for_update=True)
            if row is None:
                return
            row.slack_error = error[:2000]
            if row.slack_ts is None:
                row.slack_state = "failed"

        self.write(_go, "incident message failed")

    def slack_failed_attempt(self, incident_id: str, error: str) -> None:
        """One post attempt failed and another follows: the error is shown, the claim is kept (and renewed)."""
        self.write(lambda s: s.execute(update(IncidentRow).where(IncidentRow.id == incident_id).values(
            slack_error=error[:2000], slack_claimed_at=now())))

    def slack_failing(self, limit: int = 20) -> list[IncidentRow]:
        """Incidents whose Slack message could not be posted or brought up to date."""
        q = select(IncidentRow).where(IncidentRow.slack_error.is_not(None)).order_by(
            IncidentRow.last_seen.desc()).limit(limit)
        return list(self.read(lambda s: s.scalars(q).all()))


def _coalesce(row: IncidentRow, s: Sighting) -> IncidentRow:
    """An alert our own action caused (the router losing the worker we restart) joins the action's incident,
    which keeps its class and roles; its fingerprints hold the incident open until they resolve."""
    at = now()
    row.alerts = _merge(row.alerts, s.alert_ids)
    row.alertnames = _merge(row.alertnames, s.alertnames)
    row.firing = _merge(row.firing, s.fingerprints)
    row.probes = _merge(row.probes, [s.probe_id])
    row.last_seen = at
    what = (f"{', '.join(s.alertnames) or 'a probe'}: {s.incident} on {', '.join(s.roles)}, "
            f"{s.caused_by}; coalesced here")
    row.timeline = [*row.timeline, _event("alert", what, s.probe_id, at)]
    return row


def _reopen(row: IncidentRow, s: Sighting) -> None:
    """A resolved incident's class named again within the reopen window: open once more, keeping its record and
    its Slack message; the sighting then joins it."""
    at = now()
    after = duration_text((at - row.resolved_at).total_seconds()) if row.resolved_at else "a while"
    why = f"{', '.join(s.alertnames)} fired; " if s.alertnames else ""
    row.state, row.resolved_at, row.open_key = IncidentState.open, None, f"{row.cluster}/{row.incident}"
    row.timeline = [*row.timeline, _event("reopened", f"{why}probe {s.probe_id} names {s.incident} on "
                                          f"{', '.join(s.roles)} {after} after it resolved: reopened", s.probe_id, at)]


def _reclass(row: IncidentRow, s: Sighting, key: str) -> IncidentRow:
    """A later probe names the cause of what the incident was opened as (cuda-oom behind the router's
    no-healthy-workers): the incident takes the cause's class, the better explanation."""
    at, was = now(), row.incident
    row.incident, row.open_key, row.severity = s.incident, key, s.severity
    row.title, row.summary = s.title, s.summary or row.summary
    row.confidence = s.confidence
    row.roles = sorted(set(row.roles) | set(s.roles))
    row.alerts = _merge(row.alerts, s.alert_ids)
    row.alertnames = _merge(row.alertnames, s.alertnames)
    row.firing = _merge(row.firing, s.fingerprints)
    row.probes = _merge(row.probes, [s.probe_id])
    row.last_seen = at
    row.timeline = [*row.timeline, _event("probe", f"probe {s.probe_id} names the cause: {s.incident} on "
                                          f"{', '.join(s.roles)} explains {was}; the incident is now {s.incident}",
                                          s.probe_id, at)]
    return row


def _close(session: Session, row: IncidentRow, at: datetime) -> dict[str, Any]:
    """open → resolved; its restart plans still waiting for approval are superseded in the same transaction
    (a stale click must not restart a role that recovered)."""
    row.state, row.resolved_at, row.open_key, row.last_seen = IncidentState.resolved, at, None, at
    supersede_in(session, row.actions, f"its incident {row.id} ({row.incident}) resolved", actor="opsbot",
                 surface="incident")
    return _event("resolved", f"resolved; time to recovery {duration_text((at - row.first_seen).total_seconds())}",
                  None, at)


def duration_text(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    minutes, s = divmod(seconds, 60)
    if minutes < 120:
        return f"{minutes} min {s} s"
    hours, m = divmod(minutes, 60)
    return f"{hours} h {m} min"
