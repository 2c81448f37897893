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


def test_watchdog_sightings_open_join_and_clear(database_url):
    """While the alert chain is down the watchdog's probes open incidents without alerts; a later probe
    that no longer finds (nor explains) the class closes them, unless a restart of theirs runs."""
    from dataclasses import replace

    with Store(database_url) as s:
        alerted, _ = s.record_sighting(sighting("p0", alerts=[1], fps=["fa"], names=["SGLangDecodeNoProgress"],
                                                incident="prefill-queue-saturation"))
        row, opened = s.record_sighting(replace(sighting("p1"), via="Alertmanager not answering"))
        assert opened and not row.alerts and [e["kind"] for e in row.timeline] == ["opened", "watchdog"]
        again, opened = s.record_sighting(replace(sighting("p2"), via="Alertmanager not answering"))
        assert not opened and again.timeline[-1]["kind"] == "watchdog" and "names it again" in again.timeline[-1]["what"]
        assert [r.id for r in s.watched("lab")] == [row.id]
        assert s.clear_watched("lab", {"decode-wedged"}, "p3") == []  # still found
        assert s.clear_watched("lab", set(), "p4", hold=frozenset({row.id})) == []  # its restart runs
        (closed,) = s.clear_watched("lab", set(), "p5")  # the alerted incident the watchdog never sighted stays
        assert closed.id == row.id and closed.state == "resolved" and closed.probes[-1] == "p5"
        assert "no longer finds it" in closed.timeline[-2]["what"] and s.watched("lab") == []
        assert s.incident(alerted.id).state == "open"


def test_sighting_caused_by_our_action_or_naming_the_cause(database_url):
    """A sighting sent ``into`` another open incident: caused by its restart, it joins and leaves the class;
    naming the cause, the incident takes the cause's class (and its open key)."""
    from dataclasses import replace

    with Store(database_url) as s:
        row, _ = s.record_sighting(sighting("p1", alerts=[1], fps=["fa"], names=["SGLangDecodeNoProgress"]))
        router = replace(sighting("p2", alerts=[2], fps=["fr"], names=["RouterNoHealthyWorkers"],
                                  incident="router-no-healthy-workers"), roles=["router"])
        joined, opened = s.record_sighting(replace(router, into=row.id, caused_by="caused by our restart of decode"))
        assert not opened and joined.id == row.id and joined.incident == "decode-wedged" and joined.roles == ["decode"]
        assert set(joined.firing) == {"fa", "fr"} and "caused by our restart" in joined.timeline[-1]["what"]
        assert [r.incident for r in s.incidents(state="open")] == ["decode-wedged"]

        first, _ = s.record_sighting(replace(router, probe_id="p3", alert_ids=[3], fingerprints=["fr2"]))
        assert first.incident == "router-no-healthy-workers" and first.id != row.id
        cause = replace(sighting("p4", alerts=[4], fps=["fo"], names=["SGLangRoleDown"], incident="cuda-oom"),
                        into=first.id, title="CUDA out of memory")
        named, opened = s.record_sighting(cause)
        assert not opened and named.id == first.id and named.incident == "cuda-oom" and named.roles == ["decode", "router"]
        assert "names the cause" in named.timeline[-1]["what"] and named.title == "CUDA out of memory"
        again, opened = s.record_sighting(sighting("p5", incident="cuda-oom"))  # its open key moved with it
        assert not opened and again.id == first.id


def test_where_a_sighting_goes(database_url):
    """``Incidents.home`` over the real runbooks: an alert our running or just verified restart caused goes to
    the restart's incident; a class that explains an open incident's class takes that incident over."""
    from dataclasses import replace

    from opsbot.incidents import Incidents
    from opsbot.store.models import now

    with Store(database_url) as s:
        flow_incidents = Incidents(s, None)  # type: ignore[arg-type]
        row, _ = s.record_sighting(sighting("p1", alerts=[1], fps=["fa"], names=["SGLangDecodeNoProgress"]))
        action = s.create_action(kind="restart", cluster="lab", roles=["decode"], plan={}, reason="decode-wedged (probe p1)",
                                 requested_by="alert", surface="alert", ttl=timedelta(minutes=15))
        s.incident_event(row.id, "action", "approval asked", action_id=action.id)
        assert flow_incidents.home("lab", "router-no-healthy-workers", ["router"]) == (None, None)  # only planned
        s.transition(action.id, ("planned",), "executing", actor="t", surface="t", what="run")
        into, why = flow_incidents.home("lab", "router-no-healthy-workers", ["router"])
        assert into == row.id and why is not None and "our restart of decode" in why
        assert flow_incidents.home("lab", "role-down", ["decode"])[0] == row.id
        assert flow_incidents.home("lab", "role-down", ["prefill"]) == (None, None)  # not the role we restart
        assert flow_incidents.home("lab", "prefill-queue-saturation", ["prefill"]) == (None, None)
        assert flow_incidents.home("lab", "decode-wedged", ["decode"]) == (None, None)  # its own class is open
        s.transition(action.id, ("executing",), "succeeded", actor="t", surface="t", what="ok",
                     finished_at=now() - timedelta(minutes=10))
        assert flow_incidents.home("lab", "router-no-healthy-workers", ["router"]) == (None, None)  # long verified

        router, _ = s.record_sighting(replace(sighting("p2", incident="router-no-healthy-workers"), cluster="lab2",
                                              roles=["router"]))
        assert flow_incidents.home("lab2", "cuda-oom", ["decode"]) == (router.id, None)  # cuda-oom explains it
        s.record_sighting(replace(sighting("p3", incident="cuda-oom"), cluster="lab2", into=router.id))
        assert flow_incidents.home("lab2", "router-no-healthy-workers", ["router"]) == (
            router.id, "explained by cuda-oom")  # the router's alert again: an effect, it joins the cause
        assert flow_incidents.home("lab2", "prefill-queue-saturation", ["prefill"]) == (None, None)


def test_a_flapping_crash_loop_reopens_its_incident(database_url):
    """``Incidents.recent``: a class named again within the reopen window after its incident resolved (a crash
    loop's alert resolves each time the unit comes up for a moment) reopens that incident, which keeps its id
    and its message; another class (even one it explains), or past the window, opens a new one."""
    from dataclasses import replace

    from opsbot.incidents import Incidents

    with Store(database_url) as s:
        flow_incidents = Incidents(s, None, reopen_s=600)  # type: ignore[arg-type]
        oom, _ = s.record_sighting(sighting("p1", alerts=[1], fps=["fa"], names=["SGLangRoleDown"], incident="cuda-oom"))
        (closed,) = s.resolve_alerts("lab", ["fa"], ["SGLangRoleDown"])
        assert closed.state == "resolved"
        assert flow_incidents.recent("lab", "cuda-oom") == oom.id
        assert flow_incidents.recent("lab", "role-down") is None  # explained by cuda-oom, but maybe a new one
        assert flow_incidents.recent("lab2", "cuda-oom") is None
        row, opened = s.record_sighting(replace(sighting("p2", alerts=[2], fps=["fb"], names=["RouterWorkerUnhealthy"],
                                                         incident="cuda-oom"), into=oom.id, reopen=True))
        assert not opened and row.id == oom.id and row.state == "open" and row.resolved_at is None
        assert row.firing == ["fb"] and [e["kind"] for e in row.timeline][-2:] == ["reopened", "alert"]
        again, opened = s.record_sighting(sighting("p3", incident="cuda-oom"))  # its open key is back
        assert not opened and again.id == oom.id
        (closed,) = s.resolve_alerts("lab", ["fb"], ["RouterWorkerUnhealthy"])
        assert closed.id == oom.id and closed.state == "resolved"
        assert Incidents(s, None, reopen_s=0).recent("lab", "cuda-oom") is None  # type: ignore[arg-type]


def test_watchdog_leaves_incidents_with_firing_alerts_to_them_once_the_chain_is_back(database_url):
    from dataclasses import replace

    with Store(database_url) as s:
        row, _ = s.record_sighting(replace(sighting("p1"), via="Alertmanager not answering"))
        s.record_sighting(sighting("p2", alerts=[1], fps=["fa"], names=["SGLangDecodeNoProgress"]))  # chain back
        assert s.clear_watched("lab", set(), "p3", chain_up=True) == []  # its alert resolves it
        assert [r.id for r in s.clear_watched("lab", set(), "p4")] == [row.id]  # chain down: the probe decides
