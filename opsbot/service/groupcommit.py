"""Group commit for the alert intake: the webhook calls that arrive while one write is in flight
share the next transaction.

Every call still gets its 200 only after its alerts are committed (the durable write before the
answer stays); what changes is that N concurrent calls cost one transaction and one hop to a worker
thread instead of N. A batch that fails for any reason but the database being away is written again
call by call, so one bad notification fails alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from opsbot.store import AlertIn
from opsbot.store.database import unavailable

log = logging.getLogger(__name__)

SaveFn = Callable[[list[AlertIn]], list[tuple[int, bool]]]
"""``Store.save_alerts`` bound to its claimer: rows in, (id, new) per row out, one transaction."""


@dataclass
class _Call:
    rows: list[AlertIn]
    done: asyncio.Future[list[tuple[int, bool]]] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class GroupCommit:
    def __init__(self, save: SaveFn, run_in_thread: Callable[..., Awaitable[list[tuple[int, bool]]]],
                 max_rows: int = 2000) -> None:
        self._save = save
        self._in_thread = run_in_thread
        self._max_rows = max_rows
        self._queue: list[_Call] = []
        self._writer: asyncio.Task[None] | None = None

    async def save(self, rows: list[AlertIn]) -> list[tuple[int, bool]]:
        """Store ``rows`` in the next shared transaction; returns once it is committed (or raises its error)."""
        call = _Call(rows)
        self._queue.append(call)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_all(), name="alert-group-commit")
        return await call.done

    async def _write_all(self) -> None:
        while self._queue:
            batch: list[_Call] = []
            size = 0
            while self._queue and (not batch or size + len(self._queue[0].rows) <= self._max_rows):
                call = self._queue.pop(0)
                batch.append(call)
                size += len(call.rows)
            await self._write(batch)

    async def _write(self, batch: list[_Call]) -> None:
        try:
            results = await self._in_thread(self._save, [r for c in batch for r in c.rows])
        except Exception as exc:
            if len(batch) > 1 and not unavailable(exc):
                log.warning("a shared alert write failed (%s); writing its %d calls one by one", exc, len(batch))
                for call in batch:
                    await self._write([call])
                return
            for call in batch:
                if not call.done.done():
                    call.done.set_exception(exc)
            return
        at = 0
        for call in batch:
            if not call.done.done():
                call.done.set_result(results[at:at + len(call.rows)])
            at += len(call.rows)
