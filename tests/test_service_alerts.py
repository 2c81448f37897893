"""Alertmanager intake: validation, auth, dedup, coalescing, back-pressure and recovery, on a real store."""

from __future__ import annotations

import asyncio
import time
import json
from datetime import UTC, datetime

import pytest

from opsbot.service.intake import AlertIntake
from opsbot.store import AlertIn, Store
from tests.servicekit import flow_for, lab_settings, replay, served

ALERT_TOKEN = "am-shared-secret"
HDR = {"X-Opsbot-Alert-Token": ALERT_TOKEN}


def webhook(*alerts: dict, group: str = '{}:{alertname="DecodeStalled"}', status: str = "firing") -> dict:
    return {
        "version": "4", "groupKey": group, "truncatedAlerts": 0, "status": status, "receiver": "opsbot",
        "groupLabels": {"alertname": "DecodeStalled"}, "commonLabels": {}, "commonAnnotations": {},
        "externalURL": "http://am.local", "alerts": list(alerts),
    }


def alert(fp: str, role: str = "decode", status: str = "firing", start: str = "2026-11-30T10:00:00Z") -> dict:
    return {
        "status": status, "labels": {"alertname": "DecodeStalled", "role": role, "cluster": "lab"},
        "annotations": {"summary": "decode makes no progress"}, "startsAt": start,
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2026-11-30T10:05:00Z",
        "generatorURL": "http://prom/graph", "fingerprint": fp,
    }


@pytest.fixture
def settings(tmp_path, database_url):
    return lab_settings(tmp_path, database_url, alert_token=ALERT_TOKEN, max_body_bytes=64 * 1024)


async def test_alerts_are_stored_deduplicated_and_coalesced(settings):
    probe = replay("decode-hang-health-200")
    flow = flow_for(settings, probe)
    async with served(settings, flow) as client:
        first = await client.post("/alerts", json=webhook(alert("a1"), alert("a2"), alert("p1", role="prefill")), headers=HDR)
        assert first.status_code == 200 and first.json() == {"stored": 3, "duplicates": 0}
        again = await client.post("/alerts", json=webhook(alert("a1"), alert("a2")), headers=HDR)
        assert again.json() == {"stored": 0, "duplicates": 2}
        resolved = await client.post("/alerts", json=webhook(alert("a1", status="resolved"), status="resolved"), headers=HDR)
        assert resolved.json() == {"stored": 1, "duplicates": 0}
        await client.app.state.intake.drain()
        rows = flow.store.alerts()
        assert sorted((a.fingerprint, a.status) for a in rows) == [
            ("a1", "firing"), ("a1", "resolved"), ("a2", "firing"), ("p1", "firing")]
        assert all(a.probe_id for a in rows), "every accepted alert is handled by a probe"
        scopes = sorted((c["cluster"], tuple(c["roles"])) for c in probe.calls)
        # one probe per (cluster, role) for the first burst; the resolve came later and got its own
        assert scopes.count(("lab", ("prefill",))) == 1 and 1 <= scopes.count(("lab", ("decode",))) <= 2
        assert probe.calls[0]["trigger"].kind == "alert"
        metrics = (await client.get("/metrics")).text
        assert "opsbot_alerts_received_total 6.0" in metrics and "opsbot_alerts_deduplicated_total 2.0" in metrics


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b'{"version": "4", "alerts": [', 400, "not valid JSON"),
        (json.dumps(webhook(alert("x")) | {"version": "3"}).encode(), 422, "version"),
        (json.dumps(webhook({**alert("x"), "fingerprint": ""})).encode(), 422, "alerts.0.fingerprint"),
        (json.dumps(webhook({**alert("x"), "labels": {"role": "de code; reboot"}})).encode(), 422, "alerts.0.labels"),
        (json.dumps({k: v for k, v in webhook(alert("x")).items() if k != "groupKey"}).encode(), 422, "groupKey"),
    ],
    ids=["malformed-json", "wrong-version", "empty-fingerprint", "bad-role-label", "missing-groupKey"],
)
async def test_bad_payloads_are_refused_and_nothing_is_stored(settings, body, status, says):
    flow = flow_for(settings, replay("near-idle-decode"))
    async with served(settings, flow) as client:
        r = await client.post("/alerts", content=body, headers={**HDR, "Content-Type": "application/json"})
        assert r.status_code == status, r.text
        assert says in r.json()["detail"]
        assert flow.store.count_alerts() == 0
        assert 'opsbot_alerts_rejected_total{reason="invalid"} 1.0' in (await client.get("/metrics")).text


async def test_oversized_and_unauthenticated_are_refused(settings):
    flow = flow_for(settings, replay("near-idle-decode"))
    async with served(settings, flow) as client:
        huge = webhook(*[alert(f"fp{i}", start=f"2026-11-30T10:00:{i % 60:02d}Z") for i in range(400)])
        r = await client.post("/alerts", json=huge, headers=HDR)
        assert r.status_code == 413 and "OPSBOT_MAX_BODY_BYTES" in r.json()["detail"]

        async def chunks():
            yield json.dumps(huge).encode()

        chunked = await client.post("/alerts", content=chunks(), headers={**HDR, "Content-Type": "application/json"})
        assert chunked.status_code == 413
        assert 'opsbot_alerts_rejected_total{reason="too-large"} 2.0' in (await client.get("/metrics")).text
        wrong = await client.post("/alerts", json=webhook(alert("x")), headers={"X-Opsbot-Alert-Token": "guess"})
        assert wrong.status_code == 401 and "does not match" in wrong.json()["detail"]
        none = await client.post("/alerts", json=webhook(alert("x")))
        assert none.status_code == 401
        assert flow.store.count_alerts() == 0
        assert 'opsbot_alerts_rejected_total{reason="unauthorized"} 2.0' in (await client.get("/metrics")).text


async def test_full_queue_answers_503_and_stores_nothing_from_that_call(tmp_path, database_url):
    settings = lab_settings(tmp_path, database_url, alert_token=ALERT_TOKEN, alert_queue_max=1)
    gate = asyncio.Event()
    inner = replay("near-idle-decode")

    async def stuck(inventory, **kw):
        await gate.wait()
        return await inner(inventory, **kw)

    flow = flow_for(settings, stuck)
    async with served(settings, flow) as client:
        ok = await client.post("/alerts", json=webhook(alert("q1")), headers=HDR)  # its probe hangs
        assert ok.status_code == 200
        full = await client.post("/alerts", json=webhook(alert("q2")), headers=HDR)
        assert full.status_code == 503 and full.headers["retry-after"] and "retry later" in full.json()["detail"]
        assert [a.fingerprint for a in flow.store.alerts()] == ["q1"]
        metrics = (await client.get("/metrics")).text
        assert 'opsbot_alerts_rejected_total{reason="queue-full"} 1.0' in metrics and "opsbot_alerts_waiting 1.0" in metrics
        gate.set()
        await client.app.state.intake.drain()
        retried = await client.post("/alerts", json=webhook(alert("q2")), headers=HDR)  # Alertmanager's retry
        assert retried.status_code == 200 and sorted(a.fingerprint for a in flow.store.alerts()) == ["q1", "q2"]


async def test_stored_but_unprocessed_alerts_are_probed_at_startup(settings):
    with Store(settings.db_url()) as store:  # accepted by an opsbot that then died
        store.save_alerts([AlertIn(fingerprint="left", status="firing", labels={"alertname": "DecodeStalled"},
                                   starts_at=datetime(2026, 11, 30, tzinfo=UTC), group_key="g",
                                   cluster="lab", role="decode")])
    probe = replay("decode-hang-health-200")
    flow = flow_for(settings, probe)
    async with served(settings, flow) as client:
        intake: AlertIntake = client.app.state.intake
        await intake.drain()
        (row,) = flow.store.alerts()
        assert row.probe_id is not None and flow.store.probes()[0].id == row.probe_id
        assert [c["roles"] for c in probe.calls] == [["decode"]]


async def test_bearer_token_with_probe_scope_is_accepted_read_scope_is_not(settings):
    flow = flow_for(settings, replay("near-idle-decode"))
    prober = flow.store.create_token("am", ["probe"])
    reader = flow.store.create_token("viewer", ["read"])
    async with served(settings, flow) as client:
        weak = await client.post("/alerts", json=webhook(alert("b1")), headers={"Authorization": f"Bearer {reader}"})
        assert weak.status_code == 403 and "'probe'" in weak.json()["detail"]
        assert flow.store.count_alerts() == 0
        ok = await client.post("/alerts", json=webhook(alert("b1")), headers={"Authorization": f"Bearer {prober}"})
        assert ok.status_code == 200 and flow.store.count_alerts() == 1


async def test_missing_inventory_is_503_with_the_path_and_nothing_is_stored(tmp_path, database_url):
    settings = lab_settings(tmp_path, database_url, alert_token=ALERT_TOKEN)
    settings = settings.model_copy(update={"inventory": tmp_path / "nowhere.yaml"})
    flow = flow_for(settings, replay("near-idle-decode"))
    token = flow.store.create_token("p", ["probe"])
    async with served(settings, flow) as client:
        r = await client.post("/alerts", json=webhook(alert("m1")), headers=HDR)
        assert r.status_code == 503 and "nowhere.yaml" in r.json()["detail"] and "opsbot lab up" in r.json()["detail"]
        p = await client.post("/probe", json={}, headers={"Authorization": f"Bearer {token}"})
        assert p.status_code == 503 and "nowhere.yaml" in p.json()["detail"]
        assert flow.store.count_alerts() == 0 and (await client.get("/")).status_code == 200


async def test_an_alert_for_a_role_not_in_the_inventory_is_given_up_on_and_shown(settings):
    probe = replay("decode-hang-health-200")
    flow = flow_for(settings, probe)
    async with served(settings, flow) as client:
        r = await client.post("/alerts", json=webhook(alert("ghost", role="decoder")), headers=HDR)
        assert r.status_code == 200
        await client.app.state.intake.drain()
    (row,) = flow.store.alerts()
    assert row.probe_id is None and row.probe_failed_at is not None and row.probe_attempts == 1
    assert "unknown role 'decoder'" in row.probe_error
    again = replay("decode-hang-health-200")
    flow = flow_for(settings, again)
    async with served(settings, flow) as client:  # the next start does not try it again
        assert await client.app.state.intake.recover() == 0
        page = (await client.get("/")).text
    assert again.calls == [] and flow.store.alerts()[0].probe_attempts == 1
    assert 'id="failed-alerts"' in page and "unknown role &#39;decoder&#39;" in page
    assert any(i.kind == "alert" and "decoder" in i.detail for i in flow.store.history())


async def test_a_failing_probe_is_retried_by_the_running_service_up_to_the_attempt_limit(tmp_path, database_url):
    settings = lab_settings(tmp_path, database_url, alert_token=ALERT_TOKEN, alert_probe_attempts=2,
                            alert_retry_s=0.3, instance_heartbeat_s=0.1)
    with Store(settings.db_url()) as store:
        store.save_alerts([AlertIn(fingerprint="flaky", status="firing", labels={"alertname": "DecodeStalled"},
                                   group_key="g", cluster="lab", role="decode")])
    calls: list[float] = []

    async def broken(inventory, **kw):
        calls.append(time.monotonic())
        raise RuntimeError("ssh agent gone")

    flow = flow_for(settings, broken)
    async with served(settings, flow):
        for _ in range(100):
            (row,) = flow.store.alerts()
            if row.probe_failed_at is not None:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # no third attempt comes
    assert len(calls) == 2 and calls[1] - calls[0] >= 0.3, "retried once, after alert_retry_s, without a restart"
    assert row.probe_attempts == 2 and row.probe_error == "ssh agent gone"


async def test_two_instances_sharing_the_database_probe_each_leftover_alert_once(settings):
    with Store(settings.db_url()) as store:  # accepted by an opsbot that then died
        store.save_alerts([AlertIn(fingerprint=f"left{i}", status="firing", labels={"alertname": "DecodeStalled"},
                                   group_key="g", cluster="lab", role=role) for i, role in enumerate(["decode", "prefill"])])
    probes = [replay("decode-hang-health-200"), replay("decode-hang-health-200")]
    runtimes = [flow_for(settings, p) for p in probes]
    async with served(settings, runtimes[0]) as one, served(settings, runtimes[1]) as two:
        await asyncio.gather(one.app.state.intake.drain(), two.app.state.intake.drain())
    probed = sorted(tuple(c["roles"]) for p in probes for c in p.calls)
    assert probed == [("decode",), ("prefill",)], "each leftover alert is probed by exactly one instance"
    assert all(a.probe_id for a in runtimes[0].store.alerts())


async def test_a_node_alert_probes_the_nodes_roles(settings):
    """A GPU exporter's alert (role "exporter", node "node2") is about the node: every role is probed."""
    probe = replay("gpu-fallen-off-bus")
    flow = flow_for(settings, probe)
    node_alert = alert("x1", role="exporter")
    node_alert["labels"] |= {"node": "node2", "alertname": "GPUXidErrors"}
    stray = alert("x2", role="exporter")  # no node label: an unknown role, refused as before
    async with served(settings, flow) as client:
        assert (await client.post("/alerts", json=webhook(node_alert), headers=HDR)).status_code == 200
        await client.app.state.intake.drain()
        assert probe.calls[-1]["roles"] is None
        await client.post("/alerts", json=webhook(stray, group="g2"), headers=HDR)
        await client.app.state.intake.drain()
    assert [a.probe_failed_at is not None for a in flow.store.alerts() if a.fingerprint == "x2"] == [True]


def test_a_webhook_without_fingerprint_gets_the_one_alertmanager_computes():
    """Alertmanager before 0.19 sends no ``fingerprint``; 57a659bde08d662a is what a real Alertmanager
    0.25 (Debian's) reports at /api/v2/alerts for these labels."""
    from opsbot.service.alertmanager import Webhook

    old = alert("unused")
    del old["fingerprint"]
    parsed = Webhook.model_validate(webhook(old, {**old, "fingerprint": None}))
    assert [a.fingerprint for a in parsed.alerts] == ["57a659bde08d662a", "57a659bde08d662a"]
    assert Webhook.model_validate(webhook(alert("given"))).alerts[0].fingerprint == "given"


async def test_a_router_alert_probes_the_workers_behind_it(settings):
    """The router's alerts (a worker unreachable, none healthy) are about its workers: every role is probed,
    so a decode that died of OOM is named on the router's alert, not on the decode's own later one."""
    probe = replay("gpu-fallen-off-bus")
    flow = flow_for(settings, probe)
    router_alert = alert("r1", role="router")
    router_alert["labels"] |= {"alertname": "SMGWorkerUnreachable"}
    async with served(settings, flow) as client:
        assert (await client.post("/alerts", json=webhook(router_alert), headers=HDR)).status_code == 200
        await client.app.state.intake.drain()
        assert probe.calls[-1]["roles"] is None
        await client.post("/alerts", json=webhook(alert("d1", role="decode"), group="g2"), headers=HDR)
        await client.app.state.intake.drain()
        assert probe.calls[-1]["roles"] == ["decode"]
