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
# the tables, not the mapped classes: a Core upsert skips the ORM's bulk path (a third of the cost)
_TEMPLATES, _HISTORY = RoleLogTemplate.__table__, RoleLogHistory.__table__


def _upsert(s: Session) -> Any:
    return pg_insert if s.get_bind().dialect.name == "postgresql" else sqlite_insert


def _later(column: Any, value: Any) -> Any:
    """The later of a column and the value an upsert brings (a bundle saved late must not make a row older)."""
    return case((value > column, value), else_=column)


def learn(s: Session, cluster: str, roles: Iterable[RoleHealth], at: datetime) -> None:
    """Inside a probe's save: each healthy role's templates counted (inserted, or seen once more; a role diagnosed
    without history brings none and teaches nothing, not even a healthy probe), its count of healthy probes moved,
    its templates past the cap evicted, least recently seen first. Three statements for all the roles (more
    when one is over the cap), rows in key order so two saves at once on PostgreSQL lock them in one order."""
    taught = sorted((r for r in roles if r.state == RoleState.healthy and r.templates is not None), key=lambda r: r.role)
    if not taught:
        return
    insert = _upsert(s)
    rows = [{"cluster": cluster, "role": r.role, "key": k, "template": t[:TEMPLATE_CAP], "first_seen": at,
             "last_seen": at, "healthy_probes": 1} for r in taught for k, t in sorted((r.templates or {}).items())]
    if rows:  # one statement, compiled once and cached, run for many rows (executemany)
        stmt = insert(_TEMPLATES)
        s.execute(stmt.on_conflict_do_update(
            index_elements=["cluster", "role", "key"],
            set_={"last_seen": _later(_TEMPLATES.c.last_seen, stmt.excluded.last_seen),
                  "healthy_probes": _TEMPLATES.c.healthy_probes + 1}), rows)
    stmt = insert(_HISTORY)
    s.execute(stmt.on_conflict_do_update(
        index_elements=["cluster", "role"],
        set_={"healthy_probes": _HISTORY.c.healthy_probes + 1,
              "last_healthy_at": _later(_HISTORY.c.last_healthy_at, stmt.excluded.last_healthy_at)}),
        [{"cluster": cluster, "role": r.role, "healthy_probes": 1, "first_healthy_at": at, "last_healthy_at": at}
         for r in taught])
    held = s.execute(select(RoleLogTemplate.role, func.count()).where(
        RoleLogTemplate.cluster == cluster, RoleLogTemplate.role.in_([r.role for r in taught])).group_by(
        RoleLogTemplate.role))
    for role, n in list(held):
        if n > TEMPLATES_PER_ROLE:
            _evict(s, cluster, role, n - TEMPLATES_PER_ROLE)


def _evict(s: Session, cluster: str, role: str, over: int) -> None:
    """The role's ``over`` least recently seen (then least often seen) templates, deleted."""
    mine = (RoleLogTemplate.cluster == cluster, RoleLogTemplate.role == role)
    oldest = select(RoleLogTemplate.key).where(*mine).order_by(
        RoleLogTemplate.last_seen, RoleLogTemplate.healthy_probes, RoleLogTemplate.key).limit(over)
    s.execute(delete(RoleLogTemplate).where(*mine, RoleLogTemplate.key.in_(list(s.scalars(oldest)))))


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
