"""Re-register a router's workers (act): the ladder's cheapest step, before a restart of anything.

A worker the router marks unhealthy (a circuit breaker left open, health checks that failed while the
engine was briefly busy) while the engine itself answers its own ``/health`` is removed and added again
through the router's worker API, which gives it a fresh breaker and health state; nothing is restarted
and no request on the engine is lost. It is an action like a restart: planned, approved, run behind the
router's lock with an evidence probe before and after, verified, recorded.

The worker API, as both routers opsbot manages answer it (checked in their source and wheels):

- ``GET /workers`` → ``{"workers": [{"id", "url", "worker_type", "is_healthy", "bootstrap_port"?, ...}],
  "total", "stats"}``; ``POST /workers`` with a worker spec ``{"url", "worker_type", "bootstrap_port"}`` →
  202 ``{"status": "accepted", "worker_id", "url", "location", "message"}`` (409 ``WORKER_ALREADY_EXISTS``
  while the URL is still registered); ``DELETE /workers/{id}`` (a UUID) → 202 ``{"status": "accepted",
  "worker_id", "message": "Worker removal queued for background processing"}``, 404 ``WORKER_NOT_FOUND``.
  smg-project/smg f8daa88 model_gateway/src/server.rs:954-961 (routes), model_gateway/src/worker/service.rs:
  36-135 (answers), 265-305 (create), 446-471 (delete); crates/protocols/src/worker.rs:611 (WorkerSpec),
  838 (WorkerInfo). The smg 1.13.0 and sglang-router 0.3.2 wheels carry the same routes
  (``/workers/{worker_id}``) and strings ("Worker removal queued for background processing",
  "Invalid worker_id '' (expected UUID)"); neither has the legacy ``/add_worker?url=`` /
  ``/remove_worker?url=`` of earlier sgl-router (sglang 00eb5eb sgl-router/src/server.rs ``add_worker``),
  which opsbot does not drive: it says so and the next step is offered.
- The queue is asynchronous: the removal is awaited (the URL gone from the listing) before the add, and
  the add before the verification (the worker listed ``is_healthy``).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from datetime import timedelta
from typing import Any

from opsbot.act.lifecycle import move
from opsbot.act.plan import PlanRefused
from opsbot.act.restart import ActionOutcome, RunContext, _off, holder_id
from opsbot.act.steps import StepResult
from opsbot.collect.transport import HttpResult, Transport, TransportPool
from opsbot.contracts import ActionState, RestartCost, RestartPlan, Step, StepKind
from opsbot.inventory import Inventory, Role
from opsbot.settings import Settings
from opsbot.store import Store
from opsbot.store.models import Action, now

KIND = "reregister"
API_TIMEOUT_S = 10.0
QUEUE_WAIT_S = 15.0  # the router's job queue applies a removal within this, or the step fails


# smg_worker_cb_state{worker="URL"} 0 closed, 1 open, 2 half-open (smg-project/smg f8daa88 model_gateway/src/
# observability/metrics.rs:383-386 and set_worker_cb_state; the same family in the smg 1.13.0 and sglang-router
# 0.3.2 wheels); -1 for a removed worker (remove_worker_metrics)
CB_STATE = re.compile(r"^smg_worker_cb_state\{([^}\n]*)\}[ \t]+(\S+)", re.MULTILINE)
WORKER_LABEL = re.compile(r'(?:^|,)\s*worker="([^"]*)"')


def open_breakers(exposition: str) -> set[str]:
    """The workers whose circuit breaker the router holds open or half-open, from its /metrics (pure)."""
    out = set()
    for m in CB_STATE.finditer(exposition):
        worker = WORKER_LABEL.search(m.group(1))
        try:
            if worker and float(m.group(2)) > 0:
                out.add(worker.group(1))
        except ValueError:
            continue
    return out


class StepFailed(RuntimeError):
    """A step of the re-registration failed; the message says which and what the router answered."""


def plan_reregister(inventory: Inventory, role: str, *, cluster: str | None = None, reason: str | None = None,
                    settings: Settings) -> RestartPlan:
    """The plan (pure): list, check each engine, remove, add, verify, all through the router's worker API."""
    name, cl = inventory.cluster(cluster)
    routers = [r for r in cl.select([role]) if r.role == "router"]
    if not routers:
        raise PlanRefused(f"re-registering workers goes through a router's worker API; {role} is not a router")
    r = routers[0]
    base = r.api_base
    if base is None:
        raise PlanRefused(f"{r.key} has no health_url or api_url in the inventory: its worker API cannot be reached")
    spec = '{"url": WORKER, "worker_type": "prefill"|"decode", "bootstrap_port": PORT (prefill)}'
    steps = [
        _step("list-workers", r, ["GET", f"{base}/workers"], "the workers the router lists; those it marks unhealthy "
              "are the candidates (none: this step fails and the next one is offered)"),
        _step("check-engine", r, ["GET", "WORKER/health"], "each candidate's own /health from the router's node: only "
              "a worker whose engine answers 200 is re-registered (a dead engine needs its own fix)"),
        _step("remove-worker", r, ["DELETE", f"{base}/workers/WORKER_ID"], "removal queued (202); awaited until the "
              "listing no longer has it"),
        _step("add-worker", r, ["POST", f"{base}/workers", spec], "addition queued (202): a fresh breaker and "
              "health state"),
        _step("verify", r, ["GET", f"{base}/workers"], f"each re-registered worker listed is_healthy within "
              f"{settings.verify_deadline_s:g} s"),
    ]
    checks = ["action approved and approval not expired",
              f"lock on {r.key} taken (no restart or re-registration of it in flight)",
              "evidence: a probe of the router is taken and stored before the first step"]
    return RestartPlan(cluster=name, roles=[r.key], kinds=["router"], reason=reason, steps=steps, checks=checks,
                       verify=[f"GET {base}/workers lists every re-registered worker is_healthy"],
                       cost=RestartCost(lines=[
                           ("requests lost: none on the engines (they keep running); the router leaves each "
                            "worker out of routing from its removal until it is healthy again"),
                           f"nothing is restarted; if it does not help, restarting {r.key} is offered next"]))


def _step(kind: StepKind, role: Role, argv: list[str], note: str) -> Step:
    return Step(kind=kind, role=role.key, node=role.node, unit=role.unit, argv=argv, note=note)


def request_reregister(store: Store, inventory: Inventory, role: str, *, actor: str, surface: str, cluster: str,
                       reason: str | None, settings: Settings, plan_key: str | None = None,
                       waiting_key: str | None = None) -> tuple[Action, RestartPlan]:
    """Plan and record it (``planned``); it always waits for an approval, whatever the restart policy says."""
    plan = plan_reregister(inventory, role, cluster=cluster, reason=reason, settings=settings)
    action = store.create_action(kind=KIND, cluster=plan.cluster, roles=plan.roles[:1], plan=plan.model_dump(mode="json"),
                                 reason=reason, requested_by=actor, surface=surface,
                                 ttl=timedelta(seconds=settings.approval_ttl_s), plan_key=plan_key,
                                 waiting_key=waiting_key)
    return action, plan


async def execute_reregister(ctx: RunContext, action_id: str) -> ActionOutcome:
    """Run an approved re-registration behind the router's lock; the outcome is recorded whatever happens."""
    store, actor, surface = ctx.store, ctx.actor, ctx.surface
    action = await _off(store.action, action_id)
    if action.state != ActionState.approved:
        return ActionOutcome(action_id=action_id, state=action.state,
                             message=f"not approved (it is {action.state}); nothing was done")
    if action.expires_at <= now():
        msg = f"approval expired at {action.expires_at:%H:%M:%S} UTC; nothing was done"
        await _off(move, store, action_id, (ActionState.approved,), ActionState.expired, actor=actor, surface=surface, what="reregister expired",
            outcome=msg)
        return ActionOutcome(action_id=action_id, state="expired", message=msg)
    plan = RestartPlan.model_validate(action.plan)
    router = ctx.inventory.cluster(plan.cluster)[1].select(plan.roles)[0]
    held = await _off(store.take_lock, plan.cluster, router.key, action_id, holder_id(),
                           timedelta(seconds=ctx.settings.lock_ttl_s))
    if held is not None:
        msg = f"lock: {router.key} is being acted on by action {held.action_id}; nothing was done"
        await _off(move, store, action_id, (ActionState.approved,), ActionState.refused, actor=actor, surface=surface, what="reregister refused",
            outcome=msg, finished_at=now())
        return ActionOutcome(action_id=action_id, state="refused", message=msg)
    try:
        return await _run_locked(ctx, action_id, plan, router)
    finally:
        await _off(store.release_lock, plan.cluster, router.key, action_id)


async def _run_locked(ctx: RunContext, action_id: str, plan: RestartPlan, router: Role) -> ActionOutcome:
    store, actor, surface = ctx.store, ctx.actor, ctx.surface
    evidence, _seen = await ctx.evidence(plan.cluster, plan.roles, f"before reregister {action_id}")
    if await _off(move, store, action_id, (ActionState.approved,), ActionState.executing, actor=actor, surface=surface, what="reregister executing",
           started_at=now(), evidence_probe_id=evidence) is None:
        return ActionOutcome(action_id=action_id, state=(await _off(store.action, action_id)).state,
                             message="the action is no longer approved (run elsewhere?); nothing was done")
    own_pool = ctx.pool is None
    pool = ctx.pool or TransportPool(ctx.settings)
    steps: list[StepResult] = []
    verification: dict[str, Any] = {"ok": False}
    failure: str | None = None
    try:
        transport = await pool.get(ctx.inventory.cluster(plan.cluster)[1].node(router.node))
        verification = await _reregister(transport, router, ctx.settings, steps)
    except StepFailed as exc:
        failure = str(exc)
    except Exception as exc:  # noqa: BLE001 - recorded as the outcome, not lost in a traceback
        failure = f"{type(exc).__name__}: {exc}"
    finally:
        if own_pool:
            await pool.close()
    after, _seen = await ctx.evidence(plan.cluster, plan.roles, f"after reregister {action_id}")
    state = ActionState.succeeded if failure is None and verification.get("ok") else ActionState.failed
    msg = (f"re-registered {', '.join(verification.get('workers', []))}; the router lists them healthy "
           f"(verified in {verification.get('elapsed_s')} s)" if state == "succeeded" else f"re-register failed: {failure}")
    msg += f" (evidence: probe {evidence} before, probe {after} after)"
    verification = {**verification, "after_probe": after}
    execution = [s.model_dump() for s in steps]
    await _off(move, store, action_id, (ActionState.executing,), state, actor=actor, surface=surface, what=f"reregister {state}",
        audit_detail={"outcome": msg}, finished_at=now(), execution=execution, verification=verification, outcome=msg)
    return ActionOutcome(action_id=action_id, state=state, message=msg, evidence_probe_id=evidence,
                         after_probe_id=after, execution=execution, verification=verification)


def _listing(res: HttpResult, url: str) -> list[dict[str, Any]]:
    """The workers of a ``GET /workers`` answer; ``StepFailed`` saying what the router answered otherwise."""
    if res.status == 404:
        raise StepFailed(f"GET {url}: 404: this router has no /workers API (sglang-router before 0.3?); opsbot "
                         "does not drive the legacy /add_worker?url=")
    if not res.ok:
        raise StepFailed(f"GET {url}: {res.error or f'HTTP {res.status}: {res.body[:300]}'}")
    try:
        workers = json.loads(res.body).get("workers")
    except (ValueError, AttributeError):
        workers = None
    if not isinstance(workers, list) or not all(isinstance(w, dict) and isinstance(w.get("url"), str) for w in workers):
        raise StepFailed(f"GET {url}: not a worker listing: {res.body[:200]}")
    return workers


def _done(steps: list[StepResult], kind: str, role: Role, argv: list[str], res: HttpResult, detail: str) -> StepResult:
    step = StepResult(kind=kind, role=role.key, argv=argv, ok=res.ok, exit_status=res.status,
                      detail=detail if res.ok else (res.error or f"HTTP {res.status}: {res.body[:300]}"),
                      elapsed_ms=res.elapsed_ms)
    steps.append(step)
    return step


async def _list(transport: Transport, base: str) -> list[dict[str, Any]]:
    return _listing(await transport.http_get(f"{base}/workers", API_TIMEOUT_S), f"{base}/workers")


async def _reregister(transport: Transport, router: Role, settings: Settings, steps: list[StepResult]) -> dict[str, Any]:
    base = router.api_base or ""
    res = await transport.http_get(f"{base}/workers", API_TIMEOUT_S)
    workers = _listing(res, f"{base}/workers")
    breakers: set[str] = set()
    if router.metrics_url:  # a breaker open leaves is_healthy true in the listing: the router's metrics say it
        metrics = await transport.http_get(router.metrics_url, API_TIMEOUT_S)
        breakers = open_breakers(metrics.body) if metrics.ok else set()
    down = [w for w in workers if not w.get("is_healthy") or w["url"] in breakers]
    _done(steps, "list-workers", router, ["GET", f"{base}/workers"], res,
          f"{len(workers)} listed, marked down or breaker open: {', '.join(w['url'] for w in down) or 'none'}")
    if not down:
        raise StepFailed("the router lists every worker healthy: re-registering has nothing to fix")
    alive = []
    for w in down:
        health = await transport.http_get(f"{w['url']}/health", API_TIMEOUT_S)
        _done(steps, "check-engine", router, ["GET", f"{w['url']}/health"], health, "the engine answers 200")
        if health.ok:
            alive.append(w)
    if not alive:
        raise StepFailed("no worker the router marks down has an engine answering /health: re-registering does "
                         "not help (the engines need their own fix)")
    for w in alive:
        await _remove(transport, router, base, w, steps)
        await _add(transport, router, base, w, steps)
    return await _verify(transport, router, base, [w["url"] for w in alive], settings, steps)


async def _remove(transport: Transport, router: Role, base: str, worker: dict[str, Any], steps: list[StepResult]) -> None:
    if not isinstance(worker.get("id"), str):
        raise StepFailed(f"the listing gives no id for {worker['url']}: this router's worker API is not the one "
                         "opsbot drives (DELETE /workers/{id})")
    url = f"{base}/workers/{worker['id']}"
    res = await transport.http_delete(url, API_TIMEOUT_S)
    if not _done(steps, "remove-worker", router, ["DELETE", url], res, f"removal of {worker['url']} queued").ok:
        raise StepFailed(f"DELETE {url} refused: {steps[-1].detail}")
    deadline = time.monotonic() + QUEUE_WAIT_S
    while any(w["url"] == worker["url"] for w in await _list(transport, base)):
        if time.monotonic() > deadline:
            raise StepFailed(f"{worker['url']} still listed {QUEUE_WAIT_S:g} s after its removal was accepted")
        await asyncio.sleep(0.5)


async def _add(transport: Transport, router: Role, base: str, worker: dict[str, Any], steps: list[StepResult]) -> None:
    spec: dict[str, Any] = {"url": worker["url"], "worker_type": worker.get("worker_type") or "regular"}
    if worker.get("bootstrap_port") is not None:
        spec["bootstrap_port"] = worker["bootstrap_port"]
    body = json.dumps(spec)
    res = await transport.http_post(f"{base}/workers", body.encode(), API_TIMEOUT_S)
    if not _done(steps, "add-worker", router, ["POST", f"{base}/workers", body], res,
                 f"addition of {worker['url']} queued").ok:
        raise StepFailed(f"POST {base}/workers refused: {steps[-1].detail}; {worker['url']} is now NOT registered: "
                         f"add it by hand (POST {base}/workers {body}) or restart the router")


async def _verify(transport: Transport, router: Role, base: str, urls: list[str], settings: Settings,
                  steps: list[StepResult]) -> dict[str, Any]:
    """Poll the listing until every re-registered worker is healthy, or the verification deadline passes."""
    started = time.monotonic()
    attempts = 0
    while True:
        attempts += 1
        listed = {w["url"]: bool(w.get("is_healthy")) for w in await _list(transport, base)}
        if router.metrics_url:
            metrics = await transport.http_get(router.metrics_url, API_TIMEOUT_S)
            listed = {u: ok and (not metrics.ok or u not in open_breakers(metrics.body)) for u, ok in listed.items()}
        missing = [u for u in urls if not listed.get(u)]
        elapsed = round(time.monotonic() - started, 1)
        if not missing or elapsed >= settings.verify_deadline_s:
            ok = not missing
            steps.append(StepResult(kind="verify", role=router.key, argv=["GET", f"{base}/workers"], ok=ok,
                                    exit_status=200, elapsed_ms=elapsed * 1000,
                                    detail="listed healthy: " + ", ".join(urls) if ok else
                                    f"not listed healthy within {settings.verify_deadline_s:g} s: {', '.join(missing)}"))
            if not ok:
                raise StepFailed(steps[-1].detail)
            return {"ok": True, "workers": urls, "attempts": attempts, "elapsed_s": elapsed,
                    "deadline_s": settings.verify_deadline_s}
        await asyncio.sleep(1.0)
