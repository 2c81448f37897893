"""A watchdog on the running event loop: any stretch over ``limit_s`` in which the loop did not come back
to its scheduler (a blocking database call, a long regex, a synchronous sleep) is recorded with the
stack the loop thread was in, sampled from a second thread while it was stuck.

A stretch in which the loop thread neither ran (its CPU time hardly moved) nor could be sampled (no
thread of the process ran) is the machine starving the process, not the loop being held: it is kept
in ``starved``, not failed on. A thread blocked in a call shows in its sample; one computing, in its CPU time.

The fixture ``loop_watchdog`` (tests/conftest.py) arms it for a test and fails the test on any stall;
``tests.servicekit.served`` watches from the moment the service has started until it stops, so the
test's own setup (creating a database) is not counted, only the service: its handlers, its workers,
the restarts it runs. A test without the service calls ``watching()`` around the code to watch.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import traceback
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

LIMIT_S = 0.1
TICK_S = 0.005
# Where a loop thread waits for I/O: a sample there means the OS, not our code, kept the loop from running.
IDLE = ("select", "poll", "_run_once")


@dataclass
class Stall:
    lag_s: float
    stack: str

    def __str__(self) -> str:
        return f"the event loop was held {self.lag_s * 1000:.0f} ms, in:\n{self.stack}"


@dataclass
class LoopWatchdog:
    limit_s: float = LIMIT_S
    stalls: list[Stall] = field(default_factory=list)
    starved: list[float] = field(default_factory=list)
    worst_s: float = 0.0
    _beat: float = 0.0
    _cpu: float = 0.0
    _sample: str | None = None
    _loop_thread: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _task: asyncio.Task[None] | None = None
    _thread: threading.Thread | None = None

    @asynccontextmanager
    async def watching(self) -> AsyncIterator[LoopWatchdog]:
        """Watch the loop inside the block (nested blocks watch once)."""
        if self._task is not None:
            yield self
            return
        await self.start()
        try:
            yield self
        finally:
            await self.stop()

    async def start(self) -> LoopWatchdog:
        self._stop = threading.Event()
        self._loop_thread = threading.get_ident()
        self._beat, self._cpu = time.monotonic(), time.thread_time()
        self._task = asyncio.create_task(self._tick(), name="loop-watchdog")
        self._thread = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)
        self._thread.start()
        return self

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._thread is not None:
            self._thread.join()
        self._task = self._thread = None

    def problems(self) -> str:
        return "\n\n".join(str(s) for s in self.stalls)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            now, cpu = time.monotonic(), time.thread_time()
            lag = now - self._beat - TICK_S
            if lag > self.limit_s:
                ran = cpu - self._cpu  # the loop thread's own CPU time over the stretch
                if self._sample is None and ran < self.limit_s / 2:
                    self.starved.append(lag)
                elif not _idle(self._sample or ""):
                    self.worst_s = max(self.worst_s, lag)
                    self.stalls.append(Stall(lag, self._sample or f"(no sample: the loop thread computed {ran * 1000:.0f} ms "
                                                                  "holding the GIL)"))
            else:
                self.worst_s = max(self.worst_s, lag)
            self._beat, self._cpu, self._sample = now, cpu, None

    def _watch(self) -> None:
        """From outside the loop: while the loop is late by half the limit, keep its thread's stack."""
        while not self._stop.wait(self.limit_s / 4):
            if self._sample is None and time.monotonic() - self._beat > self.limit_s / 2:
                frame = sys._current_frames().get(self._loop_thread)
                if frame is not None:
                    self._sample = "".join(traceback.format_stack(frame, limit=25))


def _idle(stack: str) -> bool:
    """The sampled stack ends in the selector: the loop was waiting for I/O, only descheduled."""
    last = [line for line in stack.strip().splitlines() if line.lstrip().startswith("File ")]
    return bool(last) and any(f"in {name}" in last[-1] for name in IDLE)


ARMED: list[LoopWatchdog] = []  # the fixture's watchdog while a test runs (``served`` watches with it)


@asynccontextmanager
async def watching_if_armed() -> AsyncIterator[None]:
    """Watch the block with the armed watchdog, if the test asked for one."""
    if not ARMED:
        yield
        return
    async with ARMED[-1].watching():
        yield
