"""Probes run on a crontab line (recall, fidelity): each slot run once across instances, the line checked.

Instances sharing a database claim a slot (``Store.claim_period``) before running it and record how it
ended (``Store.finish_period``), as the weekly report does.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from apscheduler.triggers.cron import CronTrigger

from opsbot.report.week import zone
from opsbot.settings import Settings

if TYPE_CHECKING:
    from opsbot.flow import Flow

log = logging.getLogger("opsbot.periodic")


async def run_claimed(flow: Flow, job: str, work: Callable[[], Awaitable[str]], *,
                      now: datetime | None = None) -> str | None:
    """Run ``work`` (it returns the probe id) unless another instance claimed this minute's slot of ``job``."""
    slot = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M")
    if not await flow.db(flow.store.claim_period, job, slot, flow.instance):
        log.info("%s %s: already claimed by another instance", job, slot)
        return None
    try:
        probe_id = await work()
    except Exception as exc:
        await flow.db(flow.store.finish_period, job, slot, f"failed: {type(exc).__name__}: {exc}")
        raise
    await flow.db(flow.store.finish_period, job, slot, f"probe {probe_id}")
    return probe_id


def crontab_trigger(settings: Settings, line: str | None, env: str, example: str) -> CronTrigger:
    """The crontab ``line`` of setting ``env`` in the report time zone; refused, with an example, when malformed."""
    if not line:
        raise ValueError(f"{env} is not set")
    try:
        return CronTrigger.from_crontab(line, timezone=zone(settings.report_timezone))
    except ValueError as exc:
        raise ValueError(f"{env}={line!r}: {exc}; write a crontab line such as '{example}'") from exc
