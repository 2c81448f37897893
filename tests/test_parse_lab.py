"""Parsers on bundles captured from the lab nodes (real systemd, journald, sshd; emulated SGLang)."""

from __future__ import annotations

from pathlib import Path

import pytest

from opsbot.bundle import read_bundle
from opsbot.parse.gpu import parse_gpu_csv
from opsbot.parse.logs import count_kinds, parse_log_lines
from opsbot.parse.metrics import parse_samples
from opsbot.parse.unit import parse_unit

LAB = Path(__file__).parent / "fixtures" / "lab"


@pytest.fixture(scope="module")
def healthy():
    return read_bundle(LAB / "healthy.json")


def test_healthy_units_and_gpus(healthy):
    for r in healthy.roles:
        u = parse_unit(r.systemd.raw)
        assert (u.id, u.load_state, u.active_state, u.sub_state) == (r.unit, "loaded", "active", "running")
        assert u.main_pid and u.main_pid > 0 and u.n_restarts is not None
    for n in healthy.nodes:
        rows = parse_gpu_csv(n.gpu.raw)
        assert [g.index for g in rows] == [0, 1, 2, 3]
        assert all(g.name == "NVIDIA H200" and g.memory_total_mib == 143771 for g in rows)


def test_healthy_metrics_move(healthy):
    decode = parse_samples(healthy.role("decode").metrics.samples)
    prefill = parse_samples(healthy.role("prefill").metrics.samples)
    router = parse_samples(healthy.role("router").metrics.samples)
    for m in (decode, prefill, router):
        assert m.problems == [] and m.window_s and m.window_s >= 2.9
    assert decode.deltas["realtime_tokens_decode"] > 0 and decode.gauges["num_running_reqs"] > 0
    assert prefill.deltas["realtime_tokens_prefill_compute"] > 0
    assert 0 <= decode.gauges["token_usage"] <= 1
    assert router.gauges["smg_worker_pool_size"] == 2 and router.gauges["smg_worker_pool_size_decode"] == 1


def test_healthy_logs_are_batch_heartbeats(healthy):
    entries = parse_log_lines(healthy.role("decode").logs.raw)
    assert entries and all(e.ts and e.host and e.pid for e in entries)
    batch = [e for e in entries if e.kind == "batch"]
    assert len(batch) > len(entries) / 2 and all(e.tp_rank == 0 and e.process == "python3" for e in batch)
    # this capture came after a test had SIGKILLed the decode: systemd's lines about it are kept
    assert all(e.kind != "batch" for e in entries if e.process == "systemd")


def test_wedged_decode_fixture():
    b = read_bundle(LAB / "wedged-decode.json")
    r = b.role("decode")
    m = parse_samples(r.metrics.samples)
    assert m.gauges["num_running_reqs"] > 0 and m.deltas["realtime_tokens_decode"] == 0
    assert parse_unit(r.systemd.raw).active_state == "active"
    assert not r.health.ok and "no answer" in r.health.error


def test_crash_looping_prefill_fixture():
    b = read_bundle(LAB / "crash-prefill.json")
    r = b.role("prefill")
    u = parse_unit(r.systemd.raw)
    assert u.n_restarts >= 3 and u.result == "exit-code" and u.exec_main_status == 1
    kinds = count_kinds(parse_log_lines(r.logs.raw))
    assert kinds["hicache"] >= 1 and kinds["crash"] >= 3
    assert not r.metrics.ok and r.metrics.samples == []
