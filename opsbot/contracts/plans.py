"""Restart plans and their steps (floor): what act plans, what a surface shows, what execute runs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from opsbot.contracts.captures import PartKind

StepKind = Literal["stop", "wait-gpu-release", "reset-failed", "start", "verify",
                   # ladder: re-registering a router's workers through its worker API (act/reregister.py)
                   "list-workers", "check-engine", "remove-worker", "add-worker"]


class GuardRefused(RuntimeError):
    """A guard (lock, cooldown, budget, approval) refused a restart; the message says which and until when."""


class Step(BaseModel):
    kind: StepKind
    role: str
    node: str
    unit: str
    argv: list[str]
    note: str = ""


class RestartCost(BaseModel):
    """What a restart costs, said before it is approved (ladder: opsbot/act/cost.py computes it where the plan is made).

    ``lines`` is the one text every approval surface shows (Slack, CLI, REST), so they never differ."""

    probe_id: str | None = Field(None, description="the probe the figures come from (the cluster's latest)")
    probe_at: str | None = Field(None, description="when that probe started (ISO 8601, UTC)")
    lost_requests: float | None = Field(None, description="running + queued on the restarted roles; None: unknown")
    recoveries_s: list[float] = Field(default_factory=list,
                                      description="time to verified healthy after the role's last restarts, newest first")
    lines: list[str] = Field(default_factory=list, description="the cost, said in full, one line each")
    warnings: list[str] = Field(default_factory=list, description="capacity the restart would push past a limit")

    def said(self) -> list[str]:
        """The lines every surface shows, warnings first."""
        return [f"warning: {w}" for w in self.warnings] + self.lines


class RestartPlan(BaseModel):
    """What ``--dry-run`` shows and what ``execute`` runs, step by step, nothing else."""

    cluster: str
    roles: list[str]
    kinds: list[str]
    pair_on_purpose: bool = False
    reason: str | None = None
    remedy_for: str | None = Field(None, description="the incident class whose finding asked for it; None: by hand")
    finding_roles: list[str] = Field(default_factory=list, description="the roles that finding was on (its evidence "
                                     "probe looks at them too: a transfer failure seen on decode restarts prefill)")
    steps: list[Step]
    checks: list[str] = Field(default_factory=list, description="pre-checks run before the first step")
    verify: list[str] = Field(default_factory=list, description="what verification requires, within the deadline")
    capture: list[PartKind] = Field(default_factory=list, description="evidence taken before the first step")
    cost: RestartCost | None = Field(None, description="ladder: what it costs (lost requests, recovery time, capacity)")
