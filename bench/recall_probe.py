"""The recall probe's overhead beyond the server's own prefill time, for the default grid.

    opsbot lab up && .venv/bin/python bench/recall_probe.py [--repeat 3]

The emulator reports what its prefill spent (``/v1/loads`` → ``total_prefill_busy_us``, as SGLang's
load snapshot does); the overhead is the wall time of the grid minus that. Rows, in the same run:

(a) bare: the same grid's prompts fitted beforehand, sent through the router at the same concurrency,
    with no model lookup, no tokenizing and no queue reads: the floor of router + emulator + SSH;
(b) ``opsbot.collect.recall.run_recall``: model lookup, exact-length fitting through ``/v1/tokenize``,
    a prefill-queue reading before each request, the requests, judging.
Goal: (b) under 5 % over the prefill time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time

from rich.console import Console
from rich.table import Table

from opsbot.collect.openai import Router
from opsbot.collect.recall import RecallPlan, ask, choose_model, fit_group, plan_from, run_recall, tokenizer_for
from opsbot.collect.transport import Transport, TransportPool
from opsbot.inventory import Cluster, load_inventory
from opsbot.settings import get_settings

console = Console()


async def busy_us(cl: Cluster, transports: dict[str, Transport]) -> int:
    """Prefill time spent so far, summed over the prefill roles' ``/v1/loads``."""
    total = 0
    for role in (r for r in cl.roles if r.role == "prefill"):
        base = role.api_base
        r = await transports[role.node].http_get(f"{base}/v1/loads", 10, direct=not role.http_via_ssh)
        total += sum(int(rank.get("total_prefill_busy_us", 0)) for rank in json.loads(r.body)["loads"])
    return total


async def bare(cl: Cluster, transports: dict[str, Transport], plan: RecallPlan) -> float:
    """(a): prompts fitted first (untimed), then only the requests, ``plan.concurrency`` at a time."""
    role = cl.router()
    assert role is not None
    router = Router(transports[role.node], role, 10)
    model = await choose_model(router, cl.model)
    tok = tokenizer_for(router, model)
    rng = random.Random(1)
    cases = [c for n in plan.lengths for f in plan.fillers
             for c in await fit_group(tok, n, f, plan.depths, plan.distractors, rng)]
    slots = asyncio.Semaphore(plan.concurrency)

    async def one(case) -> None:
        async with slots:
            await ask(router, model, case, plan)

    t0 = time.perf_counter()
    await asyncio.gather(*(one(c) for c in cases))
    return time.perf_counter() - t0


async def probe_run(cl: Cluster, transports: dict[str, Transport], plan: RecallPlan) -> float:
    """(b): the whole recall run, as ``opsbot recall`` does it before probing the roles."""
    t0 = time.perf_counter()
    recall = await run_recall(cl, transports, plan, timeout_s=10)
    wall = time.perf_counter() - t0
    bad = [c for c in recall.cases if c.error]
    assert not bad, bad[0].error
    return wall


async def measure(repeat: int) -> list[tuple[str, list[float], list[float]]]:
    s = get_settings()
    inv = load_inventory(s.inventory_path())
    _name, cl = inv.cluster(s.cluster)
    plan = plan_from(s)
    rows: dict[str, tuple[list[float], list[float]]] = {"(a) bare requests": ([], []), "(b) opsbot recall": ([], [])}
    async with TransportPool(s) as pool:
        transports: dict[str, Transport] = {n.name: await pool.get(n) for n in cl.nodes}
        await run_recall(cl, transports, RecallPlan(lengths=(1024,), depths=(0.5,)), timeout_s=10)  # warm: forwards
        for _ in range(repeat):
            for name, fn in (("(a) bare requests", bare), ("(b) opsbot recall", probe_run)):
                before = await busy_us(cl, transports)
                wall = await fn(cl, transports, plan)
                spent = (await busy_us(cl, transports) - before) / 1e6
                rows[name][0].append(wall)
                rows[name][1].append(spent)
    return [(name, walls, spent) for name, (walls, spent) in rows.items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    plan = plan_from(get_settings())
    console.print(f"default grid: {plan.cases()} requests, {plan.cost_tokens():,} prompt tokens, "
                  f"concurrency {plan.concurrency}; {args.repeat} runs each (median)")
    table = Table("what", "wall s", "prefill spent s", "overhead s", "overhead %")
    for name, walls, spent in asyncio.run(measure(args.repeat)):
        wall, busy = statistics.median(walls), statistics.median(spent)
        over = wall - busy
        table.add_row(name, f"{wall:.2f}", f"{busy:.2f}", f"{over:.2f}", f"{100 * over / busy:.1f}")
    console.print(table)


if __name__ == "__main__":
    main()
