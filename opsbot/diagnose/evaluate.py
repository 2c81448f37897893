"""``diagnose``: match a bundle's facts against the runbooks (pure: no I/O beyond the first load)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import cel

from opsbot.bundle import Bundle
from opsbot.diagnose.facts import bundle_facts
from opsbot.diagnose.findings import Diagnosis, Finding, Remedy, Undetermined
from opsbot.diagnose.runbook import SEVERITY_RANK, Runbook, RunbookSet, load_runbooks

RUNBOOKS_DIR = Path(__file__).resolve().parents[2] / "runbooks"
_MISSING_PENALTY = 0.15


@lru_cache(maxsize=4)
def default_runbooks(directory: Path = RUNBOOKS_DIR) -> RunbookSet:
    """The repository's runbooks, loaded and compiled once per process."""
    return load_runbooks(directory)


def _remedy_role(kind: str | None, key: str, kinds: dict[str, str]) -> str:
    """The role instance a remedy acts on: the matched role, or the first instance of ``kind``."""
    if kind is None or kinds.get(key) == kind:
        return key
    return next((k for k, kd in kinds.items() if kd == kind), kind)


def _finding(rb: Runbook, key: str, scope: dict[str, Any], kinds: dict[str, str], used: dict, missing: tuple) -> Finding:
    spec = rb.spec
    roles = [key] + [k for k, kind in kinds.items() if kind in spec.affects and k != key]
    remedies = [
        Remedy(kind=r.kind, role=_remedy_role(r.role, key, kinds), approval=r.approval, text=t.render(scope).strip())
        for r, t in zip(spec.remedies, rb.remedy_texts)
    ]
    confidence = max(0.1, spec.confidence * (1 - _MISSING_PENALTY * len(missing)))
    return Finding(
        incident=spec.id,
        title=spec.title,
        severity=spec.severity,
        roles=roles,
        evidence=[t.render(scope).strip() for t in rb.evidence],
        summary=rb.summary.render(scope).strip(),
        explain=" ".join(spec.explain.split()),
        remedies=remedies,
        confidence=round(confidence, 2),
        missing_facts=list(missing),
        facts=used,
    )


def _order(findings: list[Finding], runbooks: dict[str, Runbook]) -> list[Finding]:
    """Drop findings another finding explains (sharing a role); most severe, surest, most specific first."""
    kept = []
    for f in findings:
        by = [g for g in findings if f.incident in runbooks[g.incident].spec.explains and set(g.roles) & set(f.roles)]
        if by:
            for g in by:
                g.explains.append(f"{f.incident} on {f.roles[0]}")
        else:
            kept.append(f)
    return sorted(
        kept,
        key=lambda f: (SEVERITY_RANK[f.severity], -f.confidence, -len(runbooks[f.incident].condition.facts), f.incident),
    )


def diagnose(bundle: Bundle, runbooks: RunbookSet | None = None) -> Diagnosis:
    """Findings for ``bundle``, most likely first; an empty list means healthy."""
    rs = runbooks if runbooks is not None else default_runbooks()
    facts = bundle_facts(bundle, rs.patterns)
    findings: list[Finding] = []
    undetermined: list[Undetermined] = []
    for key, scope in facts.scopes.items():
        kind = facts.kinds[key]
        books = [rb for rb in rs.runbooks if kind in rb.spec.roles]
        roots = {path.split(".", 1)[0] for rb in books for path in rb.condition.facts}
        context = cel.Context(variables={k: v for k, v in scope.items() if k in roots})  # convert only what CEL reads
        for rb in books:
            out = rb.condition.evaluate(context, scope, tuple(rb.spec.needs))
            if out.value is True:
                findings.append(_finding(rb, key, scope, facts.kinds, out.used, out.missing))
            elif out.value is None:
                undetermined.append(Undetermined(incident=rb.id, role=key, missing_facts=list(out.missing), error=out.error))
    problems = [str(p) for p in rs.problems] + facts.problems
    by_id = {rb.id: rb for rb in rs.runbooks}
    return Diagnosis(bundle=bundle.id, findings=_order(findings, by_id), undetermined=undetermined, problems=problems)
