"""Status and weekly reports from a real store (SQLite file and PostgreSQL server), without Prometheus."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from opsbot.report.render import render
from opsbot.report.status import build_status
from opsbot.report.week import WeekError, parse_week, zone
from opsbot.report.weekly import build_weekly, resolve_week
from opsbot.settings import Settings
from opsbot.store import Store
from tests.reportseed import QUEUE, WEDGED, RoleLoad, bundle_at, save, seed_week

SPEC = Path("serving/examples/dsv4-flash-1node.yaml")
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc)


@pytest.fixture
def store(database_url):
    s = Store(database_url)
    yield s
    s.close()


def _settings(**kw) -> Settings:
    return Settings(**{"goal": "Serve DeepSeek-V4-Flash at p99 TTFT < 2 s", "report_timezone": "UTC", **kw})


def test_status_from_a_fresh_bundle_has_every_section(store):
    now = datetime.now(timezone.utc)
    seed_week(store, now - timedelta(days=7))
    store.add_note("doing", "Sizing HiCache for 1M context", "bob")
    store.add_note("done", "Moved admission control to the router", "alice")
    store.add_note("blocked", "Second node waits for NIC firmware", "carol")
    store.add_note("next", "Load-test router queue 200", "alice")
    store.add_decision("Keep bf16 index keys", "fp8 keys lost needles past 512k tokens", "alice")
    fresh = bundle_at(now, decode=RoleLoad(running=23, queued=4, usage=0.61, tokens_per_s=1234.0))
    report = build_status(store, fresh, _settings(spec=SPEC), now=now + timedelta(minutes=1), incidents=[])
    decode = next(r for r in report.current.roles if r.role == "decode")
    assert report.current.fresh and report.current.probe_id == fresh.id
    assert (decode.running_reqs, decode.queued_reqs, decode.token_usage) == (23, 4, 0.61)
    assert decode.tokens_per_s == pytest.approx(1234.0)
    assert decode.state == "active/running" and decode.health == "ok"
    assert decode.gpus == 4  # the spec puts decode on GPUs 4-7; the node has 8
    assert decode.gpu_memory_gib == pytest.approx(sum(120000 + i for i in range(4, 8)) / 1024)
    assert [i.incident for i in report.incidents] == ["decode-wedged", "prefill-queue-saturation"]
    queue = next(i for i in report.incidents if i.incident == "prefill-queue-saturation")
    assert queue.probes == 2 and queue.evidence == QUEUE.evidence
    assert [(a.role, a.requested_by, a.approved_by, a.surface, a.state) for a in report.actions] == [
        ("decode", "alice", "bob", "slack", "succeeded")]
    md = render(report, "markdown")
    for text in ("## Goal\n\nServe DeepSeek-V4-Flash at p99 TTFT < 2 s", "Moved admission control to the router",
                 "Sizing HiCache for 1M context", "Second node waits for NIC firmware", "Load-test router queue 200",
                 "**Keep bf16 index keys**: fp8 keys lost needles past 512k tokens", WEDGED.evidence[1],
                 "by alice via slack, approved by bob via slack: succeeded",
                 "| prefill | gpu-node-1 | 0,1,2,3 | 4 | 0 | 0.85 | 2.0 | 1048576 | mooncake | unknown (the spec asks for bf16) |",
                 "Admission control: at the router: max 256 concurrent"):
        assert text in md, text
    html = render(report, "html")
    assert "<h2>Critical context</h2>" in html and "Keep bf16 index keys" in html


def test_a_saved_status_report_starts_the_next_period(store):
    save(store, NOW - timedelta(hours=3), [WEDGED])
    first = build_status(store, None, _settings(), now=NOW)
    assert [i.incident for i in first.incidents] == ["decode-wedged"]
    store.save_report("status", "p1", "markdown", render(first, "markdown"), {})
    save(store, datetime.now(timezone.utc) + timedelta(minutes=1), [QUEUE])
    second = build_status(store, None, _settings(), now=datetime.now(timezone.utc) + timedelta(minutes=2))
    assert [i.incident for i in second.incidents] == ["prefill-queue-saturation"]
    assert second.current.incidents == ["prefill-queue-saturation"]  # latest stored probe, with its age
    assert not second.current.fresh or second.current.age_s is not None


def test_note_written_done_after_doing_shows_once_as_done(store):
    store.add_note("doing", "Upgrade router to 0.3.2", "alice")
    store.add_note("done", "Upgrade router to 0.3.2", "alice")
    report = build_status(store, None, _settings(), now=datetime.now(timezone.utc) + timedelta(seconds=1))
    assert [n.text for n in report.done] == ["Upgrade router to 0.3.2"]
    assert report.doing == []


def test_status_with_nothing_stored_says_what_to_do(store):
    report = build_status(store, None, Settings(), now=NOW)
    md = render(report, "markdown")
    assert "no probe stored yet: run `opsbot status --probe --save`" in md
    assert "No goal set" in md and "no serving spec configured: set OPSBOT_SPEC" in md
    assert "## Incidents since the last report\n\nNone." in md


def test_unreadable_spec_is_reported_not_raised(store, tmp_path):
    bad = tmp_path / "spec.yaml"
    bad.write_text("name: x\nmodel: [\n")
    report = build_status(store, None, _settings(spec=bad), now=NOW)
    assert report.context.missing and report.context.missing.startswith("serving spec unreadable:")
    assert str(bad) in report.context.missing


async def test_weekly_without_prometheus_renders_from_history(store):
    week = parse_week("2026-W48", zone("UTC"))
    seeded = seed_week(store, week.start)
    report = await build_weekly(store, None, week, settings=_settings(), now=NOW)
    assert report.missing == ["every Prometheus figure and chart: no Prometheus configured (set OPSBOT_PROMETHEUS_URL)"]
    assert report.by_class == seeded.by_class and report.by_class_previous == {}
    assert report.time_to_diagnosis.count == 1
    assert report.time_to_diagnosis.median_s == pytest.approx(seeded.diagnosis_s[0], abs=0.01)
    assert report.time_to_recovery.count == 2
    assert report.time_to_recovery.worst_s == pytest.approx(max(seeded.recovery_s), abs=0.01)
    assert report.time_to_recovery.median_s == pytest.approx(sum(seeded.recovery_s) / 2, abs=0.01)
    assert report.restarts_by_opsbot == seeded.restarts
    blocks = json.loads(render(report, "blocks"))
    text = json.dumps(blocks)
    assert "Missing: every Prometheus figure" in text and "decode-wedged" in text


async def test_weekly_empty_week_renders_and_says_so(store):
    report = await build_weekly(store, None, "2026-W10", settings=_settings(), now=NOW)
    md = render(report, "markdown")
    assert "No incidents in either week." in md
    assert "## Incidents this week\n\nNone." in md and "## Actions\n\nNone." in md
    assert report.charts == [] and report.time_to_recovery.count == 0


@pytest.mark.parametrize(("label", "message"), [
    ("2026-W49", "week 2026-W49 is not over until"),
    ("2027-W02", "week 2027-W02 is in the future"),
    ("2026-W54", "2026 has no week 54"),
    ("48", "write it as YYYY-Www"),
])
def test_weeks_that_cannot_be_reported_are_refused_clearly(label, message):
    with pytest.raises(WeekError, match=message):
        resolve_week(label, _settings(), NOW)


def test_report_week_follows_the_configured_time_zone():
    week = resolve_week("2026-W48", _settings(report_timezone="Asia/Tokyo"), NOW)
    assert week.start.isoformat() == "2026-11-23T00:00:00+09:00"
    with pytest.raises(WeekError, match="unknown time zone 'Mars/Base'"):
        resolve_week(None, Settings(report_timezone="Mars/Base"), NOW)
