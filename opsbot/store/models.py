"""Every table opsbot keeps, as SQLAlchemy 2 typed models; the alembic chain in migrations/ mirrors them."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    JSON,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

NOTE_KINDS = ("done", "doing", "blocked", "next")

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def now() -> datetime:
    return datetime.now(timezone.utc)


class UtcDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend (SQLite stores them naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use timezone-aware UTC")
        return value.astimezone(timezone.utc)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {datetime: UtcDateTime, dict[str, Any]: JSON, list[Any]: JSON, list[str]: JSON}


class Probe(Base):
    """One probe: its bundle (zlib-compressed JSON) plus the columns people query by."""

    __tablename__ = "probes"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    cluster: Mapped[str] = mapped_column(String(64), index=True)
    roles: Mapped[list[str]] = mapped_column(JSON)
    started_at: Mapped[datetime] = mapped_column(index=True)
    finished_at: Mapped[datetime | None]
    trigger_kind: Mapped[str] = mapped_column(String(16))
    trigger_user: Mapped[str | None] = mapped_column(String(128))
    top_incident: Mapped[str | None] = mapped_column(String(64), index=True)
    ok_axes: Mapped[dict[str, Any]] = mapped_column(JSON)
    # each role's RoleFigures (opsbot/parse/figures.py), computed when saved: pages never parse logs
    figures: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    bundle: Mapped[bytes] = mapped_column(LargeBinary)
    stored_at: Mapped[datetime] = mapped_column(default=now)


class Finding(Base):
    __tablename__ = "findings"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    probe_id: Mapped[str] = mapped_column(ForeignKey("probes.id", ondelete="CASCADE"), index=True)
    cluster: Mapped[str] = mapped_column(String(64))
    incident: Mapped[str] = mapped_column(String(64), index=True)
    severity: Mapped[str] = mapped_column(String(16))
    roles: Mapped[list[str]] = mapped_column(JSON)
    title: Mapped[str | None] = mapped_column(Text)
    summary: Mapped[str | None] = mapped_column(Text)
    evidence: Mapped[list[Any]] = mapped_column(JSON)
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)
    at: Mapped[datetime] = mapped_column(index=True)


class Alert(Base):
    """An Alertmanager alert as received; ``dedup_key`` (fingerprint + status + startsAt) is unique."""

    __tablename__ = "alerts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    dedup_key: Mapped[str] = mapped_column(String(200), unique=True)
    fingerprint: Mapped[str] = mapped_column(String(64), index=True)
    status: Mapped[str] = mapped_column(String(16))
    alertname: Mapped[str | None] = mapped_column(String(200))
    cluster: Mapped[str | None] = mapped_column(String(64))
    role: Mapped[str | None] = mapped_column(String(64))
    group_key: Mapped[str | None] = mapped_column(Text, index=True)
    labels: Mapped[dict[str, Any]] = mapped_column(JSON)
    annotations: Mapped[dict[str, Any]] = mapped_column(JSON)
    starts_at: Mapped[datetime | None]
    ends_at: Mapped[datetime | None]
    received_at: Mapped[datetime] = mapped_column(default=now, index=True)
    probe_id: Mapped[str | None] = mapped_column(ForeignKey("probes.id", ondelete="SET NULL"))
    probe_error: Mapped[str | None] = mapped_column(Text)  # why the last probe for it could not run
    probe_attempts: Mapped[int | None] = mapped_column(Integer)
    probe_failed_at: Mapped[datetime | None]  # set when it is given up on: never retried after
    claimed_by: Mapped[str | None] = mapped_column(String(128))  # the instance probing it (a lease: see Instance)
    claimed_at: Mapped[datetime | None]  # when claimed, or when a failed probe released it (retry after a delay)


class Instance(Base):
    """A running opsbot process. Its heartbeat keeps its claims alive: once ``heartbeat_at`` is older
    than the lease (``OPSBOT_INSTANCE_LEASE_S``) the instance counts as dead and what it claimed is
    taken over by a live one. A clean shutdown deletes the row, freeing its claims at once."""

    __tablename__ = "instances"
    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(default=now)
    heartbeat_at: Mapped[datetime] = mapped_column(default=now, index=True)


class SlackThread(Base):
    """The Slack thread of one Alertmanager group: where its findings are posted. Keyed by the SHA-256 of
    the ``groupKey`` (``group_hash``), which is as long as the route's matchers make it."""

    __tablename__ = "slack_group_threads"
    group_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    channel: Mapped[str] = mapped_column(String(64))
    ts: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(16))  # firing | resolved
    created_at: Mapped[datetime] = mapped_column(default=now)
    updated_at: Mapped[datetime] = mapped_column(default=now)


class SlackSignature(Base):
    """A Slack request signature seen in the last five minutes: a second use is a replay, refused."""

    __tablename__ = "slack_signatures"
    signature: Mapped[str] = mapped_column(String(80), primary_key=True)
    seen_at: Mapped[datetime] = mapped_column(default=now, index=True)


class Action(Base):
    """A guarded action (a restart) through its life: plan, approval, execution, verification, outcome."""

    __tablename__ = "actions"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    cluster: Mapped[str] = mapped_column(String(64), index=True)
    role: Mapped[str] = mapped_column(String(64), index=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    plan: Mapped[dict[str, Any]] = mapped_column(JSON)
    reason: Mapped[str | None] = mapped_column(Text)
    requested_by: Mapped[str] = mapped_column(String(128))
    surface: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(default=now)
    expires_at: Mapped[datetime]
    approved_by: Mapped[str | None] = mapped_column(String(128))
    approved_surface: Mapped[str | None] = mapped_column(String(16))
    approved_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None] = mapped_column(index=True)
    finished_at: Mapped[datetime | None]
    execution: Mapped[list[Any] | None] = mapped_column(JSON)
    verification: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    outcome: Mapped[str | None] = mapped_column(Text)
    evidence_probe_id: Mapped[str | None] = mapped_column(ForeignKey("probes.id", ondelete="SET NULL"))
    plan_key: Mapped[str | None] = mapped_column(String(200), unique=True)  # probe:role for a planned remedy
    # cluster/role/incident class of a remedy's plan while it waits for approval (cleared when it leaves planned)
    waiting_key: Mapped[str | None] = mapped_column(String(200), unique=True)

    @property
    def roles(self) -> list[str]:
        """The role keys it restarts (the ``role`` column holds them comma-joined, as it always has)."""
        return [r for r in self.role.split(",") if r]

    @property
    def remedy_for(self) -> str | None:
        """The incident class a remedy's plan was made for (None: a restart asked by hand)."""
        return (self.plan or {}).get("remedy_for")

    @property
    def watched_roles(self) -> list[str]:
        """The roles a probe must look at to tell whether its finding still holds: its own and the finding's."""
        return sorted(set(self.roles) | set((self.plan or {}).get("finding_roles") or []))


class ActionCapture(Base):
    """The evidence captured of a role before its restart (``opsbot.act.capture``), compressed JSON."""

    __tablename__ = "action_captures"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    action_id: Mapped[str] = mapped_column(ForeignKey("actions.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(default=now)
    ok: Mapped[bool]
    summary: Mapped[str] = mapped_column(Text)
    size_bytes: Mapped[int] = mapped_column(Integer)  # of the JSON before compression
    data: Mapped[bytes] = mapped_column(LargeBinary)


class RoleLogTemplate(Base):
    """A log line template seen on a role in probes whose verdict on it was healthy (opsbot/parse/templates.py):
    what the role prints while healthy. At most ``opsbot.store.templates.TEMPLATES_PER_ROLE`` per role, the
    least recently seen evicted first."""

    __tablename__ = "role_log_templates"
    cluster: Mapped[str] = mapped_column(String(64), primary_key=True)
    role: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(String(32), primary_key=True)  # template_key: blake2b-128 of the template
    template: Mapped[str] = mapped_column(String(256))  # capped at TEMPLATE_CAP characters, control characters escaped
    first_seen: Mapped[datetime]  # the probe's start, first and last time a healthy probe printed it
    last_seen: Mapped[datetime]
    healthy_probes: Mapped[int] = mapped_column(Integer)  # healthy probes of the role it was seen in


class RoleLogHistory(Base):
    """How many probes found a role healthy and taught its templates: enough of them, and a role's lines are
    compared with what it printed while healthy."""

    __tablename__ = "role_log_history"
    cluster: Mapped[str] = mapped_column(String(64), primary_key=True)
    role: Mapped[str] = mapped_column(String(64), primary_key=True)
    healthy_probes: Mapped[int] = mapped_column(Integer)
    first_healthy_at: Mapped[datetime]
    last_healthy_at: Mapped[datetime]


class Approval(Base):
    __tablename__ = "approvals"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    action_id: Mapped[str] = mapped_column(ForeignKey("actions.id", ondelete="CASCADE"), index=True)
    approver: Mapped[str] = mapped_column(String(128))
    surface: Mapped[str] = mapped_column(String(16))
    at: Mapped[datetime] = mapped_column(default=now)
    expires_at: Mapped[datetime]


class RoleLock(Base):
    """At most one row per (cluster, role): inserting it is taking the lock; stale rows expire."""

    __tablename__ = "role_locks"
    cluster: Mapped[str] = mapped_column(String(64), primary_key=True)
    role: Mapped[str] = mapped_column(String(64), primary_key=True)
    action_id: Mapped[str] = mapped_column(String(32))
    holder: Mapped[str] = mapped_column(String(128))
    acquired_at: Mapped[datetime] = mapped_column(default=now)
    expires_at: Mapped[datetime]


class AuditEntry(Base):
    """Append-only: the Store has no update or delete for it, and a trigger forbids both."""

    __tablename__ = "audit"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(default=now, index=True)
    actor: Mapped[str] = mapped_column(String(128))
    surface: Mapped[str] = mapped_column(String(16))
    what: Mapped[str] = mapped_column(String(200))
    cluster: Mapped[str | None] = mapped_column(String(64))
    role: Mapped[str | None] = mapped_column(String(64))
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)


class Report(Base):
    __tablename__ = "reports"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    period: Mapped[str] = mapped_column(String(64))
    format: Mapped[str] = mapped_column(String(16))
    body: Mapped[str] = mapped_column(Text)
    meta: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=now, index=True)


class Note(Base):
    __tablename__ = "notes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16), index=True)
    text: Mapped[str] = mapped_column(Text)
    actor: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(default=now, index=True)


class Decision(Base):
    __tablename__ = "decisions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    text: Mapped[str] = mapped_column(Text)
    why: Mapped[str] = mapped_column(Text)
    actor: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(default=now, index=True)


class JobRun(Base):
    """A claim on (job, period): the unique pair makes a scheduled job run once across instances."""

    __tablename__ = "job_runs"
    __table_args__ = (UniqueConstraint("job", "period", name="uq_job_runs_job_period"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job: Mapped[str] = mapped_column(String(64))
    period: Mapped[str] = mapped_column(String(64))
    claimed_by: Mapped[str] = mapped_column(String(128))
    claimed_at: Mapped[datetime] = mapped_column(default=now)
    finished_at: Mapped[datetime | None]
    result: Mapped[str | None] = mapped_column(Text)


class ApiToken(Base):
    """A bearer token, kept as its SHA-256 hash only; revoked and expired tokens stay, refused."""

    __tablename__ = "api_tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=now)
    last_used_at: Mapped[datetime | None]
    expires_at: Mapped[datetime | None]  # refused (401) from then on; None: never expires
    revoked_at: Mapped[datetime | None]  # refused (401) from then on; the row stays for the audit


class IncidentRow(Base):
    """One incident (spec/incidents.md class on a cluster) from the first alert whose probe named it to its resolution.

    ``open_key`` is ``cluster/class`` while open and NULL once resolved: its unique constraint lets at
    most one open incident per class exist, whichever instance records it. ``timeline`` is append-only
    ({at, kind, what, ref}); the Slack columns make its one message posted once, then edited.
    """

    __tablename__ = "incidents"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    open_key: Mapped[str | None] = mapped_column(String(200), unique=True)
    cluster: Mapped[str] = mapped_column(String(64), index=True)
    incident: Mapped[str] = mapped_column(String(64), index=True)
    severity: Mapped[str] = mapped_column(String(16))
    roles: Mapped[list[str]] = mapped_column(JSON)
    title: Mapped[str | None] = mapped_column(Text)
    summary: Mapped[str | None] = mapped_column(Text)
    confidence: Mapped[float | None] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(16), index=True)  # open | resolved
    first_seen: Mapped[datetime] = mapped_column(index=True)
    last_seen: Mapped[datetime]
    resolved_at: Mapped[datetime | None]
    alerts: Mapped[list[Any]] = mapped_column(JSON)  # alert row ids
    alertnames: Mapped[list[str]] = mapped_column(JSON)
    firing: Mapped[list[str]] = mapped_column(JSON)  # fingerprints still firing
    probes: Mapped[list[str]] = mapped_column(JSON)
    actions: Mapped[list[str]] = mapped_column(JSON)
    timeline: Mapped[list[Any]] = mapped_column(JSON)
    slack_channel: Mapped[str | None] = mapped_column(String(64))
    slack_ts: Mapped[str | None] = mapped_column(String(32))
    slack_state: Mapped[str | None] = mapped_column(String(16))  # posting | posted | failed
    slack_claimed_at: Mapped[datetime | None]
    slack_claimed_by: Mapped[str | None] = mapped_column(String(128))  # the instance posting it (Instance.id)
    slack_error: Mapped[str | None] = mapped_column(Text)
    slack_attempts: Mapped[int] = mapped_column(Integer, default=0)
    slack_version: Mapped[int] = mapped_column(Integer, default=0)  # timeline length last shown in Slack

    @property
    def time_to_recovery_s(self) -> float | None:
        return None if self.resolved_at is None else (self.resolved_at - self.first_seen).total_seconds()

    def as_json(self) -> dict[str, Any]:
        """The incident as REST and ``--json`` show it."""
        keys = ("id", "cluster", "incident", "severity", "roles", "title", "summary", "confidence", "state",
                "alerts", "alertnames", "probes", "actions", "timeline", "slack_channel", "slack_ts", "slack_state",
                "slack_error")
        out: dict[str, Any] = {k: getattr(self, k) for k in keys}
        for k in ("first_seen", "last_seen", "resolved_at"):
            value = getattr(self, k)
            out[k] = value.isoformat() if value else None
        out["time_to_recovery_s"] = self.time_to_recovery_s
        return out


Index("ix_actions_cluster_started", Action.cluster, Action.started_at)
