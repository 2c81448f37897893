"""The chatbot's intent parser (pure): fixtures for each intent, properties for any text and any time."""

from __future__ import annotations

from datetime import datetime, time, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opsbot.chat.intents import Window, parse_intent, parse_window, resolve

BERLIN = ZoneInfo("Europe/Berlin")


@pytest.mark.parametrize(("text", "kind", "role", "window"), [
    ("help", "help", None, None),
    ("", "help", None, None),
    ("what happened last night?", "happened", None, Window("last-night")),
    ("What happened since 02:00", "happened", None, Window("since", at=time(2, 0))),
    ("what happened since 2pm", "happened", None, Window("since", at=time(14, 0))),
    ("what happened this week", "happened", None, Window("this-week")),
    ("what happened in the last 6h", "happened", None, Window("last", span=timedelta(hours=6))),
    ("what happened", "happened", None, Window("last", span=timedelta(days=1))),
    ("why did decode restart?", "why-restart", "decode", None),
    ("why was decode-2 restarted", "why-restart", "decode-2", None),
    ("is it safe to restart prefill", "safe-restart", "prefill", None),
    ("can we restart the router?", "safe-restart", "router", None),
    ("incidents", "incidents", None, None),
    ("open incidents", "incidents", None, None),
    ("history decode 24h", "history", "decode", Window("last", span=timedelta(hours=24))),
    ("history 2d", "history", None, Window("last", span=timedelta(days=2))),
    ("history of prefill since 03:30", "history", "prefill", Window("since", at=time(3, 30))),
    ("decode is stuck", "probe", None, None),
    ("restart history is weird", "probe", None, None),
])
def test_intents(text, kind, role, window):
    intent = parse_intent(text)
    assert (intent.kind, intent.role, intent.window) == (kind, role, window)
    assert intent.understood().startswith("understood: ")


def test_since_is_read_in_the_operators_zone():
    now = datetime(2026, 12, 1, 7, 30, tzinfo=timezone.utc)  # 08:30 in Berlin
    since, until = resolve(Window("since", at=time(2, 0)), now, BERLIN)
    assert since == datetime(2026, 12, 1, 1, 0, tzinfo=timezone.utc) and until == now
    since, _ = resolve(Window("since", at=time(23, 0)), now, BERLIN)  # later than now: yesterday's
    assert since == datetime(2026, 11, 30, 22, 0, tzinfo=timezone.utc)


def test_last_night_and_this_week():
    now = datetime(2026, 12, 2, 10, 0, tzinfo=timezone.utc)  # a Wednesday, 11:00 in Berlin
    since, until = resolve(Window("last-night"), now, BERLIN)
    assert (since, until) == (datetime(2026, 12, 1, 17, 0, tzinfo=timezone.utc),
                              datetime(2026, 12, 2, 8, 0, tzinfo=timezone.utc))
    early = datetime(2026, 12, 2, 3, 0, tzinfo=timezone.utc)  # 04:00: the night is not over
    assert resolve(Window("last-night"), early, BERLIN)[1] == early
    since, _ = resolve(Window("this-week"), now, BERLIN)
    assert since == datetime(2026, 11, 29, 23, 0, tzinfo=timezone.utc)  # Monday 00:00 in Berlin


@given(st.text(max_size=200))
def test_any_text_is_an_intent(text):
    intent = parse_intent(text)
    assert intent.kind in ("help", "happened", "why-restart", "safe-restart", "incidents", "history", "probe")
    assert intent.role is None or intent.role.replace("-", "").isalnum()


zones = st.sampled_from(["UTC", "Europe/Berlin", "America/Los_Angeles", "Asia/Kolkata", "Pacific/Chatham"])
windows = st.one_of(
    st.sampled_from([Window(k) for k in ("last-night", "today", "yesterday", "this-week", "last-week")]),
    st.times().map(lambda t: Window("since", at=t.replace(second=0, microsecond=0))),
    st.integers(1, 24 * 366).map(lambda h: Window("last", span=timedelta(hours=h))),
)


@given(windows, zones, st.datetimes(min_value=datetime(2000, 1, 2), max_value=datetime(2099, 12, 30),
                                    timezones=st.just(timezone.utc)))
def test_windows_end_by_now_and_start_before_they_end(window, tz, now):
    since, until = resolve(window, now, ZoneInfo(tz))
    assert since <= until <= now
    assert now - since <= timedelta(days=367)


@given(st.text(max_size=80))
def test_window_parser_never_raises(text):
    w = parse_window(text)
    assert w is None or w.describe()
