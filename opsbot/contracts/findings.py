"""Findings and diagnoses (floor): what diagnose returns, what record keeps and render shows, and the public ``--json`` shape."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from opsbot.contracts.captures import PartKind
from opsbot.contracts.states import Severity


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


class Diagnosis(BaseModel):
    bundle: str
    findings: list[Finding] = Field(default_factory=list)
    undetermined: list[Undetermined] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list, description="runbooks refused, evidence that did not parse")

    @property
    def healthy(self) -> bool:
        return not self.findings

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
        }
