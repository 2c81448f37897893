"""Current state for a report: each role's figures from one probe bundle (pure)."""

from __future__ import annotations

from datetime import datetime

from opsbot.bundle import Bundle, RoleEvidence
from opsbot.parse.errors import ParseError
from opsbot.parse.gpu import parse_gpu_csv
from opsbot.parse.metrics import parse_samples
from opsbot.parse.unit import parse_unit
from opsbot.report.model import CurrentState, RoleFigures

_TOKENS_FACT = {"prefill": "realtime_tokens_prefill_compute", "decode": "realtime_tokens_decode"}


def _health(role: RoleEvidence) -> str:
    h = role.health
    if h.ok and h.status == 200:
        return "ok"
    if h.status is not None:
        return f"failing ({h.status})"
    return "unreachable" if h.error else "unknown"


def _gpu_memory(bundle: Bundle, role: RoleEvidence, gpus: list[int] | None) -> tuple[float | None, int, str | None]:
    node = bundle.node(role.node)
    if node is None or not node.gpu.ok:
        return None, 0, f"GPU query failed on {role.node}" if node is not None else None
    try:
        rows = parse_gpu_csv(node.gpu.raw)
    except ParseError as exc:
        return None, 0, str(exc)
    if gpus:
        rows = [r for r in rows if r.index in gpus]
    used = [r.memory_used_mib for r in rows if r.memory_used_mib is not None]
    return (sum(used) / 1024.0 if used else None), len(rows), None


def role_figures(bundle: Bundle, role: RoleEvidence, gpus: list[int] | None = None) -> RoleFigures:
    """A role's unit state, health, queue, KV usage, tokens/s and GPU memory; problems listed, never raised."""
    fig = RoleFigures(role=role.key, node=role.node, unit=role.unit, state="unknown", health=_health(role))
    if role.systemd.ok:
        try:
            unit = parse_unit(role.systemd.raw)
            fig.state = "/".join(s for s in (unit.active_state, unit.sub_state) if s) or "unknown"
            fig.restarts = unit.n_restarts
        except ParseError as exc:
            fig.problems.append(f"systemd: {exc}")
    else:
        fig.problems.append(f"systemd: {role.systemd.error or 'not collected'}")
    if role.metrics.ok and role.metrics.samples:
        m = parse_samples(role.metrics.samples)
        fig.running_reqs = m.gauges.get("num_running_reqs")
        fig.queued_reqs = m.gauges.get("num_queue_reqs")
        fig.token_usage = m.gauges.get("token_usage")
        fact = _TOKENS_FACT.get(role.role)
        if fact and fact in m.rates:
            fig.tokens_per_s = m.rates[fact]
        fig.problems.extend(f"metrics: {p}" for p in m.problems)
    elif role.role != "router":
        fig.problems.append(f"metrics: {role.metrics.error or 'not collected'}")
    if role.role != "router":
        fig.gpu_memory_gib, fig.gpus, problem = _gpu_memory(bundle, role, gpus)
        if problem:
            fig.problems.append(problem)
    return fig


def current_from_bundle(bundle: Bundle, *, now: datetime, fresh: bool, incidents: list[str] | None = None,
                        role_gpus: dict[str, list[int]] | None = None) -> CurrentState:
    taken = datetime.fromisoformat(bundle.started_at.replace("Z", "+00:00"))
    return CurrentState(
        probe_id=bundle.id, cluster=bundle.cluster, taken_at=taken,
        age_s=max(0.0, (now - taken).total_seconds()), fresh=fresh,
        roles=[role_figures(bundle, r, (role_gpus or {}).get(r.key)) for r in bundle.roles],
        incidents=list(incidents or []),
    )
