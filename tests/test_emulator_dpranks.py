"""The emulator under DP attention: per-rank series and log prefixes as sglang 0.5.23 writes them, requests
pinned with ``routed_dp_rank``, one rank wedged, greedy outputs and their corruption."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from opsbot.lab.emulator import greedy, launch_server
from opsbot.lab.emulator.control import Control, write_control
from opsbot.lab.emulator.flags import dp_attention_ranks, parse_server
from opsbot.lab.emulator.launch_server import App
from opsbot.lab.emulator.scheduler import Req, Scheduler

ARGV = ["--model-path", "/m", "--tp", "4", "--disaggregation-mode", "decode", "--enable-metrics"]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _ranks(tmp_path: Path, n: int = 2, state: str = "healthy", rank: int | None = None) -> list[Scheduler]:
    path = tmp_path / "control" / "decode.json"
    write_control(path, Control(state, rank=rank))
    clock = Clock()
    out: list[Scheduler] = []
    for r in range(n):
        out.append(Scheduler("decode", "m", str(path), 4, clock=clock, dp_rank=r, dp_size=n,
                             registry=out[0].reg if out else None))
    return out


def _run(ranks: list[Scheduler], seconds: float) -> None:
    for _ in range(round(seconds / 0.1)):
        ranks[0].clock.t += 0.1
        for s in ranks:
            s.tick(0.1)


def _series(ranks: list[Scheduler], name: str, mode: str | None = None) -> dict[str, float]:
    """dp_rank -> value of one family's samples in the server's one exposition."""
    out = {}
    for fam in text_string_to_metric_families(ranks[0].reg.render()):
        for s in fam.samples:
            if s.name == name and "dp_rank" in s.labels and s.labels.get("mode") == mode:
                out[s.labels["dp_rank"]] = s.value
    return out


@pytest.mark.parametrize(("argv", "ranks"), [
    (["--enable-dp-attention", "--dp-size", "4"], 4),
    (["--attn-dp-size", "2"], 2),
    (["--dp-size", "2"], 1),  # plain data parallelism: no DP-attention ranks inside one server
    ([], 1),
])
def test_dp_attention_ranks_from_the_flags(argv, ranks) -> None:
    assert dp_attention_ranks(parse_server(ARGV + argv)) == ranks


def test_each_rank_writes_its_series_with_the_dp_rank_label_and_its_log_prefix(tmp_path, capsys) -> None:
    ranks = _ranks(tmp_path)
    _run(ranks, 3.0)
    text = ranks[0].reg.render()
    # metrics_collector.py:1381-1392: the base labels, dp_rank last added; tp_rank the rank's attention-TP-0 rank
    assert re.search(r'^sglang:num_running_reqs\{dp_rank="1",engine_type="decode",model_name="m",moe_ep_rank="0",'
                     r'pp_rank="0",tp_rank="2"\} ', text, re.MULTILINE), text[:400]
    tokens = _series(ranks, "sglang:realtime_tokens_total", "decode")
    assert set(tokens) == {"0", "1"} and all(v > 0 for v in tokens.values())
    out = capsys.readouterr().out
    assert re.search(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d DP0 TP0\] Decode batch, ", out, re.MULTILINE)
    assert re.search(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d DP1 TP2\] Decode batch, ", out, re.MULTILINE)


def test_rank_wedged_stops_one_rank_while_its_sibling_serves(tmp_path, capsys) -> None:
    ranks = _ranks(tmp_path)
    _run(ranks, 2.0)
    write_control(ranks[0].control_file, Control("rank-wedged"))
    _run(ranks, 0.2)
    before = _series(ranks, "sglang:realtime_tokens_total", "decode")
    capsys.readouterr()
    _run(ranks, 3.0)
    after = _series(ranks, "sglang:realtime_tokens_total", "decode")
    assert ranks[1].stalled and not ranks[0].stalled  # the last rank by default; rank 0 answers /health
    assert after["1"] == before["1"] and after["0"] > before["0"]
    assert _series(ranks, "sglang:num_running_reqs")["1"] > 0
    out = capsys.readouterr().out
    assert "DP0 TP0] Decode batch" in out and "DP1 TP2] Decode batch" not in out


def test_rank_wedged_takes_the_rank_the_control_names(tmp_path) -> None:
    ranks = _ranks(tmp_path, 4, "rank-wedged", rank=0)
    assert [s.stalled for s in ranks] == [True, False, False, False]


def _app(ranks: list[Scheduler], *extra: str) -> App:
    return App(parse_server(ARGV + ["--enable-dp-attention", "--dp-size", str(len(ranks)), *extra]), ranks[0], ranks)


def test_routed_dp_rank_pins_the_request_and_is_range_checked(tmp_path, monkeypatch) -> None:
    ranks = _ranks(tmp_path)
    app = _app(ranks)
    assert app.route({"routed_dp_rank": 1}) == (ranks[1], None)
    assert app.route({"data_parallel_rank": 0}) == (ranks[0], None)  # the deprecated alias
    _sched, refused = app.route({"routed_dp_rank": 2})
    assert refused == (400, {"error": {"message": "routed_dp_rank=2 out of range [0, 2)"}})
    assert app.route({"routed_dp_rank": "x"})[1][0] == 422
    assert {app.route({})[0].dp_rank for _ in range(4)} == {0, 1}  # round robin without a pin
    monkeypatch.setattr(launch_server, "ROUTED_DP_RANK", False)  # a server that predates the field
    _sched, refused = app.route({"routed_dp_rank": 1})
    assert refused[0] == 422 and refused[1]["detail"][0]["loc"] == ["body", "routed_dp_rank"]


def test_greedy_answers_repeat_their_ids_and_corruption_changes_some(tmp_path) -> None:
    ranks = _ranks(tmp_path)
    app = _app(ranks)
    req = Req("r", 0, 10, 24)
    body = {"return_logprob": True}
    prompts = [f"prompt {i}" for i in range(12)]
    healthy = [app.native_answer(body, {}, p, "", req, ranks[0]) for p in prompts]
    again = [app.native_answer(body, {}, p, "", req, ranks[1]) for p in prompts]
    assert [a["output_ids"] for a in healthy] == [a["output_ids"] for a in again]
    lp = healthy[0]["meta_info"]["output_token_logprobs"]
    assert len(lp) == 24 and lp[0][1] == healthy[0]["output_ids"][0] and lp[0][2] is None and lp[0][0] < 0
    write_control(ranks[0].control_file, Control("output-corruption"))
    for s in ranks:
        s.poll_control()
    bad = [app.native_answer(body, {}, p, "", req, ranks[0]) for p in prompts]
    hit = [p for p, h, b in zip(prompts, healthy, bad) if h["output_ids"] != b["output_ids"]]
    assert hit == [p for p in prompts if greedy.hit_by_corruption(p)] and 0 < len(hit) < len(prompts)
    first = next(b for h, b in zip(healthy, bad) if h["output_ids"] != b["output_ids"])
    assert first["output_ids"][: greedy.CORRUPT_FROM] == healthy[prompts.index(hit[0])]["output_ids"][: greedy.CORRUPT_FROM]
