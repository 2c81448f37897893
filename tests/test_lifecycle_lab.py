"""The incident and restart-plan lifecycles on the lab, end to end with the real alert chain (issue 22's walk):
decode wedged, an operator asks, the alert opens the incident and asks approval for a restart; the operator
restarts decode by hand (`opsbot restart`, another process); the incident resolves with its time to recovery,
the asked plan is superseded, and a stale click or `POST /actions/ID/approve` on it is refused, audited, and
restarts nothing (decode's main PID on the node stays); the next break is a new incident. The same walk
through the REST approve runs first. One game day (tests/gameday.py: real Prometheus, Alertmanager, `opsbot serve`, the
Slack recorder) for the module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.gameday import REPO, GameDay, GameDayError, _restart_plan, alerted_by, wait

pytestmark = [pytest.mark.lab, pytest.mark.integration]


@pytest.fixture(scope="module")
def gameday(lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GameDay]:
    lab.reset()
    day = GameDay(lab, tmp_path_factory.mktemp("lifecycle"))
    try:
        day.start().quiet()
        yield day
    finally:
        day.stop()
        lab.reset()


def _opsbot(day: GameDay, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """The CLI an operator runs beside the service (same database, inventory and settings)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), **day.environment(), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "opsbot", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _decode_pid(day: GameDay) -> str:
    """decode's unit on its node: MainPID (a restart changes it) and NRestarts, as systemd says."""
    role = next(r for r in day.lab.plan().roles if r.kind == "decode")
    out = day.lab.ssh(role.node, ["systemctl", "show", "-p", "MainPID", "-p", "NRestarts", role.unit]).stdout
    assert "MainPID=" in out and "MainPID=0" not in out, out
    return out.strip()


def _asked(day: GameDay, incident: str, since: float) -> tuple[Any, str, str]:
    """The open incident of ``incident`` opened after ``since``, its message's ts and the plan its button approves."""
    assert day.store is not None
    wait(f"{incident}: its alert firing in Prometheus", lambda: [
        a for a in day.prometheus_alerts() if a.get("state") == "firing"
        and a.get("labels", {}).get("incident") in alerted_by(incident)], 90, 0.2)
    try:
        row = wait(f"an open {incident} incident", lambda: next(
            (r for r in day.store.incidents(state="open", incident=incident) if r.first_seen.timestamp() >= since),
            None), 60, 0.2)
    except GameDayError as exc:
        seen = [(r.incident, r.state, r.timeline[-1]["what"]) for r in day.store.incidents(limit=5)]
        raise GameDayError(f"{exc}; latest incidents: {seen}; serve.log: "
                           f"{(day.workdir / 'serve.log').read_text()[-1500:]}") from exc
    message = wait("its Slack message", lambda: day.messages(row.id), 30, 0.1)[0]
    plan = wait("a Restart button on it", lambda: _restart_plan(day.latest_blocks(message["ts"])), 30, 0.2)
    return row, message["ts"], plan


def _resolved(day: GameDay, incident_id: str) -> Any:
    assert day.store is not None
    return wait(f"incident {incident_id} resolved", lambda: (r := day.store.incident(incident_id)) is not None
                and r.state == "resolved" and r, 60, 0.2)


def _rest_approve(day: GameDay, action_id: str) -> httpx.Response:
    assert day.store is not None
    token = day.store.create_token(f"approver-{time.monotonic_ns()}", ["act"])
    return httpx.post(f"{day.url}/actions/{action_id}/approve", headers={"Authorization": f"Bearer {token}"},
                      timeout=120)


def test_rest_approve_ends_the_incident_then_refuses_again(gameday: GameDay):
    store = gameday.store
    assert store is not None
    since = time.time()
    gameday.lab.break_class("decode-wedged")
    row, _ts, plan = _asked(gameday, "decode-wedged", since)
    approved = _rest_approve(gameday, plan)
    assert approved.status_code == 200 and approved.json()["state"] == "succeeded", approved.text
    assert approved.json()["roles"] == ["decode"]
    closed = _resolved(gameday, row.id)
    assert closed.time_to_recovery_s is not None and plan in closed.actions
    before = _decode_pid(gameday)
    again = _rest_approve(gameday, plan)
    assert again.status_code == 409 and "succeeded, not waiting for approval" in again.json()["detail"], again.text
    assert _decode_pid(gameday) == before
    gameday.quiet()


def test_cli_restart_ends_the_incident_and_supersedes_the_asked_plan(gameday: GameDay):
    store = gameday.store
    assert store is not None
    since = time.time()
    gameday.lab.break_class("decode-wedged")
    asked = _opsbot(gameday, "ask", "decode is stuck")
    assert asked.returncode == 1 and "decode-wedged" in asked.stdout  # 1: a finding, asked.stdout + asked.stderr
    row, ts, plan = _asked(gameday, "decode-wedged", since)

    restarted = _opsbot(gameday, "restart", "decode", "--approve", "--reason", "decode-wedged")
    assert restarted.returncode == 0 and "succeeded" in restarted.stdout, restarted.stdout + restarted.stderr
    closed = _resolved(gameday, row.id)
    assert closed.incident == "decode-wedged" and closed.time_to_recovery_s is not None
    assert any(e["kind"] == "resolved" and "time to recovery" in e["what"] for e in closed.timeline)
    # whichever process closed it (the CLI's, if the alerts resolved while it restarted), the message follows
    wait("the message saying it resolved", lambda: "Resolved" in json.dumps(gameday.latest_blocks(ts)), 30, 0.2)
    asked_plan = store.action(plan)
    assert asked_plan.state == "superseded", (asked_plan.state, asked_plan.outcome)
    assert "succeeded" in asked_plan.outcome or "resolved" in asked_plan.outcome, asked_plan.outcome

    # the stale click and the stale REST approve: refused, saying why, audited, decode not restarted
    before = _decode_pid(gameday)
    assert gameday.click_restart(ts, plan) == 200
    refused = _rest_approve(gameday, plan)
    assert refused.status_code == 409 and "superseded" in refused.json()["detail"], refused.text
    wait("both refusals audited", lambda: len([e for e in store.audit_log(limit=50) if e.what == "approval refused"
                                               and (e.detail or {}).get("action") == plan]) >= 2, 20, 0.2)
    assert store.action(plan).state == "superseded" and _decode_pid(gameday) == before

    # the next break is a new incident, not the resolved one renamed
    since = time.time()
    gameday.lab.break_class("kv-transfer-failure")
    new = wait("a new kv-transfer-failure incident", lambda: next(
        (r for r in store.incidents(state="open", incident="kv-transfer-failure")
         if r.first_seen.timestamp() >= since), None), 60, 0.2)
    assert new.id != row.id
    assert store.incident(row.id).incident == "decode-wedged" and store.incident(row.id).state == "resolved"
    # the last of the module: its teardown heals the lab (no need to wait for the quiet here)
