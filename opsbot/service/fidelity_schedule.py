"""The output-fidelity probe on ``OPSBOT_FIDELITY_SCHEDULE`` (started by the service), as the recall probe runs.

Each run is recorded and diagnosed by the flow and sets ``opsbot_fidelity_result`` on ``/metrics``; the
``OpsbotOutputFidelityDiverged`` rule (serving/alerts.py) turns a divergence into an alert. Instances sharing a
database run each slot once (``Store.claim_period``).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger

from opsbot.bundle import Trigger
from opsbot.report.week import zone
from opsbot.service.periodic import crontab_trigger, run_claimed
from opsbot.settings import Settings

if TYPE_CHECKING:
    from opsbot.flow import Flow

JOB = "fidelity"


async def run_scheduled(flow: Flow, *, now: datetime | None = None) -> str | None:
    """One scheduled run, unless another instance claimed this slot; returns the probe id."""
    async def work() -> str:
        result = await flow.run_fidelity(None, Trigger(kind="schedule", text="fidelity (OPSBOT_FIDELITY_SCHEDULE)"))
        return result.probe_id

    return await run_claimed(flow, JOB, work, now=now)


def fidelity_trigger(settings: Settings) -> CronTrigger:
    """``OPSBOT_FIDELITY_SCHEDULE``: a crontab line in the report time zone; refused when malformed."""
    return crontab_trigger(settings, settings.fidelity_schedule, "OPSBOT_FIDELITY_SCHEDULE", "*/30 * * * *")


def start_fidelity_scheduler(flow: Flow) -> AsyncIOScheduler:
    scheduler = AsyncIOScheduler(timezone=zone(flow.settings.report_timezone))
    scheduler.add_job(run_scheduled, fidelity_trigger(flow.settings), id=JOB, name="fidelity probe",
                      replace_existing=True, kwargs={"flow": flow}, misfire_grace_time=600, coalesce=True,
                      max_instances=1)
    scheduler.start()
    return scheduler
