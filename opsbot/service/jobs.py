"""Probe jobs: a probe that outlives its HTTP request keeps running and is fetched by id."""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Literal

from opsbot.flow import ProbeResult


@dataclass
class Job:
    id: str
    task: asyncio.Task[ProbeResult]

    @property
    def state(self) -> Literal["running", "done", "failed"]:
        if not self.task.done():
            return "running"
        return "failed" if self.task.cancelled() or self.task.exception() else "done"

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "state": self.state}
        if self.state == "done":
            out["result"] = self.task.result().as_json()
        elif self.state == "failed":
            out["error"] = "cancelled" if self.task.cancelled() else str(self.task.exception())
        return out


class Jobs:
    """The most recent ``keep`` probe jobs, in memory (their results are in the store anyway)."""

    def __init__(self, keep: int = 500) -> None:
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._keep = keep

    def start(self, work: Awaitable[ProbeResult]) -> Job:
        job = Job(uuid.uuid4().hex[:12], asyncio.ensure_future(work))
        self._jobs[job.id] = job
        while len(self._jobs) > self._keep:
            self._jobs.popitem(last=False)
        return job

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    async def close(self) -> None:
        for job in self._jobs.values():
            job.task.cancel()
        await asyncio.gather(*(j.task for j in self._jobs.values()), return_exceptions=True)
