"""The probe and inventory commands as an operator runs them (typer's runner, real files)."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from opsbot.cli import app
from opsbot.settings import get_settings
from opsbot.store import Store
from tests.test_probe_local import server  # noqa: F401  (module-scoped HTTP fixture)

runner = CliRunner()


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("OPSBOT_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("OPSBOT_METRICS_WINDOW_S", "0.3")
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def _write_inventory(path, url):
    path.write_text(yaml.safe_dump({"clusters": {"here": {
        "nodes": [{"name": "self", "address": "localhost", "transport": "local"}],
        "roles": [{"role": "decode", "node": "self", "unit": "sglang-dsv4-decode.service",
                   "metrics_url": f"{url}/metrics", "health_url": f"{url}/health", "http_via_ssh": False}],
    }}}))
    return path


def test_unknown_role_lists_known_roles(env, server):  # noqa: F811
    inv = _write_inventory(env / "inventory.yaml", server)
    result = runner.invoke(app, ["probe", "decoder", "-i", str(inv)])
    assert result.exit_code == 2
    assert "unknown role 'decoder'" in result.output and "decode" in result.output
    assert not (env / "bundles").exists()


def test_broken_inventory_names_file_and_line(env):
    bad = env / "bad.yaml"
    bad.write_text("clusters:\n  lab:\n    nodes:\n      - name: n1\n        address: 10.0.0.1\n    roles: []\n")
    result = runner.invoke(app, ["inventory", "check", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}:4" in result.output and "host key pinned" in result.output


def test_probe_json_and_saved_bundle(env, server):  # noqa: F811
    inv = _write_inventory(env / "inventory.yaml", server)
    out = env / "copy.json"
    result = runner.invoke(app, ["probe", "--json", "--save", str(out), "-i", str(inv)])
    assert result.exit_code == 0, result.output
    start = result.stdout.index("{")
    data = json.loads(result.stdout[start:])
    assert data["schema"] == "opsbot/probe-bundle@1" and data["roles"][0]["metrics"]["ok"]
    saved = env / "bundles" / f"{data['id']}.json"
    assert json.loads(saved.read_text())["id"] == data["id"] == json.loads(out.read_text())["id"]
    with Store(get_settings().db_url()) as store:  # every probe is kept, the CLI's too
        (row,) = store.probes()
        assert row.id == data["id"] and row.trigger_kind == "cli"


def test_ask_then_history_shows_the_probe(env, server):  # noqa: F811
    """The 3 a.m. walk: `opsbot ask` probes, diagnoses and records; `opsbot history` shows that probe."""
    inv = _write_inventory(env / "inventory.yaml", server)
    asked = runner.invoke(app, ["ask", "decode is stuck", "--json", "-i", str(inv)])
    assert asked.exit_code in (1, 3), asked.output  # systemd and nvidia-smi unreachable here: never healthy
    bundle = json.loads(asked.stdout[asked.stdout.index("{"):])["bundle"]
    shown = runner.invoke(app, ["history", "--role", "decode"], env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    assert bundle in shown.stdout and "trigger cli" in shown.stdout


def test_probe_table(env, server):  # noqa: F811
    inv = _write_inventory(env / "inventory.yaml", server)
    result = runner.invoke(app, ["probe", "-i", str(inv)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "decode" in result.stdout and "tok/s" in result.stdout
