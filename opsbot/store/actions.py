"""Guarded actions (record stage): plans, approvals, state transitions and role locks."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from opsbot.contracts import ActionState
from opsbot.store.audit import audit_row
from opsbot.store.gateway import Gateway
from opsbot.store.models import (
    Action,
    Approval,
    RoleLock,
    now,
)


@dataclass(frozen=True)
class LockHeld:
    """Why a lock could not be taken: who holds it and until when."""

    holder: str
    action_id: str
    expires_at: datetime


class ActionRecords(Gateway):
    """Actions, approvals and role locks. Mixed into ``Store`` (it needs ``write`` and ``read``)."""

    # -- actions ------------------------------------------------------------------------------

    def create_action(self, *, kind: str, cluster: str, roles: list[str], plan: dict[str, Any], reason: str | None,
                      requested_by: str, surface: str, ttl: timedelta, plan_key: str | None = None,
                      waiting_key: str | None = None) -> Action:
        """A new ``planned`` action; with ``plan_key`` (or ``waiting_key``), the one already under that key if there
        is one. Both keys are unique columns, so two instances planning at once end up with one row."""
        existing = self._under(plan_key, waiting_key)
        if existing is not None:
            return existing

        role = ",".join(roles)  # the column keeps the comma-joined form; ``Action.roles`` reads it as a list

        def _add(s: Session) -> Action:
            row = Action(id=uuid.uuid4().hex[:12], kind=kind, cluster=cluster, role=role, state=ActionState.planned,
                         plan=plan, reason=reason, requested_by=requested_by, surface=surface,
                         expires_at=now() + ttl, plan_key=plan_key, waiting_key=waiting_key)
            s.add(row)
            s.add(audit_row(requested_by, surface, f"{kind} planned", {"action": row.id, "reason": reason},
                             cluster, role))
            return row

        try:
            return self.write(_add, "create action")
        except IntegrityError:  # another instance planned it between our read and our write
            row = self._under(plan_key, waiting_key)
            if row is None:
                raise
            return row

    def _under(self, plan_key: str | None, waiting_key: str | None) -> Action | None:
        if plan_key is not None:
            row = self.read(lambda s: s.scalars(select(Action).where(Action.plan_key == plan_key)).first())
            if row is not None:
                return row
        return self.waiting_action(waiting_key) if waiting_key is not None else None

    def waiting_action(self, waiting_key: str) -> Action | None:
        """The plan waiting for approval under ``waiting_key`` (cluster/role/incident class), if any."""
        return self.read(lambda s: s.scalars(select(Action).where(Action.waiting_key == waiting_key)).first())

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

    def transition(self, action_id: str, from_states: tuple[ActionState, ...], to_state: ActionState, *, actor: str,
                   surface: str, what: str, audit_detail: dict[str, Any] | None = None,
                   also: Callable[[Session, Action], object] | None = None, **values: Any) -> Action | None:
        """Compare-and-set the action's state (and other columns) with its audit entry; None if the state moved.
        ``also`` writes what follows from the move (plans it supersedes) in the same transaction."""

        def _go(s: Session) -> Action | None:
            leaving = {} if to_state == ActionState.planned else {"waiting_key": None}
            res = s.execute(update(Action).where(Action.id == action_id, Action.state.in_(from_states))
                            .values(state=to_state, **leaving, **values))
            if res.rowcount != 1:  # type: ignore[attr-defined]
                return None
            row = s.get(Action, action_id)
            assert row is not None
            s.refresh(row)
            s.add(audit_row(actor, surface, what, {"action": action_id, **(audit_detail or {})}, row.cluster, row.role))
            if also is not None:
                also(s, row)
            return row

        return self.write(_go, f"action {to_state}")

    def supersede(self, action_ids: Iterable[str], why: str, *, actor: str, surface: str) -> list[str]:
        """planned → superseded for those of ``action_ids`` still planned, audited; the ids moved."""
        return list(self.write(lambda s: supersede_in(s, action_ids, why, actor=actor, surface=surface),
                               "supersede plans"))

    def planned_restarts(self, cluster: str) -> list[Action]:
        """Restart plans of ``cluster`` waiting for approval, newest first."""
        q = (select(Action).where(Action.cluster == cluster, Action.kind == "restart",
                                  Action.state == ActionState.planned).order_by(Action.created_at.desc()))
        return list(self.read(lambda s: s.scalars(q).all()))

    def approve_action(self, action_id: str, approver: str, surface: str, ttl: timedelta) -> Action | None:
        """planned → approved with an approval row, if still planned and not expired; None otherwise."""
        at = now()

        def _go(s: Session) -> Action | None:
            res = s.execute(update(Action).where(Action.id == action_id, Action.state == ActionState.planned,
                                                 Action.expires_at > at)
                            .values(state=ActionState.approved, approved_by=approver, approved_surface=surface,
                                    approved_at=at, expires_at=at + ttl, waiting_key=None))
            if res.rowcount != 1:  # type: ignore[attr-defined]
                return None
            row = s.get(Action, action_id)
            assert row is not None
            s.refresh(row)
            s.add(Approval(action_id=action_id, approver=approver, surface=surface, at=at, expires_at=at + ttl))
            s.add(audit_row(approver, surface, f"{row.kind} approved", {"action": action_id}, row.cluster, row.role))
            return row

        return self.write(_go, "approve action")

    def approvals(self, action_id: str) -> list[Approval]:
        return list(self.read(lambda s: s.scalars(select(Approval).where(Approval.action_id == action_id)).all()))

    def restarts_since(self, cluster: str, since: datetime, role: str | None = None) -> list[Action]:
        """Restarts that were executed (whatever their outcome) since ``since``: the cooldown and budget."""
        q = (select(Action).where(Action.cluster == cluster, Action.kind == "restart",
                                  Action.state.in_((ActionState.executing, ActionState.succeeded, ActionState.failed)),
                                  Action.started_at >= since)
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


def supersede_in(s: Session, action_ids: Iterable[str], why: str, *, actor: str, surface: str) -> list[str]:
    """planned → superseded (``why`` kept as its outcome, an audit entry each) within the caller's transaction,
    for those of ``action_ids`` still planned: a compare-and-set each, so an approval that won the race stands."""
    moved = []
    at = now()
    for action_id in dict.fromkeys(action_ids):
        res = s.execute(update(Action).where(Action.id == action_id, Action.state == ActionState.planned).values(
            state=ActionState.superseded, waiting_key=None, outcome=f"superseded: {why}", finished_at=at))
        if res.rowcount != 1:  # type: ignore[attr-defined]
            continue
        row = s.get(Action, action_id)
        assert row is not None
        s.refresh(row)
        s.add(audit_row(actor, surface, f"{row.kind} superseded", {"action": action_id, "why": why}, row.cluster,
                        row.role))
        moved.append(action_id)
    return moved


def role_plans_in(s: Session, cluster: str, roles: Iterable[str], *, exclude: str) -> list[str]:
    """Restart plans of ``cluster`` waiting for approval that restart any of ``roles`` (but ``exclude``)."""
    wanted = set(roles)
    q = select(Action).where(Action.cluster == cluster, Action.kind == "restart", Action.state == ActionState.planned,
                             Action.id != exclude)
    return [a.id for a in s.scalars(q) if wanted & set(a.roles)]
