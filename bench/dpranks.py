"""DP ranks and output fidelity on a lab of its own: what the per-rank canary costs a probe, and how often the
fidelity probe cries wolf on a healthy lab.

    python bench/dpranks.py [--probes 8] [--fidelity-runs 200]     # root, systemd-nspawn, the lab rootfs

(a) probe wall time of the whole lab (decode with two DP-attention ranks), alternating the inventory's decode
    ``dp_size: 2`` (a canary pinned to each rank) with ``dp_size: 1`` (none): the median of each and the ratio;
(b) ``opsbot fidelity``: a baseline recorded on the healthy lab, then N fidelity runs compared with it, each run
    diagnosed with one real probe of the lab beside it: how many runs name output-corruption (false alarms) and
    how many answers diverged; the largest logprob distance seen against the tolerance.
The figures are written down in bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console

from opsbot.collect import fidelity
from opsbot.collect.probe import probe
from opsbot.diagnose import default_runbooks, diagnose
from opsbot.inventory import Inventory
from opsbot.lab.nodes import Lab, isolated_settings
from opsbot.parse.fidelity import LOGPROB_FLOOR

console = Console()


def without_ranks(inv: Inventory) -> Inventory:
    data = inv.model_dump()
    for cl in data["clusters"].values():
        for r in cl["roles"]:
            r["dp_size"] = 1
    return Inventory.model_validate(data)


async def probe_costs(lab: Lab, n: int) -> tuple[list[float], list[float]]:
    settings = lab.settings.model_copy(update={"metrics_window_s": 3.0})
    plain = without_ranks(lab.inventory)
    on, off = [], []
    for i in range(2 * n):
        inv = lab.inventory if i % 2 == 0 else plain
        t0 = time.perf_counter()
        bundle = await probe(inv, settings=settings)
        (on if i % 2 == 0 else off).append(time.perf_counter() - t0)
        decode = bundle.role("decode")
        assert decode is not None and (decode.ranks is not None) == (i % 2 == 0)
        if decode.ranks:
            assert all(r.canary and r.canary.ok for r in decode.ranks), decode.ranks
    return on, off


async def false_alarms(lab: Lab, runs: int) -> dict[str, float]:
    settings = lab.settings
    base = await fidelity.record(lab.inventory, cluster=None, settings=settings, repeats=3)
    beside = await probe(lab.inventory, settings=settings)
    rb = default_runbooks()
    alarms = diverged = answers = 0
    worst = 0.0
    t0 = time.perf_counter()
    for _ in range(runs):
        run = await fidelity.judge(lab.inventory, cluster=None, settings=settings, baseline=base)
        assert run.refused is None
        answers += len(run.cases)
        diverged += sum(1 for c in run.cases if c.diverged)
        worst = max([worst] + [c.logprob_distance for c in run.cases if c.logprob_distance is not None])
        bundle = beside.model_copy(update={"fidelity": run})
        alarms += any(f.incident == "output-corruption" for f in diagnose(bundle, rb).findings)
    spread = max(p.spread for p in base.prompts.values())
    return {"runs": runs, "alarms": alarms, "answers": answers, "diverged": diverged, "worst": worst,
            "spread": spread, "tolerance": max(p.tolerance for p in base.prompts.values()),
            "floor": LOGPROB_FLOOR, "seconds": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probes", type=int, default=8, help="probes of each kind")
    ap.add_argument("--fidelity-runs", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="opsbot-bench-dpranks-") as tmp:
        lab = Lab(isolated_settings(Path(tmp)))
        with console.status("booting a lab of two nodes ...") as status:
            lab.up(2, step=lambda s: status.update(s))
        try:
            lab.reset()
            time.sleep(2.0)
            on, off = asyncio.run(probe_costs(lab, args.probes))
            m_on, m_off = statistics.median(on), statistics.median(off)
            console.print(f"(a) probe wall time, median of {args.probes}: with rank canaries {m_on:.3f} s, without "
                          f"{m_off:.3f} s: +{(m_on / m_off - 1) * 100:.1f}% (min {min(on):.3f} / {min(off):.3f} s)")
            f = asyncio.run(false_alarms(lab, args.fidelity_runs))
            console.print(f"(b) fidelity on the healthy lab: {f['alarms']} false alarm(s) in {f['runs']} runs "
                          f"({f['answers']} answers, {f['diverged']} diverged); largest logprob distance "
                          f"{f['worst']:.4f} nats, recorded spread {f['spread']:.4f}, tolerance {f['tolerance']:.3f}; "
                          f"{f['seconds'] / f['runs']:.2f} s per run")
        finally:
            lab.down()


if __name__ == "__main__":
    main()
