"""The output-fidelity judge: a baseline from repeated answers, its tolerance, the refusal of another model's."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opsbot.bundle import Fidelity, FidelityBaseline, parse_bundle
from opsbot.parse.fidelity import (
    LOGPROB_FLOOR,
    PROMPTS,
    Answer,
    build_baseline,
    compare,
    fidelity_facts,
    first_divergence,
    refusal,
    verdict,
)


def _answers(tokens: list[int], logprobs: list[float], instance: str = "decode", rank: int | None = None) -> list[Answer]:
    return [Answer(pid, instance, rank, tuple(tokens), tuple(logprobs)) for pid, _ in PROMPTS]


def _baseline(*runs: list[Answer]):
    return build_baseline([a for run in runs for a in run], id="b1", recorded_at="2026-12-03T07:00:00Z", model="m",
                          tokenizer="t")


def test_a_changed_stable_token_diverges_and_batch_wobble_does_not() -> None:
    base = _baseline(_answers([1, 2, 3, 4], [-0.1, -0.2, -0.3, -0.4]), _answers([1, 2, 3, 4], [-0.101, -0.2, -0.3, -0.4]))
    assert all(p.stable == 4 and p.spread == pytest.approx(0.001) for p in base.prompts.values())
    ok = compare(base, _answers([1, 2, 3, 4], [-0.103, -0.21, -0.3, -0.4]))
    assert not any(c.diverged for c in ok)
    bad = compare(base, _answers([1, 2, 9, 9], [-0.1, -0.2, -2.8, -2.9]))
    assert all(c.diverged and c.first_divergence == 2 for c in bad)
    drift = compare(base, _answers([1, 2, 3, 4], [-0.1, -0.2, -0.3, -0.4 - LOGPROB_FLOOR * 2]))
    assert all(c.diverged and c.first_divergence is None for c in drift)


def test_a_near_tie_flip_seen_at_record_time_is_tolerated_after_it() -> None:
    base = _baseline(_answers([1, 2, 3, 4], [-0.1, -0.7, -0.3, -0.4]), _answers([1, 2, 5, 6], [-0.1, -0.7, -0.69, -0.2]))
    assert base.prompts["capital"].stable == 2
    assert not any(c.diverged for c in compare(base, _answers([1, 2, 5, 6], [-0.1, -0.7, -0.69, -0.2])))
    assert all(c.diverged for c in compare(base, _answers([1, 7, 3, 4], [-0.1, -3.0, -0.3, -0.4])))


def test_another_models_baseline_is_refused_with_the_reason() -> None:
    base = _baseline(_answers([1], [-0.1]))
    assert refusal(base, "m", "t") is None
    assert "recorded on model 'm'; the server runs 'other'" in (refusal(base, "other", "t") or "")
    assert "token ids are not comparable" in (refusal(base, "m", "t2") or "")
    refused = Fidelity(baseline=FidelityBaseline(id="b1", model="m"), refused=refusal(base, "other", "t"))
    assert verdict(refused) == -1.0 and fidelity_facts(refused)["refused"]


def test_a_prompt_without_any_answer_records_no_baseline() -> None:
    with pytest.raises(ValueError, match="got no answer to record: HTTP 503"):
        build_baseline([Answer(pid, "decode", None, error="HTTP 503") for pid, _ in PROMPTS], id="b", recorded_at="",
                       model="m", tokenizer="t")


def test_facts_name_the_instances_and_ranks_that_diverged_and_the_verdict_is_never_a_silent_pass() -> None:
    base = _baseline(_answers([1, 2, 3], [-0.1, -0.1, -0.1], rank=0))
    cases = compare(base, _answers([1, 2, 3], [-0.1, -0.1, -0.1], rank=0) + _answers([1, 8, 8], [-0.1, -3, -3], rank=1))
    f = Fidelity(baseline=FidelityBaseline(id="b1"), cases=cases)
    facts = fidelity_facts(f)
    assert facts["diverged"] == len(PROMPTS) and facts["diverged_instances"] == ["decode"]
    assert facts["diverged_cases"][0].startswith("decode rank 1: prompt capital from token 1")
    assert verdict(f) == 0.0
    failed = Fidelity(baseline=FidelityBaseline(id="b1"), cases=compare(base, [Answer("capital", "decode", 0, error="x")]))
    assert verdict(failed) == -1.0  # nothing judged is not a pass
    assert verdict(None) == -1.0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=12), st.lists(st.integers(0, 5), max_size=12))
def test_first_divergence_is_where_the_sequences_part(a: list[int], b: list[int]) -> None:
    d = first_divergence(a, b)
    if d is None:
        assert a == b
    else:
        assert a[:d] == b[:d] and (d == min(len(a), len(b)) or a[d] != b[d])


def test_old_bundles_without_the_new_sections_stay_valid_and_a_bad_ranks_list_is_left_out() -> None:
    b = parse_bundle('{"schema": "opsbot/probe-bundle@1", "roles": [{"role": "decode"}]}')
    assert b.fidelity is None and b.roles[0].ranks is None and not b.problems
    bad = parse_bundle('{"schema": "opsbot/probe-bundle@1", "roles": [{"role": "decode", "ranks": [{"dp_rank": -1}]}],'
                       ' "fidelity": {"cases": "x"}}')
    assert bad.roles and bad.roles[0].ranks is None and bad.fidelity is None
    assert any("ranks" in p for p in bad.problems) and any(p.startswith("fidelity") for p in bad.problems)


def test_the_schedule_takes_a_crontab_line_and_refuses_a_bad_one() -> None:
    from opsbot.service.fidelity_schedule import fidelity_trigger
    from opsbot.settings import Settings

    assert "minute='*/30'" in str(fidelity_trigger(Settings(fidelity_schedule="*/30 * * * *")))
    with pytest.raises(ValueError, match="OPSBOT_FIDELITY_SCHEDULE='0 \\*/6 \\* \\* mon-xyz'"):
        fidelity_trigger(Settings(fidelity_schedule="0 */6 * * mon-xyz"))


def test_stored_runs_are_counted_per_day_and_charted_for_the_weekly_report(tmp_path) -> None:
    from datetime import date, timedelta
    from zoneinfo import ZoneInfo

    from opsbot.bundle import Bundle, FidelityCase
    from opsbot.diagnose import diagnose
    from opsbot.parse.fidelity import fidelity_record
    from opsbot.report.fidelity import fidelity_chart, fidelity_counts
    from opsbot.report.week import week_of
    from opsbot.store import Store

    week = week_of(date(2026, 11, 30), ZoneInfo("UTC"))
    store = Store(f"sqlite:///{tmp_path}/o.db")
    matched = Fidelity(baseline=FidelityBaseline(id="b"), cases=[FidelityCase(prompt_id="capital", diverged=False)])
    diverged = Fidelity(baseline=FidelityBaseline(id="b"), cases=[FidelityCase(prompt_id="capital", diverged=True)])
    assert fidelity_record(diverged) == {"result": 0.0, "compared": 1, "diverged": 1, "errors": 0, "refused": False}
    for day, hour, f in ((0, 1, matched), (0, 2, diverged), (2, 1, Fidelity(refused="another model"))):
        b = Bundle(cluster="c", started_at=(week.start + timedelta(days=day, hours=hour)).isoformat(), fidelity=f)
        store.save_probe(b, diagnose(b))
    runs = store.fidelity_runs(cluster="c")
    assert [r.record["result"] for r in runs] == [1.0, 0.0, -1.0]
    counts = fidelity_counts(runs, week)
    assert counts[0] == (1, 1, 0) and counts[2] == (0, 0, 1) and sum(map(sum, counts)) == 3
    assert fidelity_chart(runs, week) is not None and fidelity_chart([], week) is None
