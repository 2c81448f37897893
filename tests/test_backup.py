"""``opsbot db backup`` / ``restore``: SQLite's online backup of a running service under alert load, restored whole.

A real ``opsbot serve`` on a SQLite file takes an alert storm (4 clients); ``opsbot db backup`` (a real process)
runs in the middle of it; the backup restored into a fresh data directory holds every alert the service had
acknowledged before the backup started. Bad input: an existing PATH (refused unless --force), a file that is
not an opsbot database, PostgreSQL (pg_dump advice), a restore while serve holds the database.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from opsbot.cli import app
from opsbot.settings import get_settings
from tests.serveproc import ALERT_TOKEN, Serve
from tests.test_instances_bad_input import INVENTORY, webhook


def opsbot(*args: str, data_dir: Path, url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPSBOT_DATA_DIR": str(data_dir)}
    env.pop("OPSBOT_DATABASE_URL", None)
    if url:
        env["OPSBOT_DATABASE_URL"] = url
    return subprocess.run([sys.executable, "-m", "opsbot", *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(INVENTORY)
    return path


def test_a_backup_taken_under_alert_load_restores_every_alert_accepted_before_it(tmp_path, inventory):
    db = tmp_path / "serve" / "opsbot.db"
    url = f"sqlite:///{db}"
    service = Serve(tmp_path, "serve", url, inventory, OPSBOT_COALESCE_WINDOW_S="0.5").start().wait_ready()
    acked: list[tuple[float, str]] = []
    stop = threading.Event()
    numbers = itertools.count()

    def storm() -> None:
        with httpx.Client(headers={"X-Opsbot-Alert-Token": ALERT_TOKEN}, timeout=30) as client:
            while not stop.is_set():
                n = next(numbers)
                r = client.post(f"{service.url}/alerts", json=webhook(n, ("prefill", "decode")[n % 2]))
                if r.status_code == 200:
                    acked.append((time.monotonic(), f"bad{n:012x}"))

    workers = [threading.Thread(target=storm) for _ in range(4)]
    try:
        for w in workers:
            w.start()
        time.sleep(2.0)
        started = time.monotonic()
        taken = opsbot("db", "backup", str(tmp_path / "backup.db"), data_dir=tmp_path / "serve", url=url)
        finished = time.monotonic()
        time.sleep(0.5)
    finally:
        stop.set()
        for w in workers:
            w.join(60)
        service.stop()
    assert taken.returncode == 0, taken.stderr
    before = {fp for at, fp in acked if at < started}
    during = [fp for at, fp in acked if started <= at <= finished]
    assert len(before) > 50 and len(acked) > len(before), (len(before), len(acked))

    restored_dir = tmp_path / "restored"
    result = opsbot("db", "restore", str(tmp_path / "backup.db"), data_dir=restored_dir)
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(restored_dir / "opsbot.db") as conn:
        kept = {row[0] for row in conn.execute("SELECT fingerprint FROM alerts")}
    assert before <= kept, f"{len(before - kept)} accepted alerts missing from the restored backup"
    print(f"\nbackup under load: {len(before)} alerts before, {len(during)} acknowledged during the "
          f"{finished - started:.2f} s backup command, {len(kept)} in the backup")


@pytest.fixture
def cli(monkeypatch):
    """``opsbot`` in this process (typer's runner) with its own data dir and database URL per call."""
    runner = CliRunner()

    def invoke(*args: str, data_dir: Path, url: str | None = None):
        monkeypatch.setenv("OPSBOT_DATA_DIR", str(data_dir))
        if url:
            monkeypatch.setenv("OPSBOT_DATABASE_URL", url)
        else:
            monkeypatch.delenv("OPSBOT_DATABASE_URL", raising=False)
        get_settings.cache_clear()
        return runner.invoke(app, list(args))

    yield invoke
    get_settings.cache_clear()


def test_bad_input_is_refused_with_what_to_do(tmp_path, inventory, cli):
    data = tmp_path / "data"
    assert cli("db", "upgrade", data_dir=data).exit_code == 0
    target = tmp_path / "b.db"
    assert cli("db", "backup", str(target), data_dir=data).exit_code == 0
    again = cli("db", "backup", str(target), data_dir=data)
    assert again.exit_code == 2 and "exists" in again.output and "--force" in again.output
    assert cli("db", "backup", str(target), "--force", data_dir=data).exit_code == 0

    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    refused = cli("db", "restore", str(junk), data_dir=tmp_path / "other")
    assert refused.exit_code == 2 and "not a SQLite database" in refused.output
    plain = tmp_path / "plain.db"
    sqlite3.connect(plain).execute("CREATE TABLE t (x)").connection.commit()
    refused = cli("db", "restore", str(plain), data_dir=tmp_path / "other")
    assert refused.exit_code == 2 and "not an opsbot database" in refused.output

    pg = cli("db", "backup", str(tmp_path / "x.dump"), data_dir=data, url="postgresql://op:s3cretpw@db.internal/ops")
    assert pg.exit_code == 2 and "pg_dump --host db.internal" in pg.output and "s3cretpw" not in pg.output

    service = Serve(tmp_path, "live", f"sqlite:///{tmp_path / 'live' / 'opsbot.db'}", inventory).start().wait_ready()
    try:
        busy = opsbot("db", "restore", str(target), data_dir=tmp_path / "live")  # another process: the lock is per process
    finally:
        service.stop()
    assert busy.returncode == 2 and "another opsbot serve is already using" in busy.stderr
