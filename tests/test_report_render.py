"""Rendering and the pure parts of the reports: formats, Block Kit limits, escaping, episodes, weeks."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import hypothesis.strategies as st
from hypothesis import given, settings

from opsbot.report.model import (
    CriticalContext,
    CurrentState,
    Figure,
    Incident,
    NoteEntry,
    StatusReport,
    WeeklyReport,
)
from opsbot.report.prom import FIGURES, WeekData
from opsbot.report.render import change, number, render
from opsbot.slack.limits import BLOCKS_MAX
from opsbot.report.status import notes_from
from opsbot.report.week import parse_week, zone
from opsbot.report.weekly import episodes, figures, missing_lines
from opsbot.store.periods import History, ProbeRow

T0 = datetime(2026, 11, 23, tzinfo=timezone.utc)


@dataclass
class _Finding:  # the store row's shape: what episodes() reads
    probe_id: str
    incident: str
    at: datetime


def _probe(pid: str, minutes: int) -> ProbeRow:
    return ProbeRow(pid, "dsv4", T0 + timedelta(minutes=minutes), None, "cli", None)


def test_episodes_open_at_first_finding_and_recover_at_the_next_clean_probe():
    probes = [_probe(f"p{i}", m) for i, m in enumerate([0, 10, 20, 30, 40, 50])]
    findings = [_Finding("p1", "decode-wedged", probes[1].started_at), _Finding("p2", "decode-wedged", probes[2].started_at),
                _Finding("p2", "kv-cache-exhausted", probes[2].started_at),
                _Finding("p5", "decode-wedged", probes[5].started_at)]
    eps = episodes(History(since=T0, until=T0 + timedelta(days=7), probes=probes, findings=findings))  # type: ignore[arg-type]
    got = sorted((e.incident, e.start, e.recovered_at) for e in eps)
    assert got == [
        ("decode-wedged", probes[1].started_at, probes[3].started_at),
        ("decode-wedged", probes[5].started_at, None),
        ("kv-cache-exhausted", probes[2].started_at, probes[3].started_at),
    ]


def test_figures_compare_weeks_and_say_worse_or_better():
    this = WeekData(values={"ttft_p99": 2.0, "decode_tokens_per_s": 900.0})
    prev = WeekData(values={"ttft_p99": 1.0, "decode_tokens_per_s": 1000.0})
    figs = {f.key: f for f in figures(this, prev)}
    assert change(figs["ttft_p99"]) == "+100 % (worse)"
    assert change(figs["decode_tokens_per_s"]) == "-10 % (worse)"
    assert change(Figure(key="x", label="x", value=1.0, previous=None)) == "—"
    assert [f.key for f in figures(this, prev)] == [q.key for q in FIGURES]


def test_missing_lines_group_by_reason():
    data = WeekData(missing={"ttft_p99": "boom", "itl_p99": "boom", "series:ttft_p99": "slow"})
    assert missing_lines(data) == ["Time to first token p99, Inter-token latency p99: boom", "chart of ttft_p99: slow"]


def test_numbers_read_as_people_write_them():
    assert (number(0.3291, "s"), number(7.06, "s"), number(0.627, "ratio")) == ("329 ms", "7.06 s", "62.7 %")
    assert (number(3009.4, "tok/s"), number(54.0, "requests"), number(None)) == ("3,009 tok/s", "54 requests", "—")


def test_done_notes_only_since_the_period_start_open_items_as_last_written():
    @dataclass
    class N:
        kind: str
        text: str
        actor: str
        created_at: datetime

    notes = [N("done", "new thing", "a", T0 + timedelta(days=2)), N("blocked", "firmware", "b", T0 - timedelta(days=3)),
             N("done", "old thing", "a", T0 - timedelta(days=1))]
    out = notes_from(notes, T0)
    assert [n.text for n in out["done"]] == ["new thing"] and [n.text for n in out["blocked"]] == ["firmware"]


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=300)


@settings(max_examples=40, deadline=None)
@given(title=_text, evidence=st.lists(_text, max_size=5), note=_text, n=st.integers(0, 80))
def test_any_text_renders_in_every_format_and_blocks_stay_within_slack_limits(title, evidence, note, n):
    report = StatusReport(
        title=title or "t", generated_at=T0, since=T0, until=T0, goal=note, current=CurrentState(missing=note or "x"),
        incidents=[Incident(incident=f"class-{i}", severity="critical", title=title, evidence=evidence,
                            first_at=T0, last_at=T0) for i in range(n)],
        done=[NoteEntry(kind="done", text=note, actor="a", at=T0)], context=CriticalContext(missing=note))
    html = render(report, "html")
    assert "<script" not in html.replace("&lt;script", "")
    blocks = json.loads(render(report, "blocks"))
    assert 1 <= len(blocks) <= BLOCKS_MAX
    for b in blocks:
        text = b.get("text", {}).get("text", "")
        assert len(text) <= 3000
        if b["type"] == "section":
            assert "<" not in text and ">" not in text  # escaped for mrkdwn
    assert render(report, "markdown").startswith("# ")
    assert json.loads(render(report, "json"))["title"] == report.title


def test_weekly_block_kit_carries_the_figures():
    week = parse_week("2026-W48", zone("UTC"))
    report = WeeklyReport(title="Weekly report 2026-W48", generated_at=T0, since=week.start, until=week.end,
                          week="2026-W48", previous_week="2026-W47",
                          figures=[Figure(key="ttft_p99", label="Time to first token p99", unit="s", value=7.06, previous=1.66)],
                          by_class={"decode-wedged": 2}, missing=["chart of itl_p99: slow"])
    text = json.dumps(json.loads(render(report, "blocks")))
    assert "Time to first token p99: *7.06 s* (was 1.66 s; +325 % (worse))" in text
    assert "decode-wedged: 2" in text and "Missing: chart of itl_p99: slow" in text


@dataclass
class _IncidentRow:  # the store row's shape: what incident_records() reads
    id: str
    incident: str
    cluster: str
    roles: list[str]
    first_seen: datetime
    resolved_at: datetime | None
    actions: list[str]

    @property
    def time_to_recovery_s(self) -> float | None:
        return None if self.resolved_at is None else (self.resolved_at - self.first_seen).total_seconds()


@dataclass
class _Action:
    id: str
    kind: str
    role: str
    state: str
    approved_by: str | None


def test_weekly_lists_the_incident_records_with_recovery_and_actions():
    from opsbot.report.weekly import incident_records

    week = parse_week("2026-W48", zone("UTC"))
    rows = [_IncidentRow("i2", "cuda-oom", "lab", ["decode", "router"], week.start + timedelta(days=2), None, []),
            _IncidentRow("i1", "decode-wedged", "lab", ["decode"], week.start + timedelta(hours=3),
                         week.start + timedelta(hours=3, seconds=27), ["a1"]),
            _IncidentRow("i0", "role-down", "lab", ["decode"], week.start - timedelta(days=1), None, [])]
    history = History(since=week.start - timedelta(days=7), until=week.end, incidents=rows,  # type: ignore[arg-type]
                      actions=[_Action("a1", "restart", "decode", "succeeded", "slack:U0ALICE")])  # type: ignore[list-item]
    records = incident_records(history, week)
    assert [r.id for r in records] == ["i1", "i2"]  # the week's, oldest first
    assert records[0].time_to_recovery_s == 27 and records[0].actions == ["restart decode: succeeded, approved by slack:U0ALICE"]
    report = WeeklyReport(title="Weekly report 2026-W48", generated_at=T0, since=week.start, until=week.end,
                          week="2026-W48", previous_week="2026-W47", incident_records=records)
    md = render(report, "markdown")
    assert "| decode-wedged | lab | decode |" in md and "27 s" in md and "still open" in md
    assert "approved by slack:U0ALICE" in render(report, "html") and "cuda-oom" in render(report, "blocks")
