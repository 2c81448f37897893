"""Probes and their findings (record stage): bundles kept compressed, replayable."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from opsbot.bundle import Bundle, parse_bundle
from opsbot.contracts import Diagnosis
from opsbot.parse.figures import RoleFigures, role_figures

from opsbot.parse.fidelity import fidelity_record
from opsbot.parse.recall import run_record
from opsbot.store.gateway import NO_SYNC, Gateway
from opsbot.store.templates import learn
from opsbot.store.models import (
    Alert,
    Finding,
    Probe,
    now,
)


def parse_ts(value: str | None) -> datetime | None:
    """RFC 3339 (``...Z`` too) to an aware UTC datetime; None stays None."""
    if not value:
        return None
    dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


def compress_bundle(bundle: Bundle) -> bytes:
    return zlib.compress(bundle.to_json(indent=None).encode(), 6)


def decompress_bundle(blob: bytes, source: str = "stored bundle") -> Bundle:
    return parse_bundle(zlib.decompress(blob).decode(), source)


def ok_axes(bundle: Bundle) -> dict[str, dict[str, Any]]:
    """Which evidence axes came back, per role and node: the probe's health at a glance; with the
    canary's outcome and a recall run's record (``opsbot.parse.recall.run_record``) for trends."""
    out: dict[str, dict[str, Any]] = {}
    for r in bundle.roles:
        out[r.key] = {"systemd": r.systemd.ok, "metrics": r.metrics.ok, "health": r.health.ok, "logs": r.logs.ok}
    for n in bundle.nodes:
        out[f"node:{n.node}"] = {"gpu": n.gpu.ok}
    if bundle.canary is not None and not bundle.canary.not_awaited:
        out["canary"] = {"ok": bundle.canary.ok}
    if bundle.recall is not None:
        out["recall"] = run_record(bundle.recall)
    if bundle.fidelity is not None:
        out["fidelity"] = fidelity_record(bundle.fidelity)
    return out


@dataclass(frozen=True)
class RecallRun:
    """One stored recall run: its probe and the record ``run_record`` made of it."""

    probe_id: str
    cluster: str
    at: datetime
    trigger: str
    record: dict[str, Any]


class ProbeRecords(Gateway):
    """Probes, findings and recall runs. Mixed into ``Store`` (it needs ``write`` and ``read``)."""

    # -- probes and findings ------------------------------------------------------------------

    def save_probe(self, bundle: Bundle, diagnosis: Diagnosis | None = None, alert_ids: list[int] | None = None) -> str:
        """Keep a bundle (compressed) and its findings; saving the same bundle twice is a no-op.

        ``alert_ids``: the stored alerts this probe answers, linked in the same transaction, so a crash
        leaves either the probe and its links or neither (never a probe whose alerts get probed again).
        The log templates of each role the diagnosis found healthy are learned in it too (only healthy
        probes teach: opsbot/store/templates.py).
        """
        findings = diagnosis.findings if diagnosis else []  # diagnose() orders them, most likely first
        started = parse_ts(bundle.started_at) or now()

        def _save(s: Session) -> str:
            if s.get(Probe, bundle.id) is not None:
                return bundle.id
            s.add(Probe(
                id=bundle.id, cluster=bundle.cluster, roles=[r.key for r in bundle.roles], started_at=started,
                finished_at=parse_ts(bundle.finished_at), trigger_kind=bundle.trigger.kind,
                trigger_user=bundle.trigger.user, top_incident=findings[0].incident if findings else None,
                ok_axes=ok_axes(bundle), bundle=compress_bundle(bundle),
                figures=[role_figures(bundle, r).model_dump(mode="json") for r in bundle.roles],
            ))
            s.flush()
            for f in findings:
                s.add(Finding(
                    probe_id=bundle.id, cluster=bundle.cluster, incident=f.incident, severity=str(f.severity),
                    roles=list(f.roles), title=f.title, summary=f.summary,
                    evidence=list(f.evidence), detail=f.model_dump(mode="json"), at=started,
                ))
            if alert_ids:
                s.execute(update(Alert).where(self._among(Alert.id, alert_ids)).values(probe_id=bundle.id),
                          execution_options=NO_SYNC)
            if diagnosis is not None:
                learn(s, bundle.cluster, diagnosis.roles, started)
            return bundle.id

        return self.write(_save, "save probe")

    def recall_runs(self, *, cluster: str | None = None, since: datetime | None = None,
                    until: datetime | None = None, limit: int = 10_000) -> list[RecallRun]:
        """Probes that carried a recall run, oldest first, with the run's record (no bundle is read)."""
        return self._kept_runs("recall", cluster, since, until, limit)

    def _kept_runs(self, axis: str, cluster: str | None, since: datetime | None, until: datetime | None,
                   limit: int) -> list[RecallRun]:
        """Probes whose ``ok_axes`` keep a record under ``axis`` (a recall or fidelity run), oldest first."""
        q = select(Probe.id, Probe.cluster, Probe.started_at, Probe.trigger_kind, Probe.ok_axes).order_by(
            Probe.started_at.desc()).limit(limit)
        if cluster:
            q = q.where(Probe.cluster == cluster)
        if since:
            q = q.where(Probe.started_at >= since)
        if until:
            q = q.where(Probe.started_at < until)
        rows = self.read(lambda s: s.execute(q).all())
        runs = [RecallRun(pid, cl, at, kind, axes[axis]) for pid, cl, at, kind, axes in rows
                if isinstance(axes, dict) and isinstance(axes.get(axis), dict)]
        return runs[::-1]

    def probe_figures(self, probe_id: str) -> list[RoleFigures] | None:
        """Each role's figures as computed when the probe was saved; None for a probe saved before they were kept."""
        stored = self.read(lambda s: s.execute(select(Probe.figures).where(Probe.id == probe_id)).scalar_one_or_none())
        return [RoleFigures.model_validate(f) for f in stored] if isinstance(stored, list) else None

    def fidelity_runs(self, *, cluster: str | None = None, since: datetime | None = None,
                      until: datetime | None = None, limit: int = 10_000) -> list[RecallRun]:
        """Probes that carried a fidelity run, oldest first, with its record (``fidelity_record``)."""
        return self._kept_runs("fidelity", cluster, since, until, limit)

    def load_bundle(self, probe_id: str) -> Bundle:
        row = self.read(lambda s: s.get(Probe, probe_id))
        if row is None:
            raise KeyError(f"no probe {probe_id!r} in the store")
        return decompress_bundle(row.bundle, f"probe {probe_id}")

    def probes(self, *, cluster: str | None = None, role: str | None = None, since: datetime | None = None,
               incident: str | None = None, limit: int = 100) -> list[Probe]:
        """The newest ``limit`` probes matching; ``role`` filters before the limit (the roles are a JSON list,
        so it is applied page by page rather than in SQL)."""
        q = select(Probe).order_by(Probe.started_at.desc(), Probe.id)
        if cluster:
            q = q.where(Probe.cluster == cluster)
        if since:
            q = q.where(Probe.started_at >= since)
        if incident:
            q = q.where(Probe.top_incident == incident)
        if role is None:
            return list(self.read(lambda s: s.scalars(q.limit(limit)).all()))
        out: list[Probe] = []
        page, offset = max(limit, 100), 0
        while len(out) < limit:
            rows = list(self.read(lambda s: s.scalars(q.offset(offset).limit(page)).all()))
            out += [p for p in rows if role in p.roles]
            if len(rows) < page:
                break
            offset += page
        return out[:limit]

    def findings(self, *, since: datetime | None = None, until: datetime | None = None,
                 cluster: str | None = None, role: str | None = None) -> list[Finding]:
        q = select(Finding).order_by(Finding.at.desc())
        if since:
            q = q.where(Finding.at >= since)
        if until:
            q = q.where(Finding.at < until)
        if cluster:
            q = q.where(Finding.cluster == cluster)
        rows = list(self.read(lambda s: s.scalars(q).all()))
        return [f for f in rows if role is None or role in f.roles]

    def probe_findings(self, probe_id: str) -> list[Finding]:
        """A probe's findings, most likely first (the order diagnose gave them)."""
        q = select(Finding).where(Finding.probe_id == probe_id).order_by(Finding.id)
        return list(self.read(lambda s: s.scalars(q).all()))
