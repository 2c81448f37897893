"""Engines and schema: connect (SQLite pragmas, PostgreSQL via psycopg 3), upgrade, refuse newer schemas."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    NoSuchModuleError,
    OperationalError,
)

from opsbot.datafiles import data_dir

if TYPE_CHECKING:
    from alembic.config import Config

T = TypeVar("T")


class StoreError(RuntimeError):
    """The database cannot be used; the message says what to do."""


class StoreBusy(StoreError):
    """The database stayed locked through every retry."""


class SchemaTooNew(StoreError):
    """The database was migrated by a newer opsbot."""


def masked(url: str) -> str:
    """The URL with any password hidden, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable URL>"


def _normalise(url: str) -> str:
    """``postgresql://`` means psycopg 3 here (SQLAlchemy's default would be psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def make_engine(url: str, *, busy_timeout_ms: int = 5000, connect_timeout_s: int = 5) -> Engine:
    """An engine with opsbot's connection settings, or ``StoreError`` for a URL it cannot use."""
    url = _normalise(url)
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise StoreError(f"database URL is not valid ({exc}); set OPSBOT_DATABASE_URL to e.g. "
                         "postgresql://user:pass@host/db or sqlite:////path/opsbot.db") from exc
    backend = parsed.get_backend_name()
    kwargs: dict[str, Any] = {}
    if backend == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"timeout": busy_timeout_ms / 1000}
    elif backend == "postgresql":
        # a lock wait ends after the busy timeout (SQLSTATE 55P03), which ``retrying`` retries
        kwargs["connect_args"] = {"connect_timeout": connect_timeout_s,
                                  "options": f"-c lock_timeout={int(busy_timeout_ms)}"}
        kwargs["pool_pre_ping"] = True
    else:
        raise StoreError(f"unsupported database {backend!r} in {masked(url)}: use sqlite:/// or postgresql://")
    try:
        engine = create_engine(url, **kwargs)
    except (NoSuchModuleError, ImportError) as exc:
        raise StoreError(f"no driver for {masked(url)} ({exc}); install opsbot with psycopg[binary]") from exc
    if backend == "sqlite":
        _sqlite_events(engine, busy_timeout_ms)
    return engine


def _sqlite_events(engine: Engine, busy_timeout_ms: int) -> None:
    """WAL, foreign keys, busy timeout on every connection; BEGIN IMMEDIATE so writers queue, not fail."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def is_busy(exc: BaseException) -> bool:
    """A lock conflict worth retrying (SQLite locked/busy; PostgreSQL serialization, deadlock, lock wait)."""
    if not isinstance(exc, DBAPIError):
        return False
    if isinstance(exc, OperationalError) and any(
        s in str(exc.orig).lower() for s in ("database is locked", "database is busy", "database table is locked")
    ):
        return True
    return getattr(exc.orig, "sqlstate", None) in {"40001", "40P01", "55P03"}


def unavailable(exc: BaseException) -> bool:
    """The database cannot be reached or stays locked: a caller should answer "retry later" (503)."""
    return isinstance(exc, (StoreError, OperationalError)) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated)


def retrying(fn: Callable[[], T], *, attempts: int, first_delay_s: float, what: str) -> T:
    """Run ``fn``; on a lock conflict wait (doubling) and try again, then raise ``StoreBusy``."""
    delay = first_delay_s
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except DBAPIError as exc:
            if not is_busy(exc):
                raise
            if attempt == attempts:
                raise StoreBusy(
                    f"database is busy: {what} still locked after {attempts} attempts "
                    f"({exc.orig}); another process holds a write lock. Retry, or find the process "
                    "holding it (a long-running opsbot, an open sqlite3 shell)."
                ) from exc
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
    raise AssertionError("unreachable")


def alembic_config(url: str | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(data_dir("migrations")))
    if url:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revisions(engine: Engine) -> tuple[str, ...]:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return tuple(MigrationContext.configure(conn).get_current_heads())


def check_connect(engine: Engine) -> None:
    """Open one connection, turning driver errors into a message about the URL."""
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except DBAPIError as exc:
        if is_busy(exc):
            return
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        raise StoreError(
            f"cannot connect to the database {masked(str(engine.url))}: {reason}. "
            "Check OPSBOT_DATABASE_URL (host, port, user, password, database name) and that the server is up."
        ) from exc


def refuse_newer(engine: Engine) -> None:
    """Raise ``SchemaTooNew`` when the database carries a revision this opsbot does not know."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    known = {rev.revision for rev in script.walk_revisions()}
    unknown = [rev for rev in current_revisions(engine) if rev not in known]
    if unknown:
        raise SchemaTooNew(
            f"the database {masked(str(engine.url))} is at schema revision {', '.join(unknown)}, which this "
            f"opsbot does not know (newest known: {script.get_current_head()}); it was written by a newer "
            "opsbot. Upgrade opsbot (pip install -U opsbot) rather than using this version with it."
        )


def upgrade(engine: Engine, *, attempts: int = 8) -> str:
    """Bring the schema to head in one transaction (safe when two processes open at once); the head."""
    check_connect(engine)
    head = _plain_head()
    if head is not None and _stamped(engine) == (head,):
        return head  # at head already: no migration, so alembic is not even imported
    from alembic import command

    refuse_newer(engine)

    def _run() -> None:
        with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(7402133)"))  # one migrator at a time
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    retrying(_run, attempts=attempts, first_delay_s=0.05, what="schema upgrade")
    return head_revision()


_ASSIGNED = re.compile(r"^(revision|down_revision)\b[^=\n]*=\s*(?:'([^']*)'|\"([^\"]*)\"|None)\s*$", re.M)


def _plain_head() -> str | None:
    """The newest revision, read from the migration files as text; None when that is not clear-cut.

    Clear-cut means every file names its revision and one parent (or none) and exactly one revision
    is no one's parent; anything else (a merge, an odd file) is left to alembic.
    """
    revisions, parents = set(), set()
    for path in (data_dir("migrations") / "versions").glob("*.py"):
        found = {m.group(1): m.group(2) or m.group(3) for m in _ASSIGNED.finditer(path.read_text(encoding="utf-8"))}
        if not found.get("revision") or "down_revision" not in found:
            return None
        revisions.add(found["revision"])
        if found["down_revision"]:
            parents.add(found["down_revision"])
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def _stamped(engine: Engine) -> tuple[str, ...] | None:
    """The revisions in the database's ``alembic_version`` table; None when it cannot be read."""
    try:
        with engine.connect() as conn:
            return tuple(row[0] for row in conn.execute(text("SELECT version_num FROM alembic_version")))
    except DBAPIError:
        return None
