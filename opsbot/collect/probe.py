"""``probe``: every axis of every selected role and node, concurrently, into one bundle."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable
from functools import partial
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, TypeVar

from opsbot.bundle import (
    Bundle, Canary, Envelope, GpuEvidence, HealthEvidence, KernelLogEvidence, LogsEvidence, MetricsEvidence, NodeEvidence,
    RankEvidence, RoleEvidence, SystemdEvidence, Trigger, utcnow,
)
from opsbot.collect import axes
from opsbot.collect.canary import send_canary
from opsbot.collect.rankcanary import rank_canaries
from opsbot.collect.transport import Transport, TransportPool
from opsbot.inventory import Inventory, Node, Role
from opsbot.settings import Settings

if TYPE_CHECKING:
    from opsbot.collect.pool import ProbeView

Progress = Callable[[str, str], None]
Decided = Callable[[Bundle], Awaitable[str | None]]
E = TypeVar("E", bound=Envelope)

_SPAN = re.compile(r"-\s*(\d+)\s*(s|sec|secs|second|seconds|m|min|mins|minute|minutes|h|hour|hours|d|day|days)")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def since_timestamp(spec: str, now: datetime) -> str:
    """``-15min`` → an absolute UTC time journalctl accepts; anything else is passed through."""
    m = _SPAN.fullmatch(spec.strip())
    if not m:
        return spec
    unit = "m" if m[2].startswith("m") else m[2][0]
    at = now - timedelta(seconds=int(m[1]) * _UNIT_S[unit])
    return at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


async def _bounded(
    name: str, make: Callable[[], Awaitable[E]], failed: Callable[[str], E], deadline: float, progress: Progress
) -> E:
    """Run one axis within the probe deadline; whatever goes wrong becomes its ``ok: false``."""
    progress(name, "running")
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    try:
        evidence = await asyncio.wait_for(make(), deadline)
    except TimeoutError:
        evidence = failed(f"no result within the probe deadline of {deadline:g} s")
    except Exception as exc:  # a bug or an odd failure in one axis must not sink the probe
        evidence = failed(f"{type(exc).__name__}: {exc}")
    if not evidence.elapsed_ms:
        evidence.elapsed_ms = round((loop.time() - t0) * 1000, 1)
    progress(name, "ok" if evidence.ok else f"failed: {evidence.error}")
    return evidence


def scope(inventory: Inventory, cluster: str | None, roles: list[str] | None) -> tuple[str, list[Role], list[Node]]:
    """The cluster name, roles and nodes a probe covers; raises ``ConfigError``/``UnknownRole``."""
    name, cl = inventory.cluster(cluster)
    selected = cl.select(roles)
    nodes: list[Node] = []
    for r in selected:
        node = cl.node(r.node)
        if node not in nodes:
            nodes.append(node)
    return name, selected, nodes


async def probe(
    inventory: Inventory,
    *,
    cluster: str | None = None,
    roles: list[str] | None = None,
    trigger: Trigger | None = None,
    settings: Settings,
    progress: Progress | None = None,
    pool: TransportPool | ProbeView | None = None,
    decided: Decided | None = None,
) -> Bundle:
    """Collect every axis concurrently; a failed piece is ``ok: false``, never an exception.

    ``decided``: asked, when every role and node axis is in and the canary is still out, about the bundle
    without it; a reason it returns (the classes the evidence already names) ends the wait, and the canary
    goes into the bundle as not awaited. A wedged engine holds the canary until its deadline, while the
    metrics window already shows the wedge."""
    s = settings
    cluster_name, selected, nodes = scope(inventory, cluster, roles)  # bad scope fails before any connection
    report: Progress = progress or (lambda _name, _status: None)
    started = utcnow()
    since = since_timestamp(s.log_since, datetime.now(timezone.utc))
    own = pool is None
    pool = pool if pool is not None else await asyncio.to_thread(TransportPool, s)  # its TLS set-up holds the GIL
    try:
        transports = {n.name: await pool.get(n) for n in nodes}

        def axis(name: str, make: Callable[[], Awaitable[E]], kind: type[E]) -> Awaitable[E]:
            return _bounded(name, make, lambda err: kind(ok=False, error=err), s.probe_deadline_s, report)

        role_tasks = [
            asyncio.gather(
                axis(f"{r.key}/systemd", partial(axes.collect_systemd, transports[r.node], r, s), SystemdEvidence),
                axis(f"{r.key}/metrics", partial(axes.collect_metrics, transports[r.node], r, s), MetricsEvidence),
                axis(f"{r.key}/health", partial(axes.collect_health, transports[r.node], r, s), HealthEvidence),
                axis(f"{r.key}/logs", partial(axes.collect_logs, transports[r.node], r, since, s), LogsEvidence),
            )
            for r in selected
        ]
        node_tasks = [
            asyncio.gather(
                axis(f"{n.name}/gpu", partial(axes.collect_gpu, transports[n.name], s), GpuEvidence),
                axis(f"{n.name}/kernel", partial(axes.collect_kernel_log, transports[n.name], since, s),
                     KernelLogEvidence),
            )
            for n in nodes
        ]
        rank_tasks = [_ranks(r, transports[r.node], s, report) for r in selected]
        canary_task = asyncio.ensure_future(_canary(inventory, cluster_name, pool, s, report))
        canary_sent = _loop_time()
        try:
            role_results, node_results, rank_results = await asyncio.gather(
                asyncio.gather(*role_tasks), asyncio.gather(*node_tasks), asyncio.gather(*rank_tasks))
        except BaseException:
            canary_task.cancel()
            raise
        bundle = Bundle(
            cluster=cluster_name,
            trigger=trigger or Trigger(),
            started_at=started,
            finished_at=utcnow(),
            roles=[
                RoleEvidence(role=r.role, node=r.node, unit=r.unit, name=r.name, gpus=list(r.gpus), systemd=sd, metrics=m,
                             health=h, logs=lg, ranks=ranks)
                for r, (sd, m, h, lg), ranks in zip(selected, role_results, rank_results)
            ],
            nodes=[NodeEvidence(node=n.name, gpu=g, kernel_log=k) for n, (g, k) in zip(nodes, node_results)],
        )
        reason = await decided(bundle) if decided is not None and not canary_task.done() else None
        if reason and not canary_task.done():
            canary_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await canary_task  # let its request close before the pool does
            bundle.canary = Canary(ok=False, error=f"not awaited: {reason}", not_awaited=reason,
                                   elapsed_ms=round((_loop_time() - canary_sent) * 1000, 1))
            report("canary", f"not awaited: {reason}")
        else:
            bundle.canary = await canary_task
        bundle.finished_at = utcnow()
    finally:
        if own:
            await pool.close()
    return bundle


def ranked(role: Role) -> bool:
    """Whether the probe sends this role a canary per DP rank: a decode the inventory says runs DP attention."""
    return role.role == "decode" and role.dp_size > 1 and role.api_base is not None


async def _ranks(role: Role, transport: Transport, s: Settings, report: Progress) -> list[RankEvidence] | None:
    """One canary pinned to each rank of a DP-attention decode (opsbot/collect/rankcanary.py); never raises."""
    if not ranked(role):
        return None
    report(f"{role.key}/ranks", "running")
    try:
        ranks = await rank_canaries(role, transport, s.rank_canary_deadline_s)
    except Exception as exc:  # a bug here must not sink the probe: the ranks read as not collected
        report(f"{role.key}/ranks", f"failed: {type(exc).__name__}: {exc}")
        return [RankEvidence(dp_rank=i, canary=Canary(ok=False, error=f"{type(exc).__name__}: {exc}"))
                for i in range(role.dp_size)]
    answered = sum(1 for r in ranks if r.canary is not None and r.canary.ok)
    report(f"{role.key}/ranks", "ok" if answered == len(ranks) else f"{answered} of {len(ranks)} ranks answered")
    return ranks


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


async def _canary(inventory: Inventory, cluster: str, pool: TransportPool | ProbeView, s: Settings,
                  report: Progress) -> Canary | None:
    """The canary through the cluster's router, when the inventory keeps it on; never raises."""
    _name, cl = inventory.cluster(cluster)
    router = cl.router()
    if not cl.canary or router is None:
        return None
    transport = await pool.get(cl.node(router.node))
    return await _bounded("canary", lambda: send_canary(cl, router, transport, s.canary_deadline_s),
                          lambda err: Canary(ok=False, error=err), s.canary_deadline_s + 1, report)


def planned_axes(roles: list[Role], nodes: list[Node]) -> list[str]:
    """The ``role/axis`` and ``node/axis`` names a probe of this scope reports progress for."""
    names = [f"{r.key}/{a}" for r in roles for a in ("systemd", "metrics", "health", "logs")]
    names += [f"{r.key}/ranks" for r in roles if ranked(r)]
    return names + [f"{n.name}/{a}" for n in nodes for a in ("gpu", "kernel")]


def canary_planned(inventory: Inventory, cluster: str | None) -> bool:
    """Whether a probe of this cluster sends the canary (it is on and there is a router)."""
    _name, cl = inventory.cluster(cluster)
    return cl.canary and cl.router() is not None
