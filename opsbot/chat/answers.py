"""Answers to the chatbot's intents, read from the store: what happened, why a role restarted, whether
a restart is safe, the incidents, a role's history. Surfaces render an ``Answer`` (text or Block Kit).

Times are shown in the operator's time zone (Slack's user profile, else OPSBOT_REPORT_TIMEZONE).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from opsbot.chat.intents import HELP, Intent, Window, resolve
from opsbot.contracts import IncidentState
from opsbot.inventory import Inventory
from opsbot.settings import Settings
from opsbot.store import Store
from opsbot.store.incidents import duration_text


@dataclass
class Answer:
    understood: str
    title: str
    lines: list[str] = field(default_factory=list)

    def text(self) -> str:
        return "\n".join([f"({self.understood})", self.title, *[f"  {line}" for line in self.lines]])


def zone(name: str | None, fallback: str = "UTC") -> tzinfo:
    """The named IANA zone, else the fallback (a profile's zone may be unknown to this host)."""
    for candidate in (name, fallback, "UTC"):
        if candidate:
            try:
                return ZoneInfo(candidate)
            except (ZoneInfoNotFoundError, ValueError):
                continue
    return ZoneInfo("UTC")


def _at(dt: datetime | None, tz: tzinfo) -> str:
    return "-" if dt is None else dt.astimezone(tz).strftime("%a %H:%M:%S %Z")


def answer(intent: Intent, store: Store, inventory: Inventory | None, settings: Settings, tz: tzinfo,
           now: datetime) -> Answer | None:
    """The answer, or None for a probe request (the caller probes and diagnoses)."""
    if intent.kind == "help":
        return Answer(intent.understood(), "opsbot answers:", [f"{usage}: {what}" for usage, what in HELP])
    if intent.kind == "happened":
        return happened(intent, store, settings, tz, now)
    if intent.kind == "why-restart":
        return why_restart(intent, store, tz)
    if intent.kind == "safe-restart":
        return safe_restart(intent, store, inventory, settings)
    if intent.kind == "incidents":
        return incidents(intent, store, settings, tz, now)
    if intent.kind == "history":
        return history(intent, store, settings, tz, now)
    return None


def incident_line(row: Any, tz: tzinfo, now: datetime) -> str:
    roles = ", ".join(row.roles)
    if row.resolved_at is not None:
        state = f"resolved {_at(row.resolved_at, tz)}, time to recovery {duration_text(row.time_to_recovery_s or 0)}"
    else:
        state = f"OPEN for {duration_text((now - row.first_seen).total_seconds())}"
    acts = f"; actions {', '.join(row.actions)}" if row.actions else ""
    return f"[{row.id}] {_at(row.first_seen, tz)} {row.incident} on {roles} ({row.severity}): {state}{acts}"


def happened(intent: Intent, store: Store, settings: Settings, tz: tzinfo, now: datetime) -> Answer:
    window = intent.window or Window("today")
    since, until = resolve(window, now, tz)
    rows = store.incidents(since=since, until=until, cluster=settings.cluster, limit=200)
    acts = [a for a in store.actions(cluster=settings.cluster, since=since, limit=200) if a.created_at < until]
    title = f"{len(rows)} incident(s) and {len(acts)} action(s) from {_at(since, tz)} to {_at(until, tz)}"
    lines = [incident_line(r, tz, now) for r in rows]
    lines += [f"action {a.id}: {a.kind} {a.role} {a.state} ({_at(a.created_at, tz)}, by {a.requested_by}"
              + (f", approved by {a.approved_by}" if a.approved_by else "") + ")" for a in acts]
    return Answer(intent.understood(), title, lines or ["nothing recorded in that window"])


def why_restart(intent: Intent, store: Store, tz: tzinfo) -> Answer:
    role = intent.role or ""
    rows = [a for a in store.actions(limit=200) if a.kind == "restart"
            and any(k == role or k.startswith(f"{role}-") for k in a.roles)]
    if not rows:
        return Answer(intent.understood(), f"no restart of {role} is recorded", ["`opsbot actions list` shows every action"])
    a = rows[0]
    inc = store.incident_for_action(a.id)
    lines = [
        f"asked by {a.requested_by} via {a.surface} at {_at(a.created_at, tz)}: {a.reason or 'no reason given'}",
        f"approved by {a.approved_by} via {a.approved_surface} at {_at(a.approved_at, tz)}" if a.approved_by
        else "not approved",
        f"evidence: probe {a.evidence_probe_id} taken before the first step" if a.evidence_probe_id
        else "no evidence probe (it never ran)",
        f"outcome: {a.state}: {a.outcome or 'pending'}",
    ]
    if inc is not None:
        lines.insert(0, f"for incident [{inc.id}] {inc.incident} (first seen {_at(inc.first_seen, tz)})")
    return Answer(intent.understood(), f"restart {a.id} of {a.role} ({a.state})", lines)


def safe_restart(intent: Intent, store: Store, inventory: Inventory | None, settings: Settings) -> Answer:
    from opsbot.act.dryrun import dry_run

    role = intent.role or ""
    if inventory is None:
        return Answer(intent.understood(), "cannot tell: the inventory is not readable", [])
    result = dry_run(store, inventory, role, settings)
    verdict = f"yes: a restart of {role} passes every guard now" if result.safe else f"no: a restart of {role} would be refused"
    return Answer(intent.understood(), verdict + " (dry run; nothing planned)",
                  [f"{'ok' if c.ok else 'NO'} {c.name}: {c.detail}" for c in result.checks])


def incidents(intent: Intent, store: Store, settings: Settings, tz: tzinfo, now: datetime) -> Answer:
    open_ = store.incidents(cluster=settings.cluster, state=IncidentState.open, limit=50)
    recent = store.incidents(cluster=settings.cluster, state=IncidentState.resolved, limit=10)
    lines = [incident_line(r, tz, now) for r in open_ + recent]
    return Answer(intent.understood(), f"{len(open_)} open incident(s); the latest resolved below",
                  lines or ["no incident recorded"])


def history(intent: Intent, store: Store, settings: Settings, tz: tzinfo, now: datetime) -> Answer:
    since, until = resolve(intent.window or Window("today"), now, tz)
    items = [i for i in store.history(role=intent.role, since=since, cluster=settings.cluster, limit=60) if i.at < until]
    what = intent.role or "every role"
    lines = [f"{_at(i.at, tz)} {i.kind} {'/'.join(i.roles) or '-'} {i.what}" + (f": {i.detail}" if i.detail else "")
             for i in items]
    return Answer(intent.understood(), f"history of {what} from {_at(since, tz)} to {_at(until, tz)}",
                  lines or ["nothing recorded in that window"])
