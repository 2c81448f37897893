"""This instance's lease on what it claims: a heartbeat in the store, then a sweep, every few seconds.

Claims on shared rows (stored alerts waiting for a probe) are held by a live instance: one whose
heartbeat (``instances`` table) is younger than ``OPSBOT_INSTANCE_LEASE_S``. After each heartbeat
the sweeps run: each claims what nobody live holds (left by an instance that was killed, or a
probe to retry) and hands it on. So a crash is repaired within a lease and a heartbeat, on SQLite
and PostgreSQL alike, by whichever instance is up, not only at the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)

Sweep = Callable[[], Awaitable[int]]


class Lease:
    def __init__(self, flow: Any, sweeps: list[Sweep]) -> None:
        self.flow = flow
        self.sweeps = sweeps
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Register this instance, sweep once (what a crash left), then keep beating."""
        await self._beat()
        await self._sweep()
        self._task = asyncio.create_task(self._run(), name="opsbot-lease")

    async def stop(self) -> None:
        """Stop beating and leave: whatever this instance still held is free for the others at once."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(Exception):
            await self.flow.db(self.flow.store.leave, self.flow.instance)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.flow.settings.instance_heartbeat_s)
            try:
                await self._beat()
                await self._sweep()
            except Exception as exc:  # a database that is down for a while must not stop the beat
                log.warning("lease heartbeat or sweep failed (retrying): %s", exc)

    async def _beat(self) -> None:
        await self.flow.db(self.flow.store.heartbeat, self.flow.instance, socket.gethostname(), os.getpid())

    async def _sweep(self) -> None:
        for sweep in self.sweeps:
            taken = await sweep()
            if taken:  # after a crash (or a failed probe's retry, or an orphaned weekly report): worth a line in any log
                log.warning("%s took over %d things no live instance held", getattr(sweep, "__name__", "a sweep"), taken)
