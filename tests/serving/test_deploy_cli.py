"""``opsbot deploy check|render``: bad specs are refused with rule ids and fixes, and nothing is written."""

from __future__ import annotations

from typer.testing import CliRunner

from opsbot.cli import app
from tests.serving.conftest import EXAMPLE

runner = CliRunner()


def test_check_accepts_the_example():
    res = runner.invoke(app, ["deploy", "check", str(EXAMPLE)])
    assert res.exit_code == 0, res.output
    assert "passes every rule" in res.output


def test_bad_spec_is_refused_with_every_rule_and_renders_nothing(spec_file, tmp_path):
    def bad(d):
        d["prefill"]["args"]["--hicache-size"] = 200
        d["prefill"]["args"]["--enable-turbo"] = True
        d["decode"]["gpus"] = [3, 4, 5, 6]
        d["decode"]["hicache_ratio"] = 4.0

    p = spec_file(bad)
    out = tmp_path / "out"
    res = runner.invoke(app, ["deploy", "render", str(p), str(out)])
    assert res.exit_code == 2
    text = res.output
    for rule in ("[dsv4-hicache-size]", "[unknown-flag]", "[gpu-overlap]", "[hicache-numa-budget]"):
        assert rule in text
    assert "Fix: remove --hicache-size and set prefill.hicache_ratio" in text
    assert f"{p}:" in text
    assert not out.exists()


def test_render_writes_every_file(tmp_path):
    res = runner.invoke(app, ["deploy", "render", str(EXAMPLE), str(tmp_path)])
    assert res.exit_code == 0, res.output
    for rel in ("nodes/gpu-node-1/opt/sglang/dsv4/prefill.sh", "nodes/gpu-node-1/etc/systemd/system/sglang-router.service",
                "prometheus/rules/sglang-pd.rules.yml", "grafana/dashboards/sglang-pd.json", "opsbot/inventory.yaml",
                "alertmanager/alertmanager.yml", "nodes/gpu-node-1/opt/sglang/dsv4/gpu_exporter.py"):
        assert (tmp_path / rel).is_file(), rel
    assert (tmp_path / "nodes/gpu-node-1/opt/sglang/dsv4/prefill.sh").stat().st_mode & 0o111


def test_schema_error_is_refused(spec_file):
    res = runner.invoke(app, ["deploy", "check", str(spec_file(lambda d: d["router"].update({"polcy": "x"})))])
    assert res.exit_code == 2 and "router.polcy" in res.output and "unknown field" in res.output


def test_check_shows_the_kv_arithmetic():
    res = runner.invoke(app, ["deploy", "check", str(EXAMPLE)])
    assert res.exit_code == 0, res.output
    text = res.output
    assert "C4 index keys, bf16 (patched): 21 layers x 256 B / 4 tokens = 1,344.00 B" in text  # bf16 index keys
    assert "total, rounded up: 7,738 B per token" in text
    assert "KV pool 81.50 GiB" in text and "context_length 1,048,576 needs 7.56 GiB" in text


def test_memory_and_patch_refusals_come_with_the_numbers_and_upload_nothing(spec_file, tmp_path):
    def bad(d):
        d["decode"]["mem_fraction_static"] = 0.3
        d["sglang_version"] = "0.5.22"

    res = runner.invoke(app, ["deploy", "apply", str(spec_file(bad))], terminal_width=200)
    assert res.exit_code == 2  # refused before any connection to a node
    text = " ".join(res.output.split())
    assert "[kv-budget]" in text and "short by 3.06 GiB" in text and "at least 0.322" in text
    assert "[patch-sglang-unknown]" in text and "not 0.5.22" in text
    res = runner.invoke(app, ["deploy", "check", str(spec_file(bad))], terminal_width=200)
    assert res.exit_code == 2 and "KV pool 4.50 GiB" in res.output  # the arithmetic beside the refusal


def test_bf16_keys_on_a_model_without_an_indexer_are_refused(spec_file):
    def v3(d):
        d["model"]["config"] = "DeepSeek-V3"
        d["prefill"]["context_length"] = d["decode"]["context_length"] = 131072

    res = runner.invoke(app, ["deploy", "check", str(spec_file(v3))], terminal_width=200)
    text = " ".join(res.output.split())
    assert res.exit_code == 2 and "[index-keys-no-indexer]" in text and "0 of 61 layers" in text
