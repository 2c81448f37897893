"""The weekly report on a schedule: APScheduler in the service, once per week across instances.

The service's lifespan calls ``start_report_scheduler(store, settings, poster)`` and, on the
way out, ``scheduler.shutdown()``. Every instance may schedule the job; ``Store.claim_period``
lets exactly one of them run it for a given week (a unique row in the shared database).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from datetime import datetime, timedelta, timezone
from typing import Protocol

from apscheduler.job import Job
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger

from opsbot.report.render import render
from opsbot.report.week import last_complete_week, zone
from opsbot.report.weekly import build_weekly
from opsbot.settings import Settings
from opsbot.slack.notifier import SlackNotifier
from opsbot.store import Store

JOB = "weekly-report"
log = logging.getLogger("opsbot.report")


class ReportPoster(Protocol):
    """Where a finished report goes: the service's Slack client (``SlackPoster``) or anything alike."""

    async def post_report(self, channel: str, text: str, blocks: list[dict], files: list[tuple[str, bytes]]) -> None:
        ...


class SlackPoster:
    """Posts through the Slack notifier (``opsbot.slack.notifier``): the Block Kit message, then the charts as files."""

    def __init__(self, notifier: SlackNotifier) -> None:
        self.notifier = notifier

    async def post_report(self, channel: str, text: str, blocks: list[dict], files: list[tuple[str, bytes]]) -> None:
        sent = await self.notifier.post(channel, text, blocks)
        if files and sent is not None:
            await self.notifier.upload(sent.channel, sent.ts, files)


async def run_weekly(store: Store, settings: Settings, poster: ReportPoster | None = None, *,
                     now: datetime | None = None, instance: str = "") -> str | None:
    """Make, keep and post last week's report, unless another instance has claimed that week (a claim
    left unfinished by an instance that died is taken over: ``resume_weekly``).

    Returns the week reported on, or None when the claim was lost. A failure is recorded on the
    claim (``opsbot report weekly --week W --save`` redoes it by hand) and re-raised.
    """
    now = now or datetime.now(timezone.utc)
    week = last_complete_week(now, zone(settings.report_timezone))
    lease = timedelta(seconds=settings.instance_lease_s)
    if not await asyncio.to_thread(store.claim_period, JOB, week.label, instance, lease=lease):
        log.info("weekly report %s: already claimed by another instance", week.label)
        return None
    try:
        report = await build_weekly(store, settings.prometheus_url, week, settings=settings, now=now)
        meta = {"week": week.label, "missing": report.missing, "by_class": report.by_class}
        for fmt in ("markdown", "html"):
            await asyncio.to_thread(store.save_report, "weekly", week.label, fmt, render(report, fmt), meta)
        result = "saved"
        if poster is not None and settings.report_slack_channel:
            blocks = json.loads(render(report, "blocks"))
            files = [(f"{c.key}.png", base64.b64decode(c.png_base64)) for c in report.charts]
            await poster.post_report(settings.report_slack_channel, report.title, blocks, files)
            result = f"saved, posted to {settings.report_slack_channel}"
    except Exception as exc:
        await asyncio.to_thread(store.finish_period, JOB, week.label, f"failed: {type(exc).__name__}: {exc}")
        raise
    await asyncio.to_thread(store.finish_period, JOB, week.label, result)
    return week.label


async def resume_weekly(store: Store, settings: Settings, poster: ReportPoster | None = None, *,
                        instance: str = "") -> int:
    """The lease sweep's part: last week's report, if the instance making it died before finishing."""
    week = last_complete_week(datetime.now(timezone.utc), zone(settings.report_timezone))
    lease = timedelta(seconds=settings.instance_lease_s)
    if week.label not in await asyncio.to_thread(store.orphaned_periods, JOB, lease):
        return 0
    log.warning("weekly report %s: its instance died before finishing; taking it over", week.label)
    return 1 if await run_weekly(store, settings, poster, instance=instance) else 0


def weekly_trigger(settings: Settings) -> CronTrigger:
    hour, minute = (int(x) for x in settings.weekly_report_time.split(":"))
    return CronTrigger(day_of_week=settings.weekly_report_day, hour=hour, minute=minute,
                       timezone=zone(settings.report_timezone))


def schedule_weekly(scheduler: AsyncIOScheduler, store: Store, settings: Settings,
                    poster: ReportPoster | None = None, *, instance: str = "") -> Job:
    """Register the weekly job (default Monday 09:00 in ``report_timezone``); a late start within
    six hours still runs it, and missed runs are coalesced into one."""
    return scheduler.add_job(
        run_weekly, weekly_trigger(settings), id=JOB, name="weekly report", replace_existing=True,
        kwargs={"store": store, "settings": settings, "poster": poster, "instance": instance},
        misfire_grace_time=6 * 3600, coalesce=True, max_instances=1)


def missed_week(settings: Settings, now: datetime) -> bool:
    """Whether last week's report was due before ``now`` (the service was down at the time)."""
    week = last_complete_week(now, zone(settings.report_timezone))
    due = weekly_trigger(settings).get_next_fire_time(None, week.end)
    return due is not None and due <= now


def start_report_scheduler(store: Store, settings: Settings, poster: ReportPoster | None = None, *,
                           instance: str = "") -> AsyncIOScheduler:
    """For the service's lifespan (inside the running event loop): a started scheduler with the weekly job.

    If last week's report was due while no instance was running, it is made now; the claim keeps
    an instance that did run it from posting it twice.
    """
    scheduler = AsyncIOScheduler(timezone=zone(settings.report_timezone))
    schedule_weekly(scheduler, store, settings, poster, instance=instance)
    if missed_week(settings, datetime.now(timezone.utc)):
        scheduler.add_job(run_weekly, id=f"{JOB}-catch-up", name="weekly report (catch-up)",
                          kwargs={"store": store, "settings": settings, "poster": poster, "instance": instance})
    scheduler.start()
    return scheduler
