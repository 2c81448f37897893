"""What each role printed while healthy (record stage): its log templates (opsbot/parse/templates.py).

Only healthy probes teach: ``learn`` runs inside the transaction that saves a probe, for each role the
diagnosis found healthy. A role keeps at most ``TEMPLATES_PER_ROLE`` templates, the least recently seen
evicted first, so a role printing ever-new lines (hostile or not) cannot grow the table without bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import case, delete, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from opsbot.contracts import RoleHealth, RoleState
from opsbot.parse.templates import TEMPLATE_CAP, RoleHistory
from opsbot.store.gateway import Gateway
from opsbot.store.models import RoleLogHistory, RoleLogTemplate

TEMPLATES_PER_ROLE = 2000
_CHUNK = 100  # rows per INSERT: 7 parameters each, under SQLite's 999 of old builds


def _upsert(s: Session) -> Any:
    return pg_insert if s.get_bind().dialect.name == "postgresql" else sqlite_insert


def _later(column: Any, value: Any) -> Any:
    """The later of a column and the value an upsert brings (a bundle saved late must not make a row older)."""
    return case((value > column, value), else_=column)


def learn(s: Session, cluster: str, roles: Iterable[RoleHealth], at: datetime) -> None:
    """Inside a probe's save: each healthy role's templates (a role diagnosed without history brings none and
    teaches nothing, not even a healthy probe) counted (inserted, or seen once more), its count of
    healthy probes moved, and its templates past the cap evicted, least recently seen first. Roles and keys in
    sorted order, so two saves at once on PostgreSQL lock rows in one order."""
    insert = _upsert(s)
    for role in sorted(roles, key=lambda r: r.role):
        if role.state != RoleState.healthy or role.templates is None:  # not healthy, or diagnosed without history
            continue
        rows = [{"cluster": cluster, "role": role.role, "key": k, "template": t[:TEMPLATE_CAP], "first_seen": at,
                 "last_seen": at, "healthy_probes": 1} for k, t in sorted(role.templates.items())]
        for i in range(0, len(rows), _CHUNK):
            stmt = insert(RoleLogTemplate).values(rows[i:i + _CHUNK])
            s.execute(stmt.on_conflict_do_update(
                index_elements=["cluster", "role", "key"],
                set_={"last_seen": _later(RoleLogTemplate.last_seen, stmt.excluded.last_seen),
                      "healthy_probes": RoleLogTemplate.healthy_probes + 1}))
        stmt = insert(RoleLogHistory).values(cluster=cluster, role=role.role, healthy_probes=1, first_healthy_at=at,
                                             last_healthy_at=at)
        s.execute(stmt.on_conflict_do_update(
            index_elements=["cluster", "role"],
            set_={"healthy_probes": RoleLogHistory.healthy_probes + 1,
                  "last_healthy_at": _later(RoleLogHistory.last_healthy_at, stmt.excluded.last_healthy_at)}))
        _evict(s, cluster, role.role)


def _evict(s: Session, cluster: str, role: str) -> None:
    """The role's templates past ``TEMPLATES_PER_ROLE``, least recently seen (then least often) first, deleted."""
    mine = (RoleLogTemplate.cluster == cluster, RoleLogTemplate.role == role)
    over = (s.scalar(select(func.count()).select_from(RoleLogTemplate).where(*mine)) or 0) - TEMPLATES_PER_ROLE
    if over <= 0:
        return
    oldest = select(RoleLogTemplate.key).where(*mine).order_by(
        RoleLogTemplate.last_seen, RoleLogTemplate.healthy_probes, RoleLogTemplate.key).limit(over)
    keys = list(s.scalars(oldest))
    s.execute(delete(RoleLogTemplate).where(*mine, RoleLogTemplate.key.in_(keys)))


class TemplateRecords(Gateway):
    """Roles' log templates while healthy. Mixed into ``Store``; written by ``save_probe`` (``learn``)."""

    def role_history(self, cluster: str, roles: Sequence[str]) -> dict[str, RoleHistory]:
        """Per role key: its healthy probes and the keys of its templates (an empty history where none): what
        the flow passes to ``diagnose``."""
        def _read(s: Session) -> dict[str, RoleHistory]:
            counts: dict[str, int] = {role: n for role, n in s.execute(
                select(RoleLogHistory.role, RoleLogHistory.healthy_probes).where(
                    RoleLogHistory.cluster == cluster, RoleLogHistory.role.in_(roles)))}
            keys: dict[str, set[str]] = {}
            for role, key in s.execute(select(RoleLogTemplate.role, RoleLogTemplate.key).where(
                    RoleLogTemplate.cluster == cluster, RoleLogTemplate.role.in_(roles))):
                keys.setdefault(role, set()).add(key)
            return {r: RoleHistory(counts.get(r, 0), frozenset(keys.get(r, ()))) for r in roles}

        return self.read(_read)

    def role_templates(self, cluster: str, role: str) -> list[RoleLogTemplate]:
        """The role's templates, most recently seen first."""
        q = select(RoleLogTemplate).where(RoleLogTemplate.cluster == cluster, RoleLogTemplate.role == role).order_by(
            RoleLogTemplate.last_seen.desc(), RoleLogTemplate.healthy_probes.desc(), RoleLogTemplate.key)
        return list(self.read(lambda s: s.scalars(q).all()))
