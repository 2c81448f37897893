"""One Slack message per incident, on the real bolt app and Slack client against the recording server:
opened by the first alert's probe, edited as alerts coalesce and the restart moves, closed by resolved
alerts with the time to recovery; Slack answering 500 or late: retried, never posted twice.

Probes replay recorded bundles (the lab end-to-end tests are tests/test_gameday_lab.py).
"""

from __future__ import annotations

import asyncio

import pytest

from tests.servicekit import block_actions_body, lab_settings, replay, flow_for, served, signed
from tests.slackrecorder import SlackRecorder
from tests.test_service_alerts import HDR, alert, webhook

pytestmark = pytest.mark.usefixtures("loop_watchdog")  # a handler holding the loop over 100 ms fails the test


@pytest.fixture
async def slack():
    recorder = await SlackRecorder().start()
    yield recorder
    await recorder.stop()


@pytest.fixture
def settings(tmp_path, slack):
    return lab_settings(tmp_path, f"sqlite:///{tmp_path / 'opsbot.db'}", slack_bot_token="xoxb-test",
                        slack_signing_secret="8f742231b10e8888abcd99yyyzzz85a5", slack_api_url=slack.url,
                        slack_alert_channel="C0ALERTS", slack_approvers=["U0ALICE"],
                        alert_token=HDR["X-Opsbot-Alert-Token"], public_url="https://opsbot.example")


def text_of(blocks: list[dict]) -> str:
    out = []
    for b in blocks:
        if b["type"] == "section":
            out.append(b["text"]["text"])
        elif b["type"] == "context":
            out += [e["text"] for e in b["elements"]]
    return "\n".join(out)


def buttons(blocks: list[dict]) -> dict[str, dict]:
    return {e["action_id"]: e for b in blocks if b["type"] == "actions" for e in b["elements"]}


async def settle(client) -> None:
    await client.app.state.intake.drain()
    await client.app.state.slack.incidents.drain()


async def test_one_message_lives_with_the_incident(settings, slack):
    flow = flow_for(settings, replay("decode-hang-health-200"))
    async with served(settings, flow) as client:
        await client.post("/alerts", json=webhook(alert("fa")), headers=HDR)
        await settle(client)
        (message,) = slack.posted("C0ALERTS")
        (incident,) = flow.store.incidents()
        assert incident.incident == "decode-wedged" and message["metadata"]["event_payload"]["incident"] == incident.id
        body = text_of(message["blocks"])
        assert "decode-wedged" in body and "confidence" in body and "Approval asked" in body
        assert f"https://opsbot.example/probes/{incident.probes[0]}" in body
        restart = buttons(message["blocks"])["restart_approve"]
        assert restart["text"]["text"] == "Restart decode" and restart["value"] in incident.actions

        # a second alert on the same scope joins the incident: the message is edited, not posted again
        later = alert("fb", start="2026-11-30T10:01:00Z")
        later["labels"]["alertname"] = "SGLangDecodeNoProgress"
        await client.post("/alerts", json=webhook(later), headers=HDR)
        await settle(client)
        assert len(slack.posted("C0ALERTS")) == 1
        update = slack.of("chat.update")[-1].args
        assert update["ts"] == message["ts"] and "2 alert(s)" in text_of(update["blocks"])
        assert len(flow.store.incident(incident.id).actions) == 1, "one restart plan for the incident"

        # the approver's click: the restart runs (here on local transports: it fails), the message follows
        body = block_actions_body("restart_approve", restart["value"], user="U0ALICE",
                                  message={"ts": message["ts"], "blocks": message["blocks"]}, channel="C0ALERTS")
        assert (await client.post("/slack/events", content=body, headers=signed(body))).status_code == 200
        for _ in range(200):
            if flow.store.action(restart["value"]).state not in ("planned", "approved", "executing"):
                break
            await asyncio.sleep(0.05)
        await settle(client)
        action = flow.store.action(restart["value"])
        assert action.approved_by == "slack:U0ALICE"
        after = text_of(slack.of("chat.update")[-1].args["blocks"])
        assert "Restart" in after and "restart_approve" not in str(slack.of("chat.update")[-1].args["blocks"])

        # both alerts resolve: the incident closes, the message says so with the time to recovery
        await client.post("/alerts", json=webhook(alert("fa", status="resolved"), later | {"status": "resolved"},
                                                   status="resolved"), headers=HDR)
        await settle(client)
        closed = flow.store.incident(incident.id)
        assert closed.state == "resolved" and closed.time_to_recovery_s is not None
        final = text_of(slack.of("chat.update")[-1].args["blocks"])
        assert "Resolved" in final and "time to recovery" in final
        assert len(slack.posted("C0ALERTS")) == 1, "one message for the whole incident"
        replies = [m for m in slack.messages if m.get("thread_ts") == message["ts"]]
        assert len(replies) == len(closed.timeline) and "resolved" in replies[-1]["text"]

        # it fires again a moment later (a flap): the same incident reopens, in the same message
        await client.post("/alerts", json=webhook(alert("fc", start="2026-11-30T10:05:00Z")), headers=HDR)
        await settle(client)
        reopened = flow.store.incident(incident.id)
        assert reopened.state == "open" and [r.id for r in flow.store.incidents()] == [incident.id]
        assert len(slack.posted("C0ALERTS")) == 1
        assert "reopened 1x" in text_of(slack.of("chat.update")[-1].args["blocks"])


async def test_no_restart_button_where_a_restart_does_not_help(settings, slack):
    flow = flow_for(settings, replay("prefill-saturation-unbootstrapped"))
    async with served(settings, flow) as client:
        await client.post("/alerts", json=webhook(alert("fa", role="prefill")), headers=HDR)
        await settle(client)
        (message,) = slack.posted("C0ALERTS")
        assert "prefill-queue-saturation" in text_of(message["blocks"]) and buttons(message["blocks"]) == {}
        assert "a restart does not help" in text_of(message["blocks"])
        assert flow.store.incidents()[0].actions == []


@pytest.mark.parametrize("how", ["500", "timeout"])
async def test_slack_down_retried_and_never_posted_twice(settings, slack, how):
    slack.fail("chat.postMessage", how, how)
    slack.slow_s = 1.0
    flow = flow_for(settings, replay("decode-hang-health-200"))
    async with served(settings, flow) as client:
        client.app.state.slack.notifier.first_delay_s = 0.05
        client.app.state.slack.notifier.timeout_s = 0.5
        await client.post("/alerts", json=webhook(alert("fa")), headers=HDR)
        await client.app.state.intake.drain()
        (incident,) = flow.store.incidents()  # recorded and probed whatever Slack does
        assert incident.probes
        await settle(client)
        assert len(slack.posted("C0ALERTS")) == 1
        row = flow.store.incident(incident.id)
        assert row.slack_state == "posted" and row.slack_ts == slack.posted("C0ALERTS")[0]["ts"]
        attempts = [c for c in slack.of("chat.postMessage") if not c.args.get("thread_ts")]
        if how == "500":
            assert [c.status for c in slack.calls if c.method == "chat.postMessage"][:2] == [500, 500]
        else:
            assert len(attempts) == 1 and slack.of("conversations.history"), "the late post was found, not repeated"


async def test_slack_down_for_good_is_shown_on_the_status_page(settings, slack):
    slack.fail("chat.postMessage", *["500"] * 50)
    flow = flow_for(settings, replay("decode-hang-health-200"))
    async with served(settings, flow) as client:
        client.app.state.slack.notifier.first_delay_s = 0.01
        client.app.state.slack.notifier.retry_for_s = 0.05  # given up on within 50 ms
        client.app.state.slack.incidents.resync_delays_s = []
        await client.post("/alerts", json=webhook(alert("fa")), headers=HDR)
        await settle(client)
        (incident,) = flow.store.incidents()
        assert incident.slack_state == "failed" and "internal_error" in incident.slack_error
        page = (await client.get("/")).text
        table = page[page.index('id="integrations"'):]
        assert "Slack" in table and "FAILING" in table and incident.id in table
        assert slack.posted() == []
