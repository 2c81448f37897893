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
    row = gameday.store.incident(run.incident_id)  # type: ignore[union-attr,arg-type]
    assert row.state == "resolved" and row.time_to_recovery_s is not None and row.alertnames  # the alert reached opsbot
    assert any(e["kind"] == "resolved" for e in row.timeline)


def test_alertmanager_and_prometheus_down(gameday: GameDay):
    """Alertmanager down: the status page says so, and once it is back the firing alert still reaches
    opsbot (Prometheus re-sends), the incident is recorded and probed; Prometheus down: said too."""
    store = gameday.store
    assert store is not None
    gameday.take_down("alertmanager")
    try:
        table = gameday.integrations()
        assert "Alertmanager" in table and table.count("FAILING") == 1
        since = time.time()
        gameday.lab.break_class("decode-wedged")
        wait("the alert firing with nowhere to go", lambda: [
            a for a in gameday.prometheus_alerts() if a["state"] == "firing"
            and a["labels"].get("incident") == "decode-wedged"], 60, 0.5)
        assert not store.incidents(state="open")
    finally:
        gameday.bring_back()
    row = wait("the incident recorded once Alertmanager is back", lambda: next(
        (r for r in store.incidents(state="open", incident="decode-wedged") if r.first_seen.timestamp() >= since),
        None), 60, 0.5)
    assert row.probes and wait("its message", lambda: gameday.messages(row.id), 30, 0.2)
    gameday.take_down("prometheus")
    try:
        table = gameday.integrations()
        assert "Prometheus" in table and "FAILING" in table and "not answering" in table
    finally:
        gameday.bring_back()
        gameday.quiet()
    assert "FAILING" not in gameday.integrations()
