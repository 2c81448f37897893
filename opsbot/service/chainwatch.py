"""The alert chain's watchdog: while Prometheus or Alertmanager does not answer, no alert can reach opsbot,
so opsbot probes every role of every cluster itself, every ``OPSBOT_CHAIN_WATCH_S``. Its findings open and
join incidents through the flow as an alert's probe does (``Incidents.watched``), and the incidents it
sighted close when a later probe no longer finds them (no resolved alert will come). It keeps probing
until the chain answers again and nothing it opened is left open. Instances sharing a database probe once
per interval between them (``Store.claim_period``), as the weekly report and the recall slots do.

Started and stopped by the service's composition root, like the other triggers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from opsbot.bundle import Trigger
from opsbot.service.integrations import Integration, alert_chain
from opsbot.store.database import unavailable

JOB = "chain-watch"
CHAIN = ("Prometheus", "Alertmanager")  # the integrations an alert passes through (``alert_chain``)
log = logging.getLogger("opsbot.chainwatch")


@dataclass
class ChainWatch:
    flow: Any  # opsbot.flow.Flow
    watching: int = 0  # open incidents the watchdog sighted that only it can close, at the last check
    _task: asyncio.Task[None] | None = None

    @property
    def interval_s(self) -> float:
        return self.flow.settings.chain_watch_s

    def start(self) -> None:
        if self.interval_s > 0:
            self._task = asyncio.create_task(self._run(), name="opsbot-chain-watch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception as exc:  # a database or node away for a while must not stop the watch
                if not unavailable(exc):
                    log.exception("alert-chain watch failed; trying again in %.0f s", self.interval_s)
                else:  # expected while PostgreSQL restarts: one line, as the intake and the lease say it
                    log.warning("alert-chain watch: database unavailable (%s); trying again in %.0f s", exc, self.interval_s)
            await asyncio.sleep(self.interval_s)

    async def tick(self, at: float | None = None) -> list[str]:
        """Check the chain; while it is down (or an incident the watchdog sighted is open), probe every
        cluster unless another instance took this interval. The probe ids taken here."""
        flow = self.flow
        down = [i for i in await alert_chain(flow.settings) if i.ok is False]
        # with the chain back, only what no alert holds is left to the watchdog to close
        self.watching = len([r for r in await flow.db(flow.store.watched) if down or not r.firing])
        if not down and not self.watching:
            return []
        slot = str(int((at if at is not None else time.time()) // max(self.interval_s, 1e-3)))
        if not await flow.db(flow.store.claim_period, JOB, slot, flow.instance):
            return []
        why = "; ".join(f"{i.name} {i.detail}" for i in down) or "the alert chain answers again"
        probes: list[str] = []
        try:
            for cluster in list(flow.inventory().clusters):
                result = await flow.run_probe(cluster, None, Trigger(kind="schedule", text=f"watchdog: {why}"))
                await flow.incidents.watched(result, why, chain_up=not down)
                probes.append(result.probe_id)
        except Exception as exc:
            await flow.db(flow.store.finish_period, JOB, slot, f"failed: {type(exc).__name__}: {exc}"[:500])
            raise
        await flow.db(flow.store.finish_period, JOB, slot, f"{why}; probe {', '.join(probes)}"[:500])
        return probes

    async def state(self, checked: list[Integration]) -> Integration:
        """The watchdog as a row of the status page's integrations table, by the page's own ``checked``
        integrations (fresher than the last tick)."""
        down = [i for i in checked if i.ok is False and i.name in CHAIN]
        if self.interval_s <= 0:
            return Integration("opsbot watchdog", None, None, "off (OPSBOT_CHAIN_WATCH_S=0)")
        last = await self.flow.db(self.flow.store.latest_run, JOB)
        seen = (f"; last watchdog probe {last.claimed_at:%Y-%m-%d %H:%M:%S} UTC: {last.result or 'running'}"
                if last is not None else "")
        if not down and not self.watching:
            return Integration("opsbot watchdog", None, True, f"idle: the alert chain answers{seen}")
        what = ", ".join(i.name for i in down) or "nothing (closing what it opened)"
        return Integration("opsbot watchdog", None, True,
                           f"probing every role every {self.interval_s:g} s while the alert chain is down "
                           f"(failing: {what}){seen}")
