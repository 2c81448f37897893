"""probe() end to end on this machine: a local node, a real HTTP server, and a dead SSH node."""

from __future__ import annotations

import time

import pytest

from opsbot.bundle import parse_bundle
from opsbot.collect.probe import probe, since_timestamp
from opsbot.inventory import Inventory, UnknownRole
from opsbot.parse.metrics import parse_samples
from opsbot.settings import Settings
from tests.httpstub import serve
from tests.sshd import free_port

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDr6mGNmEXLk0ioh9kKUT1GYnDt4hO8VkqQ3M2qA3q8P"


@pytest.fixture(scope="module")
def server():
    """A /metrics whose decode counter moves 100 tokens per request, and a /health."""
    state = {"tokens": 0}

    def body_for(path: str) -> bytes:
        if path == "/metrics":
            state["tokens"] += 100
            return (
                "# TYPE sglang:num_running_reqs gauge\n"
                'sglang:num_running_reqs{tp_rank="0"} 4\n'
                "# TYPE sglang:realtime_tokens_total counter\n"
                f'sglang:realtime_tokens_total{{mode="decode",tp_rank="0"}} {state["tokens"]}\n'
            ).encode()
        if path == "/slow":
            time.sleep(4)
            return b"late"
        return b""

    with serve(body_for) as url:
        yield url


def _inventory(url: str, dead_port: int, health: str = "/health") -> Inventory:
    return Inventory.model_validate(
        {
            "clusters": {
                "here": {
                    "nodes": [
                        {"name": "self", "address": "localhost", "transport": "local"},
                        {"name": "gone", "address": "127.0.0.1", "port": dead_port, "host_key": KEY},
                    ],
                    "roles": [
                        {"role": "decode", "node": "self", "unit": "sglang-dsv4-decode.service",
                         "metrics_url": f"{url}/metrics", "health_url": f"{url}{health}", "http_via_ssh": False},
                        {"role": "prefill", "node": "gone", "unit": "sglang-dsv4-prefill.service",
                         "metrics_url": "http://127.0.0.1:30000/metrics", "health_url": "http://127.0.0.1:30000/health"},
                    ],
                }
            }
        }
    )


async def test_probe_collects_what_it_can_and_marks_the_rest(server, tmp_path):
    s = Settings(data_dir=tmp_path, metrics_window_s=0.5, ssh_connect_timeout_s=1.0, probe_deadline_s=6)
    seen: list[tuple[str, str]] = []
    t0 = time.monotonic()
    bundle = await probe(_inventory(server, free_port()), settings=s, progress=lambda n, st: seen.append((n, st)))
    assert time.monotonic() - t0 < 6
    decode, prefill = bundle.role("decode"), bundle.role("prefill")
    assert decode.metrics.ok and len(decode.metrics.samples) == 2
    m = parse_samples(decode.metrics.samples)
    assert m.deltas["realtime_tokens_decode"] == 100 and m.gauges["num_running_reqs"] == 4
    assert 0.4 <= m.window_s <= 1.5
    assert decode.health.ok and decode.health.status == 200 and decode.health.endpoint == "/health"
    for axis in ("systemd", "metrics", "health", "logs"):
        ev = getattr(prefill, axis)
        assert not ev.ok and "cannot connect" in ev.error, axis
    gone = bundle.node("gone")
    assert not gone.gpu.ok and not gone.kernel_log.ok
    # every planned axis reported running and then a result
    finished = [n for n, st in seen if st != "running"]
    assert sorted(finished) == sorted(n for n, st in seen if st == "running") and len(finished) == 12
    # the bundle round-trips through the public parser
    again = parse_bundle(bundle.to_json())
    assert again.role("decode").metrics.samples[1].raw == decode.metrics.samples[1].raw


async def test_a_slow_axis_costs_at_most_its_deadline(server, tmp_path):
    s = Settings(data_dir=tmp_path, metrics_window_s=0.2, http_timeout_s=1.0, ssh_connect_timeout_s=1.0)
    t0 = time.monotonic()
    bundle = await probe(_inventory(server, free_port(), health="/slow"), roles=["decode"], settings=s)
    assert time.monotonic() - t0 < 2.5
    decode = bundle.role("decode")
    assert not decode.health.ok and "no answer within 1 s" in decode.health.error
    assert decode.metrics.ok and decode.logs.ok


async def test_unknown_role_is_refused_before_any_connection(server, tmp_path):
    s = Settings(data_dir=tmp_path)
    t0 = time.monotonic()
    with pytest.raises(UnknownRole, match="decode, prefill"):
        await probe(_inventory(server, free_port()), roles=["decoder"], settings=s)
    assert time.monotonic() - t0 < 0.5


def test_since_timestamp():
    from datetime import datetime, timezone

    now = datetime(2026, 11, 30, 14, 30, tzinfo=timezone.utc)
    assert since_timestamp("-15min", now) == "2026-11-30 14:15:00 UTC"
    assert since_timestamp("-2h", now) == "2026-11-30 12:30:00 UTC"
    assert since_timestamp("today", now) == "today"
