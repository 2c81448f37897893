"""The chatbot's answers over a real store, ``opsbot ask``/``opsbot incidents`` as subprocesses, REST
``/incidents``, the probe view and the status page's integrations (Prometheus down is said so)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

from opsbot.bundle import Trigger
from opsbot.chat.answers import answer
from opsbot.chat.intents import parse_intent
from opsbot.inventory import load_inventory
from opsbot.store import Sighting, Store
from opsbot.store.models import now
from tests.databases import free_port
from tests.servicekit import lab_settings, replay, flow_for, served

REPO = Path(__file__).resolve().parents[1]


def seed(store: Store) -> tuple[str, str]:
    """An incident with a restart that ran (approved by bob) and resolved."""
    row, _ = store.record_sighting(Sighting(
        cluster="lab", incident="decode-wedged", severity="critical", roles=["decode"], title="Decode wedged",
        summary="no tokens", confidence=0.9, probe_id="p-evidence", alert_ids=[1], fingerprints=["fa"],
        alertnames=["SGLangDecodeNoProgress"]))
    action = store.create_action(kind="restart", cluster="lab", roles=["decode"], plan={"steps": []},
                                 reason="decode-wedged (probe p-evidence)", requested_by="alertmanager",
                                 surface="slack", ttl=timedelta(minutes=15))
    store.approve_action(action.id, "slack:U0BOB", "slack", timedelta(minutes=15))
    store.transition(action.id, ("approved",), "executing", actor="slack:U0BOB", surface="slack", what="x",
                     started_at=now(), evidence_probe_id=None)
    store.transition(action.id, ("executing",), "succeeded", actor="slack:U0BOB", surface="slack", what="x",
                     outcome="restarted and verified healthy in 9.1 s", finished_at=now())
    store.incident_event(row.id, "action", "restart approved", action_id=action.id)
    store.resolve_alerts("lab", ["fa"], ["SGLangDecodeNoProgress"])
    return row.id, action.id


def ask(store, settings, text, tz="UTC"):
    inv = load_inventory(settings.inventory_path())
    return answer(parse_intent(text), store, inv, settings, ZoneInfo(tz), datetime.now(timezone.utc))


def test_answers_from_the_store(tmp_path):
    settings = lab_settings(tmp_path, f"sqlite:///{tmp_path / 'opsbot.db'}")
    with Store(settings.db_url()) as store:
        incident_id, action_id = seed(store)
        happened = ask(store, settings, "what happened in the last 2h", tz="Asia/Kolkata")
        assert happened.understood == "understood: what happened, in the last 2 h"
        assert incident_id in happened.text() and "time to recovery" in happened.text() and action_id in happened.text()
        assert "IST" in happened.title  # the operator's zone
        why = ask(store, settings, "why did decode restart?").text()
        assert "approved by slack:U0BOB" in why and "verified healthy" in why and incident_id in why
        assert "no restart of prefill" in ask(store, settings, "why did prefill restart").text()
        safe = ask(store, settings, "is it safe to restart decode")
        assert safe.title.startswith("no:") and "NO cooldown" in safe.text()  # restarted a moment ago
        assert ask(store, settings, "is it safe to restart prefill").title.startswith("yes:")
        assert "NO plan" in ask(store, settings, "is it safe to restart decoder").text()
        assert incident_id in ask(store, settings, "incidents").text()
        assert "finding" in ask(store, settings, "history decode 24h").text() or "action" in ask(
            store, settings, "history decode 24h").text()
        assert ask(store, settings, "decode is stuck") is None  # a probe request


def _opsbot(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPSBOT_DATA_DIR": str(tmp_path), "PYTHONPATH": str(REPO), "COLUMNS": "250",
           "OPSBOT_INVENTORY": str(tmp_path / "inventory.yaml"), "OPSBOT_REPORT_TIMEZONE": "Europe/Berlin"}
    env.pop("OPSBOT_DATABASE_URL", None)
    return subprocess.run([sys.executable, "-m", "opsbot", *args], env=env, capture_output=True, text=True, timeout=60)


def test_cli_ask_and_incidents(tmp_path):
    settings = lab_settings(tmp_path, f"sqlite:///{(tmp_path / 'opsbot.db').resolve()}")
    with Store(settings.db_url()) as store:
        incident_id, _ = seed(store)
    listed = _opsbot(tmp_path, "incidents")
    assert listed.returncode == 0 and incident_id in listed.stdout and "resolved" in listed.stdout
    shown = _opsbot(tmp_path, "incidents", "show", incident_id)
    assert shown.returncode == 0 and "time to recovery" in shown.stdout and "SGLangDecodeNoProgress" in shown.stdout
    assert _opsbot(tmp_path, "incidents", "show", "nope").returncode == 1
    as_json = json.loads(_opsbot(tmp_path, "incidents", "--json", "--state", "resolved").stdout)
    assert [i["id"] for i in as_json] == [incident_id] and as_json[0]["time_to_recovery_s"] >= 0
    said = _opsbot(tmp_path, "ask", "what happened today")
    assert said.returncode == 0 and "(understood: what happened, today)" in said.stdout and incident_id in said.stdout
    assert "CET" in said.stdout  # OPSBOT_REPORT_TIMEZONE
    assert "understood: help" in _opsbot(tmp_path, "ask", "help").stdout


async def test_rest_incidents_probe_view_and_integrations(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: Prometheus and Alertmanager are down
    settings = lab_settings(tmp_path, f"sqlite:///{tmp_path / 'opsbot.db'}", prometheus_url=dead,
                            alertmanager_url=dead, slack_bot_token="xoxb-test")
    flow = flow_for(settings, replay("decode-hang-health-200"))
    with Store(settings.db_url()) as store:
        incident_id, _ = seed(store)
        store.record_sighting(Sighting(cluster="lab", incident="cuda-oom", severity="critical", roles=["decode"],
                                       title="OOM", summary=None, confidence=0.9, probe_id="p2"))
        opened = store.incidents(state="open")[0]
        store.slack_failed(opened.id, "SlackApiError: internal_error (500)")
        token = store.create_token("reader", ["read"])
    async with served(settings, flow) as client:
        h = {"Authorization": f"Bearer {token}"}
        assert (await client.get("/incidents")).status_code == 401
        rows = (await client.get("/incidents", headers=h)).json()
        assert {r["id"] for r in rows} == {incident_id, opened.id}
        assert [r["id"] for r in (await client.get("/incidents?state=resolved", headers=h)).json()] == [incident_id]
        assert (await client.get("/incidents?state=bogus", headers=h)).status_code == 422
        assert (await client.get(f"/incidents/{incident_id}", headers=h)).json()["timeline"][0]["kind"] == "opened"
        assert (await client.get("/incidents/nope", headers=h)).status_code == 404

        result = await flow.run_probe(None, None, Trigger(kind="cli", user="test"))
        page = await client.get(f"/probes/{result.probe_id}")
        assert page.status_code == 200 and 'id="finding-decode-wedged"' in page.text and "<b>decode</b>" in page.text
        assert (await client.get("/probes/<script>")).status_code == 404

        status = (await client.get("/")).text
        table = status[status.index('id="integrations"'):status.index("</table>", status.index('id="integrations"'))]
        assert table.count("FAILING") == 3 and "not answering" in table and "internal_error" in table


async def test_slack_asks_in_the_users_zone_and_answers_mentions_in_the_thread(tmp_path):
    import time as _time

    from tests.servicekit import SIGNING_SECRET, signed, slash_body
    from tests.slackrecorder import SlackRecorder

    slack = await SlackRecorder(zones={"U0ALICE": "Asia/Tokyo"}).start()
    try:
        settings = lab_settings(tmp_path, f"sqlite:///{tmp_path / 'opsbot.db'}", slack_bot_token="xoxb-test",
                                slack_signing_secret=SIGNING_SECRET, slack_api_url=slack.url)
        flow = flow_for(settings, replay("decode-hang-health-200"))
        incident_id, _ = seed(flow.store)
        async with served(settings, flow) as client:
            body = slash_body("what happened in the last 3h", user="U0ALICE")
            assert (await client.post("/slack/events", content=body, headers=signed(body))).status_code == 200
            (post,) = await slack.wait_for("chat.postMessage")
            text = json.dumps(post.args["blocks"])
            assert "understood: what happened, in the last 3 h" in text and incident_id in text and "JST" in text
            event = {"token": "legacy", "team_id": "T0LAB", "api_app_id": "A0OPSBOT", "type": "event_callback",
                     "event_id": "Ev1", "event_time": int(_time.time()),
                     "event": {"type": "app_mention", "user": "U0BOB", "text": "<@U0BOT> why did decode restart?",
                               "ts": "1700000000.000009", "thread_ts": "1700000000.000001", "channel": "C0ALERTS",
                               "event_ts": "1700000000.000009"}}
            raw = json.dumps(event)
            headers = {**signed(raw), "Content-Type": "application/json"}
            assert (await client.post("/slack/events", content=raw, headers=headers)).status_code == 200
            replies = await slack.wait_for("chat.postMessage", 2)
            reply = replies[-1].args
            assert reply["thread_ts"] == "1700000000.000001" and reply["channel"] == "C0ALERTS"
            assert "why a role restarted" in json.dumps(reply["blocks"]) and "slack:U0BOB" in json.dumps(reply["blocks"])
            assert "UTC" in json.dumps(reply["blocks"])  # U0BOB's profile has no zone: OPSBOT_REPORT_TIMEZONE
    finally:
        await slack.stop()
