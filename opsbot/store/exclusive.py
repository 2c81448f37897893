"""SQLite serves one ``opsbot serve`` at a time: a second live instance on the same file is refused.

The lock is ``flock`` on a file next to the database, held for the life of the service: the kernel
drops it when the process ends, however it ends (kill -9 too), so a crashed instance never blocks
the next start. Several instances need PostgreSQL, where the database itself coordinates them.
"""

from __future__ import annotations

import fcntl
import os
import socket
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy.engine import make_url

from opsbot.store.database import StoreError

_held: dict[Path, int] = {}  # lock file → open descriptor, for the locks this process holds


class SecondInstance(StoreError):
    """Another live opsbot serve holds this SQLite database."""


def sqlite_file(url: str) -> Path | None:
    """The database file of a ``sqlite:///`` URL; None for PostgreSQL or an in-memory database."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database).resolve()


def hold_single_instance(url: str) -> Path | None:
    """Take the SQLite file's instance lock (idempotent within this process); the lock file, or None
    when the database is not a SQLite file. Raises ``SecondInstance`` naming the holder."""
    db = sqlite_file(url)
    if db is None:
        return None
    lock = db.with_name(db.name + ".instance-lock")
    if lock in _held:
        return lock
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 512).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise SecondInstance(
            f"another opsbot serve is already using the SQLite database {db} ({holder}). SQLite supports one "
            "instance: stop that one first, or run several instances on PostgreSQL "
            "(OPSBOT_DATABASE_URL=postgresql://user:pass@host/db; see docs/operator.md 'Running more than one')."
        ) from None
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, since {started}\n".encode(), 0)
    _held[lock] = fd
    return lock


def release_single_instance(lock: Path | None) -> None:
    """Give the lock back (a clean shutdown); the file stays, its lock is what counts."""
    fd = _held.pop(lock, None) if lock is not None else None
    if fd is not None:
        os.close(fd)
