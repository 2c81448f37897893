"""The loop watchdog (tests/loopwatch.py) catches what holds the event loop: a blocking call, with the
stack it was in, and a computation; a loop only waiting is no stall."""

from __future__ import annotations

import asyncio
import time

from tests.loopwatch import LoopWatchdog


def _blocking_store_call() -> None:
    time.sleep(0.25)


async def test_a_blocking_call_and_a_computation_are_caught_with_their_stack():
    async with LoopWatchdog().watching() as watchdog:
        await asyncio.sleep(0.05)
        _blocking_store_call()
        await asyncio.sleep(0.05)
        end = time.thread_time() + 0.25
        while time.thread_time() < end:
            pass
        await asyncio.sleep(0.05)
    assert len(watchdog.stalls) == 2, watchdog.problems()
    assert "_blocking_store_call" in watchdog.stalls[0].stack and watchdog.stalls[0].lag_s >= 0.2
    assert "test_a_blocking_call" in watchdog.stalls[1].stack


async def test_waiting_is_not_a_stall():
    async with LoopWatchdog().watching() as watchdog:
        await asyncio.sleep(0.5)
        await asyncio.to_thread(time.sleep, 0.3)  # blocking, but in a thread
    assert watchdog.stalls == [] and watchdog.worst_s < 0.1
