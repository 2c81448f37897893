"""The guarded restart, one code path for every surface: request → approve → execute → verify → record.

Every transition is a compare-and-set on the action's state with its audit entry in the same
transaction, so an action runs at most once; an action found ``executing`` with no live owner
was interrupted and is reconciled by looking at the unit, never by running it again. The async
paths (``execute``, ``reconcile``) make every store call in a worker thread (``_off``): the
service's event loop never waits on the database.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any, TypeVar

from anyio import to_thread
from pydantic import BaseModel, Field

from opsbot.act.cost import with_cost
from opsbot.act.guards import budget_until, cooldown_until, when
from opsbot.act.plan import plan_restart
from opsbot.contracts.plans import RestartPlan
from opsbot.act.steps import StepResult, run_command, wait_gpu_release
from opsbot.act.verify import Look, verify_roles
from opsbot.collect.transport import Transport, TransportPool
from opsbot.act.lifecycle import OWNER, after_success, approve, expire_overdue, finding_check, move
from opsbot.contracts import ActionState, Diagnosis
from opsbot.contracts.captures import ALL_PARTS, PartKind
from opsbot.inventory import Cluster, Inventory, Node, Role
from opsbot.settings import Settings
from opsbot.store import Store
from opsbot.store.models import Action, now

R = TypeVar("R")
BUDGET_LOCK = "*budget*"  # a short-lived cluster lock around the budget check and the move to executing
# The flow's port: probe these roles of the cluster, diagnose, record; the probe id and its diagnosis (text says why).
Evidence = Callable[[str, list[str], str], Awaitable[tuple[str, Diagnosis]]]
# The flow's port: the capture the action's plan asks for (stacks, state, last lines), kept with it; never raises.
CaptureFirst = Callable[[str], Awaitable[None]]


@dataclass
class RunContext:
    """What running an action needs, handed in by the flow: where to record, what to act on, the two ports."""

    store: Store
    inventory: Inventory
    settings: Settings
    actor: str
    surface: str
    evidence: Evidence
    look: Look
    pool: TransportPool | None = None
    capture: CaptureFirst | None = None


class ActionOutcome(BaseModel):
    """What a surface shows after ``execute``: the final state and why."""

    action_id: str
    state: ActionState
    message: str
    allowed_at: datetime | None = None
    evidence_probe_id: str | None = None
    after_probe_id: str | None = None
    execution: list[dict[str, Any]] = Field(default_factory=list)
    verification: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.state == ActionState.succeeded


async def _off(fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """A store call (or a guard reading the store) in a worker thread, off the event loop."""
    return await to_thread.run_sync(partial(fn, *args, **kwargs))


def holder_id() -> str:
    """Who holds a lock: host and pid, so a crashed holder on this host is recognised."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _holder_dead(holder: str) -> bool:
    host, _, pid = holder.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def request_restart(store: Store, inventory: Inventory, roles: list[str], *, actor: str, surface: str,
                    cluster: str | None = None, pair: bool = False, reason: str | None = None,
                    settings: Settings, plan_key: str | None = None, waiting_key: str | None = None,
                    remedy_for: str | None = None, finding_roles: list[str] | None = None,
                    capture: Sequence[PartKind] = ALL_PARTS) -> tuple[Action, RestartPlan]:
    """Plan and record a restart (state ``planned``); unknown roles and unsafe plans raise before anything.
    ``remedy_for``: the incident class whose finding (on ``finding_roles``) asked for it (execute re-checks that it
    still holds).

    With ``plan_key`` (or ``waiting_key``: one plan waiting per key), an action already under that key is
    returned instead of a second one."""
    plan = plan_restart(inventory, roles, cluster=cluster, pair=pair, reason=reason, settings=settings,
                        capture=capture)
    if remedy_for is not None:
        plan = plan.model_copy(update={"remedy_for": remedy_for, "finding_roles": sorted(finding_roles or [])})
    plan = with_cost(store, inventory, plan)  # ladder: what it costs, stored with the plan for every surface
    action = store.create_action(kind="restart", cluster=plan.cluster, roles=plan.roles,
                                 plan=plan.model_dump(mode="json"), reason=reason, requested_by=actor,
                                 surface=surface, ttl=timedelta(seconds=settings.approval_ttl_s), plan_key=plan_key,
                                 waiting_key=waiting_key)
    if not settings.restart_requires_approval and action.state == ActionState.planned:
        action = approve(store, action.id, "policy:no-approval-required", surface, settings)
    return action, plan


async def execute(ctx: RunContext, action_id: str) -> ActionOutcome:
    """Run an approved restart behind its guards; the outcome is recorded whatever happens."""
    store, actor, surface = ctx.store, ctx.actor, ctx.surface
    action = await _off(store.action, action_id)
    plan = RestartPlan.model_validate(action.plan)
    if action.state == ActionState.planned:
        return ActionOutcome(action_id=action_id, state=ActionState.planned,
                             message=f"not approved yet: approve it with `opsbot actions approve {action_id}` "
                                     f"before {action.expires_at:%H:%M:%S} UTC")
    if action.state != ActionState.approved:
        return ActionOutcome(action_id=action_id, state=ActionState(action.state),
                             message=f"action is already {action.state}; nothing was done ({action.outcome or ''})")
    if action.expires_at <= now():
        msg = f"approval expired at {action.expires_at:%Y-%m-%d %H:%M:%S} UTC; request the restart again"
        await _off(move, store, action_id, (ActionState.approved,), ActionState.expired, actor=actor, surface=surface,
                   what="restart expired", outcome=msg)
        return ActionOutcome(action_id=action_id, state=ActionState.expired, message=msg)
    _, cluster = ctx.inventory.cluster(plan.cluster)
    roles = cluster.select(plan.roles)
    refusal = await _off(lambda: _guards(store, plan, roles, cluster, ctx.settings)
                         or _take_locks(store, plan, action_id, ctx.settings))
    if refusal:
        return await _off(_refuse, store, action_id, actor, surface, *refusal)
    try:
        return await _run_locked(ctx, action_id, plan, roles, cluster)
    finally:
        await _off(_release, store, plan.cluster, [r.key for r in roles], action_id)


async def _run_locked(ctx: RunContext, action_id: str, plan: RestartPlan, roles: list[Role],
                      cluster: Cluster) -> ActionOutcome:
    store, actor, surface = ctx.store, ctx.actor, ctx.surface
    own_pool = ctx.pool is None
    pool = ctx.pool if ctx.pool is not None else await _off(TransportPool, ctx.settings)  # TLS set-up reads certificates
    try:
        watched = sorted(set(plan.roles) | set(plan.finding_roles))  # a remedy's finding may be on another role
        before = ctx.evidence(plan.cluster, watched, f"before restart {action_id}")
        if ctx.capture is not None and plan.capture:  # while the evidence probe runs: both read, neither changes
            (evidence, seen), _ = await asyncio.gather(before, ctx.capture(action_id))
        else:
            evidence, seen = await before
        holds, check = finding_check(plan, seen, evidence)
        if not holds:
            return await _off(_refuse, store, action_id, actor, surface, check)
        refusal = await _begin(ctx, action_id, plan, roles, cluster, evidence, check)
        if refusal:
            return await _off(_refuse, store, action_id, actor, surface, *refusal)
        steps: list[StepResult] = []
        verification = None
        try:
            transports: dict[str, Transport] = {r.node: await pool.get(_node(ctx.inventory, plan.cluster, r.node))
                                               for r in roles}
            await _run_steps(transports, plan, roles, ctx.settings, steps)
            if all(s.ok for s in steps):
                verification = await verify_roles(ctx.look, plan.cluster, roles, ctx.settings)
        except Exception as exc:  # noqa: BLE001 - recorded as the outcome, not lost in a traceback
            steps.append(StepResult(kind="error", role=",".join(plan.roles), argv=[], ok=False,
                                    detail=f"{type(exc).__name__}: {exc}"))
        # The after-probe is the record of how it ended: the recovery, or the evidence of the failure.
        after, _ = await ctx.evidence(plan.cluster, plan.roles, f"after restart {action_id}")
        return await _off(_record, store, action_id, plan, actor, surface, evidence, after, steps, verification)
    finally:
        if own_pool:
            await pool.close()


def _release(store: Store, cluster: str, keys: list[str], action_id: str) -> None:
    for key in keys:
        store.release_lock(cluster, key, action_id)


def _node(inventory: Inventory, cluster: str, name: str) -> Node:
    return inventory.cluster(cluster)[1].node(name)


async def _run_steps(transports: Mapping[str, Transport], plan: RestartPlan, roles: list[Role], settings: Settings,
                     done: list[StepResult]) -> None:
    """Stop, wait for GPU release, start, appending to ``done``; the first failure ends the run
    (a unit is never started on GPUs still held)."""
    by_key = {r.key: r for r in roles}
    for step in plan.steps:
        if step.kind == "verify":
            continue
        t = transports[step.node]
        if step.kind == "wait-gpu-release":
            res = await wait_gpu_release(t, step, by_key[step.role].gpus, settings)
        else:
            res = await run_command(t, step, settings)
        done.append(res)
        if not res.ok:
            return


def _record(store: Store, action_id: str, plan: RestartPlan, actor: str, surface: str, evidence: str,
            after: str | None, steps: list[StepResult], verification: dict[str, Any] | None) -> ActionOutcome:
    """executing → succeeded | failed; a success supersedes, in the same write, the plans waiting to restart
    the same roles (another restart fixed them)."""
    failed_step = next((s for s in steps if not s.ok), None)
    if failed_step:
        state = ActionState.failed
        msg = f"{failed_step.kind} {failed_step.role} failed: {failed_step.detail}"
    elif verification and verification["ok"]:
        state = ActionState.succeeded
        msg = f"restarted and verified healthy in {verification['elapsed_s']} s"
    else:
        state = ActionState.failed
        problems = "; ".join(p for r in (verification or {}).get("roles", []) for p in r["problems"])
        msg = f"did not come back healthy within {(verification or {}).get('deadline_s')} s: {problems}"
    if after:
        msg += f" (evidence: probe {evidence} before, probe {after} after)"
    execution = [s.model_dump() for s in steps]
    verification = {**(verification or {}), "after_probe": after}
    also = after_success(plan.cluster, plan.roles, action_id) if state == ActionState.succeeded else None
    row = move(store, action_id, (ActionState.executing,), state, actor=actor, surface=surface,
               what=f"restart {state}", audit_detail={"outcome": msg}, also=also, finished_at=now(),
               execution=execution, verification=verification, outcome=msg)
    if row is None:
        msg = f"the action left 'executing' while it ran (reconciled by another process?); this run saw: {msg}"
    return ActionOutcome(action_id=action_id, state=state, message=msg, evidence_probe_id=evidence,
                         after_probe_id=after, execution=execution, verification=verification)


def _refuse(store: Store, action_id: str, actor: str, surface: str, msg: str,
            allowed_at: datetime | None = None) -> ActionOutcome:
    row = move(store, action_id, (ActionState.approved,), ActionState.refused, actor=actor, surface=surface,
               what="restart refused", audit_detail={"why": msg}, outcome=msg, finished_at=now())
    state = ActionState.refused if row is not None else ActionState(store.action(action_id).state)
    return ActionOutcome(action_id=action_id, state=state, message=msg, allowed_at=allowed_at)


def _guards(store: Store, plan: RestartPlan, roles: list[Role], cluster: Cluster,
            settings: Settings) -> tuple[str, datetime | None] | None:
    """Cooldown per role, budget per cluster, and the prefill/decode pair: a refusal or None."""
    at = now()
    for r in roles:
        past = store.restarts_since(plan.cluster, at - timedelta(seconds=settings.restart_cooldown_s), role=None)
        starts = [a.started_at for a in past if a.started_at and r.key in a.roles]
        until = cooldown_until(starts, timedelta(seconds=settings.restart_cooldown_s), at)
        if until:
            return (f"cooldown: {r.key} was restarted at {max(starts):%H:%M:%S} UTC; the next restart is allowed "
                    f"{when(until, at)}", until)
    window = timedelta(seconds=settings.restart_budget_window_s)
    recent = [a.started_at for a in store.restarts_since(plan.cluster, at - window) if a.started_at]
    until = budget_until(recent, settings.restart_budget, window, at)
    if until:
        return (f"budget: cluster {plan.cluster} had {len(recent)} restarts in the last {window.total_seconds() / 60:g} "
                f"min (budget {settings.restart_budget}); the next restart is allowed {when(until, at)}", until)
    if not plan.pair_on_purpose:
        other = {"prefill": "decode", "decode": "prefill"}
        mine = {other[k] for k in plan.kinds if k in other}
        kind_of = {r.key: r.role for r in cluster.roles}
        for lock in store.locks(plan.cluster):
            if kind_of.get(lock.role) in mine and lock.expires_at > at:
                return (f"prefill/decode pair: {lock.role} is being restarted (action {lock.action_id}); never both "
                        "sides at once; retry when it finishes, or restart both with --pair on purpose", None)
    return None


def _take_locks(store: Store, plan: RestartPlan, action_id: str, settings: Settings) -> tuple[str, None] | None:
    taken: list[str] = []
    for key in plan.roles:
        held = store.take_lock(plan.cluster, key, action_id, holder_id(), timedelta(seconds=settings.lock_ttl_s))
        if held is not None:
            for k in taken:
                store.release_lock(plan.cluster, k, action_id)
            return (f"lock: {key} is being restarted by action {held.action_id} ({held.holder}); the lock expires "
                    f"at {held.expires_at:%H:%M:%S} UTC at the latest", None)
        taken.append(key)
    return None


async def _begin(ctx: RunContext, action_id: str, plan: RestartPlan, roles: list[Role], cluster: Cluster,
                 evidence: str, check: str) -> tuple[str, datetime | None] | None:
    """Re-check the guards under the cluster's budget lock, then move to ``executing`` (counts in the budget);
    ``check``: what the evidence probe said of the plan's finding, kept in the audit."""
    store = ctx.store
    deadline = time.monotonic() + 10
    while (held := await _off(store.take_lock, plan.cluster, BUDGET_LOCK, action_id, holder_id(),
                                  timedelta(seconds=30))):
        if time.monotonic() > deadline:
            return (f"budget check busy: held by {held.holder}; retry", None)
        await asyncio.sleep(0.1)
    try:
        return await _off(_start, ctx, action_id, plan, roles, cluster, evidence, check)
    finally:
        await _off(store.release_lock, plan.cluster, BUDGET_LOCK, action_id)


def _start(ctx: RunContext, action_id: str, plan: RestartPlan, roles: list[Role], cluster: Cluster,
           evidence: str, check: str) -> tuple[str, datetime | None] | None:
    """Under the budget lock: the guards again, then the move to ``executing``; a refusal or None. ``check``:
    what the evidence probe said of the plan's finding, kept in the audit."""
    refusal = _guards(ctx.store, plan, roles, cluster, ctx.settings)
    if refusal:
        return refusal
    row = move(ctx.store, action_id, (ActionState.approved,), ActionState.executing, actor=ctx.actor,
               surface=ctx.surface, what="restart executing",
               audit_detail={"evidence_probe": evidence, "finding_check": check},
               started_at=now(), evidence_probe_id=evidence)
    if row is None:
        return ("the action is no longer approved (run elsewhere?); nothing was done", None)
    return None


async def reconcile(ctx: RunContext) -> list[ActionOutcome]:
    """Settle actions left ``executing`` by a process that died: look at the unit, record, never re-run."""
    store = ctx.store
    await _off(expire_overdue, store)
    orphans = await _off(lambda: [a for a in store.actions(state=ActionState.executing, limit=1000)
                                  if _orphaned(store, a)])
    quick = ctx.settings.model_copy(update={"verify_deadline_s": min(ctx.settings.verify_deadline_s, 10.0)})
    out: list[ActionOutcome] = []
    for a in orphans:
        plan = RestartPlan.model_validate(a.plan)
        roles = ctx.inventory.cluster(plan.cluster)[1].select(plan.roles)
        verification = await verify_roles(ctx.look, plan.cluster, roles, quick)
        state = ActionState.succeeded if verification["ok"] else ActionState.failed
        problems = "; ".join(p for r in verification["roles"] for p in r["problems"])
        msg = ("interrupted while executing (opsbot stopped before recording); reconciled at start-up: "
               + ("the role is active and healthy" if verification["ok"] else f"the role is not healthy: {problems}"))
        row = await _off(move, store, a.id, (ActionState.executing,), state, actor=OWNER, surface="reconcile",
                         what=f"restart {state} (reconciled)", audit_detail={"outcome": msg},
                         finished_at=now(), verification={**verification, "reconciled": True}, outcome=msg)
        # The budget lock too: a process killed between its move to executing and the lock's release left it.
        await _off(_release, store, plan.cluster, [r.key for r in roles] + [BUDGET_LOCK], a.id)
        if row is not None:
            out.append(ActionOutcome(action_id=a.id, state=state, message=msg, evidence_probe_id=a.evidence_probe_id,
                                     verification=verification))
    return out


def _orphaned(store: Store, action: Action) -> bool:
    """Executing with no live owner: its lock is gone, expired, or held by a dead process on this host."""
    plan = RestartPlan.model_validate(action.plan)
    locks = {lock.role: lock for lock in store.locks(plan.cluster) if lock.action_id == action.id}
    at = now()
    return any(key not in locks or locks[key].expires_at <= at or _holder_dead(locks[key].holder)
               for key in plan.roles)
