"""The contracts floor: the types every stage passes to the next (bundle, findings, plans, states).

Pydantic only; nothing here imports a stage, so any stage (and any surface) can type what it holds.
"""

from opsbot.bundle import Bundle, Trigger
from opsbot.contracts.findings import Diagnosis, Finding, Remedy, RoleHealth, Undetermined
from opsbot.contracts.plans import GuardRefused, RestartCost, RestartPlan, Step, StepKind
from opsbot.contracts.states import (
    SEVERITY_COLOUR,
    SEVERITY_EMOJI,
    LIVE_ACTIONS,
    RUNNING_ACTIONS,
    UNKNOWN_EMOJI,
    ActionState,
    IncidentState,
    RoleState,
    Severity,
    allowed,
    severity_rank,
)

__all__ = [
    "LIVE_ACTIONS", "RUNNING_ACTIONS", "SEVERITY_COLOUR", "SEVERITY_EMOJI", "UNKNOWN_EMOJI", "ActionState", "Bundle", "Diagnosis", "Finding", "GuardRefused", "IncidentState",
    "Remedy",
    "RestartCost", "RestartPlan", "RoleHealth", "RoleState", "Severity", "Step", "StepKind", "Trigger", "Undetermined",
    "allowed", "severity_rank",
]
