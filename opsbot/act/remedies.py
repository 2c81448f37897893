"""The restarts a diagnosis asks for, planned once per probe and role (act): every trigger gets the same plans.

The key ``probe:role`` is unique in the store, so planning the same probe again (another message
showing it, another instance handling the same alert) returns the plan already made.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opsbot.act.restart import request_restart
from opsbot.contracts import Diagnosis
from opsbot.inventory import Inventory
from opsbot.settings import Settings
from opsbot.store import Store


@dataclass
class PlannedRemedies:
    plans: dict[str, str] = field(default_factory=dict)  # role -> action id
    refused: list[str] = field(default_factory=list)  # "restart ROLE: why", for a plan the guardrails refuse


def plan_remedies(store: Store, inventory: Inventory, diagnosis: Diagnosis, probe_id: str, *, cluster: str,
                  actor: str, surface: str, settings: Settings) -> PlannedRemedies:
    """A planned restart for each remedy that needs approval, most likely finding first; idempotent."""
    out = PlannedRemedies()
    for finding in diagnosis.findings:
        for remedy in finding.remedies:
            if remedy.kind != "restart" or remedy.approval != "required" or not remedy.role or remedy.role in out.plans:
                continue
            try:
                action, _ = request_restart(store, inventory, [remedy.role], actor=actor, surface=surface,
                                            cluster=cluster, reason=f"{finding.incident} (probe {probe_id})",
                                            settings=settings, plan_key=f"{probe_id}:{remedy.role}")
            except Exception as exc:  # noqa: BLE001 - a plan the guardrails refuse: said instead of a button
                out.refused.append(f"restart {remedy.role}: {exc}")
                continue
            out.plans[remedy.role] = action.id
    return out
