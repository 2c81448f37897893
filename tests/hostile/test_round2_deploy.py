"""Issue 23, ``opsbot deploy``: a spec that writes outside its output folder (item 4), injects unit-file
directives through a newline (item 5), or carries numbers no rule can reason about (item 6). Each is
refused by ``check`` and by ``render`` with exit 2 and the field named, no traceback, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from opsbot.cli import app
from serving.render import OutsideOutput, RenderedFile, Rendering, write

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "serving" / "examples" / "dsv4-flash-1node.yaml"
INJECTED = "deepseek\n[Service]\nExecStartPre=/bin/sh -c 'touch /tmp/pwned'"


def _set(path: str, value):
    def edit(d):
        *parents, last = path.split(".")
        for p in parents:
            d = d[p]
        d[last] = value
    return edit


HOSTILE = [
    ("install_dir", _set("install_dir", "/x/../../../../ESCAPED")),
    ("unit_dir", _set("unit_dir", "/etc/systemd/system/./..")),
    ("unit", _set("exporter.unit", "opsbot-gpu-exporter.service/../../../x")),
    ("unit", _set("prefill.unit", "sglang-prefill.service\nExecStart=/bin/sh")),
    ("unit", _set("router.unit", "../../tmp/x.service")),
    ("served_name", _set("model.served_name", INJECTED)),
    ("name", _set("name", "dsv4\nx")),
    ("path", _set("model.path", "/models/x\rExecStart=/bin/sh")),
    ("launcher", _set("launcher", ["python3", "-m", "sglang.launch_server\n[Install]"])),
    ("environment", _set("prefill.environment", {"A": "1\nExecStart=/bin/sh"})),
    ("args", _set("decode.args", {"--tool-call-parser": "x\u2028y"})),
    ("hicache_ratio", _set("decode.hicache_ratio", float("nan"))),
    ("hicache_ratio", _set("decode.hicache_ratio", float("inf"))),
    ("weights_gib", _set("model.weights_gib", 10**400)),
    ("tp", _set("prefill.tp", 10**400)),
    ("kv_usage_max", lambda d: d.setdefault("alerts", {}).__setitem__("kv_usage_max", float("nan"))),
    ("numa_memory_gib", lambda d: d["nodes"][0].__setitem__("numa_memory_gib", {0: float("inf")})),
    ("args", _set("prefill.args", {"--chunked-prefill-size": float("nan")})),
    ("hicache_numa_margin", _set("hicache_numa_margin", float("nan"))),
]


@pytest.mark.parametrize("field,edit", HOSTILE, ids=[f"{f}-{i}" for i, (f, _e) in enumerate(HOSTILE)])
def test_hostile_spec_is_refused_naming_the_field(tmp_path, field, edit):
    data = yaml.safe_load(EXAMPLE.read_text())
    edit(data)
    text = yaml.safe_dump(data, sort_keys=False)
    text = text.replace(str(10**400), "1" + "0" * 400)  # YAML writes the big integer as it is
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    out = tmp_path / "out"
    runner = CliRunner()
    for argv in (["deploy", "check", str(spec)], ["deploy", "render", str(spec), str(out)]):
        res = runner.invoke(app, argv)
        assert res.exit_code == 2, (argv, res.output)
        assert isinstance(res.exception, SystemExit), repr(res.exception)  # a clear refusal, no traceback
        assert "spec refused" in res.output and field in res.output, res.output
    assert not out.exists()
    assert not (tmp_path.parent / "ESCAPED").exists() and not Path("/ESCAPED").exists()


def test_write_refuses_any_path_that_resolves_outside(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "nodes").mkdir()
    (out / "nodes" / "n1").symlink_to(tmp_path)  # a link planted in the output folder
    for rendering in (
        Rendering(node_files={"n1": [RenderedFile(path="/etc/x.service", data=b"x", mode=0o644, role="prefill")]}),
        Rendering(node_files={}, cluster_files={"../escaped.yml": b"x"}),
        Rendering(node_files={}, cluster_files={"prometheus/../../escaped.yml": b"x"}),
    ):
        with pytest.raises(OutsideOutput, match="does not resolve under the output folder"):
            write(rendering, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_the_example_still_renders(tmp_path):
    res = CliRunner().invoke(app, ["deploy", "render", str(EXAMPLE), str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert all(p.resolve().is_relative_to((tmp_path / "out").resolve()) for p in (tmp_path / "out").rglob("*"))
