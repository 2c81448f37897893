"""The figures an operator looks at first, per role, from one bundle (pure).

One function serves every surface: the probe table in the terminal, the status and weekly reports,
and the status page. Problems are listed, never raised.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from opsbot.bundle import Bundle, Canary, RoleEvidence
from opsbot.parse.errors import ParseError
from opsbot.parse.facts import patch_seen, run_started
from opsbot.parse.gpu import parse_gpu_csv
from opsbot.parse.logs import count_kinds, parse_log_lines
from opsbot.parse.metricnames import QUEUE_REQS, RUNNING_REQS, TOKEN_USAGE
from opsbot.parse.metrics import parse_samples, requests_rate, tokens_delta
from opsbot.parse.ranks import PROGRESS_MODE
from opsbot.parse.unit import parse_unit

AXES = ("systemd", "metrics", "health", "logs")
# The counter that moves while a role does its work (reference/sglang.md: realtime tokens).


class RankFigures(BaseModel):
    """One DP-attention rank of a role: its own series and its pinned canary (opsbot/parse/ranks.py)."""

    dp_rank: int
    running_reqs: float | None = None
    queued_reqs: float | None = None
    token_usage: float | None = None
    tokens_per_s: float | None = None
    canary: str = Field("-", description="'ok (230 ms)', 'no answer: ...', 'skipped: ...' or '-' (not sent)")


def _rank_canary(c: Canary | None) -> str:
    if c is None:
        return "-"
    if c.skipped:
        return f"skipped: {c.skipped}"
    return f"ok ({c.total_ms or c.elapsed_ms or 0:.0f} ms)" if c.ok else f"failed: {c.error}"


class RoleFigures(BaseModel):
    """One role's state, as a probe saw it."""

    role: str = Field(description="the role's name in the inventory")
    kind: str = Field("", description="prefill, decode or router")
    node: str
    unit: str
    state: str = Field("unknown", description="systemd ActiveState/SubState, 'unit not found' or 'unknown'")
    restarts: int | None = None
    health: str = Field("unknown", description="'ok', 'failing (503)', 'unreachable', 'unknown'")
    running_reqs: float | None = None
    queued_reqs: float | None = None
    token_usage: float | None = None
    tokens_per_s: float | None = None
    tokens_delta: float | None = None
    window_s: float | None = None
    requests_per_s: float | None = Field(None, description="router only: requests routed per second")
    gpu_memory_gib: float | None = None
    gpus: int = 0
    errors: dict[str, int] = Field(default_factory=dict, description="error log lines by kind")
    failed_axes: list[str] = Field(default_factory=list, description="'axis: error' for evidence not collected")
    problems: list[str] = Field(default_factory=list, description="evidence that was collected but unreadable")
    index_keys: str | None = Field(None, description="servers: the index keys the current run shows (the patch's line)")
    ranks: list[RankFigures] = Field(default_factory=list, description="DP attention: one entry per rank (2 or more)")


def _health(role: RoleEvidence) -> str:
    h = role.health
    if h.ok and h.status == 200:
        return "ok"
    if h.status is not None:
        return f"failing ({h.status})"
    return "unreachable" if h.error else "unknown"


def gpu_memory(bundle: Bundle, role: RoleEvidence, gpus: list[int] | None) -> tuple[float | None, int, str | None]:
    node = bundle.node(role.node)
    if node is None or not node.gpu.ok:
        return None, 0, f"GPU query failed on {role.node}" if node is not None else None
    try:
        rows = parse_gpu_csv(node.gpu.raw)
    except ParseError as exc:
        return None, 0, str(exc)
    wanted = gpus if gpus is not None else getattr(role, "gpus", None)
    if wanted:
        rows = [r for r in rows if r.index in wanted]
    used = [r.memory_used_mib for r in rows if r.memory_used_mib is not None]
    return (sum(used) / 1024.0 if used else None), len(rows), None


def _unit(fig: RoleFigures, role: RoleEvidence) -> None:
    try:
        unit = parse_unit(role.systemd.raw)
    except ParseError as exc:
        fig.problems.append(f"systemd: {exc}")
        return
    if not unit.exists:
        fig.state = "unit not found"
        return
    fig.state = "/".join(s for s in (unit.active_state, unit.sub_state) if s) or "unknown"
    fig.restarts = unit.n_restarts


def _metrics(fig: RoleFigures, role: RoleEvidence) -> None:
    m = parse_samples(role.metrics.samples)
    fig.running_reqs = m.gauges.get(RUNNING_REQS)
    fig.queued_reqs = m.gauges.get(QUEUE_REQS)
    fig.token_usage = m.gauges.get(TOKEN_USAGE)
    fig.window_s = m.window_s
    fig.tokens_delta = tokens_delta(m, role.role) if role.role != "router" else None
    if fig.tokens_delta is not None and m.window_s:
        fig.tokens_per_s = fig.tokens_delta / m.window_s
    if role.role == "router":
        fig.requests_per_s = requests_rate(m)
    fig.problems.extend(f"metrics: {p}" for p in m.problems if "only one" not in p)
    mode = PROGRESS_MODE.get(role.role, "decode")
    fig.ranks = [RankFigures(dp_rank=r.dp_rank, running_reqs=r.running, queued_reqs=r.queued, token_usage=r.token_usage,
                             tokens_per_s=r.tokens[mode] / m.window_s if mode in r.tokens and m.window_s else None)
                 for r in m.ranks]


def _rank_canaries(fig: RoleFigures, role: RoleEvidence) -> None:
    """The pinned canaries beside the ranks' series (a rank the metrics did not show gets a row of its own)."""
    by_rank = {r.dp_rank: r for r in fig.ranks}
    for ev in role.ranks or []:
        row = by_rank.setdefault(ev.dp_rank, RankFigures(dp_rank=ev.dp_rank))
        row.canary = _rank_canary(ev.canary)
    fig.ranks = [by_rank[k] for k in sorted(by_rank)] if len(by_rank) >= 2 else []


def role_figures(bundle: Bundle, role: RoleEvidence, gpus: list[int] | None = None) -> RoleFigures:
    """A role's unit state, health, queue, KV usage, tokens/s, GPU memory and error lines."""
    fig = RoleFigures(role=role.key, kind=role.role, node=role.node, unit=role.unit, health=_health(role))
    fig.failed_axes = [f"{a}: {getattr(role, a).error or 'not collected'}" for a in AXES if not getattr(role, a).ok]
    if role.systemd.ok:
        _unit(fig, role)
    if role.metrics.ok and role.metrics.samples:
        _metrics(fig, role)
    _rank_canaries(fig, role)
    if role.logs.ok:
        fig.errors = count_kinds(parse_log_lines(role.logs.raw))
    if role.role != "router":
        fig.index_keys = patch_seen(bundle, role, run_started(role)).describe()
        fig.gpu_memory_gib, fig.gpus, problem = gpu_memory(bundle, role, gpus)
        if problem:
            fig.problems.append(problem)
    return fig
