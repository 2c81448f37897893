"""The recall probe's pure parts: flags, judging, the shape of a loss, facts, the runbook and the canary.

Runbook checks use the lab's healthy bundle (tests/scenarios/dev/healthy.json) with a recall or
canary section put in, so the real parsers and the real runbooks read them.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opsbot.bundle import Bundle, Canary, Recall, RecallCase, parse_bundle
from opsbot.collect import haystack
from opsbot.collect.recall import RecallPlan, fit_group, queue_depth
from opsbot.diagnose import default_runbooks, diagnose
from opsbot.lab.emulator import recall as model
from opsbot.parse.recall import (
    canary_facts, judge, parse_depths, parse_fillers, parse_lengths, recall_facts, summarize, worse, run_record,
)

HEALTHY = Path(__file__).parent / "scenarios" / "dev" / "healthy.json"
LENGTHS = (1024, 2048, 4096, 8192, 16384)
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


def _recall(lost: callable) -> Recall:
    cases = [RecallCase(tokens=n, depth=d, needle="1234567", found=not lost(n, d), answer="x")
             for n in LENGTHS for d in DEPTHS]
    return Recall(model="m", endpoint="http://r/v1/completions", tokenizer="server", cases=cases)


def _bundle(recall: Recall | None = None, canary: Canary | None = None) -> Bundle:
    b = parse_bundle(HEALTHY.read_text(encoding="utf-8"), str(HEALTHY))
    return b.model_copy(update={"recall": recall, "canary": canary})


def _incidents(bundle: Bundle) -> list[str]:
    return [f.incident for f in diagnose(bundle, default_runbooks()).findings]


def test_flags_parse_and_bad_ones_say_what_to_write():
    assert parse_lengths("1k, 2k,4096,1m") == [1024, 2048, 4096, 1024 * 1024]
    assert parse_depths("1,0,0.5") == [0.0, 0.5, 1.0]
    assert parse_fillers("code,prose,code") == ["code", "prose"]
    for bad, says in [("1x", "write a token count"), ("12", "at least 64"), ("", "write a token count")]:
        with pytest.raises(ValueError, match=says):
            parse_lengths(bad)
    with pytest.raises(ValueError, match="from 0"):
        parse_depths("1.5")
    with pytest.raises(ValueError, match="choose from prose, code, config"):
        parse_fillers("poetry")


@given(st.integers(10**6, 10**7 - 1), st.text(alphabet=" .,:;!?\n", max_size=3), st.text(alphabet=" .,:\n", max_size=3))
def test_judge_finds_the_value_between_separators_only(value: int, before: str, after: str):
    v = str(value)
    assert judge(f"The answer is{before or ' '}{v}{after}", v)
    assert not judge(f"{v}9", v) and not judge(f"9{v}", v)
    assert not judge(str(value + 1), v)


@given(st.integers(1, len(LENGTHS) - 1), st.sets(st.sampled_from(DEPTHS), min_size=2).filter(lambda s: s - {0.0, 1.0}))
def test_a_loss_past_a_length_at_several_depths_is_a_threshold(first_lost: int, depths: set[float]):
    cut = LENGTHS[first_lost]
    s = summarize(_recall(lambda n, d: n >= cut and (d in depths or n > cut)))
    assert s.pattern == "threshold"
    assert s.threshold == cut and s.longest_full == LENGTHS[first_lost - 1]


@given(st.sets(st.sampled_from(LENGTHS), min_size=1), st.sampled_from([(0.0,), (1.0,), (0.0, 1.0)]))
def test_a_loss_only_at_the_edges_is_positional(lengths: set[int], edges: tuple[float, ...]):
    assert summarize(_recall(lambda n, d: n in lengths and d in edges)).pattern == "positional"


def test_a_loss_at_every_length_is_flat_and_none_is_full():
    assert summarize(_recall(lambda n, d: True)).pattern == "flat"
    assert summarize(_recall(lambda n, d: d in (0.25, 0.5, 0.75))).pattern == "flat"
    full = summarize(_recall(lambda n, d: False))
    assert full.pattern == "full" and full.longest_full == 16384 and full.threshold is None
    errors = Recall(cases=[RecallCase(tokens=1024, depth=0.5, found=None, error="HTTP 503: no workers")])
    assert summarize(errors).pattern == "unjudged" and summarize(errors).errors == 1


def test_runbook_fires_on_a_threshold_and_names_it_with_the_preceding_deploy():
    recall = _recall(lambda n, d: n > 4096).model_copy(update={"after_deploy": "lab-2node.yaml at 2026-12-01 10:00"})
    d = diagnose(_bundle(recall, Canary(ok=True, status=200, tokens=8)), default_runbooks())
    assert [f.incident for f in d.findings] == ["long-context-recall-regression"]
    f = d.findings[0]
    assert f.roles == ["router"]
    assert "up to 4096 tokens and lost from 8192" in f.summary and "lab-2node.yaml" in f.summary
    text = "\n".join(f.evidence)
    assert "[8192, 16384]" in text and "5 of 5 depths" in text and "lab-2node.yaml" in text


@pytest.mark.parametrize("lost", [
    lambda n, d: True,  # flat: a broken prompt or tokenizer
    lambda n, d: d in (0.0, 1.0),  # positional
    lambda n, d: n == 8192 and d == 0.5,  # one stray miss
    lambda n, d: False,
])
def test_runbook_does_not_fire_on_flat_positional_scattered_or_full(lost):
    assert "long-context-recall-regression" not in _incidents(_bundle(_recall(lost)))


def test_runbook_does_not_fire_while_a_role_is_down_or_the_canary_fails():
    recall = _recall(lambda n, d: n > 4096)
    assert "long-context-recall-regression" not in _incidents(_bundle(recall, Canary(ok=False, error="HTTP 503")))


def test_canary_timeout_while_every_role_is_healthy_is_transfer_evidence_and_absence_changes_nothing():
    assert _incidents(_bundle()) == []
    assert _incidents(_bundle(canary=Canary(ok=True, status=200, ttft_ms=40.0, total_ms=90.0, tokens=8))) == []
    timed_out = Canary(ok=False, error="POST http://127.0.0.1:30002/v1/completions: no answer within 10 s",
                       elapsed_ms=10000.0)
    d = diagnose(_bundle(canary=timed_out), default_runbooks())
    assert [f.incident for f in d.findings] == ["kv-transfer-failure"]
    assert any("canary through the router: timed out after 10000 ms" in e for e in d.findings[0].evidence)


def test_canary_and_recall_facts_are_absent_without_the_sections():
    assert recall_facts(None) == {} and canary_facts(None) == {}
    facts = canary_facts(Canary(ok=False, error="GET x: no answer within 3 s"))
    assert facts["timed_out"] and not facts["answered"]


def test_a_malformed_recall_section_is_listed_not_refused():
    data = json.loads(HEALTHY.read_text(encoding="utf-8"))
    data["recall"] = {"cases": [{"tokens": "many", "depth": 0.5}]}
    data["canary"] = "yes"
    b = parse_bundle(json.dumps(data))
    assert b.recall is None and b.canary is None
    d = diagnose(b, default_runbooks())
    assert any(p.startswith("bundle: recall: ") and p.endswith("ignored") for p in d.problems)
    assert any(p.startswith("bundle: canary: ") for p in d.problems)


def test_worse_than_the_last_good_run():
    good = run_record(_recall(lambda n, d: False))
    assert worse(run_record(_recall(lambda n, d: n > 4096)), good)
    assert not worse(run_record(_recall(lambda n, d: False)), good)
    assert worse(run_record(_recall(lambda n, d: n > 4096)), None)


class EmulatedTokenizer:
    name, max_model_len = "emulator", None

    async def count(self, texts: list[str]) -> list[int]:
        return [model.count(t) for t in texts]


@settings(max_examples=12, deadline=None)
@given(st.integers(300, 12000), st.sampled_from(["prose", "code", "config"]), st.integers(0, 8), st.randoms())
def test_prompts_are_fitted_to_the_exact_length_at_every_depth(tokens: int, filler: str, n: int, rng: random.Random):
    cases = asyncio.run(fit_group(EmulatedTokenizer(), tokens, filler, DEPTHS, n, rng))
    assert [c.error for c in cases] == [None] * len(DEPTHS)
    assert [model.count(c.prompt) for c in cases] == [tokens] * len(DEPTHS)
    first = cases[0]
    assert first.prompt.count(first.needle.line) == 1
    assert sum(line.startswith("The special magic number for ") for line in first.prompt.splitlines()) == n + 1
    assert all(model.answer(c.prompt, tokens, 10**9).startswith(c.needle.value) for c in cases)


def test_near_misses_are_one_edit_away_and_never_the_needle():
    rng = random.Random(7)
    target = haystack.needle(rng)
    near = haystack.near_misses(target, 20, rng)
    assert len({d.key for d in near}) == 20 and target.key not in {d.key for d in near}
    for d in near:
        a, b = target.key.split("-"), d.key.split("-")
        assert sum(x != y for x, y in zip(a, b)) == 1 and d.value != target.value


def test_queue_depth_reads_both_prefixes_and_ignores_other_series():
    raw = 'sglang:num_queue_reqs{tp_rank="0"} 3.0\nsglang_num_queue_reqs{tp_rank="1"} 5\nsglang:num_running_reqs 9\n'
    assert queue_depth(raw) == 5.0 and queue_depth("garbage") is None


def test_plan_cost_is_every_prompt_token():
    plan = RecallPlan(lengths=(1024, 2048), depths=(0.0, 1.0), fillers=("prose", "code"))
    assert plan.cases() == 8 and plan.cost_tokens() == (1024 + 2048) * 4


def _stored(store, recall: Recall, at: str) -> None:
    b = _bundle(recall).model_copy(update={"id": f"r{at.replace(':', '')}", "started_at": at, "finished_at": at})
    store.save_probe(b, diagnose(b, default_runbooks()))


def test_weekly_report_shows_the_recall_trend_per_day_and_the_failed_runs(tmp_path):
    from datetime import datetime, timezone

    from opsbot.report.render import render
    from opsbot.report.weekly import build_weekly
    from opsbot.settings import Settings
    from opsbot.store import Store

    with Store(f"sqlite:///{tmp_path / 'opsbot.db'}") as store:
        _stored(store, _recall(lambda n, d: False), "2026-11-23T09:00:00.000Z")  # Monday: full to 16k
        _stored(store, _recall(lambda n, d: n > 4096), "2026-11-25T09:00:00.000Z")  # Wednesday: lost past 4k
        _stored(store, _recall(lambda n, d: False), "2026-11-25T15:00:00.000Z")
        _stored(store, _recall(lambda n, d: False), "2026-11-16T09:00:00.000Z")  # the week before
        runs = store.recall_runs()
        assert [r.record["longest_full"] for r in runs] == [16384, 16384, 4096, 16384]
        report = asyncio.run(build_weekly(store, None, "2026-W48", settings=Settings(report_timezone="UTC"),
                                          now=datetime(2026, 12, 1, tzinfo=timezone.utc)))
    days = {d.day.isoformat(): d for d in report.recall_days}
    assert len(days) == 7
    assert days["2026-11-23"].longest_full == 16384 and days["2026-11-23"].failed == 0
    assert days["2026-11-25"].longest_full == 4096 and days["2026-11-25"].runs == 2 and days["2026-11-25"].failed == 1
    assert days["2026-11-24"].runs == 0 and days["2026-11-24"].longest_full is None
    assert [f.threshold for f in report.recall_failed] == [8192]
    assert any(c.key == "recall" for c in report.charts)
    md = render(report, "markdown")
    assert "### Long-context recall" in md and "| 2026-11-25 | 2 | 4k | 1 |" in md and "lost from 8k" in md
    assert "Long-context recall" in render(report, "html")
    assert "lost from 8k" in render(report, "blocks")


def test_the_service_starts_the_recall_schedule_only_when_set(tmp_path):
    from fastapi.testclient import TestClient

    from opsbot.service.app import create_app
    from opsbot.settings import Settings

    app = create_app(Settings(data_dir=tmp_path, recall_schedule="0 */6 * * *", report_schedule=False))
    with TestClient(app):
        job = app.state.recall_scheduler.get_job("recall")
        assert job is not None and job.next_run_time is not None
    off = create_app(Settings(data_dir=tmp_path, report_schedule=False))
    with TestClient(off):
        assert off.state.recall_scheduler is None


def test_the_emulators_recall_window_follows_the_index_keys_unless_given():
    assert model.recall_window(None, model.bf16_index_keys({}), 1 << 20) == 4096  # fp8 keys, as the incident believed
    assert model.recall_window(None, model.bf16_index_keys({"SGLANG_EMULATOR_INDEX_KEYS": "bf16"}), 1 << 20) == 1 << 20
    assert model.recall_window(None, model.bf16_index_keys({"SGLANG_DSV4_BF16_INDEX_KEYS": "1"}), 1 << 20) == 1 << 20
    assert model.recall_window(8192, True, 1 << 20) == 8192


def test_a_canary_timing_out_on_a_wedged_decode_leaves_it_decode_wedged():
    wedged = parse_bundle((HEALTHY.parent / "decode-wedged.json").read_text(encoding="utf-8"))
    timed_out = Canary(ok=False, error="POST http://r/v1/completions: no answer within 10 s", elapsed_ms=10000.0)
    found = _incidents(wedged.model_copy(update={"canary": timed_out}))
    assert found[:1] == ["decode-wedged"] and "kv-transfer-failure" not in found
