"""``Store``: the one gateway to the database, one transaction per logical write, retried while the
database is busy; each aggregate's reads and writes live in its own module, mixed in here (record stage)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from opsbot.store.actions import ActionRecords, LockHeld
from opsbot.store.alerts import ALERT_CHUNK, AlertIn, AlertRecords
from opsbot.store.audit import AuditRecords, audit_row
from opsbot.store.captures import CaptureRecords
from opsbot.store.coordination import CoordinationRecords
from opsbot.store.database import StoreError, make_engine, upgrade
from opsbot.store.incidents import IncidentRecords
from opsbot.store.periods import PeriodRecords
from opsbot.store.templates import TemplateRecords
from opsbot.store.probes import (
    ProbeRecords,
    RecallRun,
    compress_bundle,
    decompress_bundle,
    ok_axes,
    parse_ts,
)
from opsbot.store.tokens import SCOPES, TokenRecords, TokenScopes, implied_scopes

T = TypeVar("T")


@dataclass(frozen=True)
class HistoryItem:
    """One line of ``opsbot history``: a probe, finding, action or audit entry."""

    at: datetime
    kind: str
    cluster: str | None
    roles: list[str]
    what: str
    detail: str = ""
    ref: str = ""



class Store(ProbeRecords, AlertRecords, CoordinationRecords, AuditRecords, TokenRecords, ActionRecords,
            IncidentRecords, PeriodRecords, CaptureRecords, TemplateRecords):
    """The one gateway to the database. ``Store(url)`` connects and upgrades the schema to head."""

    def __init__(self, url: str, *, busy_timeout_ms: int = 5000, attempts: int = 6, migrate: bool = True):
        self.url = url
        self.engine = make_engine(url, busy_timeout_ms=busy_timeout_ms)
        self.attempts = attempts
        self.revision = upgrade(self.engine) if migrate else None
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------------

    def clock_skew(self) -> float | None:
        """Seconds this host's clock runs ahead of the PostgreSQL server's (negative: behind); None on
        SQLite, whose clock is this host's. Claims and leases compare times written by several hosts."""
        if self.engine.dialect.name != "postgresql":
            return None

        def _read(s: Session) -> float:
            before = time.time()
            server = float(s.execute(text("SELECT extract(epoch FROM clock_timestamp())")).scalar_one())
            return (before + time.time()) / 2 - server

        skew: float = self.read(_read)
        return skew

    # -- history ------------------------------------------------------------------------------

    def history(self, role: str | None = None, since: datetime | None = None, cluster: str | None = None,
                limit: int = 200) -> list[HistoryItem]:
        """Probes, findings, actions and audit entries, newest first."""
        items: list[HistoryItem] = []
        for p in self.probes(cluster=cluster, role=role, since=since, limit=limit):
            bad = sorted(f"{k}.{ax}" for k, axes in p.ok_axes.items() for ax, ok in axes.items() if not ok)
            items.append(HistoryItem(p.started_at, "probe", p.cluster, list(p.roles),
                                     p.top_incident or "no incident", f"trigger {p.trigger_kind}"
                                     + (f"; failed axes: {', '.join(bad)}" if bad else ""), p.id))
        for f in self.findings(since=since, cluster=cluster, role=role)[:limit]:
            items.append(HistoryItem(f.at, "finding", f.cluster, list(f.roles), f.incident,
                                     f"{f.severity}: {f.summary or f.title or ''}", f.probe_id))
        for a in self.actions(cluster=cluster, role=role, since=since, limit=limit):
            who = a.approved_by and f", approved by {a.approved_by} via {a.approved_surface}"
            items.append(HistoryItem(a.created_at, "action", a.cluster, [a.role], f"{a.kind} {a.state}",
                                     f"by {a.requested_by} via {a.surface}{who or ''}"
                                     + (f"; {a.outcome}" if a.outcome else ""), a.id))
        for al in self.failed_alerts(since=since, limit=limit):
            if (cluster and al.cluster != cluster) or (role and al.role != role):
                continue
            assert al.probe_failed_at is not None
            items.append(HistoryItem(al.probe_failed_at, "alert", al.cluster, [al.role] if al.role else [],
                                     f"probe failed: {al.alertname or al.fingerprint}",
                                     f"{al.probe_error} (after {al.probe_attempts} attempt(s); not retried)", str(al.id)))
        for e in self.audit_log(since=since, role=role, limit=limit):
            if cluster and e.cluster not in (None, cluster):
                continue
            items.append(HistoryItem(e.at, "audit", e.cluster, [e.role] if e.role else [], e.what,
                                     f"{e.actor} via {e.surface}", str(e.id)))
        items.sort(key=lambda i: i.at, reverse=True)
        return items[:limit]


__all__ = ["ALERT_CHUNK", "SCOPES", "AlertIn", "HistoryItem", "LockHeld", "RecallRun", "Store", "StoreError", "TokenScopes",
           "audit_row", "compress_bundle", "decompress_bundle", "implied_scopes", "ok_axes", "parse_ts"]
