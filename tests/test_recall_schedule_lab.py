"""The recall probe by itself, on the lab: the scheduled run (one instance per slot), a worse run posted
to Slack with its grid (the recording Slack stand-in), the preceding deploy named, the service starting it."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest

from opsbot.bundle import Trigger
from opsbot.flow import Flow
from opsbot.lab.nodes import Lab
from opsbot.service.recall_schedule import recall_trigger, run_scheduled, slack_poster
from opsbot.settings import Settings
from opsbot.store import Store
from tests.slackrecorder import SlackRecorder

pytestmark = pytest.mark.lab
GRID = {"recall_lengths": "1k,2k,4k,8k", "recall_depths": "0,0.5,1", "recall_distractors": 2}


def test_schedule_is_a_crontab_line_and_a_bad_one_is_refused():
    assert str(recall_trigger(Settings(recall_schedule="0 */6 * * *"))).startswith("cron[")
    with pytest.raises(ValueError, match="OPSBOT_RECALL_SCHEDULE"):
        recall_trigger(Settings(recall_schedule="0 */6 * * mon-xyz"))


def test_a_scheduled_run_worse_than_the_last_good_one_is_posted_with_its_grid(lab: Lab, tmp_path):
    lab.reset()

    async def go() -> tuple:
        slack = await SlackRecorder().start()
        try:
            settings = lab.settings.model_copy(update={
                **GRID, "slack_bot_token": "xoxb-test", "slack_alert_channel": "C-ALERTS",
                "slack_api_url": slack.url, "database_url": f"sqlite:///{tmp_path / 'opsbot.db'}"})
            with Store(settings.db_url()) as store:
                flow = Flow(settings=settings, store=store)
                poster = slack_poster(settings)
                good = await flow.run_recall(None, Trigger(kind="cli", text="recall"))
                assert good.worse_than is None and good.bundle.recall is not None
                store.audit("alice", "cli", "deploy restart", {"deploy": "deploy-1a2b3c4d", "role": "decode"},
                            cluster=good.bundle.cluster, role="decode")
                lab.inject("decode", "recall-loss", beyond=2048)
                at = datetime.now(timezone.utc)
                first = await run_scheduled(flow, poster, now=at)
                again = await run_scheduled(flow, poster, now=at)  # the same slot: claimed once
                bundle = store.load_bundle(first) if first else None
                return slack.calls, first, again, bundle
        finally:
            await slack.stop()

    calls, first, again, bundle = asyncio.run(go())
    assert first is not None and again is None
    assert bundle.trigger.kind == "schedule"
    assert bundle.recall.model_extra["after_deploy"].startswith("deploy-1a2b3c4d by alice at ")
    posts = [c for c in calls if c.method == "chat.postMessage"]
    assert len(posts) == 1 and posts[0].args["channel"] == "C-ALERTS"
    text = str(posts[0].args["blocks"])
    assert "LOST" in text and "worse on its schedule" in posts[0].args["text"]
    assert "long-context-recall-regression" in text


def test_deploy_apply_runs_the_recall_probe_and_posts_a_worse_run(lab: Lab, tmp_path, capsys):
    """``opsbot deploy apply``'s last step (``recall_after_deploy``) on the lab, Slack recording in a thread."""
    import threading

    from opsbot.cli.deploy import recall_after_deploy

    lab.reset()
    loop = asyncio.new_event_loop()
    slack = loop.run_until_complete(SlackRecorder().start())
    serving = threading.Thread(target=loop.run_forever, daemon=True)
    serving.start()
    try:
        settings = lab.settings.model_copy(update={
            **GRID, "slack_bot_token": "xoxb-test", "slack_alert_channel": "C-ALERTS", "slack_api_url": slack.url,
            "database_url": f"sqlite:///{tmp_path / 'opsbot.db'}"})
        recall_after_deploy(settings, "lab")  # good: every needle found
        assert "every needle found up to 8k" in capsys.readouterr().out
        lab.inject("decode", "recall-loss", beyond=2048)
        recall_after_deploy(settings, "lab")
        shown = capsys.readouterr().out
        assert "worse than the last good run" in shown and "long-context-recall-regression" in shown
    finally:
        asyncio.run_coroutine_threadsafe(slack.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        serving.join(10)
    posts = slack.of("chat.postMessage")
    assert len(posts) == 1 and "worse after a deploy" in posts[0].args["text"]
