"""What a restart costs, said in the approval (act): requests lost, time to recover, the capacity left.

``restart_cost`` is pure (the plan's roles, the figures of the cluster's latest probe, the recovery
times of the role's earlier restarts in; a ``RestartCost`` out). ``cost_for`` reads those from the
store; it is called where the plan is made (``request_restart``), so Slack, the CLI and REST all show
the text stored with the plan.

Thresholds: SMG leaves a worker out of routing, while another is under, at 8 waiting requests or 0.8
KV usage or more (overload protection, on by default: smg 1.13.0 smg/router_args.py:271-275; ``>=``
in model_gateway/src/worker/overload.rs ``is_overloaded``, smg-project/smg f8daa88). The router's
own admission is ``--max-concurrent-requests`` (-1: off) and ``--queue-size`` (sglang_router 0.3.2
router_args.py:67-69, smg 1.13.0 smg/router_args.py:144-146), read from the inventory's router role.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median

from opsbot.bundle import Bundle
from opsbot.contracts.plans import RestartCost, RestartPlan
from opsbot.inventory import Cluster, Inventory, Role
from opsbot.parse.figures import RoleFigures, role_figures
from opsbot.store import Store
from opsbot.store.models import Action

OVERLOAD_KV = 0.8  # smg overload protection: KV usage at which a worker is left out while another is under
OVERLOAD_WAITING = 8  # ... and waiting requests
HISTORY = 3  # earlier restarts shown


def _n(x: float) -> str:
    return f"{x:g}" if x == int(x) else f"{x:.1f}"


def _in_flight(fig: RoleFigures | None) -> float | None:
    if fig is None or fig.running_reqs is None:
        return None
    return fig.running_reqs + (fig.queued_reqs or 0.0)


def _lost(roles: Sequence[Role], figures: dict[str, RoleFigures], probe: str) -> tuple[float | None, str]:
    parts, total, unknown = [], 0.0, []
    for r in roles:
        fig = figures.get(r.key)
        n = _in_flight(fig)
        if r.role == "router":
            parts.append(f"{r.key}: the requests it is proxying (clients see the connection drop)")
        elif n is None or fig is None:
            unknown.append(r.key)
        else:
            total += n
            parts.append(f"{r.key}: {_n(fig.running_reqs or 0)} running, {_n(fig.queued_reqs or 0)} queued")
    if unknown:
        where = f"probe {probe}" if figures else "no probe of the cluster on record"
        return None, (f"requests lost: unknown for {', '.join(unknown)} (no scheduler metrics in {where})"
                      + (f"; {'; '.join(parts)}" if parts else ""))
    if all(r.role == "router" for r in roles):
        return None, "requests lost: " + "; ".join(parts)
    return total, f"requests lost: {_n(total)} ({'; '.join(parts)}; {probe})"


def _recovery(roles: Sequence[Role], history: dict[str, list[float]]) -> tuple[list[float], str]:
    times = [t for r in roles for t in history.get(r.key, [])][:HISTORY]
    if not times:
        return [], f"time to healthy: no earlier verified restart of {', '.join(r.key for r in roles)} on record"
    said = ", ".join(f"{_n(t)} s" for t in times)
    return times, f"time to healthy after its last restarts: {said} (median {_n(median(times))} s)"


def _capacity(role: Role, cluster: Cluster, figures: dict[str, RoleFigures], lost: float | None,
              restarting: set[str]) -> tuple[list[str], list[str]]:
    """The other instances of the role's kind after taking its share, against SMG's overload thresholds."""
    others = [r for r in cluster.roles if r.role == role.role and r.key not in restarting]
    if not others:
        return [], [f"no other {role.role} instance: {role.role} traffic fails until {role.key} is back"]
    share = (lost or 0.0) / len(others)
    lines, warnings = [], []
    for o in others:
        fig = figures.get(o.key)
        n = _in_flight(fig)
        if fig is None or n is None:
            lines.append(f"{o.key} takes {role.key}'s share: its load is unknown (no metrics in the probe)")
            continue
        waiting = (fig.queued_reqs or 0.0) + share
        kv = fig.token_usage
        if kv is not None and fig.running_reqs:
            kv = kv * (1 + share / fig.running_reqs)  # KV use grows with the requests it holds
        kv_text = f", KV usage ~{kv:.2f} (now {fig.token_usage:.2f})" if kv is not None and fig.token_usage is not None else ""
        lines.append(f"{o.key} after taking its share (+{_n(share)}): {_n(n + share)} requests, "
                     f"{_n(waiting)} waiting{kv_text}")
        if kv is not None and kv >= OVERLOAD_KV:
            warnings.append(f"{o.key} would reach KV usage {kv:.2f}, past SMG's overload threshold {OVERLOAD_KV}")
        if waiting >= OVERLOAD_WAITING:
            warnings.append(f"{o.key} would hold {_n(waiting)} waiting requests, past SMG's overload threshold "
                            f"{OVERLOAD_WAITING}")
    return lines, warnings


def _admission(cluster: Cluster, figures: dict[str, RoleFigures], restarting: set[str]) -> list[str]:
    """The load the remaining servers carry against the router's --max-concurrent-requests and --queue-size."""
    routers = [r for r in cluster.roles if r.role == "router" and r.max_concurrent_requests is not None]
    decode = [r for r in cluster.roles if r.role == "decode"]
    loads = [_in_flight(figures.get(r.key)) for r in decode]
    if not routers or not decode or any(n is None for n in loads):
        return []
    left = [r for r in decode if r.key not in restarting]
    limit = routers[0].max_concurrent_requests or -1
    if limit <= 0 or not left:
        return []
    total = sum(n for n in loads if n is not None)
    queue = routers[0].queue_size if routers[0].queue_size is not None else 100
    if total > limit + queue:
        return [(f"{_n(total)} requests would come back to {routers[0].key}, past its admission "
                 f"(--max-concurrent-requests {limit} + --queue-size {queue}): the rest are refused there")]
    if total > limit:
        return [(f"{_n(total - limit)} of {_n(total)} requests would wait in {routers[0].key}'s queue "
                 f"(--max-concurrent-requests {limit})")]
    return []


def restart_cost(plan_roles: Sequence[Role], cluster: Cluster, bundle: Bundle | None, probe_id: str | None,
                 history: dict[str, list[float]]) -> RestartCost:
    """The cost of restarting ``plan_roles`` (pure): ``bundle`` is the cluster's latest probe (None: none on
    record), ``history`` the seconds each role took to verify healthy after its earlier restarts, newest first."""
    figures = {ev.key: role_figures(bundle, ev) for ev in bundle.roles} if bundle is not None else {}
    probe = f"probe {probe_id} at {bundle.started_at[11:19]} UTC" if bundle is not None and probe_id else "no probe"
    lost, lost_line = _lost(plan_roles, figures, probe)
    recoveries, recovery_line = _recovery(plan_roles, history)
    lines, warnings = [lost_line, recovery_line], []
    restarting = {r.key for r in plan_roles}
    for r in plan_roles:
        if r.role in ("prefill", "decode"):
            more, warned = _capacity(r, cluster, figures, _in_flight(figures.get(r.key)), restarting)
            lines += more
            warnings += [w for w in warned if w not in warnings]
    if any(r.role == "router" for r in plan_roles):
        lines.append("every request fails until the router is back (it is the only way in)")
    warnings += _admission(cluster, figures, restarting)
    return RestartCost(probe_id=probe_id if bundle is not None else None, probe_at=bundle.started_at if bundle else None,
                       lost_requests=lost, recoveries_s=recoveries, lines=lines, warnings=warnings)


def recovery_history(actions: Sequence[Action], role_keys: Sequence[str]) -> dict[str, list[float]]:
    """Seconds to verified healthy after each succeeded restart of the roles, newest first (``actions``
    newest first, as the store lists them)."""
    out: dict[str, list[float]] = {k: [] for k in role_keys}
    for a in actions:
        if a.kind != "restart" or a.state != "succeeded":
            continue
        elapsed = (a.verification or {}).get("elapsed_s")
        if not isinstance(elapsed, (int, float)):
            continue
        for key in a.role.split(","):
            if key in out:
                out[key].append(float(elapsed))
    return out


def cost_for(store: Store, inventory: Inventory, plan: RestartPlan) -> RestartCost:
    """The plan's cost from the store: the cluster's latest probe and the roles' succeeded restarts."""
    _, cluster = inventory.cluster(plan.cluster)
    roles = cluster.select(plan.roles)
    latest = store.probes(cluster=plan.cluster, limit=1)
    bundle = store.load_bundle(latest[0].id) if latest else None
    actions = store.actions(state="succeeded", cluster=plan.cluster, limit=200)
    return restart_cost(roles, cluster, bundle, latest[0].id if latest else None,
                        recovery_history(actions, plan.roles))


def with_cost(store: Store, inventory: Inventory, plan: RestartPlan) -> RestartPlan:
    """The plan with its cost; a cost that cannot be read is said, and never stops the plan."""
    try:
        cost = cost_for(store, inventory, plan)
    except Exception as exc:  # noqa: BLE001 - the approval says the cost is unknown, the plan stands
        cost = RestartCost(lines=[f"cost unknown: {type(exc).__name__}: {exc}"])
    return plan.model_copy(update={"cost": cost})
