"""``diagnose``: match a bundle's facts against the runbooks (pure: no I/O beyond the first load)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import cel

from opsbot.bundle import Bundle
from opsbot.contracts import Diagnosis, Finding, Remedy, Undetermined, severity_rank
from opsbot.datafiles import data_dir
from opsbot.diagnose.runbook import Runbook, RunbookSet, load_runbooks
from opsbot.parse.facts import BundleFacts, bundle_facts

_MISSING_PENALTY = 0.15


@lru_cache(maxsize=1)
def default_runbooks() -> RunbookSet:
    """The runbooks shipped with opsbot (wheel or checkout), loaded and compiled once per process."""
    return load_runbooks(data_dir("runbooks"))


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
        evidence=[line for t in rb.evidence if (line := t.render(scope).strip())],  # a line may render to nothing
        summary=rb.summary.render(scope).strip(),
        explain=" ".join(spec.explain.split()),
        remedies=remedies,
        confidence=round(confidence, 2),
        missing_facts=list(missing),
        facts=used,
    )


def _merge(findings: list[Finding]) -> list[Finding]:
    """One finding per incident: the same class on several roles is one incident seen twice."""
    out: dict[str, Finding] = {}
    prefixed: set[str] = set()
    for f in findings:
        first = out.get(f.incident)
        if first is None:
            out[f.incident] = f
            continue
        if f.incident not in prefixed:
            prefixed.add(f.incident)
            first.evidence = [f"{first.roles[0]}: {e}" for e in first.evidence]
            first.facts = {f"{first.roles[0]}: {k}": v for k, v in first.facts.items()}
        first.roles += [r for r in f.roles if r not in first.roles]
        first.evidence += [f"{f.roles[0]}: {e}" for e in f.evidence]
        first.facts.update({f"{f.roles[0]}: {k}": v for k, v in f.facts.items()})
        first.summary += f"; {f.summary}"
        first.remedies += [r for r in f.remedies if r.text not in {x.text for x in first.remedies}]
        first.missing_facts += [m for m in f.missing_facts if m not in first.missing_facts]
        first.confidence = max(first.confidence, f.confidence)
    return list(out.values())


def _order(findings: list[Finding], runbooks: dict[str, Runbook]) -> list[Finding]:
    """Drop findings another finding explains (sharing a role); most severe, surest, most specific first."""
    kept = []
    for f in findings:
        by = [g for g in findings if runbooks[g.incident].explains(f.incident, bool(set(g.roles) & set(f.roles)))]
        if by:
            for g in by:
                g.explains.append(f"{f.incident} on {f.roles[0]}")
        else:
            kept.append(f)
    return sorted(
        kept,
        key=lambda f: (severity_rank(f.severity), -f.confidence, -len(runbooks[f.incident].condition.facts), f.incident),
    )


def diagnose(bundle: Bundle, runbooks: RunbookSet | None = None) -> Diagnosis:
    """Findings for ``bundle``, most likely first; an empty list means healthy."""
    rs = runbooks if runbooks is not None else default_runbooks()
    return evaluate(bundle_facts(bundle, rs.patterns, rs.metric_facts), rs, bundle.id)


def evaluate(facts: BundleFacts, rs: RunbookSet, bundle_id: str) -> Diagnosis:
    """Run every runbook over fact maps already built from a bundle."""
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
    return Diagnosis(bundle=bundle_id, findings=_merge(_order(findings, by_id)), undetermined=undetermined, problems=problems)
