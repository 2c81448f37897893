"""Restart guardrails that refuse before touching a node: plans, approval, cooldown, budget, lock.

The inventory points every node at a local TCP listener that counts connections, so "refused
before any SSH connection" is checked, not assumed. Lab tests (tests/test_restart_lab.py) cover
the paths that reach the nodes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from opsbot.act import ApprovalRefused, PlanRefused, approve, plan_restart, request_restart
from opsbot.act.guards import budget_until, cooldown_until
from opsbot.flow import Flow
from opsbot.inventory import UnknownRole, load_inventory
from opsbot.settings import Settings
from opsbot.store import Store

REPO = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


class ConnectionCounter:
    """A TCP listener standing where the nodes' sshd would be: it counts who connects."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()


@pytest.fixture
def counter():
    c = ConnectionCounter()
    yield c
    c.sock.close()


def write_inventory(directory: Path, port: int) -> Path:
    """A two-node inventory whose nodes' sshd is ``port`` on loopback (a ``ConnectionCounter``)."""
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    nodes = "\n".join(f"      - {{name: {n}, address: 127.0.0.1, port: {port}, host_key: '{key}'}}"
                      for n in ("node1", "node2"))
    path = directory / "inventory.yaml"
    path.write_text(f"""clusters:
  lab:
    nodes:
{nodes}
    roles:
      - {{role: prefill, node: node1, unit: sglang-dsv4-prefill.service, gpus: [0, 1],
         health_url: "http://127.0.0.1:30000/health", metrics_url: "http://127.0.0.1:30000/metrics"}}
      - {{role: router, node: node1, unit: sglang-router.service}}
      - {{role: decode, node: node2, unit: sglang-dsv4-decode.service, gpus: [0, 1],
         health_url: "http://127.0.0.1:30001/health", metrics_url: "http://127.0.0.1:30001/metrics"}}
""")
    return path


@pytest.fixture
def inventory_path(tmp_path, counter) -> Path:
    return write_inventory(tmp_path, counter.port)


@pytest.fixture
def inventory(inventory_path):
    return load_inventory(inventory_path)


@pytest.fixture
def settings(tmp_path, inventory_path) -> Settings:
    return Settings(data_dir=tmp_path, inventory=inventory_path)


@pytest.fixture
def store(database_url):
    s = Store(database_url)
    yield s
    s.close()


def test_plan_is_stop_wait_for_gpu_release_start_verify(inventory, settings):
    plan = plan_restart(inventory, ["decode"], settings=settings)
    assert [(s.kind, s.role) for s in plan.steps] == [
        ("stop", "decode"), ("wait-gpu-release", "decode"), ("reset-failed", "decode"), ("start", "decode"),
        ("verify", "decode")]
    assert plan.steps[0].argv == ["systemctl", "stop", "sglang-dsv4-decode.service"]
    assert plan.steps[1].argv[0] == "nvidia-smi" and plan.steps[1].argv[-2:] == ["-i", "0,1"]
    assert plan.steps[2].argv == ["systemctl", "reset-failed", "sglang-dsv4-decode.service"]
    assert plan.steps[3].argv == ["systemctl", "start", "sglang-dsv4-decode.service"]
    assert "restart" not in [a for s in plan.steps for a in s.argv]  # never a blind restart
    router = plan_restart(inventory, ["router"], settings=settings)
    assert [s.kind for s in router.steps] == ["stop", "reset-failed", "start", "verify"]  # no GPUs, nothing to wait for


def test_both_sides_of_the_pair_only_on_purpose(inventory, settings):
    with pytest.raises(PlanRefused, match="both sides of the prefill/decode pair"):
        plan_restart(inventory, ["prefill", "decode"], settings=settings)
    plan = plan_restart(inventory, ["prefill", "decode"], pair=True, settings=settings)
    order = [(s.kind, s.role) for s in plan.steps if s.kind in ("stop", "start")]
    assert order == [("stop", "decode"), ("stop", "prefill"), ("start", "prefill"), ("start", "decode")]
    with pytest.raises(PlanRefused, match="one of each"):
        plan_restart(inventory, ["decode"], pair=True, settings=settings)


def test_unknown_role_refused_before_any_connection(inventory, settings, store, counter):
    with pytest.raises(UnknownRole, match="unknown role 'decoder'; this cluster has: decode, prefill, router"):
        request_restart(store, inventory, ["decoder"], actor="alice", surface="cli", settings=settings)
    assert store.actions() == []
    env = {**os.environ, "OPSBOT_DATA_DIR": str(settings.data_dir), "OPSBOT_INVENTORY": str(settings.inventory),
           "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    cli = subprocess.run([sys.executable, "-m", "opsbot", "restart", "decoder", "--approve"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode == 2 and "unknown role 'decoder'" in cli.stdout
    assert counter.connections == 0


def test_dry_run_shows_exact_commands_and_changes_nothing(settings, counter):
    env = {**os.environ, "OPSBOT_DATA_DIR": str(settings.data_dir), "OPSBOT_INVENTORY": str(settings.inventory),
           "PYTHONPATH": str(REPO), "COLUMNS": "250"}
    cli = subprocess.run([sys.executable, "-m", "opsbot", "restart", "decode", "--dry-run"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert "systemctl stop sglang-dsv4-decode.service" in cli.stdout
    assert "nvidia-smi" in cli.stdout and "systemctl start sglang-dsv4-decode.service" in cli.stdout
    assert "dry run: nothing was changed" in cli.stdout
    assert not (settings.data_dir / "opsbot.db").exists() and counter.connections == 0


def test_unapproved_and_expired_actions_do_not_run(inventory, settings, store, counter):
    action, _ = request_restart(store, inventory, ["decode"], actor="alice", surface="cli", settings=settings)
    out = _run(store, inventory, action.id, settings)
    assert out.state == "planned" and f"opsbot actions approve {action.id}" in out.message
    short = settings.model_copy(update={"approval_ttl_s": 0.01})
    stale, _ = request_restart(store, inventory, ["decode"], actor="alice", surface="cli", settings=short)
    _wait_until(stale.expires_at)
    with pytest.raises(ApprovalRefused, match="expired .* request the restart again"):
        approve(store, stale.id, "bob", "slack", short)
    assert store.action(stale.id).state == "expired"
    approved_then_stale, _ = request_restart(store, inventory, ["decode"], actor="alice", surface="cli",
                                             settings=settings)
    approved = approve(store, approved_then_stale.id, "bob", "slack", settings)  # approved with 15 min ...
    assert (approved.approved_by, approved.approved_surface) == ("bob", "slack")
    assert store.approvals(approved.id)[0].approver == "bob"
    _expire(store, approved.id)  # ... which then runs out
    out = _run(store, inventory, approved.id, settings)
    assert out.state == "expired" and "approval expired" in out.message
    assert counter.connections == 0


def test_cooldown_refuses_with_the_time_it_will_be_allowed(inventory, settings, store, counter):
    done = _executed(store, inventory, settings, "decode", minutes_ago=2)
    action, _ = request_restart(store, inventory, ["decode"], actor="alice", surface="cli", settings=settings)
    approve(store, action.id, "alice", "cli", settings)
    out = _run(store, inventory, action.id, settings)
    assert out.state == "refused" and out.message.startswith("cooldown: decode was restarted")
    assert out.allowed_at == done.started_at + timedelta(minutes=10)
    assert f"{out.allowed_at:%H:%M:%S} UTC" in out.message and "(in 7 min" in out.message
    assert store.action(action.id).state == "refused" and counter.connections == 0


def test_budget_survives_a_new_store_instance(inventory, settings, database_url, counter):
    first = Store(database_url)
    starts = [_executed(first, inventory, settings, role, minutes_ago=m).started_at
              for role, m in (("decode", 50), ("prefill", 40), ("router", 30))]
    first.close()
    second = Store(database_url)  # as after a restart of opsbot
    cooled = settings.model_copy(update={"restart_cooldown_s": 60})
    action, _ = request_restart(second, inventory, ["router"], actor="alice", surface="cli", settings=cooled)
    approve(second, action.id, "alice", "cli", cooled)
    out = _run(second, inventory, action.id, cooled)
    assert out.state == "refused" and "budget: cluster lab had 3 restarts in the last 60 min" in out.message
    assert out.allowed_at == starts[0] + timedelta(hours=1)
    assert counter.connections == 0
    second.close()


def test_lock_held_by_another_action_refuses(inventory, settings, store, counter):
    assert store.take_lock("lab", "decode", "other-action", "host:1", timedelta(minutes=5)) is None
    action, _ = request_restart(store, inventory, ["decode"], actor="alice", surface="cli", settings=settings)
    approve(store, action.id, "alice", "cli", settings)
    out = _run(store, inventory, action.id, settings)
    assert out.state == "refused" and "lock: decode is being restarted by action other-action" in out.message
    assert counter.connections == 0


def test_other_side_of_the_pair_in_flight_refuses(inventory, settings, store, counter):
    assert store.take_lock("lab", "prefill", "prefill-action", "host:1", timedelta(minutes=5)) is None
    action, _ = request_restart(store, inventory, ["decode"], actor="alice", surface="cli", settings=settings)
    approve(store, action.id, "alice", "cli", settings)
    out = _run(store, inventory, action.id, settings)
    assert out.state == "refused" and "never both sides at once" in out.message
    assert counter.connections == 0


def test_audit_records_who_did_what_through_which_surface(inventory, settings, store):
    action, _ = request_restart(store, inventory, ["decode"], actor="alice", surface="rest", reason="wedged",
                                settings=settings)
    approve(store, action.id, "bob", "slack", settings)
    entries = [(e.actor, e.surface, e.what) for e in reversed(store.audit_log())]
    assert entries == [("alice", "rest", "restart planned"), ("bob", "slack", "restart approved")]
    with pytest.raises(ApprovalRefused, match="is approved, not waiting"):
        approve(store, action.id, "carol", "cli", settings)


def test_budget_and_cooldown_arithmetic():
    assert cooldown_until([], timedelta(minutes=10), T0) is None
    assert cooldown_until([T0 - timedelta(minutes=3)], timedelta(minutes=10), T0) == T0 + timedelta(minutes=7)
    assert cooldown_until([T0 - timedelta(minutes=11)], timedelta(minutes=10), T0) is None
    hour = timedelta(hours=1)
    times = [T0 - timedelta(minutes=m) for m in (70, 50, 20, 5)]
    assert budget_until(times, 3, hour, T0) == T0 - timedelta(minutes=50) + hour
    assert budget_until(times, 4, hour, T0) is None
    assert budget_until(times, 1, hour, T0) == T0 - timedelta(minutes=5) + hour


# -- helpers --------------------------------------------------------------------------------------

def _run(store, inventory, action_id, settings):
    """Execute through the flow, as every surface does (its inventory is ``settings.inventory``)."""
    import asyncio

    return asyncio.run(Flow(settings=settings, store=store).execute(action_id, actor="alice", surface="cli"))


def _executed(store, inventory, settings, role, minutes_ago):
    """A restart that ran ``minutes_ago`` (recorded through the store's own transitions)."""
    action, _ = request_restart(store, inventory, [role], actor="alice", surface="cli", settings=settings)
    approve(store, action.id, "alice", "cli", settings)
    started = datetime.now(timezone.utc) - timedelta(minutes=minutes_ago)
    store.transition(action.id, ("approved",), "executing", actor="alice", surface="cli", what="restart executing",
                     started_at=started)
    return store.transition(action.id, ("executing",), "succeeded", actor="alice", surface="cli",
                            what="restart succeeded", finished_at=started + timedelta(seconds=30), outcome="ok")


def _expire(store, action_id):
    store.transition(action_id, ("approved",), "approved", actor="test", surface="cli", what="clock moved",
                     expires_at=datetime.now(timezone.utc) - timedelta(seconds=1))


def _wait_until(t):
    import time

    while datetime.now(timezone.utc) <= t:
        time.sleep(0.01)


def test_overdue_actions_are_expired_at_start_up(inventory, settings, store, counter):
    import asyncio

    pending, _ = request_restart(store, inventory, ["decode"], actor="alice", surface="cli", settings=settings)
    fresh, _ = request_restart(store, inventory, ["prefill"], actor="alice", surface="cli", settings=settings)
    store.transition(pending.id, ("planned",), "planned", actor="test", surface="cli", what="clock moved",
                     expires_at=datetime.now(timezone.utc) - timedelta(seconds=1))
    assert asyncio.run(Flow(settings=settings, store=store).reconcile()) == []
    assert store.action(pending.id).state == "expired" and "request the restart again" in store.action(pending.id).outcome
    assert store.action(fresh.id).state == "planned" and counter.connections == 0


def test_reconcile_frees_every_lock_a_killed_restart_held(inventory, settings, store, counter):
    """Killed between its move to executing and the budget lock's release: both its locks go at start-up."""
    import asyncio

    from opsbot.act.restart import BUDGET_LOCK

    plan, _ = request_restart(store, inventory, ["decode"], actor="alice", surface="cli", settings=settings)
    approve(store, plan.id, "alice", "cli", settings)
    store.transition(plan.id, ("approved",), "executing", actor="alice", surface="cli", what="restart executing")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    holder = f"{socket.gethostname()}:{dead.stdout.strip()}"
    for key in ("decode", BUDGET_LOCK):
        assert store.take_lock("lab", key, plan.id, holder, timedelta(seconds=600)) is None
    quick = settings.model_copy(update={"verify_deadline_s": 1.0})
    (out,) = asyncio.run(Flow(settings=quick, store=store).reconcile())
    assert out.action_id == plan.id and out.message.startswith("interrupted while executing")
    assert store.locks("lab") == []
