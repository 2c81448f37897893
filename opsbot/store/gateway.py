"""``Gateway``: the transaction every aggregate's records go through, one place (record stage).

Each aggregate's reads and writes live in a mixin of its own (``ProbeRecords``, ``ActionRecords``, ...);
they all stand on this base, so each knows ``read`` and ``write`` by type, and ``Store`` joins them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from opsbot.store.database import retrying

T = TypeVar("T")


class Gateway:
    """One transaction per logical write, retried while the database is busy."""

    engine: Engine
    attempts: int
    _sessions: sessionmaker[Session]

    def write(self, fn: Callable[[Session], T], what: str = "write") -> T:
        """Run ``fn`` in one transaction: all of it commits or none; retried while busy."""

        def _once() -> T:
            with self._sessions.begin() as session:
                return fn(session)

        return retrying(_once, attempts=self.attempts, first_delay_s=0.05, what=what)

    def read(self, fn: Callable[[Session], T]) -> T:
        return self.write(fn, "read")
