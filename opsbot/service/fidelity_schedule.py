"""The output-fidelity probe on ``OPSBOT_FIDELITY_SCHEDULE`` (started by the service), as the recall probe runs.

Each run is recorded and diagnosed by the flow and sets ``opsbot_fidelity_result`` on ``/metrics``; the
``OpsbotOutputFidelityDiverged`` rule (serving/alerts.py) turns a divergence into an alert. Instances sharing a
database run each slot once (``Store.claim_period``).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger

from opsbot.bundle import Trigger
from opsbot.report.week import zone
from opsbot.settings import Settings

if TYPE_CHECKING:
    from opsbot.flow import Flow

JOB = "fidelity"
log = logging.getLogger("opsbot.fidelity")


async def run_scheduled(flow: Flow, *, now: datetime | None = None) -> str | None:
    """One scheduled run, unless another instance claimed this slot; returns the probe id."""
    now = now or datetime.now(UTC)
    slot = now.strftime("%Y-%m-%dT%H:%M")
    if not await flow.db(flow.store.claim_period, JOB, slot, flow.instance):
        log.info("fidelity %s: already claimed by another instance", slot)
        return None
    try:
        result = await flow.run_fidelity(None, Trigger(kind="schedule", text="fidelity (OPSBOT_FIDELITY_SCHEDULE)"))
    except Exception as exc:
        await flow.db(flow.store.finish_period, JOB, slot, f"failed: {type(exc).__name__}: {exc}")
        raise
    await flow.db(flow.store.finish_period, JOB, slot, f"probe {result.probe_id}")
    return result.probe_id


def fidelity_trigger(settings: Settings) -> CronTrigger:
    """``OPSBOT_FIDELITY_SCHEDULE``: a crontab line in the report time zone; refused when malformed."""
    if not settings.fidelity_schedule:
        raise ValueError("OPSBOT_FIDELITY_SCHEDULE is not set")
    try:
        return CronTrigger.from_crontab(settings.fidelity_schedule, timezone=zone(settings.report_timezone))
    except ValueError as exc:
        raise ValueError(f"OPSBOT_FIDELITY_SCHEDULE={settings.fidelity_schedule!r}: {exc}; write a crontab line "
                         "such as '*/30 * * * *'") from exc


def start_fidelity_scheduler(flow: Flow) -> AsyncIOScheduler:
    scheduler = AsyncIOScheduler(timezone=zone(flow.settings.report_timezone))
    scheduler.add_job(run_scheduled, fidelity_trigger(flow.settings), id=JOB, name="fidelity probe",
                      replace_existing=True, kwargs={"flow": flow}, misfire_grace_time=600, coalesce=True,
                      max_instances=1)
    scheduler.start()
    return scheduler
