"""``diagnose``: match a bundle's facts against the runbooks (pure: no I/O beyond the first load)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from opsbot.diagnose.celengine import cel

from opsbot.bundle import Bundle
from opsbot.contracts import Diagnosis, Finding, Remedy, RoleHealth, RoleState, Severity, Undetermined, severity_rank
from opsbot.datafiles import data_dir
from opsbot.diagnose.runbook import Runbook, RunbookSet, pick
from opsbot.diagnose.runbook_cache import cached_runbooks
from opsbot.parse.facts import BundleFacts, bundle_facts
from opsbot.parse.templates import RoleHistory

_MISSING_PENALTY = 0.15
UNEXPLAINED = "unexplained"


@lru_cache(maxsize=1)
def default_runbooks() -> RunbookSet:
    """The runbooks shipped with opsbot (wheel or checkout), loaded and compiled once per process (and kept
    compiled between processes: ``runbook_cache``)."""
    return cached_runbooks(data_dir("runbooks"))


def _remedy_role(kind: str | None, key: str, kinds: dict[str, str]) -> str:
    """The role instance a remedy acts on: the matched role, or the first instance of ``kind``."""
    if kind is None or kinds.get(key) == kind:
        return key
    return next((k for k, kd in kinds.items() if kd == kind), kind)


def _finding(rb: Runbook, key: str, scope: dict[str, Any], kinds: dict[str, str], used: dict, missing: tuple,
             context: cel.Context | None = None) -> Finding:
    spec = rb.spec
    roles = [key] + [k for k, kind in kinds.items() if kind in spec.affects and k != key]
    conditions = rb.remedy_conditions or (None,) * len(spec.remedies)
    remedies = [
        Remedy(kind=r.kind, role=_remedy_role(r.role, key, kinds), approval=r.approval, text=t.render(scope).strip(),
               capture=list(r.capture or []))
        for r, t, cond in zip(spec.remedies, rb.remedy_texts, conditions)
        if cond is None or context is None or cond.evaluate(context, scope).value is True
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


def _order(findings: list[Finding], runbooks: dict[str, Runbook], nodes: dict[str, str] | None = None) -> list[Finding]:
    """Drop findings another finding explains (sharing a role, a node, or any); most severe, surest,
    most specific first."""
    nodes = nodes or {}

    def on(f: Finding) -> set[str]:
        return {nodes[r] for r in f.roles if r in nodes}

    kept = []
    for f in findings:
        by = [g for g in findings
              if g is not f and runbooks[g.incident].explains(f.incident, bool(set(g.roles) & set(f.roles)), bool(on(g) & on(f)))]
        if by:
            for g in by:
                g.explains.append(f"{f.incident} on {f.roles[0]}")
        else:
            kept.append(f)
    return sorted(
        kept,
        key=lambda f: (severity_rank(f.severity), -f.confidence, -len(runbooks[f.incident].condition.facts), f.incident),
    )


def diagnose(bundle: Bundle, runbooks: RunbookSet | None = None, previous: Bundle | None = None,
             history: Mapping[str, RoleHistory] | None = None) -> Diagnosis:
    """Findings for ``bundle``, most likely first; an empty list means healthy. ``previous``: an earlier
    probe of the same roles (a second look), whose systemd state gives ``unit.restarts_moved``. ``history``:
    per role key, its log templates while healthy (read from the store by the flow; None offline): a role
    that is not healthy then names its lines new since healthy, and a healthy one carries its templates
    (``RoleHealth.templates``) for the store to learn."""
    rs = runbooks if runbooks is not None else default_runbooks()
    return evaluate(bundle_facts(bundle, rs.patterns, rs.metric_facts, rs.exceptions, previous, history), rs,
                    bundle.id)


def _decide(findings: list[Finding], undetermined: list[Undetermined], by_id: dict[str, Runbook],
            contexts: dict[str, tuple[cel.Context, dict[str, Any]]]) -> None:
    """Say what would tell a finding apart from a close class that is also found, undetermined on its
    roles, or whose ``when`` holds."""
    present = {f.incident for f in findings} | {u.incident for u in undetermined}
    for f in findings:
        rb = by_id[f.incident]
        context, scope = contexts[f.roles[0]]
        for d, cond in zip(rb.spec.decide, rb.decide_conditions):
            holds = d.vs in present or (cond is not None and cond.evaluate(context, scope).value is True)
            if holds and d.text not in f.decide:
                f.decide.append(d.text)
                f.second_look = f.second_look or d.second_look


def evaluate(facts: BundleFacts, rs: RunbookSet, bundle_id: str) -> Diagnosis:
    """Run every runbook over fact maps already built from a bundle."""
    findings: list[Finding] = []
    undetermined: list[Undetermined] = []
    contexts: dict[str, tuple[cel.Context, dict[str, Any]]] = {}
    for key, scope in facts.scopes.items():
        kind = facts.kinds[key]
        books = [rb for rb in rs.runbooks if kind in rb.spec.roles]
        context = cel.Context(variables=pick(scope, rs.cel_reads[kind]))  # convert only what CEL reads
        contexts[key] = (context, scope)
        for rb in books:
            out = rb.condition.evaluate(context, scope, tuple(rb.spec.needs))
            if out.value is True:
                findings.append(_finding(rb, key, scope, facts.kinds, out.used, out.missing, context))
            elif out.value is None:
                undetermined.append(Undetermined(incident=rb.id, role=key, missing_facts=list(out.missing), error=out.error))
    problems = [str(p) for p in rs.problems] + facts.problems
    by_id = {rb.id: rb for rb in rs.runbooks}
    nodes = {key: scope.get("node", "") for key, scope in facts.scopes.items()}
    ordered = _unexplained(_merge(_order(findings, by_id, nodes)), facts)
    _decide(ordered, undetermined, by_id, contexts)
    return Diagnosis(bundle=bundle_id, findings=ordered, undetermined=undetermined, problems=problems,
                     roles=_role_health(facts))


def _unexplained(findings: list[Finding], facts: BundleFacts) -> list[Finding]:
    """``unexplained`` is abnormal evidence that no runbook claims: dropped when another class is found,
    else its severity is the evidence's own (the worst of its roles' verdicts)."""
    if any(f.incident != UNEXPLAINED for f in findings):
        return [f for f in findings if f.incident != UNEXPLAINED]
    for f in findings:
        worst = min((facts.scopes[r].get("verdict", {}).get("severity", "high") for r in f.roles if r in facts.scopes),
                    key=severity_rank, default="high")
        f.severity = Severity(worst)
    return findings


def _role_health(facts: BundleFacts) -> list[RoleHealth]:
    """Each role's verdict (opsbot/parse/verdict.py), in the bundle's order, with what is new since healthy
    (opsbot/parse/templates.py) when the role's history was given; a healthy role carries its templates."""
    out = []
    for key, scope in facts.scopes.items():
        v = scope.get("verdict", {})
        state = RoleState(v.get("state", "unknown"))
        said = [v["since_healthy"]] if v.get("since_healthy") else []
        seen = v.get("templates") if state == RoleState.healthy else None
        learned = None if seen is None else {k: t for k, (t, _line) in seen.items()}
        out.append(RoleHealth(role=key, state=state, reasons=list(v.get("reasons", [])) + said,
                              notes=list(v.get("notes", [])), templates=learned))
    return out
