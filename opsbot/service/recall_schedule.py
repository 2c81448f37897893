"""The recall probe by itself: on ``OPSBOT_RECALL_SCHEDULE`` (started by the service) and after a deploy.

A run that recalls less than the last good one is posted to Slack with its grid
(``OPSBOT_SLACK_ALERT_CHANNEL``). Instances sharing a database run each scheduled slot once
(``Store.claim_period``), as the weekly report does.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from apscheduler.job import Job
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger

from opsbot.bundle import Trigger
from opsbot.parse.recall import short_length
from opsbot.service.periodic import crontab_trigger, run_claimed
from opsbot.settings import Settings
from opsbot.slack.blocks import recall_blocks
from opsbot.slack.notifier import SlackNotifier

if TYPE_CHECKING:
    from opsbot.flow import Flow, RecallResult

JOB = "recall"


class RecallPoster(Protocol):
    async def post(self, text: str, blocks: list[dict]) -> None: ...


class SlackRecallPoster:
    """Posts to a channel through the Slack notifier (``opsbot.slack.notifier``)."""

    def __init__(self, notifier: SlackNotifier, channel: str) -> None:
        self.notifier, self.channel = notifier, channel

    async def post(self, text: str, blocks: list[dict]) -> None:
        await self.notifier.post(self.channel, text, blocks)


def slack_poster(settings: Settings, notifier: SlackNotifier | None = None) -> SlackRecallPoster | None:
    """A poster when Slack is configured (a bot token and the alert channel), else None."""
    if not (settings.slack_bot_token and settings.slack_alert_channel):
        return None
    return SlackRecallPoster(notifier or SlackNotifier.from_settings(settings), settings.slack_alert_channel)


async def report_worse(result: RecallResult, poster: RecallPoster | None, why: str) -> None:
    """Post a run with its grid when it recalls less than the last good run (``result.worse_than``)."""
    if poster is None or result.worse_than is None or result.bundle.recall is None:
        return
    good = result.worse_than
    title = (f"Long-context recall is worse {why} on {result.bundle.cluster}: the last good run "
             f"({good.at:%Y-%m-%d %H:%M} UTC) recalled every needle up to "
             f"{short_length(good.record.get('longest_full') or 0)}")
    incidents = ", ".join(f.incident for f in result.diagnosis.findings) or "no finding"
    await poster.post(title, recall_blocks(result.bundle.recall, title, f"diagnosis: {incidents}; probe {result.probe_id}"))


async def run_scheduled(flow: Flow, poster: RecallPoster | None, *, now: datetime | None = None) -> str | None:
    """One scheduled run, unless another instance claimed this slot; returns the probe id."""
    async def work() -> str:
        result = await flow.run_recall(None, Trigger(kind="schedule", text="recall (OPSBOT_RECALL_SCHEDULE)"))
        await report_worse(result, poster, "on its schedule")
        return result.probe_id

    return await run_claimed(flow, JOB, work, now=now)


def recall_trigger(settings: Settings) -> CronTrigger:
    """``OPSBOT_RECALL_SCHEDULE``: a crontab line (``0 */6 * * *``) in the report time zone; refused when malformed."""
    return crontab_trigger(settings, settings.recall_schedule, "OPSBOT_RECALL_SCHEDULE", "0 */6 * * *")


def schedule_recall(scheduler: AsyncIOScheduler, flow: Flow, poster: RecallPoster | None) -> Job:
    return scheduler.add_job(run_scheduled, recall_trigger(flow.settings), id=JOB, name="recall probe",
                             replace_existing=True, kwargs={"flow": flow, "poster": poster},
                             misfire_grace_time=600, coalesce=True, max_instances=1)
