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
