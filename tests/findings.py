"""Real ``opsbot.diagnose`` findings for tests that store or report them, with quiet defaults."""

from __future__ import annotations

from opsbot.diagnose import Diagnosis, Finding


def finding(incident: str, severity: str, roles: list[str], *, evidence: list[str] | None = None,
            summary: str = "", title: str = "") -> Finding:
    return Finding(incident=incident, title=title, severity=severity, roles=roles, evidence=evidence or [],
                   summary=summary, explain="", remedies=[], confidence=1.0)


def diagnosis(bundle_id: str, findings: list[Finding]) -> Diagnosis:
    return Diagnosis(bundle=bundle_id, findings=findings)
