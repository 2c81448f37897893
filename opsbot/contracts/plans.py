"""Restart plans and their steps (floor): what act plans, what a surface shows, what execute runs."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from opsbot.contracts.captures import PartKind

StepKind = Literal["stop", "wait-gpu-release", "reset-failed", "start", "verify"]


class GuardRefused(RuntimeError):
    """A guard (lock, cooldown, budget, approval) refused a restart; the message says which and until when."""


class Step(BaseModel):
    kind: StepKind
    role: str
    node: str
    unit: str
    argv: list[str]
    note: str = ""


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
