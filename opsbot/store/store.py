"""``Store``: every write opsbot makes, one transaction per logical write, retried while the database is busy."""

from __future__ import annotations

import hashlib
import json
import secrets
import time
import uuid
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from opsbot.bundle import Bundle, parse_bundle
from opsbot.contracts import Diagnosis
from opsbot.parse.recall import run_record
from opsbot.store.database import StoreError, make_engine, retrying, upgrade
from opsbot.store.incidents import IncidentRecords
from opsbot.store.models import (
    NOTE_KINDS,
    Action,
    Alert,
    ApiToken,
    Approval,
    AuditEntry,
    Decision,
    Finding,
    Instance,
    JobRun,
    Note,
    Probe,
    Report,
    RoleLock,
    SlackSignature,
    SlackThread,
    now,
)

T = TypeVar("T")
SCOPES = ("read", "probe", "act")
ALERT_CHUNK = 500


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
    if bundle.canary is not None:
        out["canary"] = {"ok": bundle.canary.ok}
    if bundle.recall is not None:
        out["recall"] = run_record(bundle.recall)
    return out


@dataclass(frozen=True)
class RecallRun:
    """One stored recall run: its probe and the record ``run_record`` made of it."""

    probe_id: str
    cluster: str
    at: datetime
    trigger: str
    record: dict[str, Any]


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


@dataclass(frozen=True)
class LockHeld:
    """Why a lock could not be taken: who holds it and until when."""

    holder: str
    action_id: str
    expires_at: datetime


class TokenScopes(list[str]):
    """A checked token's scopes (a list), the token's ``name`` (who the caller is) and, for a revoked
    or expired token, why it is ``refused`` (its scopes are then empty)."""

    def __init__(self, name: str, scopes: Iterable[str], refused: str | None = None) -> None:
        super().__init__(scopes)
        self.name = name
        self.refused = refused


def implied_scopes(scopes: Iterable[str]) -> list[str]:
    """Scopes nest as users expect: ``act`` includes ``probe``, which includes ``read``."""
    held = [SCOPES.index(sc) for sc in scopes if sc in SCOPES]
    return sorted(SCOPES[: max(held) + 1]) if held else []


@dataclass
class AlertIn:
    """One alert to keep; ``dedup_key`` is fingerprint, status and start time."""

    fingerprint: str
    status: str
    labels: dict[str, Any]
    annotations: dict[str, Any] = field(default_factory=dict)
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    group_key: str | None = None
    cluster: str | None = None
    role: str | None = None

    @property
    def dedup_key(self) -> str:
        start = self.starts_at.isoformat() if self.starts_at else ""
        return f"{self.fingerprint}:{self.status}:{start}"


class Store(IncidentRecords):
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
            server = float(s.scalar(text("SELECT extract(epoch FROM clock_timestamp())")))
            return (before + time.time()) / 2 - server

        return self.read(_read)

    def write(self, fn: Callable[[Session], T], what: str = "write") -> T:
        """Run ``fn`` in one transaction: all of it commits or none; retried while busy."""

        def _once() -> T:
            with self._sessions.begin() as session:
                return fn(session)

        return retrying(_once, attempts=self.attempts, first_delay_s=0.05, what=what)

    def read(self, fn: Callable[[Session], T]) -> T:
        return self.write(fn, "read")

    # -- probes and findings ------------------------------------------------------------------

    def save_probe(self, bundle: Bundle, diagnosis: Diagnosis | None = None, alert_ids: list[int] | None = None) -> str:
        """Keep a bundle (compressed) and its findings; saving the same bundle twice is a no-op.

        ``alert_ids``: the stored alerts this probe answers, linked in the same transaction, so a crash
        leaves either the probe and its links or neither (never a probe whose alerts get probed again).
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
            ))
            s.flush()
            for f in findings:
                s.add(Finding(
                    probe_id=bundle.id, cluster=bundle.cluster, incident=f.incident, severity=str(f.severity),
                    roles=list(f.roles), title=f.title, summary=f.summary,
                    evidence=list(f.evidence), detail=f.model_dump(mode="json"), at=started,
                ))
            if alert_ids:
                s.execute(update(Alert).where(Alert.id.in_(alert_ids)).values(probe_id=bundle.id))
            return bundle.id

        return self.write(_save, "save probe")

    def recall_runs(self, *, cluster: str | None = None, since: datetime | None = None,
                    until: datetime | None = None, limit: int = 10_000) -> list[RecallRun]:
        """Probes that carried a recall run, oldest first, with the run's record (no bundle is read)."""
        q = select(Probe.id, Probe.cluster, Probe.started_at, Probe.trigger_kind, Probe.ok_axes).order_by(
            Probe.started_at.desc()).limit(limit)
        if cluster:
            q = q.where(Probe.cluster == cluster)
        if since:
            q = q.where(Probe.started_at >= since)
        if until:
            q = q.where(Probe.started_at < until)
        rows = self.read(lambda s: s.execute(q).all())
        runs = [RecallRun(pid, cl, at, kind, axes["recall"]) for pid, cl, at, kind, axes in rows
                if isinstance(axes, dict) and isinstance(axes.get("recall"), dict)]
        return runs[::-1]

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

    # -- alerts -----------------------------------------------------------------------------

    def save_alert(self, alert: AlertIn) -> tuple[int, bool]:
        """Keep an alert; (row id, True) when new, (existing id, False) when a duplicate."""
        return self.save_alerts([alert])[0]

    def save_alerts(self, alerts: Iterable[AlertIn], claimer: str | None = None) -> list[tuple[int, bool]]:
        """Keep one notification's alerts in one transaction (all or none); duplicates by key stay single.

        ``claimer`` marks the new rows as being probed by that instance (see ``claim_unprocessed``).
        """
        alerts = list(alerts)
        if not alerts:
            return []
        at = now()
        rows: dict[str, dict[str, Any]] = {}
        for a in alerts:  # the first of a repeated key in one notification is the one kept
            rows.setdefault(a.dedup_key, dict(
                dedup_key=a.dedup_key, fingerprint=a.fingerprint, status=a.status,
                alertname=a.labels.get("alertname"), cluster=a.cluster, role=a.role, group_key=a.group_key,
                labels=a.labels, annotations=a.annotations, starts_at=a.starts_at, ends_at=a.ends_at,
                received_at=at, claimed_by=claimer, claimed_at=at if claimer else None,
            ))
        insert = pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert
        # one statement for every row (executemany with RETURNING: SQLAlchemy's insertmanyvalues), compiled
        # once and cached; a multi-row VALUES would be compiled afresh for every row count
        stmt = insert(Alert.__table__).on_conflict_do_nothing(index_elements=["dedup_key"]).returning(
            Alert.__table__.c.dedup_key)
        values, keys = list(rows.values()), list(rows)

        def _save(s: Session) -> list[tuple[int, bool]]:
            fresh = set(s.scalars(stmt, values).all())
            ids: dict[str, int] = {}
            for i in range(0, len(keys), ALERT_CHUNK):  # keeps each IN under SQLite's bound-parameter limit
                ids.update(s.execute(select(Alert.dedup_key, Alert.id)
                                     .where(Alert.dedup_key.in_(keys[i:i + ALERT_CHUNK]))).all())
            seen: set[str] = set()
            out = []
            for a in alerts:
                key = a.dedup_key
                out.append((ids[key], key in fresh and key not in seen))
                seen.add(key)
            return out

        return self.write(_save, "save alerts")

    def link_alert_probe(self, alert_ids: list[int], probe_id: str) -> None:
        self.write(lambda s: s.execute(update(Alert).where(Alert.id.in_(alert_ids)).values(probe_id=probe_id)))

    def alerts(self, *, since: datetime | None = None, limit: int = 1000) -> list[Alert]:
        q = select(Alert).order_by(Alert.received_at.desc()).limit(limit)
        if since:
            q = q.where(Alert.received_at >= since)
        return list(self.read(lambda s: s.scalars(q).all()))

    def count_alerts(self) -> int:
        return self.read(lambda s: s.scalar(select(func.count()).select_from(Alert)) or 0)

    def claim_unprocessed(self, claimer: str, *, lease: timedelta, retry_after: timedelta = timedelta(0),
                          limit: int = 10_000) -> list[Alert]:
        """Claim the alerts no probe has handled (compare-and-set): each goes to exactly one instance.

        Free to claim: alerts nobody holds (a failed probe's, once ``retry_after`` has passed since it
        failed) and alerts held by a dead instance (no heartbeat within ``lease``: see ``Instance``).
        Skipped: alerts given up on (``probe_failed_at``), and those a live instance or ``claimer`` holds.
        """
        at = now()
        open_ = (Alert.probe_id.is_(None), Alert.probe_failed_at.is_(None))
        live = select(Instance.id).where(Instance.heartbeat_at >= at - lease)
        free = ((Alert.claimed_by.is_(None) & (Alert.claimed_at.is_(None) | (Alert.claimed_at <= at - retry_after)))
                | ((Alert.claimed_by != claimer) & Alert.claimed_by.not_in(live)))

        def _claim(s: Session) -> list[Alert]:
            ids = list(s.scalars(select(Alert.id).where(*open_, free).order_by(Alert.id).limit(limit)).all())
            if not ids:
                return []
            # the WHERE is checked again row by row: a concurrent claimer's rows are left alone
            s.execute(update(Alert).where(Alert.id.in_(ids), *open_, free).values(claimed_by=claimer, claimed_at=at))
            return list(s.scalars(select(Alert).where(Alert.id.in_(ids), Alert.claimed_by == claimer,
                                                      Alert.claimed_at == at).order_by(Alert.id)).all())

        return self.write(_claim, "claim alerts")

    def alert_probe_failed(self, alert_ids: list[int], error: str, *, max_attempts: int, final: bool = False) -> None:
        """Record a probe that could not run; after ``max_attempts`` (or a ``final`` error) it is given up on."""
        at = now()

        def _fail(s: Session) -> None:
            for row in s.scalars(select(Alert).where(Alert.id.in_(alert_ids))).all():
                row.probe_error = error[:2000]
                row.probe_attempts = (row.probe_attempts or 0) + 1
                if final or row.probe_attempts >= max_attempts:
                    row.probe_failed_at = at
                row.claimed_by, row.claimed_at = None, at  # released: retried after a delay, unless given up on

        self.write(_fail, "record alert probe failure")

    def failed_alerts(self, *, since: datetime | None = None, limit: int = 100) -> list[Alert]:
        """Alerts given up on: their probe could never run (the error says why)."""
        q = select(Alert).where(Alert.probe_failed_at.is_not(None)).order_by(Alert.probe_failed_at.desc()).limit(limit)
        if since:
            q = q.where(Alert.probe_failed_at >= since)
        return list(self.read(lambda s: s.scalars(q).all()))

    # -- instances: who is alive, so that what a dead one claimed is taken over ------------------

    def heartbeat(self, instance: str, host: str, pid: int, *, forget_after: timedelta = timedelta(days=1)) -> None:
        """Say ``instance`` is alive (registering it the first time); rows silent for ``forget_after`` go."""
        at = now()

        def _beat(s: Session) -> None:
            row = s.get(Instance, instance)
            if row is None:
                s.add(Instance(id=instance, host=host, pid=pid, started_at=at, heartbeat_at=at))
            else:
                row.heartbeat_at = at
            s.execute(delete(Instance).where(Instance.heartbeat_at < at - forget_after))

        self.write(_beat, "heartbeat")

    def leave(self, instance: str) -> None:
        """A clean shutdown: the instance's row goes, so its claims are free at once."""
        self.write(lambda s: s.execute(delete(Instance).where(Instance.id == instance)), "leave")

    def instances(self, lease: timedelta) -> list[tuple[Instance, bool]]:
        """Every known instance and whether it is alive (a heartbeat within ``lease``)."""
        at = now()
        rows = self.read(lambda s: s.scalars(select(Instance).order_by(Instance.started_at)).all())
        return [(r, r.heartbeat_at >= at - lease) for r in rows]

    # -- Slack alert threads -----------------------------------------------------------------

    def slack_thread(self, group_key: str) -> SlackThread | None:
        return self.read(lambda s: s.get(SlackThread, group_key))

    def save_slack_thread(self, group_key: str, channel: str, ts: str, state: str) -> SlackThread:
        """Remember (or update the state of) an alert group's thread; the first thread of a group is kept."""

        def _save(s: Session) -> SlackThread:
            row = s.get(SlackThread, group_key)
            if row is None:
                row = SlackThread(group_key=group_key, channel=channel, ts=ts, state=state)
                s.add(row)
            else:
                row.state, row.updated_at = state, now()
            return row

        return self.write(_save, "save slack thread")

    def first_use(self, signature: str, window: timedelta) -> bool:
        """True the first time a Slack signature is seen within ``window`` (across instances); False for a replay."""
        at = now()

        def _use(s: Session) -> None:
            s.execute(delete(SlackSignature).where(SlackSignature.seen_at < at - window))
            s.add(SlackSignature(signature=signature, seen_at=at))

        try:
            self.write(_use, "record slack signature")
        except IntegrityError:
            return False
        return True

    # -- audit (append-only) -----------------------------------------------------------------

    def audit(self, actor: str, surface: str, what: str, detail: dict[str, Any] | None = None, *,
              cluster: str | None = None, role: str | None = None) -> int:
        def _add(s: Session) -> int:
            row = _audit_row(actor, surface, what, detail, cluster, role)
            s.add(row)
            s.flush()
            return row.id

        return self.write(_add, "audit")

    def audit_log(self, *, since: datetime | None = None, role: str | None = None, limit: int = 500) -> list[AuditEntry]:
        q = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit)
        if since:
            q = q.where(AuditEntry.at >= since)
        if role:
            q = q.where(AuditEntry.role == role)
        return list(self.read(lambda s: s.scalars(q).all()))

    # -- reports, notes, decisions -----------------------------------------------------------

    def save_report(self, kind: str, period: str, fmt: str, body: str, meta: dict[str, Any] | None = None) -> int:
        def _add(s: Session) -> int:
            row = Report(kind=kind, period=period, format=fmt, body=body, meta=meta or {})
            s.add(row)
            s.flush()
            return row.id

        return self.write(_add, "save report")

    def latest_report(self, kind: str, fmt: str | None = None) -> Report | None:
        q = select(Report).where(Report.kind == kind).order_by(Report.created_at.desc(), Report.id.desc()).limit(1)
        if fmt:
            q = q.where(Report.format == fmt)
        return self.read(lambda s: s.scalar(q))

    def report(self, report_id: int) -> Report | None:
        return self.read(lambda s: s.get(Report, report_id))

    def reports(self, *, kind: str | None = None, limit: int = 50) -> list[Report]:
        q = select(Report).order_by(Report.created_at.desc(), Report.id.desc()).limit(limit)
        if kind:
            q = q.where(Report.kind == kind)
        return list(self.read(lambda s: s.scalars(q).all()))

    def add_note(self, kind: str, text: str, actor: str) -> int:
        if kind not in NOTE_KINDS:
            raise ValueError(f"note kind {kind!r}: use one of {', '.join(NOTE_KINDS)}")
        if not text.strip():
            raise ValueError("a note needs text")

        def _add(s: Session) -> int:
            row = Note(kind=kind, text=text, actor=actor)
            s.add(row)
            s.add(_audit_row(actor, "cli", f"note {kind}", {"text": text}))
            s.flush()
            return row.id

        return self.write(_add, "add note")

    def notes(self, *, since: datetime | None = None, kind: str | None = None) -> list[Note]:
        q = select(Note).order_by(Note.created_at.desc(), Note.id.desc())
        if since:
            q = q.where(Note.created_at >= since)
        if kind:
            q = q.where(Note.kind == kind)
        return list(self.read(lambda s: s.scalars(q).all()))

    def add_decision(self, text: str, why: str, actor: str) -> int:
        if not text.strip() or not why.strip():
            raise ValueError("a decision needs its text and why it was taken")

        def _add(s: Session) -> int:
            row = Decision(text=text, why=why, actor=actor)
            s.add(row)
            s.add(_audit_row(actor, "cli", "decision", {"text": text, "why": why}))
            s.flush()
            return row.id

        return self.write(_add, "add decision")

    def decisions(self, *, since: datetime | None = None) -> list[Decision]:
        q = select(Decision).order_by(Decision.created_at.desc(), Decision.id.desc())
        if since:
            q = q.where(Decision.created_at >= since)
        return list(self.read(lambda s: s.scalars(q).all()))

    # -- scheduled jobs ----------------------------------------------------------------------

    def claim_period(self, job: str, period: str, claimer: str = "", *, lease: timedelta | None = None) -> bool:
        """True for exactly one caller per (job, period), across processes and hosts.

        With ``lease``, a claim its instance left unfinished and that is no longer held by a live
        instance (no heartbeat within ``lease``: it was killed mid-job) is taken over, by one caller;
        a claim younger than ``lease`` never is (its claimer may not have beaten yet).
        """
        claimer = claimer or f"pid-{uuid.uuid4().hex[:8]}"
        try:
            self.write(lambda s: s.add(JobRun(job=job, period=period, claimed_by=claimer)), "claim job")
            return True
        except IntegrityError:
            if lease is None:
                return False
        at = now()
        live = select(Instance.id).where(Instance.heartbeat_at >= at - lease)
        take = (update(JobRun).where(JobRun.job == job, JobRun.period == period, JobRun.finished_at.is_(None),
                                     JobRun.claimed_at < at - lease, JobRun.claimed_by != claimer,
                                     JobRun.claimed_by.not_in(live))
                .values(claimed_by=claimer, claimed_at=at))
        return bool(self.write(lambda s: s.execute(take).rowcount, "take over job"))

    def orphaned_periods(self, job: str, lease: timedelta) -> list[str]:
        """Periods of ``job`` claimed, unfinished, by instances that are no longer alive."""
        at = now()
        live = select(Instance.id).where(Instance.heartbeat_at >= at - lease)
        q = select(JobRun.period).where(JobRun.job == job, JobRun.finished_at.is_(None), JobRun.claimed_at < at - lease,
                                        JobRun.claimed_by.not_in(live))
        return list(self.read(lambda s: s.scalars(q).all()))

    def finish_period(self, job: str, period: str, result: str) -> None:
        self.write(lambda s: s.execute(
            update(JobRun).where(JobRun.job == job, JobRun.period == period).values(finished_at=now(), result=result)
        ))

    # -- API tokens --------------------------------------------------------------------------

    def create_token(self, name: str, scopes: list[str], expires_in: timedelta | None = None) -> str:
        """A new bearer token; only its SHA-256 is stored, the secret is returned once."""
        bad = [sc for sc in scopes if sc not in SCOPES]
        if bad or not scopes:
            raise ValueError(f"scopes {bad or '(none)'}: choose from {', '.join(SCOPES)}")
        if expires_in is not None and expires_in <= timedelta(0):
            raise ValueError("a token's lifetime must be positive, e.g. 30d")
        secret = "opsbot_" + secrets.token_urlsafe(32)
        expires_at = now() + expires_in if expires_in is not None else None

        def _add(s: Session) -> None:
            s.add(ApiToken(name=name, token_hash=_sha256(secret), scopes=sorted(set(scopes)), expires_at=expires_at))
            s.add(_audit_row("cli", "cli", "token created", {"name": name, "scopes": scopes,
                                                              "expires_at": expires_at and expires_at.isoformat()}))

        try:
            self.write(_add, "create token")
        except IntegrityError as exc:
            raise ValueError(f"a token named {name!r} exists; choose another name") from exc
        return secret

    def check_token(self, secret: str) -> TokenScopes | None:
        """The token's scopes with the ones they include (act > probe > read) and its ``name``, or None
        when unknown; a revoked or expired token comes back with ``refused`` saying which. Records use."""
        digest = _sha256(secret)
        at = now()

        def _check(s: Session) -> TokenScopes | None:
            row = s.scalar(select(ApiToken).where(ApiToken.token_hash == digest))
            if row is None or not secrets.compare_digest(row.token_hash, digest):
                return None
            if row.revoked_at is not None:
                return TokenScopes(row.name, [], refused=f"token {row.name!r} was revoked at {row.revoked_at:%Y-%m-%d %H:%M} UTC")
            if row.expires_at is not None and row.expires_at <= at:
                return TokenScopes(row.name, [], refused=f"token {row.name!r} expired at {row.expires_at:%Y-%m-%d %H:%M} UTC")
            row.last_used_at = at
            return TokenScopes(row.name, implied_scopes(row.scopes))

        return self.write(_check, "check token")

    def revoke_token(self, name_or_id: str, actor: str = "cli") -> ApiToken:
        """Revoke a token by name (or numeric id); KeyError when there is none, ValueError if already revoked."""

        def _revoke(s: Session) -> ApiToken:
            row = s.scalar(select(ApiToken).where(ApiToken.name == name_or_id))
            if row is None and name_or_id.isdigit() and len(name_or_id) < 19:
                row = s.get(ApiToken, int(name_or_id))
            if row is None:
                raise KeyError(f"no token named {name_or_id!r} (opsbot tokens list)")
            if row.revoked_at is not None:
                raise ValueError(f"token {row.name!r} was already revoked at {row.revoked_at:%Y-%m-%d %H:%M} UTC")
            row.revoked_at = now()
            s.add(_audit_row(actor, "cli", "token revoked", {"name": row.name, "id": row.id}))
            return row

        return self.write(_revoke, "revoke token")

    def tokens(self) -> list[ApiToken]:
        return list(self.read(lambda s: s.scalars(select(ApiToken).order_by(ApiToken.id)).all()))

    # -- actions ------------------------------------------------------------------------------

    def create_action(self, *, kind: str, cluster: str, role: str, plan: dict[str, Any], reason: str | None,
                      requested_by: str, surface: str, ttl: timedelta, plan_key: str | None = None) -> Action:
        """A new ``planned`` action; with ``plan_key``, the one already planned under that key if there is one."""
        if plan_key is not None:
            existing = self.read(lambda s: s.scalars(select(Action).where(Action.plan_key == plan_key)).first())
            if existing is not None:
                return existing

        def _add(s: Session) -> Action:
            row = Action(id=uuid.uuid4().hex[:12], kind=kind, cluster=cluster, role=role, state="planned",
                         plan=plan, reason=reason, requested_by=requested_by, surface=surface,
                         expires_at=now() + ttl, plan_key=plan_key)
            s.add(row)
            s.add(_audit_row(requested_by, surface, f"{kind} planned", {"action": row.id, "reason": reason},
                             cluster, role))
            return row

        try:
            return self.write(_add, "create action")
        except IntegrityError:  # another instance planned it between our read and our write
            if plan_key is None:
                raise
            return self.read(lambda s: s.scalars(select(Action).where(Action.plan_key == plan_key)).one())

    def action(self, action_id: str) -> Action:
        row = self.read(lambda s: s.get(Action, action_id))
        if row is None:
            raise KeyError(f"no action {action_id!r}; see `opsbot actions list`")
        return row

    def actions(self, *, state: str | None = None, cluster: str | None = None, role: str | None = None,
                since: datetime | None = None, limit: int = 100) -> list[Action]:
        q = select(Action).order_by(Action.created_at.desc()).limit(limit)
        if state:
            q = q.where(Action.state == state)
        if cluster:
            q = q.where(Action.cluster == cluster)
        if role:
            q = q.where(Action.role == role)
        if since:
            q = q.where(Action.created_at >= since)
        return list(self.read(lambda s: s.scalars(q).all()))

    def transition(self, action_id: str, from_states: tuple[str, ...], to_state: str, *, actor: str, surface: str,
                   what: str, audit_detail: dict[str, Any] | None = None, **values: Any) -> Action | None:
        """Compare-and-set the action's state (and other columns) with its audit entry; None if the state moved."""

        def _go(s: Session) -> Action | None:
            res = s.execute(update(Action).where(Action.id == action_id, Action.state.in_(from_states))
                            .values(state=to_state, **values))
            if res.rowcount != 1:  # type: ignore[attr-defined]
                return None
            row = s.get(Action, action_id)
            assert row is not None
            s.refresh(row)
            s.add(_audit_row(actor, surface, what, {"action": action_id, **(audit_detail or {})}, row.cluster, row.role))
            return row

        return self.write(_go, f"action {to_state}")

    def approve_action(self, action_id: str, approver: str, surface: str, ttl: timedelta) -> Action | None:
        """planned → approved with an approval row, if still planned and not expired; None otherwise."""
        at = now()

        def _go(s: Session) -> Action | None:
            res = s.execute(update(Action).where(Action.id == action_id, Action.state == "planned",
                                                 Action.expires_at > at)
                            .values(state="approved", approved_by=approver, approved_surface=surface,
                                    approved_at=at, expires_at=at + ttl))
            if res.rowcount != 1:  # type: ignore[attr-defined]
                return None
            row = s.get(Action, action_id)
            assert row is not None
            s.refresh(row)
            s.add(Approval(action_id=action_id, approver=approver, surface=surface, at=at, expires_at=at + ttl))
            s.add(_audit_row(approver, surface, f"{row.kind} approved", {"action": action_id}, row.cluster, row.role))
            return row

        return self.write(_go, "approve action")

    def approvals(self, action_id: str) -> list[Approval]:
        return list(self.read(lambda s: s.scalars(select(Approval).where(Approval.action_id == action_id)).all()))

    def restarts_since(self, cluster: str, since: datetime, role: str | None = None) -> list[Action]:
        """Restarts that were executed (whatever their outcome) since ``since``: the cooldown and budget."""
        q = (select(Action).where(Action.cluster == cluster, Action.kind == "restart",
                                  Action.state.in_(("executing", "succeeded", "failed")), Action.started_at >= since)
             .order_by(Action.started_at))
        if role:
            q = q.where(Action.role == role)
        return list(self.read(lambda s: s.scalars(q).all()))

    # -- role locks ---------------------------------------------------------------------------

    def take_lock(self, cluster: str, role: str, action_id: str, holder: str, ttl: timedelta) -> LockHeld | None:
        """Take the role's lock (None) or say who holds it; an expired lock is taken over."""
        at = now()

        def _take(s: Session) -> None:
            s.execute(delete(RoleLock).where(RoleLock.cluster == cluster, RoleLock.role == role,
                                             RoleLock.expires_at < at))
            s.add(RoleLock(cluster=cluster, role=role, action_id=action_id, holder=holder, acquired_at=at,
                           expires_at=at + ttl))

        try:
            self.write(_take, "take lock")
            return None
        except IntegrityError:
            held = self.read(lambda s: s.get(RoleLock, (cluster, role)))
            if held is None:  # released between our insert and this read: try once more
                return self.take_lock(cluster, role, action_id, holder, ttl)
            return LockHeld(held.holder, held.action_id, held.expires_at)

    def release_lock(self, cluster: str, role: str, action_id: str) -> None:
        self.write(lambda s: s.execute(delete(RoleLock).where(
            RoleLock.cluster == cluster, RoleLock.role == role, RoleLock.action_id == action_id)), "release lock")

    def locks(self, cluster: str) -> list[RoleLock]:
        return list(self.read(lambda s: s.scalars(select(RoleLock).where(RoleLock.cluster == cluster)).all()))

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


def _audit_row(actor: str, surface: str, what: str, detail: dict[str, Any] | None,
               cluster: str | None = None, role: str | None = None) -> AuditEntry:
    json.dumps(detail or {})  # refuse what cannot be kept before the transaction starts
    return AuditEntry(actor=actor, surface=surface, what=what, detail=detail or {}, cluster=cluster, role=role,
                      at=now())


def _sha256(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


__all__ = ["AlertIn", "HistoryItem", "LockHeld", "Store", "StoreError", "TokenScopes", "compress_bundle", "decompress_bundle"]
