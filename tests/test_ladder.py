"""The remedy ladder without the lab: the runbook's order, which step is offered, the plan, the parser.

Bundles are the recorded router scenarios (tests/scenarios/dev), the store a real SQLite file; the
lab test (tests/test_ladder_lab.py) drives the router emulator's worker API.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opsbot.act import plan_remedies
from opsbot.act.ladder import remaining
from opsbot.act.plan import PlanRefused
from opsbot.act.reregister import open_breakers, plan_reregister
from opsbot.bundle import read_bundle
from opsbot.diagnose import diagnose
from opsbot.diagnose.runbook import RemedySpec
from opsbot.inventory import load_inventory
from opsbot.settings import Settings
from opsbot.store import Store

REPO = Path(__file__).resolve().parents[1]
BREAKER = REPO / "tests/scenarios/dev/router-breaker-fake-dead-prefill.json"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


@pytest.fixture
def inventory_path(tmp_path) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(f"""clusters:
  lab:
    nodes:
      - {{name: node1, address: 127.0.0.1, port: 1, host_key: '{KEY}'}}
      - {{name: node2, address: 127.0.0.1, port: 1, host_key: '{KEY}'}}
    roles:
      - {{role: prefill, node: node1, unit: sglang-dsv4-prefill.service, gpus: [0, 1],
         health_url: "http://127.0.0.1:30000/health", metrics_url: "http://127.0.0.1:30000/metrics"}}
      - {{role: router, node: node1, unit: sglang-router.service, health_url: "http://127.0.0.1:8000/health",
         metrics_url: "http://127.0.0.1:29000/metrics"}}
      - {{role: decode, node: node2, unit: sglang-dsv4-decode.service, gpus: [0, 1],
         health_url: "http://127.0.0.1:30001/health", metrics_url: "http://127.0.0.1:30001/metrics"}}
""")
    return path


@pytest.fixture
def store(tmp_path):
    s = Store(f"sqlite:///{tmp_path / 'opsbot.db'}")
    yield s
    s.close()


def _plan(store, inventory_path, probe_id="p1"):
    bundle = read_bundle(BREAKER)
    diagnosis = diagnose(bundle)
    assert diagnosis.findings[0].incident == "router-no-healthy-workers"
    store.save_probe(bundle, diagnosis)
    settings = Settings(data_dir=inventory_path.parent, inventory=inventory_path)
    return diagnosis, plan_remedies(store, load_inventory(inventory_path), diagnosis, bundle.id, cluster="lab",
                                    actor="alertmanager", surface="alertmanager", settings=settings)


def test_the_runbook_lists_reregister_before_the_router_restart():
    f = diagnose(read_bundle(BREAKER)).findings[0]
    assert [(r.kind, r.role) for r in f.remedies if r.approval == "required"] == [("reregister", "router"),
                                                                                  ("restart", "router")]


def test_reregister_is_offered_first_and_the_restart_once_it_failed(store, inventory_path):
    diagnosis, planned = _plan(store, inventory_path)
    first = store.action(planned.plans["router"])
    assert (first.kind, first.state) == ("reregister", "planned")
    assert [s.kind for s in planned_plan(first)] == ["list-workers", "check-engine", "remove-worker", "add-worker",
                                                      "verify"]
    assert planned.costs["router"].lines[0].startswith("requests lost: none on the engines")
    assert [a.id for a in store.actions(state="planned")] == [first.id]  # one step at a time: no restart offered beside it
    store.transition(first.id, ("planned",), "refused", actor="bob", surface="slack", what="dismissed")
    f = diagnosis.findings[0]
    assert [(r.kind, r.role) for r in remaining(f, store.actions(), first.created_at)] == [("restart", "router")]
    _, again = _plan(store, inventory_path)
    nxt = store.action(again.plans["router"])
    assert (nxt.kind, nxt.role, nxt.state) == ("restart", "router", "planned")


def planned_plan(action):
    from opsbot.contracts import RestartPlan

    return RestartPlan.model_validate(action.plan).steps


def test_the_last_step_is_offered_again_after_it_failed(store, inventory_path):
    diagnosis, planned = _plan(store, inventory_path)
    store.transition(planned.plans["router"], ("planned",), "refused", actor="b", surface="cli", what="dismissed")
    _, second = _plan(store, inventory_path)
    store.transition(second.plans["router"], ("planned",), "refused", actor="b", surface="cli", what="dismissed")
    kinds = [(r.kind, r.role) for r in remaining(diagnosis.findings[0], store.actions(), store.actions()[0].created_at)]
    assert kinds == [("restart", "router")]


def test_reregister_plans_only_a_router_reachable_through_its_api(inventory_path):
    inventory = load_inventory(inventory_path)
    settings = Settings(data_dir=inventory_path.parent, inventory=inventory_path)
    plan = plan_reregister(inventory, "router", settings=settings)
    assert plan.steps[2].argv == ["DELETE", "http://127.0.0.1:8000/workers/WORKER_ID"]
    with pytest.raises(PlanRefused, match="decode is not a router"):
        plan_reregister(inventory, "decode", settings=settings)


def test_the_reregister_button_says_what_it_does():
    from opsbot.slack.blocks import restart_buttons

    button = restart_buttons("router", "a1", "reregister")["elements"][0]
    assert button["text"]["text"] == "Re-register router's workers"
    assert "nothing restarts" in button["confirm"]["text"]["text"]
    assert restart_buttons("decode", "a2")["elements"][0]["text"]["text"] == "Restart decode"


def test_runbook_refuses_a_reregister_without_approval_or_off_the_router():
    with pytest.raises(ValueError, match="a reregister always needs approval"):
        RemedySpec(kind="reregister", role="router", text="x")
    with pytest.raises(ValueError, match="write role: router"):
        RemedySpec(kind="reregister", role="decode", approval="required", text="x")


URL = st.from_regex(r"http://[a-z0-9.]{1,12}:[0-9]{1,5}", fullmatch=True)


@given(st.dictionaries(URL, st.sampled_from(["-1", "0", "1", "2", "0.0", "1e0", "NaNx"]), max_size=6),
       st.lists(st.sampled_from(["# HELP smg_worker_cb_state x", 'smg_worker_health{worker="http://h:1"} 0', ""])))
def test_open_breakers_are_the_workers_with_a_state_above_zero(states, noise):
    lines = [f'smg_worker_cb_state{{model="m",worker="{u}"}} {v}' for u, v in states.items()] + noise
    assert open_breakers("\n".join(lines)) == {u for u, v in states.items() if v != "NaNx" and float(v) > 0}


@given(st.text(max_size=300))
def test_open_breakers_on_any_text_never_raises(text):
    assert isinstance(open_breakers(text), set)


def test_open_breakers_reads_the_recorded_router_metrics():
    router = next(r for r in json.loads(BREAKER.read_text())["roles"] if r["role"] == "router")
    raw = router["metrics"]["samples"][-1]["raw"]
    assert open_breakers(raw)  # the scenario's router holds a breaker open
