"""Every transition of the restart plan and the incident, with its guard, on a real SQLite file and a real
PostgreSQL database (``database_url``): superseded when the incident resolves, when a probe no longer names
the class, when another restart of the role succeeded; approvals refused on a superseded, expired, run or
resolved plan, saying why, audited; execute re-checking the finding on its evidence probe (refused before any
connection to a node); a verified restart by hand ending the incident that waited for it; a quiet incident
taking no other class; a stale incident closing itself. The lab walk is tests/test_lifecycle_lab.py."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from opsbot.act import ApprovalRefused, approve, finding_check, request_restart, supersede_unnamed
from opsbot.act.lifecycle import after_success, dismiss, move
from opsbot.act.restart import RunContext, execute
from opsbot.contracts import ActionState, Diagnosis, Undetermined, allowed
from opsbot.flow import Flow
from opsbot.incidents import stale_reason, takes_another_class
from opsbot.inventory import load_inventory
from opsbot.settings import Settings
from opsbot.store import Sighting, Store
from opsbot.store.models import Action, IncidentRow, now
from tests.findings import diagnosis, finding
from tests.test_act import ConnectionCounter, write_inventory


@pytest.fixture
def counter():
    c = ConnectionCounter()
    yield c
    c.sock.close()


@pytest.fixture
def settings(tmp_path, counter) -> Settings:
    return Settings(data_dir=tmp_path, inventory=write_inventory(tmp_path, counter.port))


@pytest.fixture
def inventory(settings):
    return load_inventory(settings.inventory)


@pytest.fixture
def store(database_url):
    s = Store(database_url)
    yield s
    s.close()


def _remedy(store, inventory, settings, role="decode", incident="decode-wedged", probe="p1") -> Action:
    """A restart plan as a finding asks for it (what ``plan_remedies`` records)."""
    action, _ = request_restart(store, inventory, [role], actor="alert", surface="alert", cluster="lab",
                                reason=f"{incident} (probe {probe})", settings=settings, plan_key=f"{probe}:{role}",
                                waiting_key=f"lab/{role}/{incident}", remedy_for=incident)
    return action


def _manual(store, inventory, settings, role="decode") -> Action:
    action, _ = request_restart(store, inventory, [role], actor="alice", surface="cli", cluster="lab",
                                settings=settings)
    return action


def _audited(store, action_id: str, what: str) -> list[dict]:
    return [e.detail for e in store.audit_log(limit=100) if e.what == what and (e.detail or {}).get("action") == action_id]


def _sighting(probe: str, incident: str = "decode-wedged", fps: list[str] | None = None) -> Sighting:
    return Sighting(cluster="lab", incident=incident, severity="critical", roles=["decode"], title=incident,
                    summary=None, confidence=0.9, probe_id=probe, alert_ids=[1], fingerprints=fps or ["fa"],
                    alertnames=["SGLangDecodeNoProgress"])


def test_the_states_each_may_follow():
    assert allowed(ActionState.planned, ActionState.superseded)
    for end in (ActionState.superseded, ActionState.succeeded, ActionState.failed, ActionState.refused,
                ActionState.expired):
        assert not any(allowed(end, s) for s in ActionState if s != end), end
    assert not allowed(ActionState.executing, ActionState.superseded)  # a running restart is never superseded


def test_a_move_the_states_do_not_allow_is_a_bug(store, inventory, settings):
    action = _manual(store, inventory, settings)
    with pytest.raises(ValueError, match="not an allowed transition"):
        move(store, action.id, (ActionState.planned,), ActionState.succeeded, actor="x", surface="cli", what="x")
    assert store.action(action.id).state == ActionState.planned


def test_supersede_moves_only_waiting_plans_and_audits(store, inventory, settings):
    waiting = _remedy(store, inventory, settings)
    approved = approve(store, _manual(store, inventory, settings, "prefill").id, "bob", "cli", settings)
    assert store.supersede([waiting.id, approved.id, "nope"], "because", actor="opsbot", surface="test") == [waiting.id]
    row = store.action(waiting.id)
    assert row.state == ActionState.superseded and row.outcome == "superseded: because" and row.waiting_key is None
    assert store.action(approved.id).state == ActionState.approved
    assert _audited(store, waiting.id, "restart superseded") == [{"action": waiting.id, "why": "because"}]
    assert store.supersede([waiting.id], "twice", actor="opsbot", surface="test") == []  # once only
    again = _remedy(store, inventory, settings, probe="p2")  # its waiting key is free: a new plan may wait
    assert again.id != waiting.id and again.state == ActionState.planned


@pytest.mark.parametrize("how", ["superseded", "expired", "succeeded", "dismissed"])
def test_approve_refuses_a_plan_not_waiting_saying_why_and_audits(store, inventory, settings, how):
    action = _remedy(store, inventory, settings)
    if how == "superseded":
        store.supersede([action.id], "its incident abc resolved", actor="opsbot", surface="test")
        said = "is superseded, not waiting for approval \\(superseded: its incident abc resolved\\)"
    elif how == "expired":
        store.write(lambda s: s.execute(update(Action).where(Action.id == action.id).values(
            expires_at=now() - timedelta(seconds=1))))
        said = "expired at .* before it was approved"
    elif how == "dismissed":
        dismiss(store, action.id, actor="carol", surface="slack")
        said = "is refused, not waiting for approval \\(dismissed by carol via slack\\)"
    else:
        approve(store, action.id, "bob", "cli", settings)
        move(store, action.id, (ActionState.approved,), ActionState.executing, actor="bob", surface="cli", what="x")
        move(store, action.id, (ActionState.executing,), ActionState.succeeded, actor="bob", surface="cli", what="x",
             outcome="verified")
        said = "is succeeded, not waiting for approval \\(verified\\)"
    before = store.action(action.id).state
    with pytest.raises(ApprovalRefused, match=said):
        approve(store, action.id, "mallory", "rest", settings)
    assert store.action(action.id).state == (ActionState.expired if how == "expired" else before)
    (audit,) = _audited(store, action.id, "approval refused")
    assert "not waiting" in audit["why"] or "expired" in audit["why"]


def test_an_incident_resolving_supersedes_its_waiting_plan_in_the_same_write(store, inventory, settings):
    waiting = _remedy(store, inventory, settings)
    running = approve(store, _manual(store, inventory, settings, "prefill").id, "bob", "cli", settings)
    row, _ = store.record_sighting(_sighting("p1"))
    store.incident_event(row.id, "action", "approval asked", action_id=waiting.id)
    store.incident_event(row.id, "action", "approved", action_id=running.id)
    (closed,) = store.resolve_alerts("lab", ["fa"], ["SGLangDecodeNoProgress"])
    assert closed.state == "resolved"
    assert store.action(waiting.id).state == ActionState.superseded
    assert f"its incident {row.id} (decode-wedged) resolved" in store.action(waiting.id).outcome
    assert store.action(running.id).state == ActionState.approved  # only a waiting plan is superseded
    with pytest.raises(ApprovalRefused, match="superseded: its incident .* resolved"):
        approve(store, waiting.id, "bob", "slack", settings)


def test_approve_on_a_plan_whose_incident_resolved_is_refused_even_if_still_planned(store, inventory, settings):
    """The race: the incident closed by a path that left the plan planned (an older row): approve supersedes it."""
    waiting = _remedy(store, inventory, settings)
    row, _ = store.record_sighting(_sighting("p1"))
    store.incident_event(row.id, "action", "approval asked", action_id=waiting.id)
    store.write(lambda s: s.execute(update(IncidentRow).where(IncidentRow.id == row.id).values(
        state="resolved", open_key=None, resolved_at=now())))
    with pytest.raises(ApprovalRefused, match=f"superseded: its incident {row.id} .* resolved; nothing was restarted"):
        approve(store, waiting.id, "bob", "rest", settings)
    assert store.action(waiting.id).state == ActionState.superseded


def test_a_verified_restart_supersedes_the_plans_waiting_for_its_role(store, inventory, settings):
    waiting = _remedy(store, inventory, settings)
    other_role = _remedy(store, inventory, settings, role="prefill", incident="prefill-wedged")
    by_hand = approve(store, _manual(store, inventory, settings).id, "alice", "cli", settings)
    move(store, by_hand.id, (ActionState.approved,), ActionState.executing, actor="alice", surface="cli", what="x")
    move(store, by_hand.id, (ActionState.executing,), ActionState.succeeded, actor="alice", surface="cli", what="x",
         also=after_success("lab", ["decode"], by_hand.id))
    assert store.action(waiting.id).state == ActionState.superseded
    assert store.action(waiting.id).outcome == f"superseded: restart {by_hand.id} of decode succeeded"
    assert store.action(other_role.id).state == ActionState.planned


def test_a_probe_that_no_longer_names_the_class_supersedes_its_plan(store, inventory, settings):
    waiting = _remedy(store, inventory, settings)
    by_hand = _manual(store, inventory, settings, "prefill")
    still = diagnosis("b1", [finding("decode-wedged", "critical", ["decode"])])
    assert supersede_unnamed(store, "lab", "p2", still, {"decode", "prefill", "router"}) == []
    router_only = diagnosis("b2", [])
    assert supersede_unnamed(store, "lab", "p3", router_only, {"router"}) == []  # decode not probed
    undecided = Diagnosis(bundle="b3", undetermined=[Undetermined(incident="decode-wedged", role="decode")])
    assert supersede_unnamed(store, "lab", "p4", undecided, {"decode"}) == []  # could not tell
    healthy = diagnosis("b5", [])
    assert supersede_unnamed(store, "lab", "p5", healthy, {"decode", "prefill", "router"}) == [waiting.id]
    assert store.action(waiting.id).outcome == "superseded: probe p5 no longer names decode-wedged on decode"
    assert store.action(by_hand.id).state == ActionState.planned  # asked by hand: the probe does not decide


def test_finding_check_is_the_guard_of_executing(inventory, settings):
    from opsbot.act import plan_restart

    plan = plan_restart(inventory, ["decode"], settings=settings).model_copy(update={"remedy_for": "decode-wedged"})
    holds, said = finding_check(plan, diagnosis("b", [finding("decode-wedged", "critical", ["decode"])]), "p1")
    assert holds and said == "probe p1 still names decode-wedged on decode"
    explained = finding("config-crashloop", "critical", ["decode"]).model_copy(
        update={"explains": ["decode-wedged on decode"]})
    assert finding_check(plan, diagnosis("b", [explained]), "p1")[0]
    holds, said = finding_check(plan, diagnosis("b", [finding("decode-wedged", "critical", ["prefill"])]), "p2")
    assert not holds and "does not name decode-wedged on decode (it names decode-wedged)" in said
    holds, said = finding_check(plan.model_copy(update={"remedy_for": None}), diagnosis("b", []), "p3")
    assert holds and "asked by hand" in said
    undecided = Diagnosis(bundle="b", undetermined=[Undetermined(incident="decode-wedged", role="decode")])
    holds, said = finding_check(plan, undecided, "p4")
    assert holds and "could not decide decode-wedged on decode" in said
    # a transfer failure seen on decode asks to restart prefill: the finding is looked for on decode too
    kv = plan_restart(inventory, ["prefill"], settings=settings).model_copy(
        update={"remedy_for": "kv-transfer-failure", "finding_roles": ["decode"]})
    assert finding_check(kv, diagnosis("b", [finding("kv-transfer-failure", "high", ["decode"])]), "p5")[0]
    holds, said = finding_check(kv, diagnosis("b", []), "p6")
    assert not holds and "does not name kv-transfer-failure on decode, prefill" in said


def test_a_plan_for_a_finding_on_another_role_waits_for_a_probe_of_that_role(store, inventory, settings):
    kv, _ = request_restart(store, inventory, ["prefill"], actor="alert", surface="alert", cluster="lab",
                            settings=settings, waiting_key="lab/prefill/kv-transfer-failure",
                            remedy_for="kv-transfer-failure", finding_roles=["decode"])
    assert kv.watched_roles == ["decode", "prefill"]
    assert supersede_unnamed(store, "lab", "p1", diagnosis("b", []), {"prefill"}) == []
    assert supersede_unnamed(store, "lab", "p2", diagnosis("b", []), {"prefill", "decode"}) == [kv.id]


def test_execute_refuses_when_its_evidence_probe_no_longer_names_the_finding(store, inventory, settings, counter):
    waiting = approve(store, _remedy(store, inventory, settings).id, "bob", "slack", settings)
    probes: list[str] = []

    async def evidence(cluster: str, roles: list[str], why: str) -> tuple[str, Diagnosis]:
        probes.append(why)
        return "p-before", diagnosis("b", [])  # the evidence probe: decode recovered meanwhile

    async def look(cluster: str, roles: list[str], why: str):  # never reached
        raise AssertionError("no verification without a restart")

    ctx = RunContext(store=store, inventory=inventory, settings=settings, actor="bob", surface="slack",
                     evidence=evidence, look=look)
    outcome = asyncio.run(execute(ctx, waiting.id))
    assert outcome.state == ActionState.refused and "the finding no longer holds" in outcome.message
    assert store.action(waiting.id).state == ActionState.refused and probes == [f"before restart {waiting.id}"]
    assert counter.connections == 0 and store.locks("lab") == []  # no node touched, locks released
    (audit,) = _audited(store, waiting.id, "restart refused")
    assert "nothing was restarted" in audit["why"]


def test_a_restart_by_hand_ends_the_incident_that_waited_for_it(store, inventory, settings):
    """The CLI's restart is not the incident's action: once verified, the incident whose alerts resolved closes."""
    flow = Flow(settings=settings, store=store)
    row, _ = store.record_sighting(_sighting("p1"))
    asked = _remedy(store, inventory, settings)
    store.incident_event(row.id, "action", "approval asked", action_id=asked.id)
    by_hand = approve(store, _manual(store, inventory, settings).id, "alice", "cli", settings)
    store.incident_event(row.id, "action", "held", action_id=by_hand.id)  # held: its restart runs
    move(store, by_hand.id, (ActionState.approved,), ActionState.executing, actor="alice", surface="cli", what="x")
    (held,) = store.resolve_alerts("lab", ["fa"], ["SGLangDecodeNoProgress"], hold=frozenset({row.id}))
    assert held.state == "open" and "closing when the restart ends" in held.timeline[-1]["what"]
    other = store.record_sighting(_sighting("p9", incident="prefill-queue-saturation", fps=["fq"]))[0]
    done = move(store, by_hand.id, (ActionState.executing,), ActionState.succeeded, actor="alice", surface="cli",
                what="x", also=after_success("lab", ["decode"], by_hand.id))
    asyncio.run(flow.incidents.restart_ended(done, "restart succeeded: verified"))
    closed = store.incident(row.id)
    assert closed.state == "resolved" and closed.time_to_recovery_s is not None
    assert store.action(asked.id).state == ActionState.superseded
    assert store.incident(other.id).state == "open"  # still firing: not this restart's to end


def test_a_held_incident_hears_a_restart_it_does_not_hold(store, inventory, settings):
    """The walk of issue 22: the incident holds only the asked plan; `opsbot restart` ran another action."""
    flow = Flow(settings=settings, store=store)
    row, _ = store.record_sighting(_sighting("p1"))
    store.incident_event(row.id, "action", "approval asked", action_id=_remedy(store, inventory, settings).id)
    mine = approve(store, _remedy(store, inventory, settings, role="prefill", incident="prefill-wedged").id, "b",
                   "cli", settings)
    store.incident_event(row.id, "action", "x", action_id=mine.id)
    store.resolve_alerts("lab", ["fa"], ["x"], hold=frozenset({row.id}))
    store.transition(mine.id, (ActionState.approved,), ActionState.refused, actor="b", surface="cli", what="x")
    by_hand = approve(store, _manual(store, inventory, settings).id, "alice", "cli", settings)
    move(store, by_hand.id, (ActionState.approved,), ActionState.executing, actor="alice", surface="cli", what="x")
    done = move(store, by_hand.id, (ActionState.executing,), ActionState.succeeded, actor="alice", surface="cli",
                what="x")
    assert asyncio.run(flow.incidents.restart_ended(done, "restart succeeded: verified")) == [row.id]
    closed = store.incident(row.id)
    assert closed.state == "resolved" and by_hand.id in closed.actions
    assert any("restart of decode by alice via cli" in e["what"] for e in closed.timeline)


def test_a_quiet_incident_takes_no_other_class(store, inventory, settings):
    """Every alert of it resolved (waiting for a restart to end): a new break is its own incident, no reclass."""
    flow = Flow(settings=settings, store=store)
    row, _ = store.record_sighting(_sighting("p1"))
    assert takes_another_class(row)
    held = store.resolve_alerts("lab", ["fa"], ["x"], hold=frozenset({row.id}))[0]
    assert held.state == "open" and not takes_another_class(held)
    # kv-transfer-failure and decode-wedged share decode: before, the new class joined (and renamed) this one
    assert flow.incidents.home("lab", "kv-transfer-failure", ["decode"]) == (None, None)
    new, opened = store.record_sighting(_sighting("p2", incident="kv-transfer-failure", fps=["fk"]))
    assert opened and new.id != row.id and store.incident(row.id).incident == "decode-wedged"


def test_a_resolved_incident_is_never_joined_by_another_class(store):
    row, _ = store.record_sighting(_sighting("p1"))
    store.resolve_alerts("lab", ["fa"], ["x"])
    s = _sighting("p2", incident="kv-transfer-failure", fps=["fk"])
    joined, opened = store.record_sighting(Sighting(**{**s.__dict__, "into": row.id}))
    assert opened and joined.id != row.id and store.incident(row.id).incident == "decode-wedged"


def test_a_stale_incident_closes_itself_saying_why(store, inventory, settings):
    flow = Flow(settings=settings.model_copy(update={"incident_stale_s": 600.0}), store=store)
    quiet, _ = store.record_sighting(_sighting("p1"))
    store.write(lambda s: s.execute(update(IncidentRow).where(IncidentRow.id == quiet.id).values(
        firing=[], last_seen=now() - timedelta(minutes=11))))
    firing, _ = store.record_sighting(_sighting("p2", incident="prefill-queue-saturation", fps=["fq"]))
    store.write(lambda s: s.execute(update(IncidentRow).where(IncidentRow.id == firing.id).values(
        last_seen=now() - timedelta(minutes=30))))
    asked = _remedy(store, inventory, settings)
    store.incident_event(quiet.id, "action", "approval asked", action_id=asked.id)  # an event: no longer stale
    assert asyncio.run(flow.incidents.close_stale()) == []
    store.write(lambda s: s.execute(update(IncidentRow).where(IncidentRow.id == quiet.id).values(
        last_seen=now() - timedelta(minutes=11))))
    assert asyncio.run(flow.incidents.close_stale()) == [quiet.id]
    closed = store.incident(quiet.id)
    assert closed.state == "resolved" and closed.timeline[-2]["kind"] == "stale"
    assert "no alert firing and nothing named decode-wedged for 11 min" in closed.timeline[-2]["what"]
    assert store.action(asked.id).state == ActionState.superseded
    assert store.incident(firing.id).state == "open"  # an alert fires: never stale


def test_stale_reason_is_pure():
    at = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    row = IncidentRow(state="open", firing=[], incident="decode-wedged", last_seen=at - timedelta(minutes=31))
    assert "nothing named decode-wedged for 31 min" in stale_reason(row, False, timedelta(minutes=30), at)
    assert stale_reason(row, True, timedelta(minutes=30), at) is None  # a restart of it runs
    assert stale_reason(row, False, timedelta(minutes=40), at) is None
    row.firing = ["fa"]
    assert stale_reason(row, False, timedelta(minutes=30), at) is None


def test_the_notifier_catches_up_with_an_incident_another_process_moved(store):
    told: list[str] = []

    class Recorder:
        def notify(self, incident_id: str) -> None:
            told.append(incident_id)

    flow = Flow(settings=Settings(data_dir="/tmp"), store=store)
    flow.incidents.notifier = Recorder()
    row, _ = store.record_sighting(_sighting("p1"))
    store.slack_posted(row.id, "C1", "1.1", 1)  # the message shows the opening entry
    later = datetime.now(UTC) + timedelta(seconds=10)
    assert asyncio.run(flow.incidents.catch_up(later)) == []  # up to date
    store.resolve_alerts("lab", ["fa"], ["x"])  # closed by another process: two entries its message lacks
    assert asyncio.run(flow.incidents.catch_up(datetime.now(UTC))) == []  # that process is telling
    assert asyncio.run(flow.incidents.catch_up(later)) == [row.id] and told == [row.id]
