"""Game day on the lab, end to end: break a class, real Prometheus evaluates the rendered rules, real
Alertmanager posts to ``opsbot serve``, one probe names the class in one Slack message (the recording
server), a Restart button only where a restart helps, the approver's signed click runs the guarded
restart, the role recovers, the alerts resolve and the message says so. One lab and one monitoring
stack for the module (tests/gameday.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.gameday import GameDay, wait

pytestmark = [pytest.mark.lab, pytest.mark.integration]


@pytest.fixture(scope="module")
def gameday(lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GameDay]:
    lab.reset()  # a healthy lab, whatever the tests before left it in: a game day starts from quiet
    day = GameDay(lab, tmp_path_factory.mktemp("gameday"))
    try:
        day.start().quiet()
        yield day
    finally:
        day.stop()
        lab.reset()


@pytest.mark.parametrize(("incident", "restart_helps"), [
    ("decode-wedged", True),
    ("prefill-queue-saturation", False),
    ("config-crashloop", False),
    ("router-no-healthy-workers", False),
])
def test_break_alert_message_recover_resolve(gameday: GameDay, incident: str, restart_helps: bool):
    try:
        run = gameday.run(incident, timeout=60)
    finally:
        gameday.quiet()
    assert run.alert_s is not None and run.finding_s is not None and run.slack_s is not None
    assert run.alert_s < run.finding_s <= run.slack_s, run
    # one probe opens the incident; another alert group's probe (smg's RouterWorkerUnhealthy beside
    # RouterNoHealthyWorkers) may join it before the message is posted: still one message
    assert run.probes_at_message >= 1 and "probe(s)" in run.first_message
    assert incident in run.first_message and "confidence" in run.first_message and "/probes/" in run.first_message
    assert run.messages == 1, f"one Slack message for the incident, saw {run.messages}"
    assert run.restart_offered is restart_helps
    if restart_helps:
        assert run.recovery_s is not None and run.recovery_s < run.resolved_s  # type: ignore[operator]
        action = gameday.store.action(run.plan_id)  # type: ignore[union-attr,arg-type]  (a later probe may plan again)
        assert action.state == "succeeded" and action.approved_by == "slack:U0ALICE"
        # the wedged scheduler's stacks were kept before the restart destroyed them (issue 26)
        dumps = [p for c in gameday.store.captures(action.id) for p in c.parts if p.kind == "stacks" and p.ok]
        assert dumps and any("forward_batch_generation" in p.text for p in dumps), "no stack dump naming the wedge"
    row = gameday.store.incident(run.incident_id)  # type: ignore[union-attr,arg-type]
    assert row.state == "resolved" and row.time_to_recovery_s is not None and row.alertnames  # the alert reached opsbot
    assert any(e["kind"] == "resolved" for e in row.timeline)


def test_alertmanager_and_prometheus_down(gameday: GameDay):
    """Alertmanager down: the status page says so, and opsbot's watchdog probes by itself: the incident is
    recorded, probed and posted without any alert, and closed by a later probe once healed; Prometheus
    down: said too, and the watchdog runs again."""
    store = gameday.store
    assert store is not None
    gameday.take_down("alertmanager")
    try:
        table = gameday.integrations()
        assert "Alertmanager" in table and table.count("FAILING") == 1
        assert wait("the watchdog probing", lambda: "probing every role" in (t := gameday.integrations()) and t, 20, 0.5)
        since = time.time()
        gameday.lab.break_class("decode-wedged")
        row = wait("the incident recorded by the watchdog", lambda: next(
            (r for r in store.incidents(state="open", incident="decode-wedged") if r.first_seen.timestamp() >= since),
            None), 60, 0.5)
        assert not row.alerts and row.probes and any(e["kind"] == "watchdog" for e in row.timeline)
        probe = store.probes(limit=50)
        assert next(p for p in probe if p.id == row.probes[0]).trigger_kind == "schedule"
        assert wait("its message", lambda: gameday.messages(row.id), 30, 0.2)
        gameday.lab.reset()  # healed while the chain is still down: the watchdog's next probe closes it
        closed = wait("closed by a later watchdog probe", lambda: (r := store.incident(row.id)) is not None
                      and r.state == "resolved" and r, 60, 0.5)
        assert "no longer finds it" in closed.timeline[-2]["what"] and closed.time_to_recovery_s is not None
    finally:
        gameday.bring_back()
    gameday.take_down("prometheus")
    try:
        table = gameday.integrations()
        assert "Prometheus" in table and "FAILING" in table and "not answering" in table
        assert "failing: Prometheus" in wait("the watchdog probing again",
                                             lambda: "probing every role" in (t := gameday.integrations()) and t, 20, 0.5)
    finally:
        gameday.bring_back()
        gameday.quiet()
    assert "FAILING" not in gameday.integrations()
