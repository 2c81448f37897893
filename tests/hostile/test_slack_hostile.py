"""Slack as a workspace member would attack it, against the served app (uvicorn, real database).

Item 1: a member who is not an approver cannot dismiss (cancel) a planned restart, and a dismissal
of an action that does not exist says so instead of "dismissed by". Item 6: alert labels and
operator text never reach the channel as Slack markup (no @channel ping, no disguised link).
"""

from __future__ import annotations

import json

import httpx

from tests.hostile.conftest import ALERT_TOKEN, drained
from tests.hostile.test_surfaces import webhook
from tests.servicekit import block_actions_body, signed, slash_body

INJECTION = "<!channel> <https://evil.example|click me>"


async def _post(client: httpx.AsyncClient, body: str) -> httpx.Response:
    return await client.post("/slack/events", content=body, headers=signed(body))


def _buttons(blocks: list[dict]) -> dict[str, dict]:
    return {e["action_id"]: e for b in blocks if b["type"] == "actions" for e in b["elements"]}


async def test_dismiss_needs_an_approver_and_an_action(service):
    url, _tokens, flow, slack = service
    async with httpx.AsyncClient(base_url=url, timeout=20) as client:
        assert (await _post(client, slash_body("restart decode"))).status_code == 200
        (post,) = await slack.wait_for("chat.postMessage")
        plan_id = _buttons(post.args["blocks"])["restart_dismiss"]["value"]
        message = {"ts": "1.1", "blocks": post.args["blocks"]}

        outsider = block_actions_body("restart_dismiss", plan_id, user="U0MALLORY", message=message)
        assert (await _post(client, outsider)).status_code == 200
        (refusal,) = await slack.wait_for("chat.postEphemeral")
        assert refusal.args["user"] == "U0MALLORY" and "not allowed to dismiss" in refusal.args["text"]
        assert flow.store.action(plan_id).state == "planned"
        assert slack.of("chat.update") == []

        ghost = block_actions_body("restart_dismiss", "no-such-plan", user="U0ALICE", message=message)
        assert (await _post(client, ghost)).status_code == 200
        notes = await slack.wait_for("chat.postEphemeral", 2)
        assert "no restart plan" in notes[-1].args["text"] and "nothing dismissed" in notes[-1].args["text"]
        assert slack.of("chat.update") == []

        approver = block_actions_body("restart_dismiss", plan_id, user="U0ALICE", message=message)
        assert (await _post(client, approver)).status_code == 200
        (update,) = await slack.wait_for("chat.update")
        assert "dismissed by <@U0ALICE>" in update.args["blocks"][-1]["text"]["text"]
    assert flow.store.action(plan_id).state == "refused"
    refused = [e for e in flow.store.audit_log() if e.what == "dismissal refused: not allowed"]
    assert [e.actor for e in refused] == ["slack:U0MALLORY"]


async def test_alert_labels_and_operator_text_are_escaped_in_slack(service):
    url, _tokens, flow, slack = service
    hook = webhook(labels={"alertname": INJECTION, "role": "decode"},
                   annotations={"summary": INJECTION}, fingerprint="inj1")
    async with httpx.AsyncClient(base_url=url, timeout=20) as client:
        r = await client.post("/alerts", content=hook,
                              headers={"X-Opsbot-Alert-Token": ALERT_TOKEN, "Content-Type": "application/json"})
        assert r.status_code == 200
        await drained(flow)
        # the incident's message (and its thread): every post names the alert, escaped
        posts = await slack.wait_for("chat.postMessage", where=lambda c: c.args.get("channel") == "C0ALERTS")
        command = await _post(client, slash_body(f"probe {INJECTION}"))
    posted = json.dumps([p.args for p in slack.of("chat.postMessage") + slack.of("chat.update")])
    sent = posted + command.text
    assert posts and "<!channel>" not in sent and "<https://evil.example" not in sent
    assert "&lt;!channel&gt; &lt;https://evil.example|click me&gt;" in posted
    assert "&lt;!channel&gt;" in command.text
