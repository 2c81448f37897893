"""diff and drift over a real loopback sshd (pinned host key): hashes of what is on the node."""

from __future__ import annotations

from pathlib import Path

import pytest

from opsbot.collect.transport import TransportPool
from opsbot.settings import Settings
from serving.render import render
from serving.rollout import diff, drift, parse_sha256sum
from serving.spec import NodeSpec
from tests.sshd import start_sshd


@pytest.fixture
def sshd(tmp_path):
    d = start_sshd(tmp_path)
    yield d
    d.stop()


@pytest.fixture
def spec(example, sshd, tmp_path):
    node = NodeSpec(**sshd.node(name="gpu-node-1").model_dump(), gpu_count=8, numa_memory_gib={0: 1024, 1: 1024})
    return example.model_copy(update={"nodes": [node], "install_dir": str(tmp_path / "node" / "opt"),
                                      "unit_dir": str(tmp_path / "node" / "units")})


async def test_diff_then_drift_after_upload_and_tamper(spec, tmp_path):
    settings = Settings(data_dir=tmp_path / "data")
    async with TransportPool(settings) as pool:
        before = await diff(spec, pool)
        assert before and {s.status for s in before} == {"missing"}
        t = await pool.get(spec.nodes[0])
        for f in render(spec).node_files["gpu-node-1"]:  # serve scripts, units, the patch's files
            Path(f.path).parent.mkdir(parents=True, exist_ok=True)
            await t.put_file(f.path, f.data, f.mode)
        assert {s.status for s in await diff(spec, pool)} == {"same"}
        assert await drift(spec, pool) == []
        # someone edits decode's serve script on the node by hand
        script = tmp_path / "node" / "opt" / "decode.sh"
        script.write_text(script.read_text().replace("--mem-fraction-static 0.85", "--mem-fraction-static 0.9"))
        (found,) = await drift(spec, pool)
        assert (found.role, found.path, found.status) == ("decode", str(script), "changed")
        (tmp_path / "node" / "units" / "sglang-router.service").unlink()
        states = {(s.role, s.status) for s in await drift(spec, pool)}
        assert states == {("decode", "changed"), ("router", "missing")}
        assert await drift(spec, pool, roles=["prefill"]) == []
        # a hand-edited file of the bf16 patch is drift too
        patch_file = next(f for f in render(spec).node_files["gpu-node-1"] if f.role == "patch")
        Path(patch_file.path).write_bytes(patch_file.data + b"\n# edited on the node\n")
        assert ("patch", "changed") in {(s.role, s.status) for s in await drift(spec, pool)}


async def test_unreachable_node_is_reported_not_raised(spec, sshd, tmp_path):
    sshd.stop()
    async with TransportPool(Settings(data_dir=tmp_path / "data", ssh_connect_timeout_s=2)) as pool:
        states = await diff(spec, pool)
    assert states and {s.status for s in states} == {"unreadable"}
    assert states[0].detail


def test_parse_sha256sum_keeps_only_well_formed_lines():
    h = "a" * 64
    assert parse_sha256sum(f"{h}  /opt/x.sh\ngarbage\n\\{h}  /odd\\nname\n") == {"/opt/x.sh": h}
