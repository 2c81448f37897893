"""The incident corpus: every bundle in tests/scenarios/ is diagnosed as its label says.

Prints a confusion table (expected class × top finding) and fails on any miss. Also checks
that every runbook has a bundle where it must fire and a near miss where it must not.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from opsbot.bundle import parse_bundle
from opsbot.diagnose import default_runbooks, diagnose

ROOT = Path(__file__).parent / "scenarios"
FILES = sorted(ROOT.glob("*/*.json"))


def _case(path: Path) -> tuple[dict, list[str]]:
    text = path.read_text(encoding="utf-8")
    label = json.loads(text)["label"]
    d = diagnose(parse_bundle(text, str(path)), default_runbooks())
    return label, [f.incident for f in d.findings]


def _miss(label: dict, found: list[str]) -> str | None:
    expected, also, must_not = label["expected"], set(label.get("also", [])), set(label.get("must_not", []))
    if expected == "healthy":
        return f"expected healthy, got {found}" if found else None
    if not found or found[0] != expected:
        return f"expected {expected} first, got {found}"
    extra = set(found) - {expected} - also
    if extra:
        return f"unexpected extra findings {sorted(extra)}"
    if must_not & set(found):
        return f"must not report {sorted(must_not & set(found))}"
    return None


def test_corpus_is_there():
    assert len(FILES) >= 20, f"the corpus in {ROOT} is missing bundles"
    for path in FILES:
        label = json.loads(path.read_text(encoding="utf-8")).get("label", {})
        assert label.get("expected") and label.get("source"), f"{path}: a corpus bundle needs label.expected and label.source"


def test_corpus_diagnoses_as_labelled(capsys):
    matrix: Counter[tuple[str, str]] = Counter()
    misses = []
    for path in FILES:
        label, found = _case(path)
        matrix[(label["expected"], found[0] if found else "healthy")] += 1
        why = _miss(label, found)
        if why:
            misses.append(f"{path.relative_to(ROOT)}: {why}")
    classes = sorted({e for e, _ in matrix} | {p for _, p in matrix})
    width = max(len(c) for c in classes) + 5
    lines = ["expected \\ top finding (column n = row n)".ljust(width) + " ".join(f"{i:>3}" for i in range(len(classes)))]
    for i, e in enumerate(classes):
        lines.append(f"{i:>2}. {e}".ljust(width) + " ".join(f"{matrix.get((e, p), 0) or '.':>3}" for p in classes))
    with capsys.disabled():
        print("\n" + "\n".join(lines) + f"\n{len(FILES)} bundles, {len(misses)} misses")
    assert not misses, "\n".join(misses)


def test_every_runbook_has_a_firing_bundle_and_a_near_miss():
    fires, near = set(), set()
    for path in FILES:
        label = json.loads(path.read_text(encoding="utf-8"))["label"]
        fires.add(label["expected"])
        near.update(label.get("must_not", []))
    ids = set(default_runbooks().ids())
    assert ids - fires == set(), f"runbooks with no bundle where they must fire: {sorted(ids - fires)}"
    assert ids - near == set(), f"runbooks with no near miss: {sorted(ids - near)}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_bundle_replays(path: Path):
    """Each file is a valid version-1 bundle that diagnoses without problems."""
    d = diagnose(parse_bundle(path.read_text(encoding="utf-8"), str(path)), default_runbooks())
    assert not [p for p in d.problems if "runbooks/" in p], d.problems


def _read_facts(scope: dict, wanted: frozenset[str]) -> dict:
    """What runbooks can read of a role's facts: every group but metrics, and the wanted metric facts."""
    out = {k: v for k, v in scope.items() if k not in ("metrics", "delta", "rate", "roles")}
    for group in ("metrics", "delta", "rate"):
        out.update({f"{group}.{name}": scope[group].get(name, "absent") for name in wanted})
    return out


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_runbook_families_give_the_same_facts_as_a_full_parse(path: Path):
    """Parsing only the families the runbooks read changes no fact they read, nor the diagnosis."""
    from opsbot.diagnose.evaluate import evaluate
    from opsbot.parse.facts import bundle_facts

    rs = default_runbooks()
    assert all(rs.metric_facts.values())  # runbooks name their metric facts, so diagnose parses less
    b = parse_bundle(path.read_text(encoding="utf-8"), str(path))
    full, cut = bundle_facts(b, rs.patterns), bundle_facts(b, rs.patterns, rs.metric_facts)
    assert cut.problems == full.problems and cut.kinds == full.kinds
    for key in full.scopes:
        wanted = rs.metric_facts[cut.kinds[key]]
        assert _read_facts(cut.scopes[key], wanted) == _read_facts(full.scopes[key], wanted)
    assert evaluate(cut, rs, b.id).model_dump() == evaluate(full, rs, b.id).model_dump()
