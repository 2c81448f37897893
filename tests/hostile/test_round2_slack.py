"""Issue 23, Slack: long operator text (item 1), an unknown role echoed in a notification (item 9),
signed but malformed interactive payloads (item 11), against the served app (uvicorn, real database).

Item 1's attack was ``<@bot> `` + 40,000 ``.`` + ``x``: ``_norm``'s backtracking ``re.sub`` stalled
``/healthz`` 16 s. Now the text is refused before any pattern reads it, and every pattern is RE2.
"""

from __future__ import annotations

import json
import time
from urllib.parse import urlencode

import httpx

from tests.servicekit import signed, slash_body

HUGE = "." * 40_000 + "x"


async def _post(client: httpx.AsyncClient, body: str, content_type: str | None = None) -> httpx.Response:
    headers = signed(body)
    if content_type:
        headers["Content-Type"] = content_type
    return await client.post("/slack/events", content=body, headers=headers)


def _mention(text: str, ts: str) -> str:
    return json.dumps({"token": "legacy-unused", "team_id": "T0LAB", "api_app_id": "A0OPSBOT", "type": "event_callback",
                       "event_id": f"Ev{ts.replace('.', '')}", "event_time": int(time.time()),
                       "event": {"type": "app_mention", "user": "U0ALICE", "text": text, "ts": ts, "channel": "C0OPS",
                                 "event_ts": ts}})


async def test_long_slash_command_is_answered_too_long_at_once(service):
    url, _tokens, _flow, slack = service
    async with httpx.AsyncClient(base_url=url, timeout=20) as client:
        t0 = time.monotonic()
        r = await _post(client, slash_body(HUGE))
        took = time.monotonic() - t0
        assert r.status_code == 200 and "too long" in r.text, r.text
        assert took < 1.5, f"the slash command took {took:.1f} s to answer (Slack allows 3 s)"
        assert (await client.get("/healthz")).status_code == 200
    assert slack.of("chat.postMessage") == []


async def test_long_mention_is_answered_too_long_and_healthz_stays_fast(service):
    url, _tokens, _flow, slack = service
    async with httpx.AsyncClient(base_url=url, timeout=20) as client:
        r = await _post(client, _mention("<@U0OPSBOT> " + HUGE, "1700000000.000100"), "application/json")
        assert r.status_code == 200
        t0 = time.monotonic()
        for _ in range(5):
            assert (await client.get("/healthz")).status_code == 200
        assert time.monotonic() - t0 < 1.0
        (post,) = await slack.wait_for("chat.postMessage")
    assert "too long" in post.args["text"] and post.args["thread_ts"] == "1700000000.000100"


async def test_unknown_role_in_a_mention_is_escaped_in_the_notification_text(service):
    url, _tokens, _flow, slack = service
    async with httpx.AsyncClient(base_url=url, timeout=20) as client:
        r = await _post(client, _mention("<@U0OPSBOT> probe <!channel>", "1700000000.000200"), "application/json")
        assert r.status_code == 200
        (post,) = await slack.wait_for("chat.postMessage")
    sent = json.dumps(post.args)
    assert "<!channel>" not in sent and "&lt;!channel&gt;" in post.args["text"]


async def test_malformed_interactive_payloads_are_400_not_500(service):
    url, _tokens, _flow, _slack = service
    payloads = [
        {"type": "view_submission", "user": {"id": "U0ALICE"}, "view": {"id": "V1"}},
        {"type": "view_submission", "user": {"id": "U0ALICE"}},
        {"type": "block_actions", "user": {"id": "U0ALICE"}, "actions": []},
        {"type": "block_actions", "user": {"id": "U0ALICE"}, "actions": ["x"]},
        {"type": "block_actions", "user": {"id": "U0ALICE"}, "actions": {"action_id": "restart_approve"}},
        {"type": "block_actions", "actions": [{"action_id": "restart_approve", "value": "1"}]},
        {"type": 7},
    ]
    async with httpx.AsyncClient(base_url=url, timeout=20) as client:
        for payload in payloads:
            r = await _post(client, urlencode({"payload": json.dumps(payload)}))
            assert r.status_code == 400, (payload, r.status_code, r.text)
            assert "payload" in r.json()["detail"]
        assert (await client.get("/healthz")).status_code == 200
