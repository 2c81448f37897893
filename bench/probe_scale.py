"""A full probe at fleet size: 2, 4, 8 and 16 lab nodes, with the SSH pool cold and warm.

    sudo .venv/bin/python bench/probe_scale.py [--nodes 16] [--sizes 2,4,8,16] [--repeat 3] [--fanout 16,64]

Boots one lab of ``--nodes`` real systemd-nspawn nodes (``--volatile=overlay`` on the one cached
root file system; its own machine names and ports) and probes the roles on its first k nodes for
each size. **cold**: a fresh ``KeptPool`` (the service's pool), so every node's SSH connection is
opened and its host key verified inside the timed probe; **warm**: the same pool again, as the
service's next probe sees it. Baseline in the same run: the slowest single axis, measured alone
(one role's axes on one node, warm). Printed per size: wall time (median of ``--repeat``), the ratio
to that baseline, SSH connections open after the probe (at most one per node), and memory per probe
(tracemalloc peak of the probe's Python allocations, and the process RSS growth), and how busy the
machine's cores were during the probe: the lab's nodes run their side of it (sshd, systemctl,
journalctl, the emulators) on the same cores as the probe.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opsbot.collect.pool import KeptPool  # noqa: E402
from opsbot.collect.probe import probe  # noqa: E402
from opsbot.inventory import Cluster, Inventory  # noqa: E402
from opsbot.lab.nodes import Lab, _port_free  # noqa: E402
from opsbot.lab.settings import LabSettings  # noqa: E402
from opsbot.settings import Settings  # noqa: E402

console = Console(width=200)


def lab_settings(data_dir: Path, nodes: int) -> LabSettings:
    """Ports of their own for a lab of ``nodes`` (wider than the test slots, which hold 8 nodes)."""
    for ssh_base, svc_base in ((23600 + 40 * k, 47000 + 60 * k) for k in range(40)):
        if all(_port_free(p) for p in [*range(ssh_base, ssh_base + nodes), *range(svc_base, svc_base + 60)]):
            return LabSettings(data_dir=data_dir, lab_prefix="opsbot-scale", lab_ssh_port_base=ssh_base,
                            lab_service_port_base=svc_base, metrics_window_s=1.0)
    raise SystemExit("no free port range for the lab")


def first_nodes(inventory: Inventory, k: int) -> tuple[Inventory, str]:
    name, cluster = next(iter(inventory.clusters.items()))
    nodes = cluster.nodes[:k]
    keep = {n.name for n in nodes}
    sub = Cluster(nodes=nodes, roles=[r for r in cluster.roles if r.node in keep])
    return Inventory(clusters={name: sub}), name


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine: the nodes' work runs on the same cores as the probe."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def timed(inventory: Inventory, cluster: str, settings: Settings, pool: KeptPool,
                roles: list[str] | None = None) -> tuple[float, float, dict[str, float]]:
    """Wall seconds, tracemalloc peak MiB, and each axis's own seconds."""
    axes: dict[str, float] = {}
    t0 = time.perf_counter()

    def progress(name: str, status: str) -> None:
        if status != "running":
            axes[name] = time.perf_counter() - t0

    tracemalloc.start()
    bundle = await probe(inventory, cluster=cluster, roles=roles, settings=settings, pool=pool.view(),
                         progress=progress)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    wall = time.perf_counter() - t0
    failed = [r.key for r in bundle.roles if not (r.systemd.ok and r.metrics.ok and r.health.ok)]
    if failed:
        console.print(f"[yellow]axes failed on {failed}[/]")
    return wall, peak / 2**20, axes


async def measure(lab: Lab, base: Settings, sizes: list[int], repeat: int, fanouts: list[int]) -> None:
    inventory = lab.inventory
    settings = base
    one, name = first_nodes(inventory, 1)
    pool = KeptPool(settings, idle_s=600)
    await timed(one, name, settings, pool)  # connect once
    singles = [await timed(one, name, settings, pool) for _ in range(repeat)]
    slowest_axis = statistics.median(max(a.values()) for _, _, a in singles)
    await pool.close()

    table = Table(title=f"full probe by lab size (median of {repeat}; metrics window {settings.metrics_window_s:g} s; "
                        "baseline row: the slowest single axis alone)")
    for col in ("fan-out", "nodes", "roles", "pool", "wall s", "x slowest axis", "SSH conns", "py peak MiB", "RSS growth MiB",
                "machine CPU busy %", "last 5 axes to finish (all runs)"):
        table.add_column(col, justify="right")
    table.add_row(str(settings.max_fanout), "1", "base", "warm", f"{slowest_axis:.2f}", "1.00", "1", "—", "—", "—", "—")
    for fanout, k, mode in ((f, k, m) for f in fanouts for k in sizes for m in ("cold", "warm")):
        settings = base.model_copy(update={"max_fanout": fanout})
        sub, name = first_nodes(inventory, k)
        n_roles = len(sub.clusters[name].roles)
        walls, peaks, busy = [], [], []
        tails: Counter[str] = Counter()  # which axes finish last: what the probe waits for
        rss0 = rss_mib()
        conns = 0
        for _ in range(repeat):
            pool = KeptPool(settings, idle_s=600)
            if mode == "warm":
                await timed(sub, name, settings, pool)
            b0, t0 = cpu_ticks()
            wall, peak, axes = await timed(sub, name, settings, pool)
            tails.update(a.split("/")[-1] for a in sorted(axes, key=axes.__getitem__)[-5:])
            b1, t1 = cpu_ticks()
            busy.append(100 * (b1 - b0) / max(t1 - t0, 1))
            conns = max(conns, pool.open_connections)
            await pool.close()
            walls.append(wall)
            peaks.append(peak)
        wall = statistics.median(walls)
        table.add_row(str(fanout), str(k), str(n_roles), mode, f"{wall:.2f}", f"{wall / slowest_axis:.2f}", str(conns),
                      f"{statistics.median(peaks):.1f}", f"{rss_mib() - rss0:.1f}", f"{statistics.median(busy):.0f}",
                      ", ".join(f"{axis} {n}" for axis, n in tails.most_common()))
    console.print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--sizes", default="2,4,8,16")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--fanout", default="", help="OPSBOT_MAX_FANOUT values to compare, e.g. 16,64 (default: the setting's)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if int(s) <= args.nodes]
    settings = lab_settings(Path(tempfile.mkdtemp(prefix="opsbot-scale-")), args.nodes)
    fanouts = [int(f) for f in args.fanout.split(",") if f] or [settings.max_fanout]
    lab = Lab(settings)
    t0 = time.perf_counter()
    try:
        lab.up(args.nodes, step=lambda s: console.print(f"  {s}"), timeout=600)
        console.print(f"lab of {args.nodes} nodes up in {time.perf_counter() - t0:.0f} s")
        asyncio.run(measure(lab, settings.model_copy(update={"inventory": lab.inventory_path}), sizes, args.repeat, fanouts))
    finally:
        lab.down()


if __name__ == "__main__":
    main()
