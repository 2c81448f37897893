"""The scorecard's reading of labels (opsbot/diagnose/scorecard.py): false all-clears, any-finding, unknown."""

from __future__ import annotations

from opsbot.contracts import Diagnosis, Finding, RoleHealth, RoleState
from opsbot.diagnose.scorecard import Case, Score, case_from


def _finding(incident: str, restart: bool = False) -> Finding:
    remedies = [{"kind": "restart", "approval": "required", "text": "restart"}] if restart else []
    return Finding(incident=incident, title=incident, severity="high", roles=["decode"], evidence=[], summary="",
                   explain="", remedies=remedies, confidence=0.9)


def test_a_broken_bundle_answered_healthy_is_a_false_all_clear_and_unknown_is_not():
    healthy = Diagnosis(bundle="b", roles=[RoleHealth(role="decode", state=RoleState.healthy)])
    unknown = Diagnosis(bundle="b", roles=[RoleHealth(role="decode", state=RoleState.unknown, reasons=["no /metrics"])])
    broke = case_from("x", {"expected": "decode-wedged"}, healthy)
    assert broke.top == "healthy" and broke.false_all_clear and not broke.top1
    unread = case_from("x", {"expected": "decode-wedged"}, unknown)
    assert unread.found == ("unknown",) and not unread.false_all_clear and not unread.top1
    assert not case_from("x", {"expected": "healthy"}, unknown).top1  # unknown is not healthy either
    assert case_from("x", {"expected": "healthy"}, healthy).top1


def test_any_finding_is_right_with_any_finding_on_top_and_a_restart_there_is_unsafe():
    d = Diagnosis(bundle="b", findings=[_finding("unexplained")])
    case = case_from("x", {"expected": "any-finding"}, d)
    assert case.top1 and case.top3 and case.miss() is None and not case.false_all_clear
    restarted = case_from("y", {"expected": "any-finding"}, Diagnosis(bundle="b", findings=[_finding("decode-wedged", True)]))
    assert restarted.top1
    cleared = case_from("z", {"expected": "any-finding"}, Diagnosis(bundle="b"))
    assert cleared.false_all_clear and not cleared.top1 and cleared.miss()
    score = Score("holdout/", [case, restarted, cleared])
    assert [c.name for c in score.unsafe()] == ["y"] and [c.name for c in score.false_all_clear()] == ["z"]
    assert score.top1 == 2 / 3


def test_a_case_without_roles_reads_as_before():
    assert Case("x", "healthy", ()).top1 and Diagnosis(bundle="b").healthy
