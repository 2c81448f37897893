"""What every surface of the service shares: settings, store, metrics, and the one probe path.

REST routes, Slack handlers and the alert intake all call ``Runtime.run_probe``; it probes,
diagnoses, stores and counts, and nothing else. The store is synchronous (SQLAlchemy), so its
calls run in a worker thread to keep the event loop answering.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from anyio import to_thread

from opsbot.bundle import Bundle, Trigger
from opsbot.inventory import Inventory, load_inventory
from opsbot.service.telemetry import Telemetry
from opsbot.settings import Settings
from opsbot.yamlsource import ConfigError

R = TypeVar("R")
ProbeFn = Callable[..., Awaitable[Bundle]]
DiagnoseFn = Callable[[Bundle], Any]


def _default_probe() -> ProbeFn:
    from opsbot.collect.probe import probe

    return probe


def _instance_id() -> str:
    """This opsbot process, as it signs its claims on shared rows: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _default_diagnose() -> DiagnoseFn:
    from opsbot.diagnose import diagnose

    return diagnose


class InventoryUnavailable(RuntimeError):
    """The inventory cannot be read: nothing can be probed until it is fixed (503, retry later)."""


@dataclass
class ProbeResult:
    probe_id: Any
    bundle: Bundle
    diagnosis: Any

    def as_json(self) -> dict[str, Any]:
        """The public diagnosis JSON contract, plus which probe row holds the evidence."""
        return {"probe_id": self.probe_id, "cluster": self.bundle.cluster, **self.diagnosis.public()}


@dataclass
class Runtime:
    settings: Settings
    store: Any
    probe: ProbeFn = field(default_factory=_default_probe)
    diagnose: DiagnoseFn = field(default_factory=_default_diagnose)
    telemetry: Telemetry = field(default_factory=Telemetry)
    instance: str = field(default_factory=_instance_id)
    pool: Any = None  # opsbot.collect.pool.KeptPool: connections kept across probes (set by the service)
    _inventory: tuple[float, Inventory] | None = None

    def inventory(self) -> Inventory:
        """The inventory file, reloaded when it changes (the lab rewrites it on ``lab up``)."""
        path: Path = self.settings.inventory_path()
        try:
            mtime = path.stat().st_mtime
            if self._inventory is None or self._inventory[0] != mtime:
                self._inventory = (mtime, load_inventory(path))
        except FileNotFoundError as exc:
            raise InventoryUnavailable(f"no inventory at {path}: run `opsbot lab up` or set OPSBOT_INVENTORY") from exc
        except ConfigError as exc:
            raise InventoryUnavailable(f"the inventory is refused: {exc}") from exc
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
            kept = {"pool": self.pool.view()} if self.pool is not None else {}
            bundle = await self.probe(inventory, cluster=cluster, roles=roles, trigger=trigger, settings=self.settings,
                                      **kept)
            diagnosis = self.diagnose(bundle)
            probe_id = await self.db(self.store.save_probe, bundle, diagnosis)
            outcome = "finding" if diagnosis.findings else "no-finding"
        finally:
            self.telemetry.probes.labels(trigger.kind, outcome).inc()
            self.telemetry.probe_seconds.labels(trigger.kind).observe(time.perf_counter() - started)
        for finding in diagnosis.findings:
            self.telemetry.findings.labels(finding.incident).inc()
        return ProbeResult(probe_id, bundle, diagnosis)

    # -- guarded restarts: the same opsbot.act path the CLI uses ----------------------------
    async def request_restart(self, role: str, cluster: str | None, *, actor: str, surface: str,
                              reason: str | None = None) -> tuple[Any, Any]:
        """Plan and record a restart (``planned``, waiting for approval); bad scope raises."""
        from opsbot.act import request_restart

        return await self.db(request_restart, self.store, self.inventory(), [role], actor=actor, surface=surface,
                             cluster=cluster or self.settings.cluster, reason=reason, settings=self.settings)

    async def approve_and_execute(self, action_id: str, *, approver: str, surface: str) -> Any:
        """Approve (refused when expired or not pending: ``ApprovalRefused``), then run it behind its guards."""
        from opsbot.act import approve, execute

        await self.db(approve, self.store, action_id, approver, surface, self.settings)
        outcome = await execute(self.store, self.inventory(), action_id, actor=approver, surface=surface,
                                settings=self.settings)
        self.telemetry.actions.labels(outcome.state).inc()
        return outcome

    async def dismiss(self, action_id: str, *, actor: str, surface: str) -> Any:
        """A planned restart nobody will approve: closed as refused, with who dismissed it."""
        row = await self.db(self.store.transition, action_id, ("planned",), "refused", actor=actor, surface=surface,
                            what="restart dismissed", outcome=f"dismissed by {actor} via {surface}")
        if row is not None:
            self.telemetry.actions.labels("dismissed").inc()
        return row
