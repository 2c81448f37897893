"""How long a full probe of the lab takes, against doing it by hand and against its slowest axis.

    python bench/probe_latency.py [--repeat 3] [--window SECONDS]

(a) by hand: what an engineer types, one ``ssh node 'command'`` process per command, in
    sequence (systemctl show, fetch /metrics, wait the window, fetch /metrics again, fetch
    /health, journalctl | grep per role; nvidia-smi and journalctl -k | grep per node);
(b) the slowest single axis alone, on a fresh connection as in a probe;
(c) ``opsbot.collect.probe.probe`` over every role and node.
Needs a running lab (``opsbot lab up``); the figures are written down in bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.table import Table

from opsbot.bundle import GPU_QUERY, SYSTEMD_PROPERTIES, Envelope
from opsbot.collect import axes
from opsbot.collect.probe import probe, since_timestamp
from opsbot.collect.transport import TransportPool
from opsbot.inventory import Cluster, Node, load_inventory
from opsbot.parse.logs import LOG_FILTER
from opsbot.settings import Settings, get_settings

console = Console()
ROLE_AXES = ("systemd", "metrics", "health", "logs")
NODE_AXES = ("gpu", "kernel")


def ssh_argv(node: Node, known_hosts: Path) -> list[str]:
    return [
        "ssh", "-p", str(node.port), "-i", str(node.key_file), "-o", f"UserKnownHostsFile={known_hosts}",
        "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
        f"{node.user}@{node.address}",
    ]


def by_hand_commands(cl: Cluster, fetch: str) -> list[tuple[str, str | None]]:
    """(node, remote command) in the order an engineer runs them; None is "wait the window"."""
    grep = shlex.quote(LOG_FILTER)
    out: list[tuple[str, str | None]] = []
    for r in cl.roles:
        out += [
            (r.node, f"systemctl show {r.unit} --no-pager -p {SYSTEMD_PROPERTIES}"),
            (r.node, f"{fetch} {r.metrics_url}"),
            (r.node, None),
            (r.node, f"{fetch} {r.metrics_url}"),
            (r.node, f"{fetch} {r.health_url}"),
            (r.node, f"journalctl -u {r.unit} --since -15min -o short-iso --no-pager | grep -E {grep} | tail -n 400"),
        ]
    for n in cl.nodes:
        out += [
            (n.name, f"nvidia-smi --query-gpu={GPU_QUERY} --format=csv,noheader,nounits"),
            (n.name, "journalctl -k --since -15min -o short-iso --no-pager | grep -E 'NVRM|Xid'"),
        ]
    return out


def run_by_hand(cl: Cluster, known_hosts: Path, window: float, fetch: str, wait: bool) -> float:
    t0 = time.monotonic()
    for node, command in by_hand_commands(cl, fetch):
        if command is None:
            time.sleep(window if wait else 0)
            continue
        subprocess.run([*ssh_argv(cl.node(node), known_hosts), command], capture_output=True, timeout=60)
    return time.monotonic() - t0


async def time_axis(cl: Cluster, s: Settings, where: str, axis: str) -> float:
    """One axis of one role or node, alone, on its own fresh connection."""
    since = since_timestamp(s.log_since, datetime.now(timezone.utc))
    role = next((r for r in cl.roles if r.key == where), None)
    async with TransportPool(s) as pool:
        t0 = time.monotonic()
        make: Callable[[], Awaitable[Envelope]]
        if role is not None:
            t = await pool.get(cl.node(role.node))
            make = {
                "systemd": lambda: axes.collect_systemd(t, role, s),
                "metrics": lambda: axes.collect_metrics(t, role, s),
                "health": lambda: axes.collect_health(t, role, s),
                "logs": lambda: axes.collect_logs(t, role, since, s),
            }[axis]
        else:
            t = await pool.get(cl.node(where))
            make = {"gpu": lambda: axes.collect_gpu(t, s), "kernel": lambda: axes.collect_kernel_log(t, since, s)}[axis]
        ev = await make()
        if not ev.ok:
            raise SystemExit(f"{where}/{axis} failed: {ev.error}; is the lab up?")
        return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description="time a full probe of the lab against its baselines")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--window", type=float, default=None, help="metrics window in seconds (default: settings)")
    args = ap.parse_args()
    s = get_settings()
    if args.window is not None:
        s = s.model_copy(update={"metrics_window_s": args.window})
    inv = load_inventory(s.inventory_path())
    _name, cl = inv.cluster(s.cluster)

    with tempfile.TemporaryDirectory() as tmp:
        kh = Path(tmp) / "known_hosts"
        kh.write_text("".join(f"[{n.address}]:{n.port} {n.host_key}\n" for n in cl.nodes if n.host_key))
        curl = subprocess.run([*ssh_argv(cl.nodes[0], kh), "command -v curl"], capture_output=True).returncode == 0
        fetch = "curl -s -m 5" if curl else (
            "python3 -c 'import sys,urllib.request;print(urllib.request.urlopen(sys.argv[1],timeout=5).read().decode())'"
        )
        n_cmds = sum(1 for _n, c in by_hand_commands(cl, fetch) if c is not None)
        full: list[float] = []
        hand: list[float] = []
        hand_nowait: list[float] = []
        alone: dict[str, list[float]] = {}
        with console.status("timing") as status:
            for i in range(args.repeat):
                run = f"run {i + 1}/{args.repeat}"
                status.update(f"{run}: opsbot probe")
                t0 = time.monotonic()
                asyncio.run(probe(inv, settings=s))
                full.append(time.monotonic() - t0)
                status.update(f"{run}: by hand ({n_cmds} ssh commands)")
                hand.append(run_by_hand(cl, kh, s.metrics_window_s, fetch, wait=True))
                hand_nowait.append(run_by_hand(cl, kh, s.metrics_window_s, fetch, wait=False))
                targets = [(r.key, a) for r in cl.roles for a in ROLE_AXES] + [(n.name, a) for n in cl.nodes for a in NODE_AXES]
                for where, axis in targets:
                    status.update(f"{run}: {where}/{axis} alone")
                    alone.setdefault(f"{where}/{axis}", []).append(asyncio.run(time_axis(cl, s, where, axis)))

    med = statistics.median
    slowest = max(alone, key=lambda k: med(alone[k]))
    p = med(full)
    table = Table(title=f"full probe of the lab: {len(cl.roles)} roles on {len(cl.nodes)} nodes, "
                        f"metrics window {s.metrics_window_s:g} s, median of {args.repeat}")
    table.add_column("way")
    for col in ("median s", "min s", "÷ opsbot probe"):
        table.add_column(col, justify="right")
    rows = [
        (f"(a) by hand: {n_cmds} ssh commands in sequence, waiting the window per role", hand),
        ("(a') by hand, not waiting the window (counter deltas over ~0 s)", hand_nowait),
        (f"(b) slowest single axis alone: {slowest}", alone[slowest]),
        ("opsbot probe: every axis, concurrent", full),
    ]
    for label, xs in rows:
        table.add_row(label, f"{med(xs):.2f}", f"{min(xs):.2f}", f"{med(xs) / p:.2f}x")
    console.print(table)
    fastest_axis = min(alone, key=lambda k: med(alone[k]))
    console.print(f"fastest axis alone: {fastest_axis} {med(alone[fastest_axis]):.2f} s")
    console.print(f"opsbot probe is {med(hand) / p:.1f}x faster than (a) (goal >= 5x) and "
                  f"{p / med(alone[slowest]):.2f}x the slowest axis alone (goal <= 1.5x)")


if __name__ == "__main__":
    main()
