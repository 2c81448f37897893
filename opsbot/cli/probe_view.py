"""How a probe looks in a terminal: pure functions from a bundle to rich tables."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.table import Table

from opsbot.bundle import Bundle, RoleEvidence
from opsbot.parse import ParseError
from opsbot.parse.gpu import parse_gpu_csv
from opsbot.parse.logs import count_kinds, parse_log_lines
from opsbot.parse.metrics import parse_samples
from opsbot.parse.unit import parse_unit

AXES = ("systemd", "metrics", "health", "logs")
# The counter that moves while a role does its work (reference/sglang.md: realtime tokens).
PROGRESS_COUNTER = {"decode": "realtime_tokens_decode", "prefill": "realtime_tokens_prefill_compute"}


@dataclass
class RoleSummary:
    key: str
    role: str
    node: str
    state: str = "?"
    restarts: int | None = None
    running: float | None = None
    queued: float | None = None
    token_usage: float | None = None
    throughput: str = "-"
    health: str = "-"
    errors: dict[str, int] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)


def summarize_role(r: RoleEvidence) -> RoleSummary:
    s = RoleSummary(r.key, r.role, r.node)
    for axis in AXES:
        ev = getattr(r, axis)
        if not ev.ok:
            s.failed.append(f"{axis}: {ev.error}")
    if r.systemd.ok:
        try:
            u = parse_unit(r.systemd.raw)
            s.state = f"{u.active_state}/{u.sub_state}" if u.exists else "unit not found"
            s.restarts = u.n_restarts
        except ParseError as exc:
            s.failed.append(f"systemd: {exc}")
    if r.metrics.samples:
        m = parse_samples(r.metrics.samples)
        s.running = m.gauges.get("num_running_reqs")
        s.queued = m.gauges.get("num_queue_reqs")
        s.token_usage = m.gauges.get("token_usage")
        counter = PROGRESS_COUNTER.get(r.role)
        if counter and counter in m.rates:
            s.throughput = f"{m.rates[counter]:.1f} tok/s (+{m.deltas[counter]:g} in {m.window_s:.1f} s)"
        elif r.role == "router" and "smg_router_requests" in m.rates:
            s.throughput = f"{m.rates['smg_router_requests']:.1f} req/s"
        s.failed.extend(f"metrics: {p}" for p in m.problems if "only one" not in p)
    if r.health.ok:
        s.health = str(r.health.status)
    s.errors = count_kinds(parse_log_lines(r.logs.raw))
    return s


def _num(v: float | int | None, fmt: str = "{:g}") -> str:
    return "-" if v is None else fmt.format(v)


def _state_style(state: str) -> str:
    if state.startswith("active/running"):
        return "green"
    return "yellow" if state.startswith(("activating", "reloading")) else "red"


def roles_table(bundle: Bundle) -> Table:
    t = Table(title=f"probe {bundle.id} · cluster {bundle.cluster} · {bundle.started_at}", title_justify="left")
    for col in ("role", "node", "state", "restarts", "running", "queued", "token usage", "throughput", "health",
                "error lines", "failed axes"):
        t.add_column(col, overflow="fold")
    for r in bundle.roles:
        s = summarize_role(r)
        errors = ", ".join(f"{k}×{v}" for k, v in sorted(s.errors.items(), key=lambda kv: -kv[1])) or "-"
        t.add_row(
            s.key, s.node, f"[{_state_style(s.state)}]{s.state}[/]", _num(s.restarts), _num(s.running),
            _num(s.queued), _num(s.token_usage, "{:.0%}"), s.throughput, s.health, errors,
            "[red]" + "; ".join(x.split(":")[0] for x in s.failed) + "[/]" if s.failed else "-",
        )
    return t


def nodes_table(bundle: Bundle) -> Table:
    t = Table(title="GPUs", title_justify="left")
    for col in ("node", "gpu", "name", "memory", "util", "temp", "power", "Xid lines"):
        t.add_column(col)
    for n in bundle.nodes:
        xids = str(len(n.kernel_log.raw.splitlines())) if n.kernel_log and n.kernel_log.ok else "-"
        if not n.gpu.ok:
            t.add_row(n.node, "-", f"[red]{n.gpu.error}[/]", "", "", "", "", xids)
            continue
        try:
            rows = parse_gpu_csv(n.gpu.raw)
        except ParseError as exc:
            t.add_row(n.node, "-", f"[red]{exc}[/]", "", "", "", "", xids)
            continue
        for g in rows:
            mem = (f"{(g.memory_used_mib or 0) / 1024:.1f}/{(g.memory_total_mib or 0) / 1024:.1f} GiB"
                   if g.memory_total_mib else "-")
            t.add_row(n.node, str(g.index), g.name or "-", mem, _num(g.utilization_pct, "{:g}%"),
                      _num(g.temperature_c, "{:g} C"), _num(g.power_w, "{:g} W"), xids)
    return t


def failures_table(bundle: Bundle) -> Table | None:
    """Every axis that could not be collected, with its error; None when all were."""
    rows = [(r.key, a, getattr(r, a).error or "") for r in bundle.roles for a in AXES if not getattr(r, a).ok]
    for n in bundle.nodes:
        rows += [(n.node, "gpu", n.gpu.error or "")] if not n.gpu.ok else []
        if n.kernel_log is not None and not n.kernel_log.ok:
            rows.append((n.node, "kernel", n.kernel_log.error or ""))
    if not rows:
        return None
    t = Table(title="axes that failed (evidence: the probe itself went on)", title_justify="left")
    for col in ("where", "axis", "error"):
        t.add_column(col, overflow="fold")
    for row in rows:
        t.add_row(*row)
    return t
