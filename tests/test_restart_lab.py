"""Guarded restarts against the lab nodes: real sshd, systemd units and the SGLang emulator.

The emulator's injected states persist across restarts (the lab's control file is read at start
and watched while running). A wedged decode is a state a restart clears in production, so the test
injects it with ``until_restart=True`` (``opsbot lab inject decode wedged --until-restart``): the
running process takes the wedge up and stays wedged; its next start comes back healthy. The restart
is therefore what brings the role back.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opsbot.collect.probe import probe
from opsbot.flow import Flow
from opsbot.parse.metrics import parse_samples
from opsbot.settings import Settings
from opsbot.store import Store
from tests.loopwatch import LoopWatchdog

pytestmark = pytest.mark.lab
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def settings(lab, tmp_path) -> Settings:
    return Settings(data_dir=tmp_path, inventory=lab.inventory_path, metrics_window_s=2.0, verify_deadline_s=60,
                    gpu_release_timeout_s=30)


@pytest.fixture
def store(settings):
    s = Store(settings.db_url())
    yield s
    s.close()


@pytest.fixture(autouse=True)
def healthy_lab(lab):
    """Every test starts and ends with healthy roles."""
    lab.reset()
    yield
    lab.reset()


def _env(settings: Settings, **extra: str) -> dict[str, str]:
    return {**os.environ, "OPSBOT_DATA_DIR": str(settings.data_dir), "OPSBOT_INVENTORY": str(settings.inventory),
            "OPSBOT_DATABASE_URL": settings.db_url(), "OPSBOT_METRICS_WINDOW_S": "2", "OPSBOT_VERIFY_DEADLINE_S": "60",
            "PYTHONPATH": str(REPO), "COLUMNS": "250", **extra}


def _cli(settings: Settings, *args: str, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "opsbot", *args], env=_env(settings, **extra), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _restart(store, inventory, settings, role="decode", actor="alice", pair=False, approver=None):
    """Request, approve and execute through the flow, as every surface does; the event loop watched all along
    (a restart in the service must never hold it over 100 ms: tests/loopwatch.py)."""
    flow = Flow(settings=settings, store=store)

    async def go():
        async with LoopWatchdog().watching() as watchdog:
            action, _ = await flow.request_restart([role] if isinstance(role, str) else role, None, actor=actor,
                                                   surface="cli", reason="test", pair=pair)
            outcome = await flow.approve_and_execute(action.id, approver=approver or actor, surface="cli")
        assert not watchdog.stalls, watchdog.problems()
        return outcome

    return asyncio.run(go())


def _main_pid(lab, unit: str) -> str:
    return lab.ssh("node2", ["systemctl", "show", unit, "--property=MainPID", "--value"]).stdout.strip()


def test_wedged_decode_is_restarted_and_verified_then_cooldown_refuses(lab, settings, store):
    lab.inject("decode", "wedged", until_restart=True)
    wedged = asyncio.run(probe(lab.inventory, roles=["decode"], settings=settings))
    before = parse_samples(wedged.role("decode").metrics.samples)
    assert before.deltas.get("realtime_tokens", 0) == 0, "the injected wedge should stop token progress"
    time.sleep(2.5)
    still = parse_samples(asyncio.run(probe(lab.inventory, roles=["decode"], settings=settings))
                          .role("decode").metrics.samples)
    assert still.deltas.get("realtime_tokens", 0) == 0, "without a restart the decode stays wedged"
    pid_before = _main_pid(lab, "sglang-dsv4-decode.service")

    out = _restart(store, lab.inventory, settings)

    assert out.state == "succeeded", out.message
    pid_after = _main_pid(lab, "sglang-dsv4-decode.service")
    assert pid_after != pid_before
    (decode,) = out.verification["roles"]
    assert decode["active_state"] == "active" and decode["health_status"] == 200 and decode["tokens_delta"] > 0
    assert [s["kind"] for s in out.execution] == ["stop", "wait-gpu-release", "reset-failed", "start"]
    assert out.execution[1]["ok"] and "released" in out.execution[1]["detail"]
    evidence = store.load_bundle(out.evidence_probe_id)  # the pre-restart probe shows the wedge
    assert store.probes(role="decode", incident="decode-wedged")[0].id == out.evidence_probe_id
    assert "decode-wedged" in [f.incident for f in store.findings(role="decode")]
    assert parse_samples(evidence.role("decode").metrics.samples).deltas.get("realtime_tokens", 0) == 0
    latest = store.probes(role="decode")[0]  # the after-probe records the recovery
    assert latest.id == out.after_probe_id != out.evidence_probe_id and latest.top_incident is None
    row = store.action(out.action_id)
    assert (row.state, row.approved_by, row.evidence_probe_id) == ("succeeded", "alice", out.evidence_probe_id)
    whats = [e.what for e in reversed(store.audit_log(role="decode"))]
    assert whats == ["restart planned", "restart approved", "restart executing", "restart succeeded"]

    again = _restart(store, lab.inventory, settings)
    assert again.state == "refused" and again.message.startswith("cooldown: decode was restarted")
    assert again.allowed_at is not None and f"{again.allowed_at:%H:%M:%S} UTC" in again.message
    assert _main_pid(lab, "sglang-dsv4-decode.service") == pid_after  # refused: nothing was touched


def test_two_concurrent_restarts_one_wins_the_other_is_refused_by_the_lock(lab, settings, database_url):
    settings = settings.model_copy(update={"database_url": database_url})  # SQLite file, then PostgreSQL
    store = Store(database_url)
    procs = [_cli(settings, "restart", "decode", "--approve", "--reason", f"operator {i}") for i in range(2)]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 1], outs
    loser = outs[[p.returncode for p in procs].index(1)]
    assert "lock: decode is being restarted by action" in loser, loser
    states = sorted(a.state for a in store.actions())
    assert states == ["refused", "succeeded"]
    store.close()


def test_budget_holds_across_a_restart_of_the_process(lab, settings, database_url):
    settings = settings.model_copy(update={"database_url": database_url})
    store = Store(database_url)
    env = {"OPSBOT_RESTART_BUDGET": "1", "OPSBOT_RESTART_COOLDOWN_S": "0"}
    first = _cli(settings, "restart", "decode", "--approve", **env)
    out1 = first.communicate(timeout=180)[0]
    assert first.returncode == 0, out1
    second = _cli(settings, "restart", "decode", "--approve", **env)  # a new process, the same database
    out2 = second.communicate(timeout=180)[0]
    assert second.returncode == 1 and "budget: cluster" in out2 and "had 1 restarts" in out2, out2
    assert "the next restart is allowed at" in out2
    assert [a.state for a in store.actions()] == ["refused", "succeeded"]
    store.close()


def test_unknown_role_refused_before_any_ssh_connection(lab, settings):
    def accepted() -> int:
        res = lab.ssh("node2", ["journalctl", "-u", "ssh.service", "--no-pager", "-o", "cat", "-g", "Accepted"])
        return len(res.stdout.splitlines())

    before = accepted()
    cli = _cli(settings, "restart", "decoder", "--approve")
    out = cli.communicate(timeout=60)[0]
    assert cli.returncode == 2 and "unknown role 'decoder'" in out
    assert accepted() == before + 1  # only the counting call itself logged in


def test_a_role_that_never_comes_back_is_recorded_failed_with_evidence(lab, settings, store):
    lab.inject("decode", "crash", message="ValueError: opsbot test crash at start-up")
    quick = settings.model_copy(update={"verify_deadline_s": 20})
    out = _restart(store, lab.inventory, quick)
    assert out.state == "failed", out.message
    assert "did not come back healthy within 20" in out.message and "sglang-dsv4-decode.service" in out.message
    row = store.action(out.action_id)
    assert row.state == "failed" and row.outcome == out.message and row.evidence_probe_id
    after = store.load_bundle(out.after_probe_id)
    shown = subprocess.run([sys.executable, "-m", "opsbot", "actions", "show", out.action_id], env=_env(quick),
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "state: failed" in shown.stdout and out.after_probe_id in shown.stdout
    (after_row,) = [p for p in store.probes(role="decode") if p.id == out.after_probe_id]
    assert after_row.top_incident is not None  # the after-probe is diagnosed and its finding kept
    assert "opsbot test crash at start-up" in after.role("decode").logs.raw
    assert store.probes(role="decode")  # both probes are in the history


async def _start_service(settings: Settings, store: Store) -> None:
    """Start and stop the opsbot service (its lifespan) on this store."""
    from opsbot.service.app import create_app

    app = create_app(settings, flow=Flow(settings=settings, store=store))
    async with app.router.lifespan_context(app):
        pass


def test_an_interrupted_restart_is_reconciled_not_repeated(lab, settings, store):
    proc = _cli(settings, "restart", "decode", "--approve", OPSBOT_VERIFY_DEADLINE_S="60")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not store.actions(state="executing"):
        time.sleep(0.05)
    (action,) = store.actions(state="executing")
    proc.send_signal(signal.SIGKILL)  # opsbot dies between execute and record
    proc.wait(timeout=10)
    assert store.action(action.id).state == "executing" and store.locks("lab")
    time.sleep(8)  # let the unit settle whichever way the interrupted run left it

    asyncio.run(_start_service(settings, store))  # the service settles it at start-up, as the CLI does

    row = store.action(action.id)
    assert row.state in ("succeeded", "failed") and row.outcome.startswith("interrupted while executing")
    assert store.locks("lab") == []
    whats = [e.what for e in store.audit_log() if e.detail.get("action") == action.id]
    assert whats.count("restart executing") == 1 and len([w for w in whats if "reconciled" in w]) == 1
    assert asyncio.run(Flow(settings=settings, store=store).reconcile()) == []  # nothing settled twice
    assert len(store.actions()) == 1


def test_node_unreachable_is_recorded_failed_and_nothing_is_started(lab, settings, store):
    quick = settings.model_copy(update={"ssh_connect_timeout_s": 3.0, "probe_deadline_s": 10})
    lab.stop_sshd("node2")
    try:
        out = _restart(store, lab.inventory, quick)
    finally:
        lab.start_sshd("node2")
    assert out.state == "failed" and out.message.startswith("stop decode failed"), out.message
    assert [s["kind"] for s in out.execution] == ["stop"]  # no start after a failed stop
    evidence = store.load_bundle(out.evidence_probe_id)
    assert not evidence.role("decode").systemd.ok  # the evidence shows the node was unreachable
    assert store.action(out.action_id).state == "failed" and store.locks("lab") == []


def test_pair_restart_on_purpose_restarts_both_sides_in_order(lab, settings, store):
    pids = {n: lab.ssh(n, ["systemctl", "show", u, "--property=MainPID", "--value"]).stdout.strip()
            for n, u in (("node1", "sglang-dsv4-prefill.service"), ("node2", "sglang-dsv4-decode.service"))}
    out = _restart(store, lab.inventory, settings, ["prefill", "decode"], pair=True, approver="bob")
    assert out.state == "succeeded", out.message
    assert [(s["kind"], s["role"]) for s in out.execution] == [
        ("stop", "decode"), ("stop", "prefill"), ("wait-gpu-release", "decode"), ("wait-gpu-release", "prefill"),
        ("reset-failed", "prefill"), ("reset-failed", "decode"), ("start", "prefill"), ("start", "decode")]
    assert {r["role"] for r in out.verification["roles"]} == {"prefill", "decode"}
    for n, u in (("node1", "sglang-dsv4-prefill.service"), ("node2", "sglang-dsv4-decode.service")):
        assert lab.ssh(n, ["systemctl", "show", u, "--property=MainPID", "--value"]).stdout.strip() != pids[n]
    assert [a.id for a in store.restarts_since("lab", store.action(out.action_id).started_at)] == [out.action_id]
