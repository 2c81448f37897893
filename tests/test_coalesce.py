"""The coalescer: one run per key at a time; work that arrives meanwhile rides one follow-up run."""

from __future__ import annotations

import asyncio

from opsbot.service.coalesce import Coalescer


async def test_one_run_at_a_time_per_key_and_one_follow_up():
    running: dict[str, int] = {}
    peak: dict[str, int] = {}
    runs: list[tuple[str, list[int]]] = []
    release = asyncio.Event()

    async def run(key: str, items: list[int]) -> None:
        running[key] = running.get(key, 0) + 1
        peak[key] = max(peak.get(key, 0), running[key])
        runs.append((key, items))
        await release.wait()
        running[key] -= 1

    c: Coalescer[str, int] = Coalescer(run, window_s=0.05)
    for i in range(5):
        c.submit("decode", [i])
    c.submit("prefill", [100])
    await asyncio.sleep(0.15)  # the window closed: the first runs are in progress
    for i in range(5, 50):
        c.submit("decode", [i])  # all of these wait for one follow-up run
    release.set()
    await c.drain()
    decode = [items for key, items in runs if key == "decode"]
    assert decode == [[0, 1, 2, 3, 4], list(range(5, 50))]
    assert [items for key, items in runs if key == "prefill"] == [[100]]
    assert peak == {"decode": 1, "prefill": 1} and c.started == {"decode": 2, "prefill": 1}


async def test_a_failed_run_does_not_stop_later_runs():
    seen: list[list[int]] = []

    async def run(key: str, items: list[int]) -> None:
        seen.append(items)
        if items == [1]:
            raise RuntimeError("probe failed")

    c: Coalescer[str, int] = Coalescer(run, window_s=0.01)
    c.submit("k", [1])
    await c.drain()
    c.submit("k", [2])
    await c.drain()
    assert seen == [[1], [2]]
