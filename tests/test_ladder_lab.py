"""The remedy ladder against the lab: the SMG emulator's worker API, its breakers, real sshd and units.

``breaker-open`` makes the router hold open the breakers of the workers registered before it, while
their engines answer; re-registering them (DELETE then POST /workers) closes them. In
``breaker-open-locked`` the worker API refuses (401): that step fails and the next one (restart the
router) is offered, and nothing runs without its approval.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from opsbot.bundle import Trigger
from opsbot.flow import Flow
from opsbot.settings import Settings
from opsbot.store import Store

pytestmark = pytest.mark.lab


@pytest.fixture
def settings(lab, tmp_path) -> Settings:
    return Settings(data_dir=tmp_path, inventory=lab.inventory_path, metrics_window_s=1.0, verify_deadline_s=20)


@pytest.fixture
def store(settings):
    s = Store(settings.db_url())
    yield s
    s.close()


@pytest.fixture(autouse=True)
def healthy_lab(lab):
    lab.reset()
    yield
    lab.reset()


def _named(flow: Flow, incident: str, deadline_s: float = 30.0):
    """Probe until the top finding is ``incident`` (the router's checker runs every second in a breaker state)."""
    end = time.monotonic() + deadline_s
    while True:
        result = asyncio.run(flow.run_probe(None, None, Trigger(kind="cli", user="test")))
        top = [f.incident for f in result.diagnosis.findings]
        if top[:1] == [incident] or time.monotonic() > end:
            return result
        time.sleep(1)


def _router_pid(lab) -> str:
    return lab.ssh("node1", ["systemctl", "show", "sglang-router.service", "--property=MainPID", "--value"]).stdout.strip()


def test_open_breakers_are_fixed_by_reregistering_first(lab, settings, store):
    flow = Flow(settings=settings, store=store)
    lab.inject("router", "breaker-open")
    result = _named(flow, "router-no-healthy-workers")
    assert [f.incident for f in result.diagnosis.findings][:1] == ["router-no-healthy-workers"]
    offered = store.action(result.plans["router"])
    assert (offered.kind, offered.state) == ("reregister", "planned")  # the cheapest step, waiting for approval
    incident = asyncio.run(flow.incidents.sighted(result, [], via="test"))
    pid = _router_pid(lab)
    outcome = asyncio.run(flow.approve_and_execute(offered.id, approver="alice", surface="cli"))
    assert outcome.state == "succeeded", outcome.message
    kinds = [s["kind"] for s in outcome.execution]
    assert kinds[:1] == ["list-workers"] and kinds.count("remove-worker") == 2 and kinds.count("add-worker") == 2
    assert kinds[-1] == "verify" and outcome.verification["ok"]
    assert _router_pid(lab) == pid  # nothing was restarted
    after = asyncio.run(flow.run_probe(None, None, Trigger(kind="cli", user="test")))
    assert "router-no-healthy-workers" not in [f.incident for f in after.diagnosis.findings]
    timeline = [e["what"] for e in store.incident(incident).timeline]
    assert any(t.startswith("approval asked: re-register the workers of router") for t in timeline)
    assert any(t.startswith("reregister succeeded: re-registered ") for t in timeline)


def test_a_refusing_worker_api_fails_the_step_and_offers_the_router_restart(lab, settings, store):
    flow = Flow(settings=settings, store=store)
    lab.inject("router", "breaker-open-locked")
    result = _named(flow, "router-no-healthy-workers")
    first = result.plans["router"]
    incident = asyncio.run(flow.incidents.sighted(result, [], via="test"))
    pid = _router_pid(lab)
    outcome = asyncio.run(flow.approve_and_execute(first, approver="alice", surface="cli"))
    assert outcome.state == "failed"
    assert "401" in outcome.message and "Missing or invalid Authorization header" in outcome.message
    offered = [a for a in store.actions(cluster="lab") if a.id != first]
    assert [(a.kind, a.role, a.state) for a in offered] == [("restart", "router", "planned")]  # next, not run
    assert _router_pid(lab) == pid
    timeline = [e["what"] for e in store.incident(incident).timeline]
    assert any(t.startswith("reregister failed: re-register failed: DELETE ") for t in timeline)
    assert f"ladder: next step offered: restart router (plan {offered[0].id})" in timeline
    again = asyncio.run(flow.run_probe(None, None, Trigger(kind="cli", user="test")))
    assert again.plans.get("router") == offered[0].id  # a later probe keeps offering the restart, not the failed step
