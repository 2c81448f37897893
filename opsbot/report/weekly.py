"""The weekly report: the status report over one ISO week, plus Prometheus figures, charts and trends.

``compose_weekly`` is pure (history + Prometheus data in, report out); ``build_weekly`` does the
I/O: the store read, and the Prometheus queries off the event loop.
"""

from __future__ import annotations

import asyncio
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from opsbot.bundle import Bundle
from opsbot.contracts import ActionState
from opsbot.report.charts import weekly_charts
from opsbot.report.model import Durations, Figure, IncidentRecord, WeeklyReport
from opsbot.report.prom import FIGURES, WeekData, fetch_week
from opsbot.report.fidelity import fidelity_chart
from opsbot.report.recall import recall_chart, recall_days, recall_failures
from opsbot.report.status import (
    OPEN_ITEMS_WINDOW,
    compose_status,
    current_state,
    load_context,
    with_observed_index_keys,
)
from opsbot.report.week import Week, check_over, last_complete_week, parse_week, zone
from opsbot.settings import Settings
from opsbot.store import Store
from opsbot.store.periods import History
from opsbot.store.store import RecallRun
from serving.spec import DeploymentSpec

_EXECUTED = (ActionState.succeeded, ActionState.failed)


@dataclass(frozen=True)
class Episode:
    """One stretch of consecutive probes of a cluster that found ``incident``."""

    cluster: str
    incident: str
    start: datetime
    recovered_at: datetime | None


def episodes(history: History) -> list[Episode]:
    """Walk each cluster's probes in order; an incident class opens at the first probe that finds it
    and closes (recovers) at the next probe that does not."""
    classes: dict[str, set[str]] = defaultdict(set)
    for f in history.findings:
        classes[f.probe_id].add(f.incident)
    open_: dict[tuple[str, str], datetime] = {}
    out: list[Episode] = []
    for p in sorted(history.probes, key=lambda p: p.started_at):
        found = classes.get(p.id, set())
        for (cluster, incident), start in list(open_.items()):
            if cluster == p.cluster and incident not in found:
                out.append(Episode(cluster, incident, start, p.started_at))
                del open_[(cluster, incident)]
        for incident in found:
            open_.setdefault((p.cluster, incident), p.started_at)
    out.extend(Episode(c, i, start, None) for (c, i), start in open_.items())
    return out


def _durations(seconds: list[float]) -> Durations:
    if not seconds:
        return Durations()
    return Durations(count=len(seconds), median_s=statistics.median(seconds), worst_s=max(seconds))


def time_to_diagnosis(history: History, week: Week) -> Durations:
    """From an alert starting to fire to the end of the probe it triggered, when that probe found something."""
    diagnosed = {f.probe_id for f in history.findings}
    probes = {p.id: p for p in history.probes}
    seconds = []
    for a in history.alerts:
        p = probes.get(a.probe_id or "")
        if p is None or p.id not in diagnosed or not (week.start <= p.started_at < week.end):
            continue
        began = a.starts_at or a.received_at
        seconds.append(max(0.0, ((p.finished_at or p.started_at) - began).total_seconds()))
    return _durations(seconds)


def _in(week: Week, at: datetime) -> bool:
    return week.start <= at < week.end


def figures(this: WeekData, prev: WeekData) -> list[Figure]:
    return [Figure(key=q.key, label=q.label, unit=q.unit, value=this.values.get(q.key),
                   previous=prev.values.get(q.key), missing=this.missing.get(q.key),
                   lower_is_better=q.lower_is_better) for q in FIGURES]


def missing_lines(this: WeekData) -> list[str]:
    """Missing figures grouped by reason: one line per reason, naming the figures (or saying 'all')."""
    labels = {q.key: q.label for q in FIGURES}
    by_reason: dict[str, list[str]] = defaultdict(list)
    for key, reason in this.missing.items():
        by_reason[reason].append(key)
    lines = []
    for reason, keys in by_reason.items():
        if set(labels) <= set(keys):
            lines.append(f"every Prometheus figure and chart: {reason}")
            continue
        names = [f"chart of {k.removeprefix('series:')}" if k.startswith("series:") else labels.get(k, k) for k in keys]
        lines.append(f"{', '.join(names)}: {reason}")
    return lines


def compose_weekly(*, week: Week, now: datetime, history: History, this: WeekData, prev: WeekData,
                   status_parts: dict[str, Any], recall_runs: Sequence[RecallRun] = (),
                   fidelity_runs: Sequence[RecallRun] = ()) -> WeeklyReport:
    """The weekly report from a history spanning the week before and this one (pure)."""
    before = week.previous()
    eps = episodes(history)
    this_eps = [e for e in eps if _in(week, e.start)]
    by_class = dict(Counter(e.incident for e in this_eps))
    by_class_prev = dict(Counter(e.incident for e in eps if _in(before, e.start)))
    week_history = History(since=week.start, until=week.end, probes=history.probes,
                           findings=history.findings_in(week.start, week.end), alerts=history.alerts,
                           actions=[a for a in history.actions if _in(week, a.created_at)],
                           notes=history.notes, decisions=[d for d in history.decisions if _in(week, d.created_at)])
    base = compose_status(now=now, since=week.start, history=week_history, **status_parts)
    base_data = base.model_dump(exclude={"kind", "title", "until"})
    days = recall_days(recall_runs, week)
    recall = recall_chart(days)
    fidelity = fidelity_chart(fidelity_runs, week)
    return WeeklyReport(
        **base_data,
        title=f"Weekly report {week.label}" + (f": {base.current.cluster}" if base.current.cluster else ""),
        until=week.end, week=week.label, previous_week=before.label,
        figures=figures(this, prev), missing=missing_lines(this),
        charts=weekly_charts(week, this, prev, by_class, by_class_prev) + ([recall] if recall else [])
        + ([fidelity] if fidelity else []),
        recall_days=days, recall_failed=recall_failures(recall_runs, week),
        by_class=by_class, by_class_previous=by_class_prev,
        time_to_diagnosis=time_to_diagnosis(history, week),
        time_to_recovery=_durations(recovery_seconds(history, week, this_eps)),
        restarts_by_opsbot=sum(1 for a in week_history.actions if a.kind == "restart" and a.state in _EXECUTED),
        incident_records=incident_records(history, week),
    )


def incident_records(history: History, week: Week) -> list[IncidentRecord]:
    """The incident records first seen in the week, oldest first, each with its actions in a line."""
    actions = {a.id: a for a in history.actions}

    def line(action_id: str) -> str:
        a = actions.get(action_id)
        if a is None:
            return f"action {action_id}"
        who = f", approved by {a.approved_by}" if a.approved_by else ""
        return f"{a.kind} {a.role}: {a.state}{who}"

    return [IncidentRecord(id=r.id, incident=r.incident, cluster=r.cluster, roles=list(r.roles), first_seen=r.first_seen,
                           resolved_at=r.resolved_at, time_to_recovery_s=r.time_to_recovery_s,
                           actions=[line(x) for x in r.actions])
            for r in sorted(history.incidents, key=lambda r: r.first_seen) if _in(week, r.first_seen)]


def recovery_seconds(history: History, week: Week, eps: list[Episode]) -> list[float]:
    """From the incident records (first alert to resolved) when the week has any, else from probe episodes."""
    records = [r.time_to_recovery_s for r in history.incidents if _in(week, r.first_seen) and r.resolved_at]
    return [s for s in records if s is not None] or [
        (e.recovered_at - e.start).total_seconds() for e in eps if e.recovered_at]


def resolve_week(label: str | None, settings: Settings, now: datetime) -> Week:
    """The named week (refused when not over yet) or the last complete one, in the report time zone."""
    tz = zone(settings.report_timezone)
    week = parse_week(label, tz) if label else last_complete_week(now, tz)
    check_over(week, now)
    return week


async def build_weekly(store: Store, prom_url: str | None, week: Week | str | None, *,
                       settings: Settings, spec: DeploymentSpec | None = None, bundle: Bundle | None = None,
                       now: datetime | None = None) -> WeeklyReport:
    """Read the store and Prometheus for ``week`` (default: last week) and compose the report."""
    now = now or datetime.now(timezone.utc)
    if not isinstance(week, Week):
        week = resolve_week(week, settings, now)
    before = week.previous()
    context = load_context(settings, spec)
    if prom_url:
        timeout_s, jobs = settings.prometheus_timeout_s, context.prometheus_jobs
        this, prev = await asyncio.gather(fetch_week(prom_url, week, timeout_s=timeout_s, jobs=jobs),
                                          fetch_week(prom_url, before, timeout_s=timeout_s, jobs=jobs))
    else:
        reason = "no Prometheus configured (set OPSBOT_PROMETHEUS_URL)"
        this, prev = WeekData(missing={q.key: reason for q in FIGURES}), WeekData()
    history = await asyncio.to_thread(store.period_history, before.start, week.end, cluster=settings.cluster,
                                      notes_since=week.end - OPEN_ITEMS_WINDOW)
    current = await asyncio.to_thread(current_state, store, bundle, now, settings.cluster, context=context)
    context = with_observed_index_keys(context, current)
    runs = await asyncio.to_thread(store.recall_runs, cluster=settings.cluster, since=week.start, until=week.end)
    checks = await asyncio.to_thread(store.fidelity_runs, cluster=settings.cluster, since=week.start, until=week.end)
    parts = {"current": current, "context": context, "goal": settings.goal}
    return compose_weekly(week=week, now=now, history=history, this=this, prev=prev, status_parts=parts,
                          recall_runs=runs, fidelity_runs=checks)
