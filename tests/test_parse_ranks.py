"""Per-rank evidence under DP attention: each dp_rank's series beside the role's totals, the DPn/TPn log prefix."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from opsbot.bundle import MetricSample
from opsbot.parse.logs import parse_log_line
from opsbot.parse.metrics import parse_samples


def _body(ranks: list[tuple[int, int, float, float]], tp_per_rank: int = 1) -> str:
    """An exposition as sglang 0.5.23 writes it under DP attention: rank -> (running, queued, usage, tokens)."""
    lines = ["# HELP sglang:num_running_reqs The number of running requests.", "# TYPE sglang:num_running_reqs gauge"]
    for r, (running, _q, _u, _t) in enumerate(ranks):
        lines.append(f'sglang:num_running_reqs{{dp_rank="{r}",engine_type="decode",model_name="m",moe_ep_rank="0",'
                     f'pp_rank="0",tp_rank="{r * tp_per_rank}"}} {float(running)}')
    lines += ["# HELP sglang:num_queue_reqs q", "# TYPE sglang:num_queue_reqs gauge"]
    lines += [f'sglang:num_queue_reqs{{dp_rank="{r}",tp_rank="{r * tp_per_rank}"}} {float(q)}'
              for r, (_x, q, _u, _t) in enumerate(ranks)]
    lines += ["# HELP sglang:token_usage u", "# TYPE sglang:token_usage gauge"]
    lines += [f'sglang:token_usage{{dp_rank="{r}",tp_rank="{r * tp_per_rank}"}} {u}' for r, (_x, _q, u, _t) in enumerate(ranks)]
    lines += ["# HELP sglang:realtime_tokens_total t", "# TYPE sglang:realtime_tokens_total counter"]
    lines += [f'sglang:realtime_tokens_total{{dp_rank="{r}",mode="decode",tp_rank="{r * tp_per_rank}"}} {float(t)}'
              for r, (_x, _q, _u, t) in enumerate(ranks)]
    return "\n".join(lines) + "\n"


def _samples(before: list, after: list) -> list[MetricSample]:
    return [MetricSample(at="2026-12-03T07:00:00+00:00", raw=_body(before)),
            MetricSample(at="2026-12-03T07:00:03+00:00", raw=_body(after))]


def test_a_wedged_rank_shows_beside_the_totals_that_still_move() -> None:
    before = [(4, 0, 0.1, 1000), (4, 0, 0.1, 900)]
    after = [(4, 0, 0.12, 1480), (5, 1, 0.3, 900)]
    m = parse_samples(_samples(before, after))
    assert m.gauges["num_running_reqs"] == 9 and m.deltas["realtime_tokens_decode"] == 480  # totals as before
    assert [(r.dp_rank, r.running, r.queued, r.token_usage, r.tokens) for r in m.ranks] == [
        (0, 4, 0, 0.12, {"decode": 480}), (1, 5, 1, 0.3, {"decode": 0})]


def test_one_rank_or_none_is_no_per_rank_evidence() -> None:
    assert parse_samples(_samples([(4, 0, 0.1, 10)], [(4, 0, 0.1, 20)])).ranks == []
    plain = "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{tp_rank=\"0\"} 3.0\n"
    assert parse_samples([MetricSample(at="2026-12-03T07:00:00+00:00", raw=plain)]).ranks == []


_rank = st.tuples(st.integers(0, 256), st.integers(0, 64), st.floats(0, 1), st.integers(0, 10**9))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_rank, st.integers(0, 10**6)), min_size=2, max_size=8))
def test_ranks_read_back_what_each_rank_wrote_and_sum_to_the_total(ranks) -> None:
    before = [r for r, _grow in ranks]
    after = [(run, q, u, t + grow) for (run, q, u, t), grow in ranks]
    m = parse_samples(_samples(before, after))
    assert [r.dp_rank for r in m.ranks] == list(range(len(ranks)))
    for got, (run, q, u, _t), (_r, grow) in zip(m.ranks, after, ranks):
        assert (got.running, got.queued, got.token_usage, got.tokens["decode"]) == (run, q, u, grow)
    assert m.gauges["num_running_reqs"] == sum(r for r, *_ in after)
    assert m.deltas["realtime_tokens_decode"] == sum(grow for _r, grow in ranks)


@given(st.integers(0, 63), st.integers(0, 511), st.text(min_size=1, max_size=40).filter(lambda t: "\n" not in t))
def test_the_dp_and_tp_prefix_is_kept_as_fields(dp: int, tp: int, message: str) -> None:
    """managers/scheduler.py:6279-6290 writes `` DP{dp}`` then `` TP{tp}``; journald may stand before it."""
    line = f"2026-12-03T07:00:01+0000 node2 python3[1234]: [2026-12-03 07:00:01 DP{dp} TP{tp}] {message.strip() or 'x'}"
    entry = parse_log_line(line)
    assert (entry.dp_rank, entry.tp_rank) == (dp, tp)
    assert entry.message == (message.strip() or "x")


def test_the_probe_table_and_figures_show_each_rank_with_its_canary() -> None:
    from rich.console import Console

    from opsbot.bundle import (
        Bundle,
        Canary,
        MetricsEvidence,
        RankEvidence,
        RoleEvidence,
    )
    from opsbot.cli.probe_view import ranks_table
    from opsbot.parse.figures import role_figures

    role = RoleEvidence(role="decode", metrics=MetricsEvidence(ok=True, samples=_samples(
        [(4, 0, 0.1, 1000), (4, 0, 0.1, 900)], [(4, 0, 0.12, 1480), (5, 1, 0.3, 900)])), ranks=[
        RankEvidence(dp_rank=0, canary=Canary(ok=True, status=200, total_ms=210.0)),
        RankEvidence(dp_rank=1, canary=Canary(ok=False, error="POST x: no answer within 4 s"))])
    bundle = Bundle(roles=[role])
    fig = role_figures(bundle, role)
    assert [(k.dp_rank, k.running_reqs, k.tokens_per_s, k.canary) for k in fig.ranks] == [
        (0, 4, 160.0, "ok (210 ms)"), (1, 5, 0.0, "failed: POST x: no answer within 4 s")]
    console = Console(width=200, record=True)
    console.print(ranks_table(bundle))
    assert "no answer within 4 s" in console.export_text()
    assert ranks_table(Bundle(roles=[RoleEvidence(role="decode")])) is None


def test_rank_facts_from_the_series_alone_name_the_stalled_rank_and_need_a_window() -> None:
    from opsbot.bundle import MetricsEvidence, RoleEvidence
    from opsbot.parse.ranks import rank_facts

    samples = _samples([(4, 0, 0.1, 1000), (4, 0, 0.96, 900)], [(4, 0, 0.12, 1480), (5, 1, 0.97, 900)])
    facts = rank_facts(RoleEvidence(role="decode", metrics=MetricsEvidence(ok=True, samples=samples)))
    assert (facts["count"], facts["stalled"], facts["wedged"], facts["serving"], facts["healthy"], facts["full"]) == (
        2, [1], [1], [0], 1, [1])
    short = [samples[0], samples[1].model_copy(update={"at": "2026-12-03T07:00:01+00:00"})]
    assert rank_facts(RoleEvidence(role="decode", metrics=MetricsEvidence(ok=True, samples=short)))["stalled"] == []
    assert rank_facts(RoleEvidence(role="decode")) == {}
