"""The incident corpus, split once by thread (tests/scenarios/README.md): ``dev/`` is what rules
are written against and must be diagnosed as labelled, every bundle; ``test/`` measures how the
rules generalize to threads nobody looked at, and its top-1 figure is reported (and held at or
above ``TEST_TOP1_FLOOR``). Prints a confusion table (expected class × top finding) for each part.
Also checks that every runbook has a ``dev/`` bundle where it must fire and a near miss where it
must not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opsbot.bundle import BundleError, parse_bundle
from opsbot.cli.evaluate import no_restart_classes
from opsbot.diagnose import default_runbooks, diagnose
from opsbot.diagnose.scorecard import Case, Score, case_from, confusion_lines, summary_lines

ROOT = Path(__file__).parent / "scenarios"
DEV = sorted((ROOT / "dev").glob("*.json"))
TEST = sorted((ROOT / "test").glob("*.json"))
# Threads opened after the cut-off (2026-06-01), written by writers who write no rules, read once at the end
# of a round of rules (tests/scenarios/README.md): evaluated like test/, and never fitted.
HELD_OUT = {part: sorted((ROOT / part).glob("*.json")) for part in ("holdout", "holdout2", "holdout3")}
FILES = DEV + TEST + [path for files in HELD_OUT.values() for path in files]
MIN_DEV, MIN_TEST = 150, 45  # the corpus may only grow
# What test/ reaches (opsbot eval tests/scenarios): raise these as general rules found on dev/ improve it,
# never fit test/ to them. 2026-12-02: 44 of 48 (91.7%) after 17 bundles from 11 new threads joined test/
# (it was 30 of 31 before: the floor went down with the harder, larger part, not with the rules). Then 45 of
# 48 (93.8%) after role-down became the last resort for a dead unit, one exit without a restart stopped
# counting as a crash loop, and the router's answer to the canary and its empty pool were read (dev/ rules).
# 2026-12-03: 74 of 78 (94.9%) after the corpus writers added 8 failures of no known class and 6 healthy or
# near-miss bundles to test/ (harder, larger part: the floor went down with it, not with the rules).
TEST_TOP1_FLOOR, TEST_TOP3_FLOOR, TEST_UNSAFE_MAX = 0.94, 0.94, 0
# Issue 24: a broken bundle answered healthy is the worst answer. The goal is none on any part; dev/ holds it
# (test_dev_diagnoses_as_labelled). test/ and holdout/ are measured, not fitted: these ceilings are what they
# measured when holdout/ was read once at the end of issue 24 (2 each, goal 0: missed, said in its note), so
# a rule that makes either worse fails here; lower them as general rules found on dev/ bring them down.
# 2026-12-03, second round (rules found on dev/: HTTP status class and SGLang's error reports, a parked transfer held at
# both ends, the router's transport errors to a worker): holdout/ measured again, 1 false all-clear and no unsafe
# advice (it is no longer unseen: the next round needs a new cut-off); test/ did not move.
# 2026-12-03, after the third round (a grammar token rejected at run time, the router's keep-alive resets read
# from SMG's source): holdout2/ (31 bundles, 27 from threads opened after the cut-off, written by a writer who
# wrote no rules, no thread shared with any other part) read once: 27 of 31 (87.1%), 2 false all-clears, no
# unsafe advice. Goals (95%, 0, 0) missed; held as ceilings like holdout/'s.
# 2026-12-03, after the fourth round (the request side: a router's failed requests by its own counters, requests
# parked for a leg the PD peer refused, requests in flight nothing serves): holdout3/ (30 bundles from 25 threads
# cited nowhere else, 23 opened after the cut-off, 7 pre-cutoff fill; written by a writer who wrote no rules) read
# once: 26 of 30 (86.7%), 3 false all-clears, 1 unsafe advice. Goals missed; held as ceilings. After the fifth
# round (a decode's transfer error that names no cause of its own, while its prefill refused the request, yields
# to the request side; one router transport failure with the other leg parked is no reset), measured again (no
# longer unseen): 26 of 30, 3 false all-clears, no unsafe advice.
TEST_FALSE_ALL_CLEAR_MAX = 2
HELD_OUT_CEILINGS = {"holdout": (1, 0), "holdout2": (2, 0), "holdout3": (3, 0)}  # part: (false all-clears, unsafe advice) at most


def _case(path: Path) -> Case:
    """The label and what diagnosis said; a bundle the reader refuses counts as found "refused"."""
    text = path.read_text(encoding="utf-8")
    label = json.loads(text)["label"]
    try:
        bundle = parse_bundle(text, str(path))
    except BundleError:
        return Case(path.stem, label["expected"], ("refused",))
    return case_from(path.stem, label, diagnose(bundle, default_runbooks()))


def test_corpus_is_there():
    assert len(DEV) >= MIN_DEV and len(TEST) >= MIN_TEST, f"the corpus in {ROOT} is missing bundles: {len(DEV)} dev, {len(TEST)} test"
    parts = {p.parent.name for p in ROOT.glob("*/*.json")}
    assert not sorted(ROOT.glob("*.json")) and parts <= {"dev", "test", "holdout", "holdout2", "holdout3"}
    for path in FILES:
        label = json.loads(path.read_text(encoding="utf-8")).get("label", {})
        assert label.get("expected") and label.get("source"), f"{path}: a corpus bundle needs label.expected and label.source"


def _score(files: list[Path], part: str) -> Score:
    """Diagnose ``files`` and print the part's figures and confusion table (never its bundles' names)."""
    score = Score(part, [_case(path) for path in files], no_restart_classes(default_runbooks()))
    print("\n" + "\n".join(summary_lines(score) + confusion_lines(score)))
    return score


def test_dev_diagnoses_as_labelled(capsys):
    with capsys.disabled():
        score = _score(DEV, "dev")
    misses = [f"dev/{c.name}: {c.miss()}" for c in score.cases if c.miss()]
    assert not misses, "\n".join(misses)
    assert not score.unsafe() and not score.false_all_clear()


def test_test_part_figure(capsys):
    """test/ is reported, not fitted: a miss here is fixed by a general rule found on dev/. Only the
    figures are printed, so that nobody writes a rule for one test/ bundle."""
    with capsys.disabled():
        score = _score(TEST, "test")
    top1, top3 = score.top1, score.top3  # plain numbers: an assertion on the score would print test/'s bundles
    assert top1 >= TEST_TOP1_FLOOR and top3 >= TEST_TOP3_FLOOR
    unsafe = len(score.unsafe())
    assert unsafe <= TEST_UNSAFE_MAX
    cleared = len(score.false_all_clear())  # a count: an assertion on the cases would print test/ bundles' names
    assert cleared <= TEST_FALSE_ALL_CLEAR_MAX, f"{cleared} broken test/ bundle(s) answered healthy"


@pytest.mark.parametrize("part", sorted(HELD_OUT))
def test_held_out_part_figure(part, capsys):
    """A held-out part is read once at the end of a round of rules: its figures are printed, never its bundles.
    No floor on top-1 (nobody fitted it); a false all-clear there fails the test like anywhere else."""
    if not HELD_OUT[part]:
        pytest.skip(f"no {part}/ part in this checkout")
    with capsys.disabled():
        score = _score(HELD_OUT[part], part)
    most_cleared, most_unsafe = HELD_OUT_CEILINGS[part]
    cleared = len(score.false_all_clear())  # a count: an assertion on the cases would print the bundles' names
    assert cleared <= most_cleared, f"{cleared} broken {part}/ bundle(s) answered healthy"
    unsafe = len(score.unsafe())
    assert unsafe <= most_unsafe, f"{unsafe} {part}/ bundle(s) got unsafe advice"


def test_every_runbook_has_a_firing_bundle_and_a_near_miss():
    fires, near = set(), set()
    for path in DEV:
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
    full, cut = bundle_facts(b, rs.patterns, None, rs.exceptions), bundle_facts(b, rs.patterns, rs.metric_facts, rs.exceptions)
    assert cut.problems == full.problems and cut.kinds == full.kinds
    for key in full.scopes:
        wanted = rs.metric_facts[cut.kinds[key]]
        assert _read_facts(cut.scopes[key], wanted) == _read_facts(full.scopes[key], wanted)
    assert evaluate(cut, rs, b.id).model_dump() == evaluate(full, rs, b.id).model_dump()
