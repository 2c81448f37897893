"""Real databases for tests: a throw-away PostgreSQL cluster (Debian's server) and SQLite files.

``PostgresServer`` runs ``initdb``/``pg_ctl`` as the ``postgres`` user in a temporary directory on a
free 127.0.0.1 port; ``fresh_database()`` hands each test its own empty database. The fixtures that
use it live in tests/conftest.py (``postgres_server``, ``database_url``).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

PG_BIN = Path(os.environ.get("OPSBOT_PG_BIN", "/usr/lib/postgresql/15/bin"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresUnavailable(RuntimeError):
    """The server could not be started here; the message says why."""


class PostgresServer:
    """A private PostgreSQL cluster for one test session."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="opsbot-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "server.log"

    @staticmethod
    def why_not() -> str | None:
        if not (PG_BIN / "initdb").exists():
            return f"PostgreSQL server binaries not found in {PG_BIN} (apt-get install postgresql)"
        if os.geteuid() != 0:
            return "starting PostgreSQL as the postgres user needs root"
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "no postgres user (apt-get install postgresql)"
        if shutil.which("runuser") is None:
            return "runuser not found"
        return None

    def _as_postgres(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["runuser", "-u", "postgres", "--", *argv], capture_output=True, text=True,
                              timeout=timeout, check=False)

    def start(self) -> None:
        why = self.why_not()
        if why:
            raise PostgresUnavailable(why)
        shutil.chown(self.dir, "postgres", "postgres")
        os.chmod(self.dir, 0o700)
        init = self._as_postgres(str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                                 "--no-sync", "-E", "UTF8")
        if init.returncode != 0:
            raise PostgresUnavailable(f"initdb failed: {init.stderr.strip()[-500:]}")
        try:
            self.resume()
        except PostgresUnavailable as exc:
            log = self.log.read_text(errors="replace")[-800:] if self.log.exists() else ""
            raise PostgresUnavailable(f"{exc} {log}") from exc

    def pause(self) -> None:
        """Stop the server and keep its data: clients see connections refused until ``resume``."""
        self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        opts = f"-c listen_addresses=127.0.0.1 -c port={self.port} -k {self.dir} -c fsync=off -c max_connections=200"
        up = self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", opts,
                               "-w", "-t", "60", "start")
        if up.returncode != 0:
            raise PostgresUnavailable(f"pg_ctl start failed: {up.stderr.strip()}")

    def stop(self) -> None:
        if self.data.exists():
            self._as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def fresh_database(self) -> str:
        """Create an empty database and return its SQLAlchemy URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


# -- pytest fixtures (imported by tests/conftest.py) ---------------------------------------------

import pytest  # noqa: E402

from tests.realparts import need  # noqa: E402


@pytest.fixture(scope="session")
def postgres_server():
    """A running PostgreSQL server for the session; skipped locally, a failure under CI=true."""
    why = PostgresServer.why_not()
    need(why is None, why or "")
    server = PostgresServer()
    try:
        server.start()
    except PostgresUnavailable as exc:
        server.stop()
        need(False, str(exc))
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path) -> str:
    """An empty database per test: a SQLite file, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'opsbot.db'}"
    return request.getfixturevalue("postgres_server").fresh_database()
