"""The probe against the lab: real sshd, systemd and journald on systemd-nspawn nodes."""

from __future__ import annotations

import asyncio
import time

import pytest

from opsbot.collect.probe import probe
from opsbot.collect.transport import TransportPool
from opsbot.diagnose import diagnose
from opsbot.inventory import Inventory
from opsbot.parse.gpu import parse_gpu_csv
from opsbot.parse.logs import parse_log_lines
from opsbot.parse.metrics import parse_samples
from opsbot.parse.unit import parse_unit
from opsbot.settings import Settings

pytestmark = pytest.mark.lab

AXES = ("systemd", "metrics", "health", "logs")
WRONG_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDr6mGNmEXLk0ioh9kKUT1GYnDt4hO8VkqQ3M2qA3q8P"


@pytest.fixture
def settings(tmp_path):
    return Settings(data_dir=tmp_path, ssh_connect_timeout_s=3.0, metrics_window_s=3.0, probe_deadline_s=15)


def _edit_node(inv: Inventory, node: str, **changes) -> Inventory:
    data = inv.model_dump()
    for cl in data["clusters"].values():
        for n in cl["nodes"]:
            if n["name"] == node:
                n.update(changes)
    return Inventory.model_validate(data)


def _roles_on(inv: Inventory, node: str) -> list[str]:
    _name, cl = inv.cluster(None)
    return [r.key for r in cl.roles if r.node == node]


async def _wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.5)


async def test_two_node_lab_every_axis_complete(lab, settings):
    bundle = await probe(lab.inventory, settings=settings)
    assert {r.role for r in bundle.roles} == {"prefill", "decode", "router"}
    assert {r.node for r in bundle.roles if r.role in ("prefill", "router")} == {"node1"}
    assert bundle.role("decode").node == "node2"
    for r in bundle.roles:
        for axis in AXES:
            ev = getattr(r, axis)
            assert ev.ok, f"{r.key}/{axis}: {ev.error}"
        unit = parse_unit(r.systemd.raw)
        assert unit.id == r.unit and unit.active_state == "active" and unit.main_pid
        assert len(r.metrics.samples) == 2 and r.health.status == 200
        m = parse_samples(r.metrics.samples)
        assert m.problems == [] and 2.5 <= m.window_s <= 4.5
    decode = parse_samples(bundle.role("decode").metrics.samples)
    assert decode.deltas["realtime_tokens_decode"] > 0, "a healthy decode with load must move its token counter"
    assert any(e.kind == "batch" for e in parse_log_lines(bundle.role("decode").logs.raw))
    for n in bundle.nodes:
        assert n.gpu.ok and n.kernel_log is not None and n.kernel_log.ok, n
        assert parse_gpu_csv(n.gpu.raw)
    # healthy is earned: real systemd, journald and the emulator's own lines give every role positive evidence
    d = diagnose(bundle)
    assert d.healthy and d.answer == "healthy", [(r.role, str(r.state), r.reasons) for r in d.roles]


async def test_wedged_decode_running_requests_no_tokens(lab, settings):
    lab.inject("decode", "wedged")
    try:
        async def wedged():
            b = await probe(lab.inventory, roles=["decode"], settings=settings)
            m = parse_samples(b.role("decode").metrics.samples)
            return m if m.deltas.get("realtime_tokens_decode") == 0 else None

        m = await _wait_for(wedged, 30, "the decode to stop producing tokens")
        assert m.gauges["num_running_reqs"] > 0
        assert m.rates["realtime_tokens_decode"] == 0
    finally:
        lab.inject("decode", "healthy")


async def test_killed_process_shows_restarts_climbing(lab, settings):
    inv = lab.inventory
    _name, cl = inv.cluster(None)
    role = next(r for r in cl.roles if r.role == "decode")

    async def restarts() -> tuple[int, str]:
        b = await probe(inv, roles=["decode"], settings=settings.model_copy(update={"metrics_window_s": 0.0}))
        u = parse_unit(b.role("decode").systemd.raw)
        return u.n_restarts or 0, u.active_state or ""

    before, _ = await restarts()
    async with TransportPool(settings) as pool:
        t = await pool.get(cl.node(role.node))
        r = await t.run(["systemctl", "kill", "--kill-who=main", "--signal=SIGKILL", role.unit], timeout=10)
        assert r.ok, r

    async def climbed():
        n, state = await restarts()
        return (n, state) if n > before and state == "active" else None

    n, _ = await _wait_for(climbed, 30, "systemd to restart the killed decode")
    assert n == before + 1


async def test_node_with_sshd_stopped_fails_within_deadline(lab, settings):
    lab.stop_sshd("node2")
    try:
        t0 = time.monotonic()
        bundle = await probe(lab.inventory, settings=settings)
        elapsed = time.monotonic() - t0
    finally:
        lab.start_sshd("node2")
    assert elapsed < settings.ssh_connect_timeout_s + settings.metrics_window_s + 5
    for key in _roles_on(lab.inventory, "node2"):
        r = bundle.role(key)
        for axis in AXES:
            ev = getattr(r, axis)
            assert not ev.ok and ev.error and "node2" in ev.error, (key, axis, ev.error)
    assert not bundle.node("node2").gpu.ok
    for key in _roles_on(lab.inventory, "node1"):
        r = bundle.role(key)
        assert all(getattr(r, a).ok for a in AXES), [(a, getattr(r, a).error) for a in AXES]
    assert bundle.node("node1").gpu.ok


async def test_wrong_pinned_host_key_is_refused(lab, settings):
    inv = _edit_node(lab.inventory, "node1", host_key=WRONG_KEY, known_hosts=None)
    bundle = await probe(inv, settings=settings.model_copy(update={"metrics_window_s": 0.0}))
    for key in _roles_on(inv, "node1"):
        ev = bundle.role(key).systemd
        assert not ev.ok and "not the one the inventory trusts" in ev.error
        assert not bundle.role(key).metrics.samples
    assert bundle.role("decode").systemd.ok  # node2 keeps its correct key


async def test_tofu_records_the_lab_key(lab, settings, tmp_path):
    kh = tmp_path / "known_hosts"
    pinned = lab.inventory.cluster(None)[1].node("node2").host_key
    inv = _edit_node(lab.inventory, "node2", host_key=None, known_hosts=kh, trust_on_first_use=True)
    bundle = await probe(inv, roles=["decode"], settings=settings.model_copy(update={"metrics_window_s": 0.0}))
    assert bundle.role("decode").systemd.ok
    recorded = kh.read_text().split()
    assert " ".join(recorded[1:3]) == " ".join(pinned.split()[:2])


def test_cli_probe_and_inventory_check_on_the_lab(lab, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from opsbot.cli import app
    from opsbot.settings import get_settings

    monkeypatch.setenv("OPSBOT_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("OPSBOT_INVENTORY", str(lab.inventory_path))
    get_settings.cache_clear()
    try:
        runner = CliRunner()
        checked = runner.invoke(app, ["inventory", "check"], env={"COLUMNS": "200"})
        assert checked.exit_code == 0, checked.output
        assert checked.stdout.count("host key verified") == 2 and "FAIL" not in checked.stdout
        probed = runner.invoke(app, ["probe", "decode", "prefill"], env={"COLUMNS": "250"})
        assert probed.exit_code == 0, probed.output
        assert probed.stdout.count("active/running") == 2 and "tok/s" in probed.stdout
        assert len(list((tmp_path / "bundles").glob("*.json"))) == 1
    finally:
        get_settings.cache_clear()


async def test_missing_unit_and_wrong_key_fail_the_inventory_check(lab, settings, tmp_path):
    from opsbot.collect.check import check_inventory

    data = lab.inventory.model_dump(mode="json")
    cl = next(iter(data["clusters"].values()))
    cl["roles"].append({"role": "decode", "name": "ghost", "node": "node2", "unit": "sglang-ghost.service"})
    next(n for n in cl["nodes"] if n["name"] == "node1")["host_key"] = WRONG_KEY
    rows = await check_inventory(Inventory.model_validate(data), settings)
    bad = {(r.node, r.subject): r.detail for r in rows if not r.ok}
    assert "host key refused" in bad[("node1", "ssh")]
    assert "LoadState=not-found" in bad[("node2", "sglang-ghost.service")]
    assert [r.ok for r in rows if r.subject == "sglang-dsv4-decode.service"] == [True]
    bundle = await probe(Inventory.model_validate(data), roles=["ghost"], settings=settings.model_copy(
        update={"metrics_window_s": 0.0}))
    assert not parse_unit(bundle.role("ghost").systemd.raw).exists


async def test_probe_stops_waiting_for_the_canary_once_the_other_axes_name_a_wedge(lab, tmp_path):
    """A wedged decode holds the canary until its deadline; the flow's probe ends with the metrics window instead,
    the canary marked not awaited (and not evidence), and the same probe of a healthy lab still waits for it."""
    from opsbot.bundle import Trigger
    from opsbot.flow import Flow
    from opsbot.store import Store

    s = lab.settings.model_copy(update={"data_dir": tmp_path, "database_url": f"sqlite:///{tmp_path}/opsbot.db",
                                        "metrics_window_s": 3.0, "canary_deadline_s": 12.0,
                                        "inventory": lab.inventory_path})
    flow = Flow(settings=s, store=Store(s.db_url()))
    lab.reset()
    healthy = await flow.run_probe(None, None, Trigger(kind="cli"))
    assert healthy.bundle.canary is not None and healthy.bundle.canary.ok and not healthy.bundle.canary.not_awaited
    lab.inject("decode", "wedged")
    try:
        async def named():
            t0 = time.monotonic()
            r = await flow.run_probe(None, None, Trigger(kind="cli"))
            found = r.diagnosis.findings and r.diagnosis.findings[0].incident == "decode-wedged"
            return (r, time.monotonic() - t0) if found else None

        result, took = await _wait_for(named, 40, "a probe to name decode-wedged")
        c = result.bundle.canary
        assert c is not None and c.not_awaited and "decode-wedged" in c.not_awaited and not c.ok
        assert c.elapsed_ms < s.canary_deadline_s * 1000
        assert took < s.canary_deadline_s - 2, f"the probe waited for the canary ({took:.1f} s)"
        assert "kv-transfer-failure" not in {f.incident for f in result.diagnosis.findings}
    finally:
        lab.inject("decode", "healthy")
