"""What a report reads for one period (record stage): bounded queries, light columns, one snapshot.

The reports' only database I/O, mixed into ``Store`` (it needs ``read``). Everything downstream
(``report/status.py``, ``report/weekly.py``) is a pure function of the ``History`` returned, so it
is tested with plain data and benchmarked (``bench/report.py``): a year of history must not be
loaded to report on one week.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, defer

from opsbot.store.gateway import Gateway
from opsbot.store.models import (
    Action,
    Alert,
    Decision,
    Finding,
    IncidentRow,
    Note,
    Probe,
    Report,
)


@dataclass(frozen=True)
class ProbeRow:
    id: str
    cluster: str
    started_at: datetime
    finished_at: datetime | None
    trigger_kind: str
    top_incident: str | None


@dataclass(frozen=True)
class AlertRow:
    probe_id: str | None
    starts_at: datetime | None
    received_at: datetime


@dataclass
class History:
    """The store's rows for ``[since, until)``; probes and findings run on past ``until``, to see recoveries."""

    since: datetime
    until: datetime
    probes: list[ProbeRow] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def findings_in(self, start: datetime, end: datetime) -> list[Finding]:
        return [f for f in self.findings if start <= f.at < end]
    alerts: list[AlertRow] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    incidents: list[IncidentRow] = field(default_factory=list)  # incident records first seen in the span


class PeriodRecords(Gateway):
    """The rows a report reads: one period's history, the last report, the latest probe."""

    def last_report_at(self, kind: str) -> datetime | None:
        """When the last saved report of ``kind`` was made: a status report covers what came after it."""
        return self.read(lambda s: s.scalar(
            select(Report.created_at).where(Report.kind == kind).order_by(Report.created_at.desc()).limit(1)))

    def latest_probe(self, cluster: str | None = None) -> ProbeRow | None:
        q = select(Probe.id, Probe.cluster, Probe.started_at, Probe.finished_at, Probe.trigger_kind, Probe.top_incident)
        if cluster:
            q = q.where(Probe.cluster == cluster)
        row = self.read(lambda s: s.execute(q.order_by(Probe.started_at.desc()).limit(1)).first())
        return ProbeRow(*row) if row else None

    def period_history(self, since: datetime, until: datetime, *, cluster: str | None = None,
                       notes_since: datetime | None = None, recovery_horizon: timedelta = timedelta(days=2)) -> History:
        """One read transaction; ``notes_since`` reaches further back for notes and decisions still open."""
        notes_from = min(since, notes_since or since)

        def _read(s: Session) -> History:
            probes_q = (select(Probe.id, Probe.cluster, Probe.started_at, Probe.finished_at, Probe.trigger_kind, Probe.top_incident)
                        .where(Probe.started_at >= since, Probe.started_at < until + recovery_horizon)
                        .order_by(Probe.started_at))
            findings_q = (select(Finding).options(defer(Finding.detail))
                          .where(Finding.at >= since, Finding.at < until + recovery_horizon).order_by(Finding.at))
            alerts_q = (select(Alert.probe_id, Alert.starts_at, Alert.received_at)
                        .join(Probe, Probe.id == Alert.probe_id)
                        .where(Probe.started_at >= since, Probe.started_at < until))
            actions_q = (select(Action).options(defer(Action.plan), defer(Action.execution))
                         .where(Action.created_at >= since, Action.created_at < until).order_by(Action.created_at))
            notes_q = (select(Note).where(Note.created_at >= notes_from, Note.created_at < until)
                       .order_by(Note.created_at.desc(), Note.id.desc()))
            decisions_q = (select(Decision).where(Decision.created_at >= notes_from, Decision.created_at < until)
                           .order_by(Decision.created_at.desc(), Decision.id.desc()))
            incidents_q = (select(IncidentRow).where(IncidentRow.first_seen >= since, IncidentRow.first_seen < until)
                           .order_by(IncidentRow.first_seen))
            if cluster:
                incidents_q = incidents_q.where(IncidentRow.cluster == cluster)
                probes_q = probes_q.where(Probe.cluster == cluster)
                findings_q = findings_q.where(Finding.cluster == cluster)
                actions_q = actions_q.where(Action.cluster == cluster)
            return History(
                since=since, until=until,
                probes=[ProbeRow(*row) for row in s.execute(probes_q)],
                findings=list(s.scalars(findings_q)),
                alerts=[AlertRow(*row) for row in s.execute(alerts_q)],
                actions=list(s.scalars(actions_q)),
                notes=list(s.scalars(notes_q)),
                decisions=list(s.scalars(decisions_q)),
                incidents=list(s.scalars(incidents_q)),
            )

        return self.read(_read)
