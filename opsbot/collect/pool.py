"""The service's transports, kept across probes: one connection per node, not one per probe.

``KeptPool`` holds a transport per node while it is used: one SSH connection per node at most,
closed after ``idle_s`` without a probe and opened again (host key verified again, as on every
connect) by the next one. Each probe sees the pool through a ``ProbeView``: inside one probe a node
that cannot be reached fails fast; the next probe tries it again. A node whose inventory entry
changed (address, port, key) gets a fresh transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from opsbot.collect.transport import LocalTransport, PooledTransport, SshTransport, _http_client
from opsbot.inventory import Node
from opsbot.settings import Settings


@dataclass
class _Entry:
    node: Node
    transport: PooledTransport
    used: float = field(default_factory=time.monotonic)


class KeptPool:
    def __init__(self, settings: Settings, idle_s: float) -> None:
        self.settings = settings
        self.idle_s = idle_s
        self._limit = asyncio.Semaphore(settings.max_fanout)
        self._client = _http_client()
        self._entries: dict[str, _Entry] = {}
        self._reaper: asyncio.Task[None] | None = None

    def view(self) -> ProbeView:
        return ProbeView(self)

    async def get(self, node: Node, *, fresh_attempt: bool) -> PooledTransport:
        entry = self._entries.get(node.name)
        if entry is not None and entry.node != node:  # the inventory changed this node
            await self._drop(node.name)
            entry = None
        if entry is None:
            inner = (LocalTransport(node, self.settings, self._client) if node.transport == "local"
                     else SshTransport(node, self.settings, self._client))
            entry = self._entries[node.name] = _Entry(node, PooledTransport(inner, self._limit))
        elif fresh_attempt and isinstance(entry.transport.inner, SshTransport):
            entry.transport.inner.forget_failure()
        entry.used = time.monotonic()
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.create_task(self._reap(), name="transport-pool-reaper")
        return entry.transport

    @property
    def open_connections(self) -> int:
        return sum(1 for e in self._entries.values()
                   if isinstance(e.transport.inner, SshTransport) and e.transport.inner.connected)

    async def _reap(self) -> None:
        """Close what no probe has used for ``idle_s``; stop once the pool is empty."""
        while self._entries:
            await asyncio.sleep(max(self.idle_s / 4, 0.05))
            now = time.monotonic()
            for name in [n for n, e in self._entries.items() if now - e.used > self.idle_s]:
                await self._drop(name)

    async def _drop(self, name: str) -> None:
        entry = self._entries.pop(name, None)
        if entry is not None:
            with contextlib.suppress(Exception):
                await entry.transport.inner.close()

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for name in list(self._entries):
            await self._drop(name)
        await self._client.aclose()


class ProbeView:
    """What one probe sees of the kept pool (``probe(pool=...)``): closing it keeps the connections."""

    def __init__(self, pool: KeptPool) -> None:
        self._pool = pool
        self._seen: set[str] = set()

    async def get(self, node: Node) -> PooledTransport:
        first = node.name not in self._seen
        self._seen.add(node.name)
        return await self._pool.get(node, fresh_attempt=first)

    async def close(self) -> None:
        """Nothing to close: the pool keeps its connections for the next probe."""
