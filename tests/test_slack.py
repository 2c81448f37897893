"""The real slack-bolt app on the service, driven by signed requests built from Slack's documented
payloads; its Web API calls go to a local recording server (tests/slackrecorder.py)."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import parse_qsl

import pytest

from tests.servicekit import block_actions_body, flow_for, lab_settings, replay, served, signed, slash_body
from tests.slackrecorder import SlackRecorder

pytestmark = pytest.mark.usefixtures("loop_watchdog")  # a handler holding the loop over 100 ms fails the test


@pytest.fixture
async def slack():
    recorder = await SlackRecorder(group_members={"S0ONCALL": ["U0BOB"]}).start()
    yield recorder
    await recorder.stop()


@pytest.fixture
def settings(tmp_path, slack):
    return lab_settings(
        tmp_path, f"sqlite:///{tmp_path / 'opsbot.db'}", slack_bot_token="xoxb-test", slack_signing_secret="8f742231b10e8888abcd99yyyzzz85a5",
        slack_api_url=slack.url, slack_approvers=["U0ALICE"], slack_approver_groups=["S0ONCALL"],
    )


async def command(client, text: str, **kw):
    body = slash_body(text, **kw)
    return await client.post("/slack/events", content=body, headers=signed(body))


async def click(client, action_id: str, value: str, *, user: str, message: dict):
    body = block_actions_body(action_id, value, user=user, message=message)
    return await client.post("/slack/events", content=body, headers=signed(body))


def buttons(blocks: list[dict]) -> dict[str, dict]:
    return {e["action_id"]: e for b in blocks if b["type"] == "actions" for e in b["elements"]}


async def test_decode_is_stuck_acks_first_then_posts_the_finding_with_buttons(settings, slack):
    gate = asyncio.Event()
    inner = replay("decode-hang-health-200")

    async def gated(inventory, **kw):
        await gate.wait()
        return await inner(inventory, **kw)

    flow = flow_for(settings, gated)
    async with served(settings, flow) as client:
        r = await command(client, "decode is stuck")
        # the HTTP answer (Slack's 3-second ack) came back while the probe is still blocked
        assert r.status_code == 200 and "working on `decode is stuck`" in r.text
        assert slack.of("chat.postMessage") == []
        gate.set()
        (post,) = await slack.wait_for("chat.postMessage")
        assert post.args["channel"] == "C0OPS"
        blocks = post.args["blocks"]
        text = "\n".join(b.get("text", {}).get("text", "") for b in blocks if b["type"] == "section")
        assert "decode-wedged" in text and "Evidence" in text
        approve, dismiss = buttons(blocks)["restart_approve"], buttons(blocks)["restart_dismiss"]
        assert approve["text"]["text"] == "Restart decode" and approve["confirm"] and dismiss["value"] == approve["value"]
        action = flow.store.action(approve["value"])
        assert action.state == "planned" and action.role == "decode" and action.requested_by == "slack:U0ALICE"
        assert inner.calls[0]["roles"] == ["decode", "prefill", "router"]  # the same scope as `opsbot ask`
        assert inner.calls[0]["trigger"].kind == "slack"


async def test_allowed_click_approves_and_updates_message_with_outcome(settings, slack):
    flow = flow_for(settings, replay("decode-hang-health-200"))
    async with served(settings, flow) as client:
        await command(client, "probe decode")
        (post,) = await slack.wait_for("chat.postMessage")
        plan_id = buttons(post.args["blocks"])["restart_approve"]["value"]
        message = {"ts": "1700000000.000001", "blocks": post.args["blocks"]}

        stranger = await click(client, "restart_approve", plan_id, user="U0MALLORY", message=message)
        assert stranger.status_code == 200
        (eph,) = await slack.wait_for("chat.postEphemeral")
        assert eph.args["user"] == "U0MALLORY" and "not allowed" in eph.args["text"]
        assert flow.store.action(plan_id).state == "planned" and slack.of("chat.update") == []

        ok = await click(client, "restart_approve", plan_id, user="U0BOB", message=message)  # via user group
        assert ok.status_code == 200
        updates = await slack.wait_for("chat.update", 2)
        assert "approved by <@U0BOB>" in updates[0].args["blocks"][-1]["text"]["text"]
        assert buttons(updates[0].args["blocks"]) == {}, "buttons are stripped at once (no double clicks)"
        final = updates[-1].args["blocks"][-1]["text"]["text"]
        action = flow.store.action(plan_id)
        assert action.approved_by == "slack:U0BOB" and action.approved_surface == "slack"
        assert action.state in ("succeeded", "failed", "refused") and f"*{action.state}*" in final
        assert any(e.what == "approval refused: not allowed" for e in flow.store.audit_log())


async def test_expired_approval_and_dismiss(tmp_path, slack):
    settings = lab_settings(
        tmp_path, f"sqlite:///{tmp_path / 'opsbot.db'}", slack_bot_token="xoxb-test", slack_signing_secret="8f742231b10e8888abcd99yyyzzz85a5",
        slack_api_url=slack.url, slack_approvers=["U0ALICE"], approval_ttl_s=0.2,
    )
    flow = flow_for(settings, replay("decode-hang-health-200"))
    async with served(settings, flow) as client:
        await command(client, "restart decode")
        (post,) = await slack.wait_for("chat.postMessage")
        assert "systemctl stop sglang-dsv4-decode.service" in post.args["blocks"][0]["text"]["text"]
        plan_id = buttons(post.args["blocks"])["restart_approve"]["value"]
        await asyncio.sleep(0.3)
        await click(client, "restart_approve", plan_id, user="U0ALICE", message={"ts": "1.1", "blocks": post.args["blocks"]})
        updates = await slack.wait_for("chat.update", 2)
        assert "expired" in updates[-1].args["blocks"][-1]["text"]["text"]
        assert flow.store.action(plan_id).state == "expired"

        await command(client, "restart decode")
        posts = await slack.wait_for("chat.postMessage", 2)
        second = buttons(posts[-1].args["blocks"])["restart_dismiss"]["value"]
        await click(client, "restart_dismiss", second, user="U0ALICE", message={"ts": "1.2", "blocks": posts[-1].args["blocks"]})
        done = await slack.wait_for("chat.update", 3)
        assert "dismissed by <@U0ALICE>" in done[-1].args["blocks"][-1]["text"]["text"]
        assert flow.store.action(second).state == "refused"


async def test_forged_and_replayed_requests_are_refused(settings, slack):
    probe = replay("decode-hang-health-200")
    flow = flow_for(settings, probe)
    async with served(settings, flow) as client:
        body = slash_body("restart decode")
        forged = await client.post("/slack/events", content=body, headers=signed(body, secret="not-the-secret"))
        assert forged.status_code == 401
        stale = await client.post("/slack/events", content=body, headers=signed(body, timestamp=int(time.time()) - 6 * 60))
        assert stale.status_code == 401
        tampered_headers = signed(body)
        tampered = await client.post("/slack/events", content=body.replace("restart", "status"), headers=tampered_headers)
        assert tampered.status_code == 401
        await asyncio.sleep(0.1)
        assert probe.calls == [] and flow.store.actions() == []
        assert [c.method for c in slack.calls if c.method != "auth.test"] == []


async def test_help_status_probe_scope_report_and_errors(settings, slack):
    probe = replay("decode-hang-health-200")
    flow = flow_for(settings, probe)
    async with served(settings, flow) as client:
        helped = await command(client, "help")
        assert "restart ROLE" in helped.text
        await command(client, "probe prefill")
        await slack.wait_for("chat.postMessage", 1)
        assert probe.calls[-1]["roles"] == ["prefill"]
        await command(client, "status")
        status = (await slack.wait_for("chat.postMessage", 2))[-1]
        assert "decode-wedged" in str(status.args["blocks"]) or "decode" in str(status.args["blocks"])
        await command(client, "report weekly")
        weekly = (await slack.wait_for("chat.postMessage", 3))[-1]
        assert weekly.args["blocks"] and "week" in str(weekly.args["blocks"]).lower()
        await command(client, "probe decoder", response_url=slack.response_url())
        (err,) = await slack.wait_for("response_url")
        assert "unknown role 'decoder'" in err.args["text"]


async def test_socket_mode_takes_commands_over_the_websocket(tmp_path, slack):
    settings = lab_settings(
        tmp_path, f"sqlite:///{tmp_path / 'opsbot.db'}", slack_bot_token="xoxb-test", slack_signing_secret="unused-in-socket-mode",
        slack_api_url=slack.url, slack_socket_mode=True, slack_app_token="xapp-test",
    )
    command_payload = dict(parse_qsl(slash_body("probe decode")))
    slack.envelopes.append({"envelope_id": "env-1", "type": "slash_commands", "accepts_response_payload": True,
                            "payload": {**command_payload, "command": "/opsbot"}})
    probe = replay("decode-hang-health-200")
    async with served(settings, flow_for(settings, probe)):
        (ack,) = await slack.wait_for("socket_ack")
        assert ack.args["envelope_id"] == "env-1"
        (post,) = await slack.wait_for("chat.postMessage")
        assert "decode-wedged" in str(post.args["blocks"]) and probe.calls[0]["roles"] == ["decode"]
    assert slack.of("apps.connections.open")


async def test_alert_threads_live_in_their_table_and_survive_a_restart(tmp_path, slack, database_url):
    """Alerts whose probe names no incident class get a thread per alert group (incidents get their own message)."""
    from tests.test_service_alerts import HDR, alert, webhook

    settings = lab_settings(tmp_path, database_url, slack_bot_token="xoxb-test", slack_api_url=slack.url,
                            slack_signing_secret="8f742231b10e8888abcd99yyyzzz85a5", slack_alert_channel="C0ALERTS",
                            alert_token=HDR["X-Opsbot-Alert-Token"])
    group = '{}:{alertname="DecodeStalled"}'
    flow = flow_for(settings, replay("near-idle-decode"))
    async with served(settings, flow) as client:
        assert (await client.post("/alerts", json=webhook(alert("t1"), group=group), headers=HDR)).status_code == 200
        await client.app.state.intake.drain()
        (parent,) = await slack.wait_for("chat.postMessage")
    thread = flow.store.slack_thread(group)
    assert (thread.channel, thread.state) == ("C0ALERTS", "firing") and parent.args["channel"] == "C0ALERTS"
    flow = flow_for(settings, replay("near-idle-decode"))  # a restarted opsbot finds the thread in the store
    async with served(settings, flow) as client:
        resolved = webhook(alert("t1", status="resolved"), group=group, status="resolved")
        assert (await client.post("/alerts", json=resolved, headers=HDR)).status_code == 200
        await client.app.state.intake.drain()
        _, reply = await slack.wait_for("chat.postMessage", count=2)
        (update,) = await slack.wait_for("chat.update")
    assert reply.args["thread_ts"] == thread.ts and update.args["ts"] == thread.ts
    assert flow.store.slack_thread(group).state == "resolved"
    assert not [e for e in flow.store.audit_log() if e.what == "slack alert thread"]
