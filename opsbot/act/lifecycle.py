"""The restart plan's lifecycle, its one owner: every move of an action's state, each with its guard.

    planned → approved → executing → succeeded | failed
    planned → superseded | expired | refused;  approved → expired | refused

Each move is one store transaction (a compare-and-set on the state, with its audit entry), checked
against ``ActionState``'s transitions. A plan is superseded, with the reason, when its incident
resolves (``Store`` closes the incident and its plans in one write), when a later probe of its roles
no longer names the class it was made for (``supersede_unnamed``), or when another restart of its
role succeeds (``after_success``). Surfaces reach these through ``opsbot.flow`` only.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session

from opsbot.contracts import ActionState, Diagnosis, IncidentState, RestartPlan, allowed
from opsbot.settings import Settings
from opsbot.store import Store
from opsbot.store.actions import role_plans_in, supersede_in
from opsbot.store.models import Action, now

OWNER = "opsbot"  # the actor of the moves nobody asked for (expiry, superseding)


class ApprovalRefused(ValueError):
    """The action cannot be approved (unknown, not pending, expired, superseded); the message says why."""


def move(store: Store, action_id: str, from_states: tuple[ActionState, ...], to_state: ActionState,
         **kw: Any) -> Action | None:
    """``Store.transition`` for a move ``ActionState`` allows; any other (say succeeded → executing) is a bug."""
    if not all(allowed(f, to_state) for f in from_states):
        raise ValueError(f"action {action_id}: {'/'.join(from_states)} → {to_state} is not an allowed transition")
    return store.transition(action_id, from_states, to_state, **kw)


def approve(store: Store, action_id: str, approver: str, surface: str, settings: Settings) -> Action:
    """planned → approved (who, through which surface); it expires after ``approval_ttl_s``. Refused, and the
    refusal audited, when the plan is not waiting for approval, expired, or its incident resolved."""
    try:
        action = store.action(action_id)
    except KeyError as exc:
        raise ApprovalRefused(str(exc.args[0])) from exc
    why = _not_approvable(store, action, approver, surface)
    if why is None:
        approved = store.approve_action(action_id, approver, surface, timedelta(seconds=settings.approval_ttl_s))
        if approved is not None:
            return approved
        why = f"action {action_id} changed state while approving; see `opsbot actions list`"
    store.audit(approver, surface, "approval refused", {"action": action_id, "why": why}, cluster=action.cluster,
                role=action.role)
    raise ApprovalRefused(why)


def _not_approvable(store: Store, action: Action, approver: str, surface: str) -> str | None:
    """Why ``action`` may not be approved now (moving it to ``expired`` or ``superseded`` if it just became so)."""
    if action.state != ActionState.planned:
        said = f" ({action.outcome})" if action.outcome else ""
        return f"action {action.id} is {action.state}, not waiting for approval{said}; nothing was restarted"
    if expire_lapsed(store, action, actor=approver, surface=surface):
        return (f"action {action.id} expired at {action.expires_at:%Y-%m-%d %H:%M:%S} UTC before it was approved; "
                "request the restart again")
    incident = store.incident_for_action(action.id)
    if incident is not None and incident.state == IncidentState.resolved:
        why = f"its incident {incident.id} ({incident.incident}) resolved"
        store.supersede([action.id], why, actor=OWNER, surface=surface)
        return f"action {action.id} is superseded: {why}; nothing was restarted"
    return None


def expire_lapsed(store: Store, action: Action, *, actor: str, surface: str) -> bool:
    """A planned action past its approval deadline moves to ``expired`` (and frees its waiting key); whether it had."""
    if action.state != ActionState.planned or action.expires_at > now():
        return False
    move(store, action.id, (ActionState.planned,), ActionState.expired, actor=actor, surface=surface,
         what="restart expired", outcome=f"plan expired unapproved at {action.expires_at:%H:%M:%S} UTC")
    return True


def expire_overdue(store: Store) -> list[str]:
    """Planned or approved actions whose time ran out become ``expired`` (so lists never show them pending)."""
    at = now()
    expired = []
    for state in (ActionState.planned, ActionState.approved):
        for a in store.actions(state=state, limit=1000):
            if a.expires_at <= at and move(
                    store, a.id, (state,), ActionState.expired, actor=OWNER, surface="reconcile", what="restart expired",
                    outcome=f"{'approval' if state == ActionState.approved else 'plan'} expired at "
                            f"{a.expires_at:%H:%M:%S} UTC before it ran; request the restart again"):
                expired.append(a.id)
    return expired


def dismiss(store: Store, action_id: str, *, actor: str, surface: str) -> Action | None:
    """A planned restart nobody will approve: closed as refused, with who dismissed it; None if not planned."""
    return move(store, action_id, (ActionState.planned,), ActionState.refused, actor=actor, surface=surface,
                what="restart dismissed", outcome=f"dismissed by {actor} via {surface}")


def after_success(cluster: str, roles: list[str], action_id: str) -> Callable[[Session, Action], object]:
    """What a verified restart supersedes in its own transaction: the plans still waiting to restart its roles."""
    why = f"restart {action_id} of {', '.join(roles)} succeeded"
    return lambda s, _row: supersede_in(s, role_plans_in(s, cluster, roles, exclude=action_id), why, actor=OWNER,
                                        surface="act")


def named_classes(diagnosis: Diagnosis) -> set[str]:
    """The classes a diagnosis names, or accounts for through a finding that explains them."""
    named = {f.incident for f in diagnosis.findings}
    return named | {e.split(" on ")[0] for f in diagnosis.findings for e in f.explains}


def supersede_unnamed(store: Store, cluster: str, probe_id: str, diagnosis: Diagnosis,
                      probed: set[str]) -> list[str]:
    """A probe of ``probed`` roles that no longer names the class a waiting remedy plan of those roles was made
    for supersedes it (a plan asked by hand is left alone, as is one whose class this probe could not decide)."""
    named = named_classes(diagnosis)
    undecided = {(u.incident, u.role) for u in diagnosis.undetermined}
    gone = [a for a in store.planned_restarts(cluster)
            if a.remedy_for is not None and a.remedy_for not in named and set(a.watched_roles) <= probed
            and not any((a.remedy_for, r) in undecided for r in a.watched_roles)]
    moved: list[str] = []
    for a in gone:
        moved += store.supersede([a.id], f"probe {probe_id} no longer names {a.remedy_for} on {a.role}",
                                 actor=OWNER, surface="probe")
    return moved


def finding_check(plan: RestartPlan, diagnosis: Diagnosis, probe_id: str) -> tuple[bool, str]:
    """The guard of approved → executing: does the evidence probe still name the finding the plan was made for?
    (holds, the line said in the audit). A restart asked by hand is the operator's call: it holds."""
    if plan.remedy_for is None:
        return True, "asked by hand: the operator's call, no finding re-checked"
    roles = set(plan.roles) | set(plan.finding_roles)
    for f in diagnosis.findings:
        if f.incident == plan.remedy_for and roles & set(f.roles):
            return True, f"probe {probe_id} still names {plan.remedy_for} on {', '.join(sorted(roles & set(f.roles)))}"
        if any(e.split(" on ")[0] == plan.remedy_for for e in f.explains) and roles & set(f.roles):
            return True, f"probe {probe_id} names {f.incident}, which explains {plan.remedy_for}"
    undecided = sorted(u.role for u in diagnosis.undetermined if u.incident == plan.remedy_for and u.role in roles)
    if undecided:
        return True, (f"probe {probe_id} could not decide {plan.remedy_for} on {', '.join(undecided)} (facts "
                      "missing): the approval stands")
    named = ", ".join(sorted({f.incident for f in diagnosis.findings})) or "nothing abnormal"
    return False, (f"the finding no longer holds: probe {probe_id} does not name {plan.remedy_for} on "
                   f"{', '.join(sorted(roles))} (it names {named}); nothing was restarted")
