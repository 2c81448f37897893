"""opsbot deploy apply on the lab: real sshd + systemd nodes, the SGLang emulator as the launcher.

The lab's own units are stopped for the test and restored after it (their files are read-only bind
mounts on the nodes, so the spec deploys units of its own names on the same ports).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
import yaml

from opsbot.act.deploy import DeployGuard
from opsbot.cli.deploy import show_drift
from opsbot.collect.transport import TransportPool
from opsbot.store import Store
from serving.rollout import apply, diff, drift, verify_patch
from serving.rules import check
from serving.spec import DeploymentSpec, NodeSpec, load_spec
from tests.serving.conftest import LAB_SPEC

pytestmark = pytest.mark.lab
LAB_UNITS = {"node1": ["sglang-dsv4-prefill.service", "sglang-router.service"], "node2": ["sglang-dsv4-decode.service"]}


def spec_for(lab) -> DeploymentSpec:
    spec = load_spec(LAB_SPEC)
    _, cluster = lab.inventory.cluster(None)
    nodes = [NodeSpec(**n.model_dump(), gpu_count=4, numa_memory_gib={0: 1024}) for n in cluster.nodes]
    base = lab.settings.lab_service_port_base
    return spec.model_copy(update={
        "nodes": nodes,
        "prefill": spec.prefill.model_copy(update={"port": base, "bootstrap_port": base + 4}),
        "decode": spec.decode.model_copy(update={"port": base + 1, "bootstrap_port": base + 4}),
        "router": spec.router.model_copy(update={"port": base + 2, "prometheus_port": base + 3}),
    })


@pytest.fixture
def deployed_lab(lab):
    """The lab with its own units stopped; afterwards the spec's units are removed and the lab's restored."""
    for node, units in LAB_UNITS.items():
        lab.ssh(node, ["systemctl", "stop", *units], 30)
    yield lab
    spec = spec_for(lab)
    for role in ("router", "decode", "prefill"):
        node = spec.router.node if role == "router" else spec.servers()[role].node
        lab.ssh(node, ["systemctl", "disable", "--now", spec.unit_of(role)], 30)
        lab.ssh(node, ["systemctl", "reset-failed", spec.unit_of(role)], 10)
    lab.reset()


@pytest.fixture
def store(tmp_path):
    s = Store(f"sqlite:///{tmp_path / 'opsbot.db'}")
    yield s
    s.close()


def guard_for(lab, spec: DeploymentSpec, store: Store) -> DeployGuard:
    return DeployGuard(store, spec.name, actor="alice", settings=lab.settings)


async def test_apply_rolls_out_in_order_then_diff_is_clean(deployed_lab, tmp_path, store):
    lab = deployed_lab
    spec = spec_for(lab)
    guard = guard_for(lab, spec, store)
    assert check(spec) == []
    progress: list[str] = []
    async with TransportPool(lab.settings) as pool:
        assert {s.status for s in await diff(spec, pool)} == {"missing"}
        outcome = await apply(spec, pool, guard, progress=progress.append)
        assert outcome.ok, outcome.evidence
        assert outcome.restarted == ["prefill@node1", "decode@node2", "router@node1"]
        audited = [e for e in reversed(store.audit_log()) if e.what == "deploy restart"]
        assert [e.role for e in audited] == ["prefill", "decode", "router"]
        assert all("cooldown" in e.detail["overrides"] and e.detail["keeps"] == ["lock", "audit"] for e in audited)
        assert store.locks(spec.name) == []  # each lock released after its restart
        restarts = [m for m in progress if m.startswith("restarting")]
        assert [m.split()[1] for m in restarts] == ["prefill", "decode", "router"]
        # index_keys: bf16 → each server's current run printed the patch line (the lab's launcher stand-in)
        assert sorted(outcome.patch_lines) == ["decode@node2", "prefill@node1"]
        assert all(line.attached and line.index_keys == "bf16" for line in outcome.patch_lines.values())
        assert {s.status for s in await diff(spec, pool)} == {"same"}
        assert await drift(spec, pool) == []
        # the deployed router really routes through both roles it was rendered with
        t = await pool.get(spec.node("node1"))
        ready = await t.http_get(f"http://127.0.0.1:{spec.router.port}/readiness", timeout=10)
        assert ready.status == 200, ready.body
        # smg's process title, as `smg launch` sets it
        pid = (await t.run(["systemctl", "show", spec.unit_of("router"), "--property=MainPID", "--value"], 10)).stdout
        assert (await t.run(["cat", f"/proc/{pid.strip()}/comm"], 10)).stdout.strip() == "smg::router"
        kept = await t.run(["find", spec.install_dir, "-name", "*.opsbot-prev"], 10)
        assert kept.ok and kept.stdout.strip() == ""  # a successful apply keeps no previous files
        show = await t.run(["systemctl", "show", spec.unit_of("prefill"), "--property=Environment,ActiveState"], 10)
        assert "CUDA_VISIBLE_DEVICES=0,1,2,3" in show.stdout and "ActiveState=active" in show.stdout
        # nothing changed: a second apply uploads and restarts nothing
        again = await apply(spec, pool, guard)
        assert again.ok and again.uploaded == [] and again.restarted == []
        # an incident restart holding prefill's lock: the deploy does not restart it, and says why
        store.take_lock(spec.name, "prefill", "a1b2c3", "elsewhere:1", timedelta(minutes=5))
        locked = await apply(spec, pool, guard, restart_all=True)
        assert not locked.ok and locked.failed_step == "prefill on node1" and locked.restarted == []
        assert "being restarted by action a1b2c3" in locked.evidence[0]
        assert store.audit_log()[0].what == "deploy restart refused"
        store.release_lock(spec.name, "prefill", "a1b2c3")
        # hand edit on the node shows up as drift of that role
        await t.run(["sed", "-i", "s/--queue-size 32/--queue-size 999/", f"{spec.install_dir}/router.sh"], 10)
        (found,) = await drift(spec, pool)
        assert (found.role, found.status) == ("router", "changed")
    # what `opsbot probe --spec FILE` prints after the bundle: the drifted role, from a spec file
    spec_file = tmp_path / "lab-spec.yaml"
    spec_file.write_text(yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False))
    assert await asyncio.to_thread(show_drift, spec_file, lab.settings) == 1


async def test_apply_stops_at_the_first_failing_role_with_evidence(deployed_lab, store):
    lab = deployed_lab
    spec = spec_for(lab)
    guard = guard_for(lab, spec, store)
    async with TransportPool(lab.settings) as pool:
        first = await apply(spec, pool, guard)
        assert first.ok, first.evidence
        lab.inject("decode", "crash")  # decode now exits at start-up with the DSV4 --hicache-size error
        lab.ssh("node2", ["systemctl", "stop", "sglang-dsv4-decode.service"], 20)  # the lab's own unit stays down
        outcome = await apply(spec, pool, guard, restart_all=True)
    assert not outcome.ok
    assert outcome.failed_step == "decode on node2"
    assert outcome.restarted == ["prefill@node1"]  # the router was not touched after decode failed
    text = "\n".join(outcome.evidence)
    assert "opsbot-deploy-decode.service" in text
    assert "does not support --hicache-size" in text


async def test_a_refused_patch_puts_the_previous_files_back(deployed_lab, store):
    """The patch refuses to attach on decode's next start: apply says so and the previous run comes back."""
    lab = deployed_lab
    spec = spec_for(lab)
    guard = guard_for(lab, spec, store)
    env = {**spec.decode.environment, "SGLANG_EMULATOR_PATCH_REFUSE": "sglang 0.5.24: C4Indexer differs"}
    refusing = spec.model_copy(update={"decode": spec.decode.model_copy(update={"environment": env})})
    async with TransportPool(lab.settings) as pool:
        first = await apply(spec, pool, guard)
        assert first.ok, first.evidence
        outcome = await apply(refusing, pool, guard)
        assert not outcome.ok and outcome.failed_step == "decode on node2"
        assert "the patch refused to attach: sglang 0.5.24: C4Indexer differs" in outcome.evidence[0]
        assert not outcome.patch_lines["decode@node2"].attached
        assert f"node2:{spec.install_dir}/decode.sh restored" in outcome.rolled_back
        assert "decode@node2 restarted with the previous files" in outcome.rolled_back
        # the node holds the first spec's files again, and decode runs them, patched
        assert {s.status for s in await diff(spec, pool)} == {"same"}
        t = await pool.get(spec.node("node2"))
        assert (await t.run(["systemctl", "is-active", spec.unit_of("decode")], 10)).stdout.strip() == "active"
        line, problem = await verify_patch(pool, spec, "decode", "node2")
        assert problem is None and line is not None and line.attached
