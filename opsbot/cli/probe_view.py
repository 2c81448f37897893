"""How a probe looks in a terminal: pure functions from a bundle to rich tables."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from opsbot.bundle import Bundle, Canary
from opsbot.parse import ParseError
from opsbot.parse.figures import AXES, RoleFigures, role_figures
from opsbot.parse.gpu import parse_gpu_csv


def _num(v: float | int | None, fmt: str = "{:g}") -> str:
    return "-" if v is None else fmt.format(v)


def _throughput(s: RoleFigures) -> str:
    if s.tokens_per_s is not None:
        return f"{s.tokens_per_s:.1f} tok/s (+{s.tokens_delta or 0:g} in {s.window_s or 0:.1f} s)"
    return f"{s.requests_per_s:.1f} req/s" if s.requests_per_s is not None else "-"


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
        s = role_figures(bundle, r)
        errors = ", ".join(f"{k}×{v}" for k, v in sorted(s.errors.items(), key=lambda kv: -kv[1])) or "-"
        failed = s.failed_axes + s.problems
        t.add_row(
            s.role, s.node, f"[{_state_style(s.state)}]{s.state}[/]", _num(s.restarts), _num(s.running_reqs),
            _num(s.queued_reqs), _num(s.token_usage, "{:.0%}"), _throughput(s), s.health, errors,
            "[red]" + "; ".join(x.split(":")[0] for x in failed) + "[/]" if failed else "-",
        )
    return t


def ranks_table(bundle: Bundle) -> Table | None:
    """The DP-attention ranks of every role that shows several: each rank's series and its pinned canary."""
    t = Table(title="DP-attention ranks", title_justify="left")
    for col in ("role", "dp rank", "running", "queued", "token usage", "tokens/s", "pinned canary"):
        t.add_column(col, overflow="fold")
    for r in bundle.roles:
        for k in role_figures(bundle, r).ranks:
            style = "green" if k.canary.startswith("ok") else "red" if k.canary.startswith("failed") else "yellow"
            t.add_row(r.key, str(k.dp_rank), _num(k.running_reqs), _num(k.queued_reqs), _num(k.token_usage, "{:.0%}"),
                      _num(k.tokens_per_s, "{:.1f}"), f"[{style}]{escape(k.canary)}[/]")
    return t if t.row_count else None


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


def canary_line(c: Canary) -> str:
    """The canary in one line: the end-to-end PD check through the router."""
    if c.not_awaited:
        return f"canary through the router: not awaited after {c.elapsed_ms or 0:.0f} ms ({c.not_awaited})"
    if not c.ok:
        return f"canary through the router: FAILED after {c.elapsed_ms or 0:.0f} ms: {c.error}"
    return (f"canary through the router: HTTP {c.status}, first token {c.ttft_ms or 0:.0f} ms, "
            f"total {c.total_ms or 0:.0f} ms, {c.tokens or 0} tokens")
