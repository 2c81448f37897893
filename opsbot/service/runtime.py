"""What every surface of the service shares: settings, store, metrics, and the one probe path.

REST routes, Slack handlers and the alert intake all call ``Runtime.run_probe``; it probes,
diagnoses, stores and counts, and nothing else. The store is synchronous (SQLAlchemy), so its
calls run in a worker thread to keep the event loop answering.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from anyio import to_thread

from opsbot.bundle import Bundle, Trigger
from opsbot.inventory import Inventory, load_inventory
from opsbot.service.telemetry import Telemetry
from opsbot.settings import Settings

R = TypeVar("R")
ProbeFn = Callable[..., Awaitable[Bundle]]
DiagnoseFn = Callable[[Bundle], Any]


def _default_probe() -> ProbeFn:
    from opsbot.collect.probe import probe

    return probe


def _default_diagnose() -> DiagnoseFn:
    from opsbot.diagnose import diagnose

    return diagnose


@dataclass
class ProbeResult:
    probe_id: Any
    bundle: Bundle
    diagnosis: Any

    def as_json(self) -> dict[str, Any]:
        """The public diagnosis JSON contract, plus which probe row holds the evidence."""
        findings = [f.model_dump(mode="json") for f in self.diagnosis.findings]
        return {"probe_id": self.probe_id, "bundle": self.bundle.id, "cluster": self.bundle.cluster, "findings": findings}


@dataclass
class Runtime:
    settings: Settings
    store: Any
    probe: ProbeFn = field(default_factory=_default_probe)
    diagnose: DiagnoseFn = field(default_factory=_default_diagnose)
    telemetry: Telemetry = field(default_factory=Telemetry)
    _inventory: tuple[float, Inventory] | None = None

    def inventory(self) -> Inventory:
        """The inventory file, reloaded when it changes (the lab rewrites it on ``lab up``)."""
        path: Path = self.settings.inventory_path()
        mtime = path.stat().st_mtime
        if self._inventory is None or self._inventory[0] != mtime:
            self._inventory = (mtime, load_inventory(path))
        return self._inventory[1]

    def cluster_name(self, name: str | None = None) -> str:
        return self.inventory().cluster(name or self.settings.cluster)[0]

    async def db(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """Run a store call off the event loop."""
        return await to_thread.run_sync(lambda: fn(*args, **kwargs))

    async def run_probe(self, cluster: str | None, roles: list[str] | None, trigger: Trigger) -> ProbeResult:
        """Probe the scope, diagnose, store both, count; bad scope raises before any connection."""
        inventory = self.inventory()
        started = time.perf_counter()
        outcome = "error"
        try:
            bundle = await self.probe(inventory, cluster=cluster, roles=roles, trigger=trigger, settings=self.settings)
            diagnosis = self.diagnose(bundle)
            probe_id = await self.db(self.store.save_probe, bundle, diagnosis)
            outcome = "finding" if diagnosis.findings else "healthy"
        finally:
            self.telemetry.probes.labels(trigger.kind, outcome).inc()
            self.telemetry.probe_seconds.labels(trigger.kind).observe(time.perf_counter() - started)
        for finding in diagnosis.findings:
            self.telemetry.findings.labels(finding.incident).inc()
        return ProbeResult(probe_id, bundle, diagnosis)
