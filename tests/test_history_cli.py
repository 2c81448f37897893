"""``opsbot history`` and ``opsbot db`` as an operator runs them (subprocesses on a real SQLite file)."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import typer
from sqlalchemy import text

from opsbot.bundle import Bundle, utcnow
from opsbot.cli.history import parse_since
from opsbot.store import Store
from opsbot.store.database import head_revision

REPO = Path(__file__).resolve().parents[1]


def _opsbot(data_dir: Path, *args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPSBOT_DATA_DIR": str(data_dir), "PYTHONPATH": str(REPO), "COLUMNS": "250"}
    env.pop("OPSBOT_DATABASE_URL", None)
    if url:
        env["OPSBOT_DATABASE_URL"] = url
    return subprocess.run([sys.executable, "-m", "opsbot", *args], env=env, capture_output=True, text=True, timeout=60)


def _bundle(role: str) -> Bundle:
    ok = {"ok": True}
    return Bundle.model_validate({"cluster": "lab", "started_at": utcnow(), "finished_at": utcnow(), "roles": [
        {"role": role, "node": "node2", "unit": f"sglang-{role}.service", "systemd": ok, "metrics": ok,
         "health": ok, "logs": ok}]})


def test_history_filters_by_role_and_time(tmp_path):
    with Store(f"sqlite:///{tmp_path / 'opsbot.db'}") as store:
        decode = store.save_probe(_bundle("decode"))
        prefill = store.save_probe(_bundle("prefill"))
        store.audit("alice", "slack", "restart approved", {"action": "a1"}, cluster="lab", role="decode")
    out = _opsbot(tmp_path, "history", "--role", "decode", "--since", "1h")
    assert out.returncode == 0, out.stderr
    assert decode in out.stdout and prefill not in out.stdout
    assert "restart approved" in out.stdout and "alice via slack" in out.stdout
    everything = _opsbot(tmp_path, "history")
    assert decode in everything.stdout and prefill in everything.stdout


def test_history_rejects_a_bad_since(tmp_path):
    out = _opsbot(tmp_path, "history", "--since", "yesterday-ish")
    assert out.returncode == 2 and "write a duration such as 24h" in out.stderr


def test_parse_since():
    at = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)
    assert parse_since("24h", at) == at - timedelta(hours=24)
    assert parse_since("30m", at) == at - timedelta(minutes=30)
    assert parse_since("2026-11-29T09:00", at) == datetime(2026, 11, 29, 9, tzinfo=timezone.utc)
    with pytest.raises(typer.BadParameter):
        parse_since("soon", at)


def test_db_upgrade_and_refusal_of_a_newer_database(tmp_path):
    first = _opsbot(tmp_path, "db", "upgrade")
    assert first.returncode == 0 and f"(empty) -> {head_revision()}" in first.stdout
    with Store(f"sqlite:///{tmp_path / 'opsbot.db'}") as store, store.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffff0002'"))
    refused = _opsbot(tmp_path, "history")
    assert refused.returncode == 2 and "ffff0002" in refused.stderr and "Upgrade opsbot" in refused.stderr
    again = _opsbot(tmp_path, "db", "upgrade")
    assert again.returncode == 2 and "newer opsbot" in again.stderr


def test_db_url_that_does_not_connect(tmp_path):
    out = _opsbot(tmp_path, "db", "upgrade", url="postgresql://opsbot:hunter2@127.0.0.1:1/opsbot")
    assert out.returncode == 2 and "cannot connect to the database" in out.stderr
    assert "hunter2" not in out.stderr + out.stdout


def test_garbage_rows_are_printed_as_text(tmp_path):
    """An alert for a role that no longer exists and a reason holding rich markup: shown, not a crash."""
    from opsbot.store import AlertIn

    reason = "restart [/] [bold]now[/bold] [red"
    with Store(f"sqlite:///{tmp_path / 'opsbot.db'}") as store:
        ((alert_id, _),) = store.save_alerts([AlertIn(fingerprint="f00d", status="firing", labels={"alertname": "Gone"},
                                                      cluster="lab", role="retired-role")])
        store.alert_probe_failed([alert_id], "unknown role 'retired-role' [/]", max_attempts=1, final=True)
        action = store.create_action(kind="restart", cluster="lab", roles=["retired-role"], reason=reason,
                                     plan={"cluster": "lab", "roles": ["retired-role"], "kinds": ["decode"],
                                           "steps": [], "checks": ["[/] check"]},
                                     requested_by="[/]mallory", surface="cli", ttl=timedelta(minutes=5))
        store.transition(action.id, ("planned",), "refused", actor="[/]", surface="cli", what="restart dismissed",
                         outcome="dismissed [/] by [/]", execution=[{"kind": "stop", "role": "[/]"}])
    history = _opsbot(tmp_path, "history")
    assert history.returncode == 0, history.stderr
    assert "retired-role" in history.stdout and "probe failed: Gone" in history.stdout
    assert "[/]mallory" in history.stdout
    shown = _opsbot(tmp_path, "actions", "show", action.id)
    assert shown.returncode == 0, shown.stderr
    assert reason in shown.stdout and "dismissed [/] by [/]" in shown.stdout and "[/] check" in shown.stdout
