"""The one Slack notifier (opsbot/slack/notifier.py) on the real slack_sdk client against the recording
Slack server (tests/slackrecorder.py): a 429 storm (Retry-After honoured) and a 500 storm lose nothing and
keep each channel's order; a message Slack refuses fails alone; a channel's posts are rate limited; the
same notification is sent once; and the service answers meanwhile, its loop never held (loop_watchdog).
"""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from slack_sdk.web.async_client import AsyncWebClient

from opsbot.slack.notifier import Dedup, NotDelivered, SlackNotifier, TokenBucket
from tests.servicekit import flow_for, lab_settings, replay, served
from tests.slackrecorder import SlackRecorder
from tests.test_service_alerts import HDR, alert, webhook


@pytest.fixture
async def slack():
    recorder = await SlackRecorder().start()
    yield recorder
    await recorder.stop()


def notifier(slack: SlackRecorder, **kw: float) -> SlackNotifier:
    made = SlackNotifier(AsyncWebClient(token="xoxb-test", base_url=slack.url),
                         **{"rate_per_s": 1000.0, "burst": 1000, **kw})  # type: ignore[arg-type]
    made.first_delay_s = 0.02
    return made


def texts(slack: SlackRecorder, channel: str) -> list[str]:
    return [m["text"] for m in slack.posted(channel)]


@given(st.lists(st.floats(min_value=0, max_value=0.5), min_size=1, max_size=60),
       st.floats(min_value=0.5, max_value=50), st.integers(min_value=1, max_value=10))
def test_a_channel_never_gets_more_than_its_burst_and_rate(gaps, rate, burst):
    """Whenever the posts are asked for, the n-th is sent no earlier than the bucket allows."""
    bucket, asked, sent = TokenBucket(rate, burst), 0.0, []
    for gap in gaps:
        asked += gap
        at = max(asked, sent[-1] if sent else 0.0)  # a channel's worker sends one at a time, in order
        sent.append(at + bucket.take(at))
    assert all(at - sent[0] >= (i + 1 - burst) / rate - 1e-9 for i, at in enumerate(sent))


async def test_a_429_storm_is_waited_out_in_order_and_other_channels_go_on(slack):
    slack.fail("chat.postMessage", "429")
    slack.retry_after = "1"
    n = notifier(slack)
    first = asyncio.gather(*(n.post("C0STORM", f"m{i}") for i in range(20)))
    while not slack.calls:
        await asyncio.sleep(0.01)  # the storm's first 429 came back
    other = await asyncio.wait_for(asyncio.gather(*(n.post("C0CALM", f"c{i}") for i in range(5))), 0.9)
    assert [d.ts for d in other] and texts(slack, "C0CALM") == [f"c{i}" for i in range(5)]
    assert texts(slack, "C0STORM") == [], "the stormy channel still waits out its Retry-After"
    slack.fail("chat.postMessage", "429")  # and its next try is rate limited again
    delivered = await first
    assert texts(slack, "C0STORM") == [f"m{i}" for i in range(20)], "nothing lost, nothing twice, in order"
    assert len({d.ts for d in delivered}) == 20
    tries = [c for c in slack.calls if c.method == "chat.postMessage" and c.args["channel"] == "C0STORM"]
    assert [c.status for c in tries[:3]] == [429, 429, 200]
    assert tries[1].at - tries[0].at >= 0.95 and tries[2].at - tries[1].at >= 0.95, "Retry-After: 1 honoured"


async def test_a_500_storm_is_retried_with_backoff_and_a_refused_message_fails_alone(slack):
    slack.fail("chat.postMessage", *["500"] * 5)
    n = notifier(slack)
    await asyncio.gather(*(n.post("C0STORM", f"m{i}") for i in range(8)))
    assert texts(slack, "C0STORM") == [f"m{i}" for i in range(8)]
    statuses = [c.status for c in slack.calls if c.method == "chat.postMessage"]
    assert statuses[:6] == [500] * 5 + [200]
    gaps = [b.at - a.at for a, b in zip(slack.calls, slack.calls[1:]) if a.method == "chat.postMessage"]
    assert gaps and max(gaps) >= 0.15, "backoff doubles: 0.02, 0.04, 0.08, 0.16 s"
    # a 500 may have posted: the post is looked up by its metadata before it is sent again
    assert slack.of("conversations.history")

    # Slack says no for good (a channel the bot is not in): that message fails alone, the next one goes
    slack.fail("chat.postMessage", "refused")
    lost, after = await asyncio.gather(n.post("C0STORM", "lost"), n.post("C0STORM", "after"), return_exceptions=True)
    assert isinstance(lost, NotDelivered) and "not_in_channel" in str(lost)
    assert not isinstance(after, BaseException) and texts(slack, "C0STORM")[-1] == "after"

    # Slack down for longer than the notifier tries: said, not hidden
    n.retry_for_s = 0.2
    slack.fail("chat.postMessage", *["500"] * 20)
    with pytest.raises(NotDelivered, match="still failing after 0.2 s"):
        await n.post("C0STORM", "too late")


async def test_a_channel_is_rate_limited(slack):
    n = notifier(slack, rate_per_s=50.0, burst=10)
    start = time.monotonic()
    await asyncio.gather(*(n.post("C0ALERTS", f"g{i}") for i in range(40)))
    posts = slack.of("chat.postMessage")
    assert len(posts) == 40 and time.monotonic() - start >= (40 - 10) / 50 - 0.05
    for i, call in enumerate(posts):
        assert call.at - posts[0].at >= (i - 10) / 50 - 0.02, f"post {i} came too early"


async def test_by_default_100_groups_reach_a_channel_ten_at_once_then_one_a_second(slack, tmp_path):
    from opsbot.settings import Settings

    n = SlackNotifier.from_settings(Settings(data_dir=tmp_path, slack_bot_token="xoxb-test", slack_api_url=slack.url))
    posts = [asyncio.ensure_future(n.post("C0ALERTS", f"group {i}")) for i in range(100)]
    await asyncio.sleep(2.0)
    assert 10 <= len(slack.posted("C0ALERTS")) <= 13, "the burst, then about one a second"
    await n.close()
    left = await asyncio.gather(*posts[13:], return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in left), "shutdown tells the callers still waiting"


async def test_the_same_notification_is_sent_once_and_queued_edits_keep_the_latest(slack):
    n = notifier(slack)
    group = Dedup("alert-group:abc", "fa:firing|decode-wedged")
    assert await n.post("C0ALERTS", "first", dedup=group) is not None
    assert await n.post("C0ALERTS", "again", dedup=group) is None
    assert await n.post("C0ALERTS", "changed", dedup=Dedup(group.key, "fa:resolved|")) is not None
    assert texts(slack, "C0ALERTS") == ["first", "changed"]

    slack.fail("chat.update", "429")
    slack.retry_after = "1"
    edits = [n.update("C0ALERTS", "1700000000.000001", f"v{i}", []) for i in range(5)]
    await asyncio.gather(*edits)
    done = [c.args["text"] for c in slack.of("chat.update")]
    assert done[-1] == "v4" and len(done) <= 2, "edits queued behind a 429 collapse into the latest"


async def test_the_service_answers_and_loses_nothing_during_a_429_then_500_storm(tmp_path, slack, database_url,
                                                                                 loop_watchdog):
    """30 alert groups from one probe, posted while Slack rate limits and then fails: every group gets its
    one thread (a groupKey of 4,000 characters among them), spaced by the channel's rate, and /healthz
    answers fast all along."""
    settings = lab_settings(tmp_path, database_url, slack_bot_token="xoxb-test",
                            slack_signing_secret="8f742231b10e8888abcd99yyyzzz85a5", slack_api_url=slack.url,
                            slack_alert_channel="C0ALERTS", alert_token=HDR["X-Opsbot-Alert-Token"],
                            slack_channel_rate_per_s=20.0, slack_channel_burst=5)
    slack.fail("chat.postMessage", "429", "429", "500", "500", "500")
    slack.retry_after = "1"
    groups = ["{}:{" + "x" * 3990 + "}"] + [f'{{}}:{{alertname="DecodeStalled",n="{i}"}}' for i in range(29)]
    flow = flow_for(settings, replay("healthy-0.5.12"))
    async with served(settings, flow) as client:
        client.app.state.slack.notifier.first_delay_s = 0.05
        for i, group in enumerate(groups):
            r = await client.post("/alerts", json=webhook(alert(f"f{i}"), group=group), headers=HDR)
            assert r.status_code == 200
        slowest = 0.0
        while len(slack.posted("C0ALERTS")) < len(groups):
            t0 = time.monotonic()
            assert (await client.get("/healthz")).status_code == 200
            slowest = max(slowest, time.monotonic() - t0)
            await asyncio.sleep(0.05)
            assert time.monotonic() - t0 < 30
        await client.app.state.intake.drain()
        await client.app.state.slack.notifier.drain()
    posts = slack.posted("C0ALERTS")
    assert len(posts) == len(groups), "one thread per group: nothing lost, nothing twice"
    assert all(flow.store.slack_thread(g) is not None for g in groups)
    assert slowest < 0.1, f"/healthz took {slowest * 1000:.0f} ms during the storm"
    assert sorted({c.status for c in slack.calls if c.method == "chat.postMessage"}) == [200, 429, 500]
    spaced = [m["at"] for m in posts]
    assert spaced[-1] - spaced[0] >= (len(groups) - 5) / 20 - 0.1, "the channel's rate held"
