"""The recall probe and the canary on the lab: real sshd, systemd, the router and the emulated model.

The emulator's model answers RULER-style key questions from its prompt, tokenizes deterministically
(``/v1/tokenize`` through the router), spends prefill time in proportion to the prompt, and can be
put into a recall window (``recall-loss --beyond N``), a lose-everything state (``recall-blind``) and
a positional one (``recall-edges``).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from typer.testing import CliRunner

from opsbot.bundle import Bundle, RecallCase, Trigger, read_bundle
from opsbot.cli import app
from opsbot.collect.recall import RecallPlan, recall_bundle
from opsbot.collect.probe import probe
from opsbot.diagnose import default_runbooks, diagnose
from opsbot.inventory import load_inventory
from opsbot.lab.nodes import Lab
from opsbot.parse.recall import summarize

pytestmark = pytest.mark.lab
SMALL = RecallPlan(lengths=(1024, 2048, 4096), depths=(0.0, 0.5, 1.0), distractors=2)


def _run(lab: Lab, plan: RecallPlan, progress=None) -> Bundle:
    return asyncio.run(recall_bundle(lab.inventory, cluster=None, plan=plan, settings=lab.settings,
                                     trigger=Trigger(kind="cli", text="recall"), progress=progress))


def _incidents(bundle: Bundle) -> list[str]:
    return [f.incident for f in diagnose(bundle, default_runbooks()).findings]


def test_recall_finds_the_emulators_threshold_within_one_grid_step(lab: Lab, monkeypatch: pytest.MonkeyPatch):
    """The default grid through `opsbot recall`: exact lengths in the server's tokens, the threshold, the finding."""
    lab.reset()
    lab.inject("decode", "recall-loss", beyond=4096)
    monkeypatch.setenv("OPSBOT_DATA_DIR", str(lab.settings.data_dir))
    monkeypatch.setenv("OPSBOT_INVENTORY", str(lab.inventory_path))
    from opsbot.settings import get_settings

    get_settings.cache_clear()
    t0 = time.monotonic()
    res = CliRunner().invoke(app, ["recall", "--json"])
    get_settings.cache_clear()
    assert res.exit_code == 1, res.output
    assert time.monotonic() - t0 < 60
    assert "25 requests, 158,720 prompt tokens" in res.output
    recall = json.loads(res.stdout[res.stdout.index("{"):])
    assert recall["tokenizer"].startswith("server: POST http://127.0.0.1:")
    assert recall["tokenizer"].endswith("/v1/tokenize")
    cases = [RecallCase.model_validate(c) for c in recall["cases"]]
    assert len(cases) == 25 and all(c.error is None and "server_tokens" not in c.model_extra for c in cases)
    assert len({c.needle for c in cases}) == 5  # a fresh random needle per length
    bundles = sorted((lab.settings.data_dir / "bundles").glob("*.json"), key=lambda p: p.stat().st_mtime)
    kept = read_bundle(bundles[-1])
    assert kept.recall is not None and kept.recall.cases == cases
    s = summarize(kept.recall)
    assert s.pattern == "threshold"
    assert s.longest_full is not None and s.threshold is not None
    assert s.longest_full <= 4096 < s.threshold  # the window the emulator was given, within one grid step
    assert kept.canary is not None and kept.canary.ok and kept.canary.tokens
    assert _incidents(kept)[:1] == ["long-context-recall-regression"]
    replay = CliRunner().invoke(app, ["diagnose", str(bundles[-1]), "--json"])
    assert replay.exit_code == 1
    assert json.loads(replay.stdout)["findings"][0]["incident"] == "long-context-recall-regression"


@pytest.mark.parametrize("state, pattern", [("recall-blind", "flat"), ("recall-edges", "positional")])
def test_runbook_does_not_fire_on_a_flat_or_positional_loss(lab: Lab, state: str, pattern: str):
    lab.reset()
    lab.inject("decode", state)
    bundle = _run(lab, SMALL)
    assert summarize(bundle.recall).pattern == pattern
    assert "long-context-recall-regression" not in _incidents(bundle)


def test_recall_backs_off_while_prefill_is_saturated(lab: Lab):
    lab.reset()
    lab.inject("prefill", "prefill-saturated")
    time.sleep(2)
    one = RecallPlan(lengths=(1024,), depths=(0.5,), distractors=1, queue_wait_s=2.0)
    held = _run(lab, one)
    assert [c.error.split(":")[0] for c in held.recall.cases] == ["not sent"]
    assert "prefill queue stayed above 8" in held.recall.cases[0].error

    waiting = threading.Event()
    done: list[Bundle] = []

    def run() -> None:
        done.append(_run(lab, RecallPlan(lengths=(1024,), depths=(0.5,), distractors=1, queue_wait_s=60.0),
                         progress=lambda what, _case: waiting.set() if what == "waiting" else None))

    worker = threading.Thread(target=run)
    worker.start()
    assert waiting.wait(30), "the probe never waited for the saturated prefill"
    lab.inject("prefill", "healthy")
    lab.inject("decode", "healthy")
    worker.join(90)
    assert done and done[0].recall.cases[0].error is None and done[0].recall.cases[0].found is True


@pytest.mark.parametrize("state, error", [("garbage", "not a completion"), ("slow", "no answer within")])
def test_a_router_that_answers_garbage_or_times_out_gives_each_case_its_error(lab: Lab, state: str, error: str):
    lab.reset()
    lab.inject("router", state)
    bundle = _run(lab, RecallPlan(lengths=(1024, 2048), depths=(0.0, 1.0), distractors=1, request_timeout_s=2.0))
    assert len(bundle.recall.cases) == 4
    assert all(c.found is None and error in (c.error or "") for c in bundle.recall.cases)
    assert summarize(bundle.recall).pattern == "unjudged"
    assert bundle.canary is not None and not bundle.canary.ok
    lab.inject("router", "healthy")


def test_bad_input_model_context_and_unreachable_tokenizer_each_get_their_error(lab: Lab, tmp_path):
    lab.reset()
    unserved = _run(lab, RecallPlan(lengths=(1024,), depths=(0.5,), model="no-such-model"))
    assert "does not serve model 'no-such-model'" in (unserved.recall.cases[0].error or "")
    too_long = _run(lab, RecallPlan(lengths=(1024, 2 * 1024 * 1024), depths=(0.5,), distractors=1))
    assert [c.tokens for c in too_long.recall.cases] == [1024]
    assert too_long.recall.notes == ["2m skipped: the model's context holds 1048576 tokens"]
    text = lab.inventory_path.read_text().replace(
        "unit: sglang-router.service\n", "unit: sglang-router.service\n      api_url: http://127.0.0.1:9\n", 1)
    unreachable = tmp_path / "inventory.yaml"
    unreachable.write_text(text)
    blind = asyncio.run(recall_bundle(load_inventory(unreachable), cluster=None, settings=lab.settings,
                                      plan=RecallPlan(lengths=(1024, 2048), depths=(0.5,), model="m"),
                                      trigger=Trigger(kind="cli")))
    assert len(blind.recall.cases) == 2
    assert all(c.found is None and c.error.startswith("tokenizer: POST http://127.0.0.1:9/v1/tokenize")
               for c in blind.recall.cases)
    assert blind.recall.tokenizer is None


def test_canary_answers_through_the_router_and_can_be_switched_off(lab: Lab, tmp_path):
    lab.reset()
    bundle = _run(lab, RecallPlan(lengths=(1024,), depths=(0.5,), distractors=0))
    c = bundle.canary
    assert c is not None and c.ok and c.status == 200 and c.tokens and c.ttft_ms is not None
    assert c.total_ms >= c.ttft_ms and c.endpoint.endswith("/v1/completions")
    text = lab.inventory_path.read_text().replace("    nodes:\n", "    canary: false\n    nodes:\n", 1)
    off = tmp_path / "inventory.yaml"
    off.write_text(text)
    quiet = asyncio.run(probe(load_inventory(off), roles=["router"], settings=lab.settings))
    assert quiet.canary is None
