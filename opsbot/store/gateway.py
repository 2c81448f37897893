"""``Gateway``: the transaction every aggregate's records go through, one place (record stage).

Each aggregate's reads and writes live in a mixin of its own (``ProbeRecords``, ``ActionRecords``, ...);
they all stand on this base, so each knows ``read`` and ``write`` by type, and ``Store`` joins them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Engine, any_, bindparam
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import InstrumentedAttribute, Session, sessionmaker

from opsbot.store.database import retrying

T = TypeVar("T")
NO_SYNC = {"synchronize_session": False}
"""For a bulk ``UPDATE`` of rows this session has not loaded: without it the ORM fetches every updated
id back (``RETURNING``) to refresh objects it does not hold (700 ids when a probe links its alerts)."""


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

    def _among(self, column: InstrumentedAttribute[Any], values: Sequence[Any]) -> ColumnElement[bool]:
        """``column IN values``; on PostgreSQL ``= ANY`` of one array parameter, so the statement is the same
        for any count: an ``IN`` of N parameters is a new statement per N, which psycopg splits in Python
        holding the GIL (the event loop's) and PostgreSQL prepares afresh (linking 700 ids: 22 -> 16 ms)."""
        if self.engine.dialect.name == "postgresql":
            return column == any_(bindparam(f"{column.key}_any", list(values), type_=ARRAY(column.type)))
        return column.in_(values)
