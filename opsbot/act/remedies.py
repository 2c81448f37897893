"""The restarts a diagnosis asks for, planned once per probe and role (act): every trigger gets the same plans.

The key ``probe:role`` is unique in the store, so planning the same probe again (another message
showing it, another instance handling the same alert) returns the plan already made; and while a plan
of a class's restart of a role waits or runs, a later probe naming the class again (another alert, the
watchdog) gets that plan, not a second one: one plan per (incident, role, remedy) at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opsbot.act import ladder
from opsbot.act.lifecycle import expire_lapsed
from opsbot.act.reregister import request_reregister
from opsbot.act.restart import request_restart
from opsbot.contracts import ActionState, Diagnosis, RestartCost, RestartPlan
from opsbot.inventory import Inventory
from opsbot.settings import Settings
from opsbot.store import Store
from opsbot.store.models import Action, now


@dataclass
class PlannedRemedies:
    plans: dict[str, str] = field(default_factory=dict)  # role -> action id
    refused: list[str] = field(default_factory=list)  # "restart ROLE: why", for a plan the guardrails refuse
    costs: dict[str, RestartCost] = field(default_factory=dict)  # role -> what its plan costs (ladder)
    kinds: dict[str, str] = field(default_factory=dict)  # role -> the planned action's kind (ladder)


def plan_remedies(store: Store, inventory: Inventory, diagnosis: Diagnosis, probe_id: str, *, cluster: str,
                  actor: str, surface: str, settings: Settings) -> PlannedRemedies:
    """A planned action for each remedy that needs approval, most likely finding first, one step of the ladder
    per role (opsbot/act/ladder.py: the cheapest not yet failed); idempotent."""
    out = PlannedRemedies()
    recent = store.actions(cluster=cluster, since=now() - ladder.WINDOW, limit=200) if diagnosis.findings else []
    for finding in diagnosis.findings:
        for remedy in ladder.remaining(finding, recent, now()):
            if remedy.role is None or remedy.role in out.plans:
                continue
            waiting = f"{cluster}/{remedy.role}/{finding.incident}"
            live = _live_plan(store, cluster, remedy.role, waiting, actor=actor, surface=surface)
            if live is not None:
                out.plans[remedy.role] = live
                _keep(out, remedy.role, store.action(live))
                continue
            reason = f"{finding.incident} (probe {probe_id})"
            try:
                if remedy.kind == "reregister":  # ladder: its own plan key, beside a restart's of the same probe
                    action, _ = request_reregister(store, inventory, remedy.role, actor=actor, surface=surface,
                                                   cluster=cluster, reason=reason, settings=settings,
                                                   plan_key=f"{probe_id}:{remedy.role}:reregister", waiting_key=waiting)
                else:
                    action, _ = request_restart(store, inventory, [remedy.role], actor=actor, surface=surface,
                                                cluster=cluster, reason=reason, settings=settings,
                                                plan_key=f"{probe_id}:{remedy.role}", waiting_key=waiting,
                                                remedy_for=finding.incident, finding_roles=finding.roles,
                                                capture=remedy.capture)
            except Exception as exc:  # noqa: BLE001 - a plan the guardrails refuse: said instead of a button
                out.refused.append(f"{remedy.kind} {remedy.role}: {exc}")
                continue
            out.plans[remedy.role] = action.id
            _keep(out, remedy.role, action)
    return out


def _keep(out: PlannedRemedies, role: str, action: Action) -> None:
    """The kind and the cost stored with the plan (ladder), for the message that offers it."""
    out.kinds[role] = action.kind
    cost = RestartPlan.model_validate(action.plan).cost
    if cost is not None:
        out.costs[role] = cost


def _live_plan(store: Store, cluster: str, role: str, waiting: str, *, actor: str, surface: str) -> str | None:
    """A restart of ``role`` that runs (or is approved), or the plan waiting for approval under ``waiting``
    (cluster/role/incident class; a lapsed one expires here): a second plan beside it would only be refused by
    the lock or the cooldown."""
    for state in (ActionState.executing, ActionState.approved):
        for a in store.actions(state=state, cluster=cluster, limit=50):
            if any(r == role or r.startswith(f"{role}-") for r in a.roles):
                return str(a.id)  # the restart under way is the one for this role, whatever named it
    planned = store.waiting_action(waiting)
    if planned is None or expire_lapsed(store, planned, actor=actor, surface=surface):
        return None
    return str(planned.id)
