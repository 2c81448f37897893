"""`opsbot ask` end to end on the lab: real sshd, systemd, journald and the emulator."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from opsbot.bundle import read_bundle
from opsbot.cli import app
from opsbot.lab.nodes import Lab

pytestmark = pytest.mark.lab


def _ask(lab: Lab, text: str, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setenv("OPSBOT_DATA_DIR", str(lab.settings.data_dir))
    monkeypatch.setenv("OPSBOT_INVENTORY", str(lab.inventory_path))
    from opsbot.settings import get_settings

    get_settings.cache_clear()
    res = CliRunner().invoke(app, ["ask", text, "--json"])
    get_settings.cache_clear()
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.stdout[res.stdout.index("{"):])


def test_ask_decode_is_stuck_on_a_wedged_decode(lab: Lab, monkeypatch: pytest.MonkeyPatch):
    lab.reset()
    lab.inject("decode", "wedged")
    time.sleep(3)
    out = _ask(lab, "decode is stuck", monkeypatch)
    assert [f["incident"] for f in out["findings"]] == ["decode-wedged"]
    assert out["findings"][0]["roles"] == ["decode"]
    saved = read_bundle(lab.settings.data_dir / "bundles" / f"{out['bundle']}.json")
    # the named role first, then its PD peer and the router (opsbot.diagnose.probe_scope)
    assert [r.role for r in saved.roles] == ["decode", "prefill", "router"]
    assert saved.trigger.text == "decode is stuck"


def test_ask_decode_is_stuck_on_a_saturated_prefill_names_the_prefill(lab: Lab, monkeypatch: pytest.MonkeyPatch):
    """The symptom is on decode (AbortReq cascade), the cause on prefill: probing decode alone would miss it."""
    lab.reset()
    lab.inject("prefill", "prefill-saturated")
    time.sleep(6)
    out = _ask(lab, "decode is stuck", monkeypatch)
    found = [f["incident"] for f in out["findings"]]
    assert found[:1] == ["prefill-queue-saturation"], found
    assert "decode-wedged" not in found and "kv-transfer-failure" not in found, found
    assert "prefill" in out["findings"][0]["roles"]
    saved = read_bundle(lab.settings.data_dir / "bundles" / f"{out['bundle']}.json")
    assert {r.role for r in saved.roles} == {"prefill", "decode", "router"}


def test_ask_on_a_healthy_lab_is_healthy(lab: Lab, monkeypatch: pytest.MonkeyPatch):
    lab.reset()
    time.sleep(2)
    out = _ask(lab, "is everything ok?", monkeypatch)
    assert out["findings"] == []
    saved = read_bundle(lab.settings.data_dir / "bundles" / f"{out['bundle']}.json")
    assert {r.role for r in saved.roles} == {"prefill", "decode", "router"}
