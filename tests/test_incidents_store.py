"""The incident aggregate on real SQLite and PostgreSQL: open, join, resolve, one open per class, the Slack claim."""

from __future__ import annotations

import threading
from datetime import timedelta

from sqlalchemy import update

from opsbot.store import Sighting, Store
from opsbot.store.models import IncidentRow, Instance, now


def sighting(probe: str, *, alerts: list[int] | None = None, fps: list[str] | None = None,
             names: list[str] | None = None, incident: str = "decode-wedged") -> Sighting:
    return Sighting(cluster="lab", incident=incident, severity="critical", roles=["decode"], title="Decode wedged",
                    summary="no tokens", confidence=0.9, probe_id=probe, alert_ids=alerts or [],
                    fingerprints=fps or [], alertnames=names or [])


def test_open_join_resolve(database_url):
    with Store(database_url) as s:
        first, opened = s.record_sighting(sighting("p1", alerts=[1], fps=["fa"], names=["SGLangDecodeNoProgress"]))
        assert opened and first.state == "open" and first.firing == ["fa"]
        again, opened = s.record_sighting(sighting("p2", alerts=[2], fps=["fb"], names=["SGLangDecodeStalled"]))
        assert not opened and again.id == first.id
        assert again.probes == ["p1", "p2"] and again.alerts == [1, 2] and set(again.firing) == {"fa", "fb"}
        assert [e["kind"] for e in again.timeline] == ["opened", "alert"]
        other, opened = s.record_sighting(sighting("p3", incident="prefill-queue-saturation"))
        assert opened and other.id != first.id

        assert s.resolve_alerts("lab", ["fa"], ["SGLangDecodeNoProgress"])[0].state == "open"  # fb still fires
        (done,) = s.resolve_alerts("lab", ["fb"], ["SGLangDecodeStalled"])
        assert done.state == "resolved" and done.resolved_at is not None and done.time_to_recovery_s >= 0
        assert "time to recovery" in done.timeline[-1]["what"]
        # resolved: the next sighting of the class opens a new incident
        fresh, opened = s.record_sighting(sighting("p4"))
        assert opened and fresh.id != first.id
        assert {r.id for r in s.incidents(state="open")} == {fresh.id, other.id}
        assert [r.id for r in s.incidents(role="decode", state="resolved")] == [first.id]


def test_events_and_lookups(database_url):
    with Store(database_url) as s:
        row, _ = s.record_sighting(sighting("p1"))
        s.incident_event(row.id, "action", "restart planned", action_id="a1")
        assert s.incident_for_action("a1").id == row.id
        assert s.incident_for_probe("p1", "lab").id == row.id
        assert s.incident_event("nope", "action", "x") is None
        assert s.incident(row.id).actions == ["a1"]


def test_one_open_incident_per_class_across_instances(database_url):
    Store(database_url).close()
    stores = [Store(database_url) for _ in range(5)]
    barrier = threading.Barrier(len(stores))
    ids: list[str] = []

    def _go(i: int, st: Store) -> None:
        barrier.wait()
        ids.append(st.record_sighting(sighting(f"p{i}", fps=[f"f{i}"]))[0].id)

    threads = [threading.Thread(target=_go, args=(i, st)) for i, st in enumerate(stores)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(ids) == 5 and len(set(ids)) == 1
    assert len(stores[0].incident(ids[0]).probes) == 5
    [st.close() for st in stores]


def test_slack_message_claimed_once(database_url):
    with Store(database_url) as s:
        row, _ = s.record_sighting(sighting("p1"))
        stale = timedelta(minutes=5)
        assert s.claim_slack_post(row.id, stale)
        assert not s.claim_slack_post(row.id, stale)  # a post is running
        s.slack_failed(row.id, "slack answered 500")
        assert [r.id for r in s.slack_failing()] == [row.id]
        assert s.claim_slack_post(row.id, stale)  # a failed post may be retried
        s.slack_posted(row.id, "C0OPS", "1700000000.000001", 1)
        assert not s.claim_slack_post(row.id, timedelta(0))  # posted: never again, even when stale
        s.slack_failed(row.id, "chat.update timed out")
        assert s.incident(row.id).slack_state == "posted"


def test_a_killed_instances_message_claim_is_free_after_its_lease(database_url):
    """An instance killed between claiming an incident's message and posting it: another takes the claim
    once the dead one stops beating (a lease), not after the minutes a live post may take."""
    lease, stale = timedelta(seconds=30), timedelta(minutes=5)
    with Store(database_url) as s:
        s.heartbeat("dead", "host", 1)
        s.heartbeat("alive", "host", 2)
        row, _ = s.record_sighting(sighting("p1"))
        assert s.claim_slack_post(row.id, stale, "dead", lease)
        assert not s.claim_slack_post(row.id, stale, "alive", lease), "its claimer still beats"
        s.write(lambda x: x.execute(update(IncidentRow).where(IncidentRow.id == row.id).values(
            first_seen=now() - timedelta(minutes=1))))
        assert s.unposted_incidents(lease) == [], "a live instance is posting it"
        s.write(lambda x: x.execute(update(Instance).where(Instance.id == "dead").values(
            heartbeat_at=now() - timedelta(minutes=1))))
        assert s.unposted_incidents(lease) == [row.id], "its poster died: the lease sweep posts it"
        assert s.claim_slack_post(row.id, stale, "alive", lease)
        assert s.incident(row.id).slack_claimed_by == "alive"
        assert not s.claim_slack_post(row.id, stale, "dead", lease)
        s.slack_posted(row.id, "C0OPS", "1700000000.000002", 1)
        assert s.unposted_incidents(lease) == []
        s.slack_updated(row.id, 2)
        assert s.slack_failing() == []
