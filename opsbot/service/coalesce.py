"""At most one run per key at a time; work submitted meanwhile joins the next run.

The shape of Alertmanager's aggregation groups: the first submission for a key opens a window,
everything submitted before the window closes rides along, and submissions that arrive while a
run is in progress are collected for one follow-up run (never one run each).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

log = logging.getLogger(__name__)


class Coalescer(Generic[K, T]):
    def __init__(self, run: Callable[[K, list[T]], Awaitable[None]], window_s: float) -> None:
        self._run = run
        self._window_s = window_s
        self._pending: dict[K, list[T]] = {}
        self._drivers: dict[K, asyncio.Task[None]] = {}
        self.started: dict[K, int] = {}

    def submit(self, key: K, items: list[T]) -> None:
        self._pending.setdefault(key, []).extend(items)
        if key not in self._drivers:
            self._drivers[key] = asyncio.create_task(self._drive(key), name=f"coalesce:{key}")

    async def _drive(self, key: K) -> None:
        try:
            while key in self._pending:
                await asyncio.sleep(self._window_s)
                items = self._pending.pop(key)
                self.started[key] = self.started.get(key, 0) + 1
                try:
                    await self._run(key, items)
                except Exception:  # one failed run must not stop the key's later runs
                    log.exception("run for %s failed", key)
        finally:
            del self._drivers[key]

    @property
    def busy(self) -> int:
        return len(self._drivers)

    async def drain(self) -> None:
        """Wait until nothing is pending or running (tests, shutdown)."""
        while self._drivers:
            await asyncio.gather(*list(self._drivers.values()), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._drivers.values()):
            task.cancel()
        await asyncio.gather(*list(self._drivers.values()), return_exceptions=True)
