"""The alert chain's watchdog on a real SQLite file and a real PostgreSQL: Alertmanager "down" is an address
nothing listens on (the lab game day stops the real one: tests/test_gameday_lab.py). Two instances on one
database probe once per interval between them; the probe's finding opens the incident through the flow,
without any alert; a later clean probe closes it; with the chain up and nothing left open, nothing runs."""

from __future__ import annotations

import time

from opsbot.service.chainwatch import JOB, ChainWatch
from opsbot.service.integrations import alert_chain
from tests.databases import free_port
from tests.servicekit import flow_for, lab_settings, replay


async def test_one_instance_probes_while_the_chain_is_down_and_closes_what_it_opened(tmp_path, database_url):
    down = lab_settings(tmp_path, database_url, alertmanager_url=f"http://127.0.0.1:{free_port()}", chain_watch_s=30)
    first, second = flow_for(down, replay("decode-hang-health-200")), flow_for(down, replay("decode-hang-health-200"))
    at = time.time()
    taken = [await ChainWatch(first).tick(at), await ChainWatch(second).tick(at)]
    assert sorted(len(t) for t in taken) == [0, 1], "one instance probes per interval"
    (row,) = first.store.incidents(state="open")
    assert row.incident == "decode-wedged" and not row.alerts and row.probes == [p for t in taken for p in t]
    assert [e["kind"] for e in row.timeline] == ["opened", "watchdog", "action"] and "Alertmanager" in row.timeline[1]["what"]
    assert "approval asked: restart decode" in row.timeline[2]["what"]
    assert first.store.latest_run(JOB).result.startswith("Alertmanager not answering")
    watch = ChainWatch(first)
    state = await watch.state(await alert_chain(down))
    assert state.ok and "probing every role every 30 s" in state.detail and "failing: Alertmanager" in state.detail

    again = await ChainWatch(second).tick(at + 30)  # the next interval: the same incident, no second one
    assert len(again) == 1 and [r.id for r in first.store.incidents(state="open")] == [row.id]
    assert len(first.store.actions(state="planned")) == 1, "the next probe gets the plan waiting, not a second"
    assert len(first.store.incident(row.id).actions) == 1

    up = lab_settings(tmp_path, database_url, chain_watch_s=30)  # nothing configured: no chain to be down
    healthy = flow_for(up, replay("healthy-0.5.12"))
    closing = await ChainWatch(healthy).tick(at + 60)  # it still owes the incident it opened a close
    assert len(closing) == 1
    closed = healthy.store.incident(row.id)
    assert closed.state == "resolved" and "no longer finds it" in closed.timeline[-2]["what"]
    assert await ChainWatch(healthy).tick(at + 90) == []  # chain up, nothing left: no probe
    assert healthy.store.latest_run(JOB).period == str(int((at + 60) // 30))
    for flow in (first, second, healthy):
        flow.store.close()
