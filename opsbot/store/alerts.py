"""Alerts from Alertmanager (record stage): kept before the 200, claimed by a live instance, and the Slack threads they open."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    JSON,
    CompoundSelect,
    Text,
    bindparam,
    cast,
    column,
    delete,
    false,
    func,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from opsbot.store.gateway import NO_SYNC, Gateway
from opsbot.store.models import (
    Alert,
    Instance,
    SlackSignature,
    SlackThread,
    now,
)

ALERT_CHUNK = 500
BATCH_COLUMNS = ("dedup_key", "fingerprint", "status", "alertname", "cluster", "role", "group_key", "labels",
                 "annotations", "starts_at", "ends_at", "received_at", "claimed_by", "claimed_at")
"""What ``save_alerts`` writes of a new alert."""


def _batch_insert() -> CompoundSelect[str, int, bool]:
    """One statement for any number of alerts (PostgreSQL). The rows come in as one JSON array, one
    parameter (``json_to_recordset``), so the SQL text never changes: PostgreSQL prepares and plans it
    once, and psycopg neither splits a long SQL (a multi-row ``VALUES`` is a new statement per row
    count) nor escapes array elements one by one, in Python, holding the GIL the event loop needs.
    Rows: (key, id, True) per inserted alert, then (key, id, False) per alert already stored; the
    outer ``SELECT`` sees the table as it was before the insert, so none is both."""
    table = Alert.metadata.tables[Alert.__tablename__]
    rows = (func.json_to_recordset(cast(bindparam("batch", type_=Text), JSON))
            .table_valued(*(column(c, table.c[c].type) for c in BATCH_COLUMNS))
            .render_derived(name="alert", with_types=True))
    batch = select(rows).cte("batch")  # read twice, parsed once
    inserted = (pg_insert(table).from_select(BATCH_COLUMNS, select(batch))
                .on_conflict_do_nothing(index_elements=["dedup_key"]).returning(table.c.dedup_key, table.c.id)
                .cte("inserted"))
    return select(inserted.c.dedup_key, inserted.c.id, true()).union_all(
        select(table.c.dedup_key, table.c.id, false()).where(table.c.dedup_key.in_(select(batch.c.dedup_key))))


_BATCH_INSERT = _batch_insert()


def _utc_text(value: object) -> str:
    """A time in the JSON batch, in UTC as ``UtcDateTime`` binds it (PostgreSQL refuses offsets past 15:59,
    RFC 3339 allows 23:59); a naive one is refused."""
    if not isinstance(value, datetime):
        raise TypeError(f"{type(value).__name__} is not JSON serializable")
    if value.tzinfo is None:
        raise ValueError("naive datetime given to the store; use timezone-aware UTC")
    return value.astimezone(UTC).isoformat()


def group_hash(group_key: str) -> str:
    """An Alertmanager ``groupKey`` as the key of its Slack thread: 64 hex characters whatever its length."""
    return hashlib.sha256(group_key.encode("utf-8", "surrogatepass")).hexdigest()


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


class AlertRecords(Gateway):
    """Alerts, their claims and probe failures, and Slack alert threads and signatures. Mixed into ``Store`` (it needs ``write`` and ``read``)."""

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
        values = list(rows.values())
        save = self._insert_batch if self.engine.dialect.name == "postgresql" else self._insert_many

        def _save(s: Session) -> list[tuple[int, bool]]:
            ids, fresh = save(s, values)
            self._existing_ids([k for k in rows if k not in ids], s, ids)
            seen: set[str] = set()
            out = []
            for a in alerts:
                key = a.dedup_key
                out.append((ids[key], key in fresh and key not in seen))
                seen.add(key)
            return out

        return self.write(_save, "save alerts")

    @staticmethod
    def _insert_many(s: Session, values: list[dict[str, Any]]) -> tuple[dict[str, int], set[str]]:
        """Insert the new rows (SQLite): one cached executemany statement (SQLAlchemy's insertmanyvalues)
        returning the new rows' ids; (ids by key, the keys inserted)."""
        stmt = sqlite_insert(Alert).on_conflict_do_nothing(index_elements=["dedup_key"]).returning(Alert.dedup_key, Alert.id)
        ids: dict[str, int] = dict(s.execute(stmt, values).all())
        return ids, set(ids)

    @staticmethod
    def _insert_batch(s: Session, values: list[dict[str, Any]]) -> tuple[dict[str, int], set[str]]:
        """Insert the new rows and find the stored ones in one round trip (PostgreSQL: ``_batch_insert``);
        (ids by key, the keys inserted). A key neither inserted nor found (another instance committed it
        after this statement began) is left to ``_existing_ids``."""
        ids: dict[str, int] = {}
        fresh: set[str] = set()
        for key, alert_id, new in s.execute(_BATCH_INSERT, {"batch": json.dumps(values, default=_utc_text)}):
            ids[key] = alert_id
            if new:
                fresh.add(key)
        return ids, fresh

    def _existing_ids(self, keys: list[str], s: Session, ids: dict[str, int]) -> None:
        """Add the ids of already stored ``keys`` to ``ids`` (SQLite: ``IN`` chunks under its bound-parameter limit)."""
        step = max(len(keys), 1) if self.engine.dialect.name == "postgresql" else ALERT_CHUNK
        for i in range(0, len(keys), step):
            ids.update(s.execute(select(Alert.dedup_key, Alert.id).where(self._among(Alert.dedup_key, keys[i:i + step]))).all())

    def link_alert_probe(self, alert_ids: list[int], probe_id: str) -> None:
        self.write(lambda s: s.execute(update(Alert).where(self._among(Alert.id, alert_ids)).values(probe_id=probe_id),
                                       execution_options=NO_SYNC))

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
            s.execute(update(Alert).where(self._among(Alert.id, ids), *open_, free).values(claimed_by=claimer, claimed_at=at))
            return list(s.scalars(select(Alert).where(self._among(Alert.id, ids), Alert.claimed_by == claimer,
                                                      Alert.claimed_at == at).order_by(Alert.id)).all())

        return self.write(_claim, "claim alerts")

    def alert_probe_failed(self, alert_ids: list[int], error: str, *, max_attempts: int, final: bool = False) -> None:
        """Record a probe that could not run; after ``max_attempts`` (or a ``final`` error) it is given up on."""
        at = now()

        def _fail(s: Session) -> None:
            for row in s.scalars(select(Alert).where(self._among(Alert.id, alert_ids))).all():
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

    # -- Slack alert threads -----------------------------------------------------------------

    def slack_thread(self, group_key: str) -> SlackThread | None:
        """The group's thread once posted (a claim still posting, ``ts`` empty, is not one yet)."""
        row = self.read(lambda s: s.get(SlackThread, group_hash(group_key)))
        return row if row is not None and row.ts else None

    def claim_slack_thread(self, group_key: str, channel: str, stale_after: timedelta) -> bool:
        """Take the right to post the group's first message, once across instances; a claim whose poster
        went quiet for ``stale_after`` (killed mid-post) can be taken again."""
        key = group_hash(group_key)
        try:
            self.write(lambda s: s.add(SlackThread(group_hash=key, channel=channel, ts="", state="posting")),
                       "claim slack thread")
            return True
        except IntegrityError:
            at = now()
            take = (update(SlackThread).where(SlackThread.group_hash == key, SlackThread.ts == "",
                                              SlackThread.updated_at < at - stale_after).values(updated_at=at))
            return bool(self.write(lambda s: s.execute(take).rowcount, "take over slack thread"))  # type: ignore[attr-defined]

    def release_slack_thread(self, group_key: str) -> None:
        """The claimed post failed: the next finding of the group may post it."""
        key = group_hash(group_key)
        self.write(lambda s: s.execute(delete(SlackThread).where(SlackThread.group_hash == key,
                                                                 SlackThread.ts == "")), "release slack thread")

    def save_slack_thread(self, group_key: str, channel: str, ts: str, state: str) -> SlackThread:
        """Remember (or update the state of) an alert group's thread; the first thread of a group is kept."""
        key = group_hash(group_key)

        def _save(s: Session) -> SlackThread:
            row = s.get(SlackThread, key)
            if row is None:
                row = SlackThread(group_hash=key, channel=channel, ts=ts, state=state)
                s.add(row)
            elif not row.ts:  # this instance's claim, now posted
                row.channel, row.ts, row.state, row.updated_at = channel, ts, state, now()
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
