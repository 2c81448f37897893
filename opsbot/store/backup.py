"""Backups of opsbot's memory: SQLite through its online backup API; PostgreSQL through ``pg_dump``.

The online backup (``sqlite3.Connection.backup``, SQLite's ``sqlite3_backup_*``) copies a consistent
snapshot while ``opsbot serve`` keeps writing: with WAL a reader never blocks the writer, and one
backup step reads the whole database inside one read transaction. The copy is written beside its
destination and renamed into place, so a PATH is either the old file or the whole backup.
"""

from __future__ import annotations

import os
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from opsbot.store.database import StoreError, masked
from opsbot.store.exclusive import (
    hold_single_instance,
    release_single_instance,
    sqlite_file,
)


class BackupRefused(StoreError):
    """A backup or restore opsbot will not do: it says why and what to do instead."""


@dataclass(frozen=True)
class Copied:
    source: Path
    target: Path
    bytes: int
    seconds: float


def pg_dump_advice(url: str) -> str:
    """What to run for a PostgreSQL database (opsbot does not shell out to pg_dump: it needs the credentials)."""
    parsed = make_url(url)
    target = f"--host {parsed.host or 'localhost'} --port {parsed.port or 5432} --username {parsed.username or 'opsbot'}"
    return (f"{masked(url)} is PostgreSQL: back it up with pg_dump, which takes a consistent snapshot while "
            f"opsbot runs:\n  pg_dump {target} --format=custom --file opsbot.dump {parsed.database}\n"
            f"and restore into an empty database with\n  pg_restore {target} --dbname {parsed.database} "
            "--clean --if-exists opsbot.dump\n(the password from PGPASSWORD or ~/.pgpass, never the command line)")


def _sqlite_or_refuse(url: str) -> Path:
    db = sqlite_file(url)
    if db is None:
        raise BackupRefused(pg_dump_advice(url) if make_url(url).get_backend_name() == "postgresql"
                            else f"{masked(url)}: only a SQLite file or PostgreSQL can be backed up")
    return db


def _online_copy(source: sqlite3.Connection, target: Path) -> None:
    """Copy ``source`` into a fresh file beside ``target`` and rename it into place."""
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    partial.unlink(missing_ok=True)
    try:
        with closing(sqlite3.connect(partial)) as out:
            source.backup(out)  # pages=-1: the whole database in one step, one consistent snapshot
            out.execute("PRAGMA journal_mode = DELETE")  # one self-contained file, no -wal beside it
        with partial.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def backup(url: str, target: Path, *, force: bool = False) -> Copied:
    """An online backup of the SQLite database at ``url`` into ``target`` (refused if it exists, unless ``force``)."""
    db = _sqlite_or_refuse(url)
    if not db.is_file():
        raise BackupRefused(f"{db}: no database there to back up")
    if target.exists() and not force:
        raise BackupRefused(f"{target} exists: choose another path, or --force to replace it")
    if target.resolve() == db:
        raise BackupRefused(f"{target} is the database itself")
    started = time.monotonic()
    with closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as source:
        _online_copy(source, target)
    return Copied(db, target, target.stat().st_size, time.monotonic() - started)


def _opsbot_database(path: Path) -> None:
    """Refuse a file that is not a sound SQLite database written by opsbot."""
    if not path.is_file():
        raise BackupRefused(f"{path}: no such backup")
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            check = conn.execute("PRAGMA integrity_check").fetchone()[0]
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        raise BackupRefused(f"{path}: not a SQLite database ({exc})") from None
    if check != "ok":
        raise BackupRefused(f"{path}: damaged ({check})")
    if "alembic_version" not in tables:
        raise BackupRefused(f"{path}: not an opsbot database (no schema revision)")


def restore(url: str, source: Path) -> Copied:
    """Replace the SQLite database at ``url`` with the backup ``source``; refused while opsbot serve uses it."""
    db = _sqlite_or_refuse(url)
    _opsbot_database(source)
    lock = hold_single_instance(url)  # raises SecondInstance, naming the running serve
    try:
        started = time.monotonic()
        db.parent.mkdir(parents=True, exist_ok=True)
        with closing(sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True)) as backup_conn, \
                closing(sqlite3.connect(db)) as live:
            backup_conn.backup(live)  # through SQLite, so the live file's WAL and -shm stay coherent
        return Copied(source, db, db.stat().st_size, time.monotonic() - started)
    finally:
        release_single_instance(lock)
