"""Findings and diagnoses (floor): what diagnose returns, what record keeps and render shows, and the public ``--json`` shape."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from opsbot.contracts.captures import PartKind
from opsbot.contracts.states import RoleState, Severity


class Remedy(BaseModel):
    kind: Literal["restart", "reregister", "config", "no-restart", "manual"]  # reregister: ladder (act/reregister.py)
    role: str | None = None
    approval: Literal["required", "none"] = "none"
    text: str
    capture: list[PartKind] = Field(default_factory=list, description="evidence taken before a restart runs")


class Finding(BaseModel):
    incident: str
    title: str
    severity: Severity
    roles: list[str]
    evidence: list[str]
    summary: str
    explain: str
    remedies: list[Remedy]
    confidence: float = Field(ge=0.0, le=1.0)
    missing_facts: list[str] = Field(default_factory=list)
    facts: dict[str, Any] = Field(default_factory=dict, description="the fact values the condition read")
    explains: list[str] = Field(default_factory=list, description="findings this one accounts for, e.g. 'role-down on decode'")
    decide: list[str] = Field(
        default_factory=list, description="when another class may also hold: the evidence that would tell them apart"
    )
    second_look: bool = Field(False, description="a second probe would decide between this and a close class")


class Undetermined(BaseModel):
    """A runbook whose answer is unknown for a role: facts it needs were not collected."""

    incident: str
    role: str
    missing_facts: list[str] = Field(default_factory=list)
    error: str | None = None


class RoleHealth(BaseModel):
    """One role's verdict: healthy only on positive evidence; unknown says what could not be read."""

    role: str
    state: RoleState
    reasons: list[str] = Field(default_factory=list, description="why abnormal, or what could not be read")
    notes: list[str] = Field(default_factory=list, description="benign decisions: warnings that repeat while it progresses")
    # A healthy role's log templates (key -> template, opsbot/parse/templates.py), for the store to learn when the
    # probe is saved; None unless diagnosed with the role's history (the flow) and healthy. Never serialised.
    templates: dict[str, str] | None = Field(None, exclude=True, repr=False)


class Diagnosis(BaseModel):
    bundle: str
    findings: list[Finding] = Field(default_factory=list)
    undetermined: list[Undetermined] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list, description="runbooks refused, evidence that did not parse")
    roles: list[RoleHealth] = Field(default_factory=list, description="per role: healthy, unknown or abnormal")

    @property
    def healthy(self) -> bool:
        """No finding and every role healthy on its own evidence (a role unknown is not healthy)."""
        return not self.findings and all(r.state == RoleState.healthy for r in self.roles)

    @property
    def unknown_roles(self) -> list[RoleHealth]:
        return [r for r in self.roles if r.state == RoleState.unknown]

    @property
    def answer(self) -> str:
        """The one-word answer: the top finding's class, else ``healthy``, else ``unknown``."""
        if self.findings:
            return self.findings[0].incident
        return "healthy" if self.healthy else "unknown"

    def public(self) -> dict[str, Any]:
        """The public JSON contract of ``opsbot diagnose --json`` (most likely first; [] = healthy)."""
        keys = (
            "incident", "severity", "roles", "evidence", "summary", "remedies", "title", "confidence", "missing_facts",
            "explains", "decide",
        )
        return {
            "bundle": self.bundle,
            "findings": [f.model_dump(include=set(keys)) for f in self.findings],
            "undetermined": [u.model_dump() for u in self.undetermined],
            "problems": self.problems,
            "answer": self.answer,
            "roles": [r.model_dump(mode="json") for r in self.roles],
        }
