"""The REST API over a real store (SQLite file and PostgreSQL): auth, probes, jobs, reports, actions."""

from __future__ import annotations

import asyncio

import pytest

from opsbot.act import plan_remedies
from opsbot.store import Store
from tests.servicekit import flow_for, lab_settings, replay, served

pytestmark = pytest.mark.usefixtures("loop_watchdog")  # a handler holding the loop over 100 ms fails the test


@pytest.fixture
def settings(tmp_path, database_url):
    return lab_settings(tmp_path, database_url)


@pytest.fixture
def tokens(settings):
    with Store(settings.db_url()) as store:
        return {
            "read": store.create_token("reader", ["read"]),
            "probe": store.create_token("prober", ["read", "probe"]),
            "act": store.create_token("operator", ["read", "act"]),
        }


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


async def test_auth_says_401_for_who_and_403_for_what(settings, tokens):
    async with served(settings, flow_for(settings, replay("decode-hang-health-200"))) as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        missing = await client.post("/probe", json={"roles": ["decode"]})
        assert missing.status_code == 401 and "no bearer token" in missing.json()["detail"]
        assert missing.headers["www-authenticate"].startswith("Bearer")
        forged = await client.post("/probe", json={}, headers=bearer("opsbot_not-a-token"))
        assert forged.status_code == 401 and "unknown" in forged.json()["detail"]
        weak = await client.post("/probe", json={"roles": ["decode"]}, headers=bearer(tokens["read"]))
        assert weak.status_code == 403 and "'probe' scope" in weak.json()["detail"]
        no_act = await client.post("/actions/restart", json={"role": "decode"}, headers=bearer(tokens["probe"]))
        assert no_act.status_code == 403 and "'act'" in no_act.json()["detail"]


async def test_probe_diagnoses_stores_and_counts(settings, tokens):
    probe = replay("decode-hang-health-200")
    flow = flow_for(settings, probe)
    async with served(settings, flow) as client:
        r = await client.post("/probe", json={"roles": ["decode"]}, headers=bearer(tokens["probe"]))
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["state"] == "done"
        result = body["result"]
        assert result["findings"][0]["incident"] == "decode-wedged"
        assert result["findings"][0]["evidence"]
        assert probe.calls[0]["roles"] == ["decode"] and probe.calls[0]["trigger"].kind == "rest"
        stored = flow.store.probes()
        assert [p.id for p in stored] == [result["probe_id"]] and stored[0].top_incident == "decode-wedged"
        metrics = (await client.get("/metrics")).text
        assert 'opsbot_findings_total{incident="decode-wedged"} 1.0' in metrics
        assert 'opsbot_probes_total{outcome="finding",trigger="rest"} 1.0' in metrics
        # the flow planned the finding's restart for REST as it does for Slack, keyed by probe and role
        (action,) = flow.store.actions()
        assert result["planned_actions"] == {"decode": action.id} and action.state == "planned"
        assert action.plan_key == f"{result['probe_id']}:decode" and action.requested_by == "rest:prober"
        diagnosis = flow.diagnose(flow.store.load_bundle(result["probe_id"]))
        again = plan_remedies(flow.store, flow.inventory(), diagnosis, result["probe_id"], cluster="lab",
                              actor="slack:U0BOB", surface="slack", settings=settings)
        assert again.plans == {"decode": action.id} and len(flow.store.actions()) == 1


async def test_unknown_role_is_refused_before_probing(settings, tokens):
    probe = replay("decode-hang-health-200")
    flow = flow_for(settings, probe)
    async with served(settings, flow) as client:
        r = await client.post("/probe", json={"roles": ["decoder"]}, headers=bearer(tokens["probe"]))
        assert r.status_code == 404
        assert "unknown role 'decoder'" in r.json()["detail"] and "decode" in r.json()["detail"]
        bad = await client.post("/probe", json={"roles": ["de code; rm -rf /"]}, headers=bearer(tokens["probe"]))
        assert bad.status_code == 422
        assert probe.calls == [] and flow.store.probes() == []


async def test_slow_probe_becomes_a_job(settings, tokens):
    gate = asyncio.Event()
    inner = replay("near-idle-decode")

    async def slow(inventory, **kw):
        await gate.wait()
        return await inner(inventory, **kw)

    async with served(settings, flow_for(settings, slow)) as client:
        r = await client.post("/probe", json={"wait_s": 0.05}, headers=bearer(tokens["probe"]))
        assert r.status_code == 202 and r.json()["state"] == "running"
        job = r.json()["id"]
        assert r.headers["location"] == f"/probe/{job}"
        assert (await client.get(f"/probe/{job}", headers=bearer(tokens["read"]))).json()["state"] == "running"
        gate.set()
        for _ in range(100):
            polled = (await client.get(f"/probe/{job}", headers=bearer(tokens["read"]))).json()
            if polled["state"] != "running":
                break
            await asyncio.sleep(0.02)
        assert polled["state"] == "done" and polled["result"]["findings"] == []
        assert (await client.get("/probe/nope", headers=bearer(tokens["read"]))).status_code == 404


async def test_status_by_accept_and_saved_reports(settings, tokens):
    flow = flow_for(settings, replay("decode-hang-health-200"))
    async with served(settings, flow) as client:
        await client.post("/probe", json={}, headers=bearer(tokens["probe"]))
        h = bearer(tokens["read"])
        md = await client.get("/status", headers={**h, "Accept": "text/markdown"})
        assert md.headers["content-type"].startswith("text/markdown") and "decode-wedged" in md.text
        html = await client.get("/status", headers={**h, "Accept": "text/html"})
        assert html.headers["content-type"].startswith("text/html") and "<" in html.text and "decode-wedged" in html.text
        js = await client.get("/status", headers=h)
        assert js.json()["current"]["incidents"] == ["decode-wedged"]
        rid = flow.store.save_report("weekly", "2026-W48", "markdown", "# Week 48\nall quiet", {})
        listed = (await client.get("/reports", headers=h)).json()
        assert [(r["id"], r["kind"], r["period"]) for r in listed] == [(rid, "weekly", "2026-W48")]
        one = await client.get(f"/reports/{rid}", headers=h)
        assert one.text == "# Week 48\nall quiet" and one.headers["content-type"].startswith("text/markdown")
        assert (await client.get("/reports/999999", headers=h)).status_code == 404


async def test_restart_plan_dismiss_and_refusals(settings, tokens):
    flow = flow_for(settings, replay("decode-hang-health-200"))
    async with served(settings, flow) as client:
        h = bearer(tokens["act"])
        planned = await client.post("/actions/restart", json={"role": "decode", "reason": "wedged"}, headers=h)
        assert planned.status_code == 201, planned.text
        action = planned.json()
        assert action["state"] == "planned" and ["systemctl", "stop", "sglang-dsv4-decode.service"] in action["steps"]
        unknown = await client.post("/actions/restart", json={"role": "nope"}, headers=h)
        assert unknown.status_code == 404 and "unknown role" in unknown.json()["detail"]
        dismissed = await client.post(f"/actions/{action['id']}/dismiss", headers=h)
        assert dismissed.json()["state"] == "refused" and "dismissed by" in dismissed.json()["outcome"]
        again = await client.post(f"/actions/{action['id']}/approve", headers=h)
        assert again.status_code == 409 and "not waiting for approval" in again.json()["detail"]
        assert (await client.get(f"/actions/{action['id']}", headers=h)).json()["state"] == "refused"
        assert (await client.get("/actions/nope", headers=h)).status_code == 404


async def test_expired_approval_is_refused_and_nothing_runs(tmp_path, database_url):
    settings = lab_settings(tmp_path, database_url, approval_ttl_s=0.05)
    with Store(settings.db_url()) as store:
        secret = store.create_token("operator", ["read", "act"])
    flow = flow_for(settings, replay("decode-hang-health-200"))
    async with served(settings, flow) as client:
        action = (await client.post("/actions/restart", json={"role": "decode"}, headers=bearer(secret))).json()
        await asyncio.sleep(0.1)
        r = await client.post(f"/actions/{action['id']}/approve", headers=bearer(secret))
        assert r.status_code == 409 and "expired" in r.json()["detail"]
        row = flow.store.action(action["id"])
        assert row.state == "expired" and row.approved_by is None and row.started_at is None


async def test_rest_records_the_token_name_as_actor(settings, tokens):
    flow = flow_for(settings, replay("decode-hang-health-200"))
    async with served(settings, flow) as client:
        h = bearer(tokens["act"])  # the token named "operator"
        action = (await client.post("/actions/restart", json={"role": "decode"}, headers=h)).json()
        assert action["requested_by"] == "operator"
        await client.post(f"/actions/{action['id']}/dismiss", headers=h)
    rows = [e for e in flow.store.audit_log() if e.detail.get("action") == action["id"]]
    assert {(e.what, e.actor, e.surface) for e in rows} == {
        ("restart planned", "operator", "rest"), ("restart dismissed", "operator", "rest")}


async def test_the_service_reconciles_interrupted_actions_at_start(tmp_path, database_url):
    """A restart left ``executing`` by a dead opsbot (no live lock) is settled when the service starts."""
    from opsbot.act import request_restart

    settings = lab_settings(tmp_path, database_url, verify_deadline_s=0.5)
    flow = flow_for(settings, replay("decode-hang-health-200"))
    action, _ = request_restart(flow.store, flow.inventory(), ["decode"], actor="alice", surface="cli",
                                settings=settings)
    flow.store.transition(action.id, ("planned",), "executing", actor="alice", surface="cli",
                             what="restart executing", started_at=action.created_at)
    async with served(settings, flow):
        row = flow.store.action(action.id)
    # the flow's probe (a replayed wedged decode) shows no token progress: recorded as failed, never re-run
    assert row.state == "failed" and row.outcome.startswith("interrupted while executing")
    assert row.verification["reconciled"] is True
    assert [e.what for e in flow.store.audit_log() if e.detail.get("action") == action.id][0] == "restart failed (reconciled)"
