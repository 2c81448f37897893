"""What a restart costs, in the approval (ladder): real probe bundles, a store on a real SQLite file.

The figures come from the lab's recorded bundles (tests/fixtures/lab, tests/scenarios/dev); the
history from restarts recorded through the store's own transitions; each surface (CLI dry run,
REST view, Slack blocks) is checked to show the text stored with the plan.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from opsbot.act import approve, request_restart
from opsbot.act.cost import recovery_history, restart_cost
from opsbot.bundle import parse_bundle, read_bundle
from opsbot.contracts import RestartPlan
from opsbot.diagnose import diagnose
from opsbot.inventory import load_inventory
from opsbot.service.api import action_view
from opsbot.settings import Settings
from opsbot.slack.blocks import finding_blocks, plan_blocks
from opsbot.store import Store
from opsbot.store.models import now

REPO = Path(__file__).resolve().parents[1]
HEALTHY = REPO / "tests/fixtures/lab/healthy.json"
WEDGED = REPO / "tests/scenarios/dev/decode-wedged.json"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
ROUTER_LIMITS = "max_concurrent_requests: 8, queue_size: 4"


def _inventory(tmp_path: Path, *, decodes: int = 1, router: str = "") -> Path:
    extra = "".join(f"""      - {{role: decode, name: decode-{i}, node: node2, unit: sglang-decode-{i}.service,
         health_url: "http://127.0.0.1:3100{i}/health", metrics_url: "http://127.0.0.1:3100{i}/metrics"}}
""" for i in range(2, decodes + 1))
    path = tmp_path / "inventory.yaml"
    path.write_text(f"""clusters:
  lab:
    nodes:
      - {{name: node1, address: 127.0.0.1, port: 1, host_key: '{KEY}'}}
      - {{name: node2, address: 127.0.0.1, port: 1, host_key: '{KEY}'}}
    roles:
      - {{role: prefill, node: node1, unit: sglang-dsv4-prefill.service, gpus: [0, 1],
         health_url: "http://127.0.0.1:30000/health", metrics_url: "http://127.0.0.1:30000/metrics"}}
      - {{role: router, node: node1, unit: sglang-router.service{', ' + router if router else ''}}}
      - {{role: decode, node: node2, unit: sglang-dsv4-decode.service, gpus: [0, 1],
         health_url: "http://127.0.0.1:30001/health", metrics_url: "http://127.0.0.1:30001/metrics"}}
{extra}""")
    return path


def _with_second_decode(running: float, queued: float, usage: float) -> str:
    """The healthy lab bundle with a second decode instance: the real decode's evidence, its three gauges set."""
    data = json.loads(HEALTHY.read_text())
    decode = next(r for r in data["roles"] if r["role"] == "decode")
    twin = json.loads(json.dumps(decode)) | {"name": "decode-2", "unit": "sglang-decode-2.service"}
    for sample in twin["metrics"]["samples"]:
        raw = sample["raw"]
        for name, value in (("num_running_reqs", running), ("num_queue_reqs", queued), ("token_usage", usage)):
            raw = re.sub(rf"^(sglang:{name}\{{[^}}]*\}}) \S+$", rf"\g<1> {value}", raw, flags=re.MULTILINE)
        sample["raw"] = raw
    data["roles"].append(twin)
    data["id"] = "twodecodes000001"
    return json.dumps(data)


@pytest.fixture
def store(tmp_path):
    s = Store(f"sqlite:///{tmp_path / 'opsbot.db'}")
    yield s
    s.close()


def _settings(tmp_path: Path, inventory: Path) -> Settings:
    return Settings(data_dir=tmp_path, inventory=inventory)


def _succeeded(store: Store, inventory, settings: Settings, role: str, elapsed_s: float) -> None:
    """A restart of ``role`` that verified healthy in ``elapsed_s``, recorded through the store's transitions."""
    action, _ = request_restart(store, inventory, [role], actor="alice", surface="cli", settings=settings)
    approve(store, action.id, "alice", "cli", settings)
    started = now() - timedelta(hours=2)
    store.transition(action.id, ("approved",), "executing", actor="alice", surface="cli", what="restart executing",
                     started_at=started)
    store.transition(action.id, ("executing",), "succeeded", actor="alice", surface="cli", what="restart succeeded",
                     finished_at=started + timedelta(seconds=elapsed_s), outcome="ok",
                     verification={"ok": True, "elapsed_s": elapsed_s})


def test_the_lab_decode_alone_costs_its_requests_and_all_decode_traffic(tmp_path, store):
    inventory = load_inventory(_inventory(tmp_path))
    settings = _settings(tmp_path, inventory=tmp_path / "inventory.yaml")
    _succeeded(store, inventory, settings, "decode", 41.5)
    _succeeded(store, inventory, settings, "decode", 38.0)
    _succeeded(store, inventory, settings, "prefill", 12.0)  # another role's history is not the decode's
    store.save_probe(read_bundle(WEDGED))
    action, plan = request_restart(store, inventory, ["decode"], actor="bob", surface="cli", settings=settings)
    cost = plan.cost
    assert cost is not None and cost.probe_id == read_bundle(WEDGED).id
    assert cost.lost_requests == 8.0  # the wedged decode's 8 running, 0 queued
    assert cost.lines[0].startswith("requests lost: 8 (decode: 8 running, 0 queued; probe ")
    assert cost.recoveries_s == [38.0, 41.5]  # newest first, the prefill's 12 s left out
    assert "time to healthy after its last restarts: 38 s, 41.5 s (median 39.8 s)" in cost.lines
    assert cost.warnings == ["no other decode instance: decode traffic fails until decode is back"]
    stored = RestartPlan.model_validate(store.action(action.id).plan).cost
    assert stored == cost  # what every surface reads is what was computed where the plan was made


def test_a_second_decode_takes_the_share_against_smg_and_router_limits(tmp_path, store):
    inventory = load_inventory(_inventory(tmp_path, decodes=2, router=ROUTER_LIMITS))
    cluster = inventory.cluster("lab")[1]
    bundle = parse_bundle(_with_second_decode(running=4, queued=6, usage=0.4))
    first = [r for r in cluster.roles if r.key == "decode"]  # `select` by kind would name both instances
    cost = restart_cost(first, cluster, bundle, bundle.id, {})
    assert cost.lost_requests == 7.0  # the healthy lab decode: 7 running, 0 queued
    # decode-2 after +7: 17 requests, 13 waiting; KV 0.4 * (1 + 7/4) = 1.1
    assert "decode-2 after taking its share (+7): 17 requests, 13 waiting, KV usage ~1.10 (now 0.40)" in cost.lines
    assert "decode-2 would reach KV usage 1.10, past SMG's overload threshold 0.8" in cost.warnings
    assert "decode-2 would hold 13 waiting requests, past SMG's overload threshold 8" in cost.warnings
    assert ("17 requests would come back to router, past its admission (--max-concurrent-requests 8 + "
            "--queue-size 4): the rest are refused there") in cost.warnings
    assert "time to healthy: no earlier verified restart of decode on record" in cost.lines
    light = parse_bundle(_with_second_decode(running=10, queued=0, usage=0.2))
    calm = restart_cost(first, cluster, light, light.id, {})
    assert [w for w in calm.warnings if "SMG" in w] == []  # KV 0.2 * 1.7 = 0.34, 7 waiting: under both
    assert "decode-2 after taking its share (+7): 17 requests, 7 waiting, KV usage ~0.34 (now 0.20)" in calm.lines
    roomy = load_inventory(_inventory(tmp_path, decodes=2)).cluster("lab")[1]  # admission off: nothing to pass
    assert not any("admission" in w for w in restart_cost(first, roomy, light, light.id, {}).warnings)


def test_no_probe_on_record_says_unknown_never_zero(tmp_path, store):
    inventory = load_inventory(_inventory(tmp_path))
    cluster = inventory.cluster("lab")[1]
    cost = restart_cost(cluster.select(["decode"]), cluster, None, None, {})
    assert cost.lost_requests is None
    assert cost.lines[0] == "requests lost: unknown for decode (no scheduler metrics in no probe of the cluster on record)"
    router = restart_cost(cluster.select(["router"]), cluster, read_bundle(WEDGED), "p1", {})
    assert "every request fails until the router is back (it is the only way in)" in router.lines


def test_history_reads_only_succeeded_restarts_with_a_verification_time(tmp_path, store):
    inventory = load_inventory(_inventory(tmp_path))
    settings = _settings(tmp_path, tmp_path / "inventory.yaml")
    _succeeded(store, inventory, settings, "decode", 30.0)
    failed, _ = request_restart(store, inventory, ["decode"], actor="a", surface="cli", settings=settings)
    store.transition(failed.id, ("planned",), "refused", actor="a", surface="cli", what="dismissed")
    assert recovery_history(store.actions(cluster="lab"), ["decode", "prefill"]) == {"decode": [30.0], "prefill": []}


def test_every_surface_shows_the_stored_cost(tmp_path, store):
    inventory_path = _inventory(tmp_path)
    inventory = load_inventory(inventory_path)
    settings = _settings(tmp_path, inventory_path)
    store.save_probe(read_bundle(WEDGED))
    action, plan = request_restart(store, inventory, ["decode"], actor="bob", surface="rest", settings=settings)
    said = plan.cost.said()
    assert said[0] == "warning: no other decode instance: decode traffic fails until decode is back"
    view = action_view(store.action(action.id))  # GET /actions/{id}
    assert view.cost is not None and view.cost.said() == said
    slack = json.dumps(plan_blocks("decode", action.id, ["systemctl stop x"], "12:00:00 UTC", plan.cost))
    assert "Cost of restarting decode" in slack and "requests lost: 8 (decode: 8 running" in slack
    findings = diagnose(read_bundle(WEDGED)).findings
    blocks = finding_blocks("lab", "p", findings, {"decode": action.id}, costs={"decode": plan.cost})
    button = next(i for i, b in enumerate(blocks) if b["type"] == "actions")
    assert blocks[button - 1]["text"]["text"].startswith(":warning: *Cost of restarting decode*\n• warning: no other")
    env = {**os.environ, "OPSBOT_DATA_DIR": str(tmp_path), "OPSBOT_INVENTORY": str(inventory_path),
           "PYTHONPATH": str(REPO), "COLUMNS": "250"}
    cli = subprocess.run([sys.executable, "-m", "opsbot", "restart", "decode", "--dry-run"], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert cli.returncode == 0, cli.stderr
    for line in said:
        assert line in cli.stdout
