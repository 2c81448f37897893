"""Hostile requests against every surface of a running service, each with the status it must get.

The service runs under real uvicorn on loopback, over a real SQLite file and a real PostgreSQL
database; requests are what an outsider or a workspace member sent when it was attacked (issue 13):
forged and replayed Slack requests, odd bytes before any signature, bad tokens and scopes, names
with a trailing newline, text no database keeps, stalled and oversized bodies. None may get a 500;
what is accepted must be stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.hostile.conftest import ALERT_TOKEN, drained
from tests.hostile.uvicornkit import raw_request
from tests.servicekit import SIGNING_SECRET, signed, slash_body


@dataclass
class Case:
    """One hostile request: who sends it (``auth``: a token name, ``alert``, ``slack`` or None), and
    the status it must get."""

    surface: str
    name: str
    method: str
    path: str
    status: int
    auth: str | None = None
    body: bytes | str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    detail: str | None = None  # a phrase the answer must contain


def webhook(**alert: Any) -> str:
    """An Alertmanager v4 notification with one alert; ``alert`` overrides its fields."""
    one = {"status": "firing", "labels": {"alertname": "DecodeStuck", "role": "decode"}, "annotations": {},
           "startsAt": "2026-12-01T09:00:00Z", "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "",
           "fingerprint": "f00d"}
    group_key = alert.pop("groupKey", '{}:{alertname="DecodeStuck"}')
    one.update(alert)
    return json.dumps({"version": "4", "groupKey": group_key, "truncatedAlerts": 0, "status": "firing",
                       "receiver": "opsbot", "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
                       "externalURL": "http://am", "alerts": [one]})


SURROGATE = webhook(labels={"alertname": "SURROGATE_HERE", "role": "decode"}, fingerprint="s1").replace(
    "SURROGATE_HERE", "bad\\ud800name")

CASES = [
    # -- REST --------------------------------------------------------------------------------
    Case("rest", "no token", "POST", "/probe", 401, body="{}", detail="no bearer token"),
    Case("rest", "unknown token", "POST", "/probe", 401, auth="forged", body="{}", detail="unknown token"),
    Case("rest", "revoked token", "GET", "/reports", 401, auth="revoked", detail="revoked"),
    Case("rest", "expired token", "GET", "/reports", 401, auth="expired", detail="expired"),
    Case("rest", "read token probes", "POST", "/probe", 403, auth="read", body="{}", detail="'probe' scope"),
    Case("rest", "probe token plans a restart", "POST", "/actions/restart", 403, auth="probe",
         body='{"role": "decode"}'),
    Case("rest", "act token includes probe", "POST", "/probe", 200, auth="act", body='{"roles": ["decode"]}'),
    Case("rest", "role with a trailing newline", "POST", "/probe", 422, auth="act", body='{"roles": ["decode\\n"]}',
         detail="roles.0"),
    Case("rest", "shell in a role name", "POST", "/probe", 422, auth="act", body='{"roles": ["decode; rm -rf /"]}'),
    Case("rest", "unknown role", "POST", "/probe", 404, auth="act", body='{"roles": ["decoder"]}',
         detail="unknown role"),
    Case("rest", "unknown cluster", "POST", "/actions/restart", 404, auth="act",
         body='{"role": "decode", "cluster": "prod"}', detail="no cluster"),
    Case("rest", "body is not JSON", "POST", "/probe", 400, auth="act", body="{", detail="not valid JSON"),
    Case("rest", "boolean for a number", "POST", "/probe", 422, auth="act", body='{"wait_s": false}'),
    Case("rest", "unknown field", "POST", "/actions/restart", 422, auth="act", body='{"role": "decode", "x": 1}'),
    Case("rest", "declared body too large", "POST", "/probe", 413, auth="act", body="{}",
         headers={"Content-Length": "99999999"}),
    Case("rest", "approve an action that does not exist", "POST", "/actions/nope/approve", 404, auth="act",
         detail="no action"),
    Case("rest", "dismiss an action that does not exist", "POST", "/actions/nope/dismiss", 404, auth="act"),
    Case("rest", "report id past 64 bits", "GET", "/reports/99999999999999999999", 404, auth="read"),
    Case("rest", "report id past 32 bits (PostgreSQL INTEGER)", "GET", "/reports/1152921504606846975", 404, auth="read"),
    Case("rest", "limit is not a number", "GET", "/reports?limit=x", 422, auth="read"),
    Case("rest", "NUL in a report kind (PostgreSQL refuses NUL in text)", "GET", "/reports?kind=%C3%80%00", 422,
         auth="read", detail="kind"),
    Case("rest", "NUL in an incidents window", "GET", "/incidents?since=2026%00", 422, auth="read"),
    Case("rest", "unknown job", "GET", "/probe/..%2f..%2fetc%2fpasswd", 404, auth="read"),
    # -- Alertmanager ----------------------------------------------------------------------------
    Case("alerts", "no credentials", "POST", "/alerts", 401, body=webhook()),
    Case("alerts", "wrong shared token", "POST", "/alerts", 401, body=webhook(),
         headers={"X-Opsbot-Alert-Token": "guess"}),
    Case("alerts", "read token", "POST", "/alerts", 403, auth="read", body=webhook()),
    Case("alerts", "payload version 3", "POST", "/alerts", 422, auth="alert",
         body=webhook().replace('"version": "4"', '"version": "3"'), detail="version"),
    Case("alerts", "not JSON", "POST", "/alerts", 400, auth="alert", body="alerts=1"),
    Case("alerts", "a number for a time", "POST", "/alerts", 422, auth="alert",
         body=webhook(startsAt=0), detail="startsAt"),
    Case("alerts", "role label with a newline", "POST", "/alerts", 422, auth="alert",
         body=webhook(labels={"alertname": "X", "role": "decode\n"}), detail="role"),
    Case("alerts", "lone surrogate in a label", "POST", "/alerts", 200, auth="alert", body=SURROGATE),
    Case("alerts", "NUL in a label", "POST", "/alerts", 200, auth="alert",
         body=webhook(labels={"alertname": "nul\u0000name", "role": "decode"}, fingerprint="n1")),
    Case("alerts", "NUL in the fingerprint", "POST", "/alerts", 200, auth="alert", body=webhook(fingerprint="n\u00002")),
    Case("alerts", "NUL in the groupKey", "POST", "/alerts", 200, auth="alert",
         body=webhook(fingerprint="n3", groupKey="{}:\u0000")),
    Case("alerts", "64 NULs as a fingerprint", "POST", "/alerts", 200, auth="alert", body=webhook(fingerprint="\u0000" * 64)),
    # -- Slack: the signature is checked first, on the raw bytes ---------------------------------
    Case("slack", "unsigned", "POST", "/slack/events", 401, body=slash_body("status"),
         headers={"Content-Type": "application/x-www-form-urlencoded"}),
    Case("slack", "timestamp is not a number", "POST", "/slack/events", 401, body=slash_body("status"),
         headers={"X-Slack-Request-Timestamp": "soon", "X-Slack-Signature": "v0=" + "0" * 64}, detail="Unix time"),
    Case("slack", "stale timestamp", "POST", "/slack/events", 401, auth="slack-stale", body=slash_body("status")),
    Case("slack", "wrong secret", "POST", "/slack/events", 401, auth="slack-forged", body=slash_body("status")),
    Case("slack", "unsigned bytes that are not UTF-8", "POST", "/slack/events", 401, body=b"\xff\xfe\x00payload"),
    Case("slack", "signed bytes that are not UTF-8", "POST", "/slack/events", 400, auth="slack",
         body=b"payload=\xff\xfe", detail="not UTF-8"),
    Case("slack", "signed payload that is not JSON", "POST", "/slack/events", 400, auth="slack",
         body="payload=%7Bnot-json", detail="not JSON"),
    Case("slack", "signed JSON body '{'", "POST", "/slack/events", 400, auth="slack", body="{",
         headers={"Content-Type": "application/json"}),
    Case("slack", "signed JSON body [1]", "POST", "/slack/events", 400, auth="slack", body="[1]",
         headers={"Content-Type": "application/json"}, detail="not a JSON object"),
    Case("slack", "signed slash command", "POST", "/slack/events", 200, auth="slack", body=slash_body("help")),
    # -- the status page -------------------------------------------------------------------------
    Case("page", "status page", "GET", "/", 200),
    Case("page", "markup in the query", "GET", "/?q=%3Cscript%3Ealert(1)%3C/script%3E", 200),
    Case("page", "POST to the page", "POST", "/", 405),
    Case("page", "status report without a token", "GET", "/status", 401, headers={"Accept": "text/html"}),
    Case("page", "path traversal", "GET", "/..%2f..%2fetc%2fpasswd", 404),
]


def _headers(case: Case, tokens: dict[str, str], body: bytes) -> dict[str, str]:
    headers = dict(case.headers)
    if case.auth in tokens:
        headers["Authorization"] = f"Bearer {tokens[case.auth]}"
    elif case.auth == "alert":
        headers["X-Opsbot-Alert-Token"] = ALERT_TOKEN
    elif case.auth is not None and case.auth.startswith("slack"):
        at = int(time.time()) - (6 * 60 if case.auth == "slack-stale" else 0)
        secret = "not-the-secret" if case.auth == "slack-forged" else SIGNING_SECRET
        headers = {"Content-Type": "application/x-www-form-urlencoded", **_signed_bytes(body, secret, at), **headers}
    if case.body is not None and "Content-Type" not in headers:
        headers["Content-Type"] = "application/json"
    return headers


def _signed_bytes(body: bytes, secret: str, at: int) -> dict[str, str]:
    """Slack's signature over the bytes as they are sent (v0=HMAC-SHA256(secret, 'v0:ts:body'))."""
    digest = hmac.new(secret.encode(), b"v0:" + str(at).encode() + b":" + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(at), "X-Slack-Signature": f"v0={digest}"}


async def test_hostile_requests_get_the_status_they_must(service):
    url, tokens, flow, _slack = service
    wrong: list[str] = []
    async with httpx.AsyncClient(base_url=url, timeout=20) as client:
        for case in CASES:
            body = case.body.encode() if isinstance(case.body, str) else (case.body or b"")
            headers = _headers(case, tokens, body)
            if "Content-Length" in case.headers:  # a lie about the length: only a raw socket sends it
                status, _ = raw_request(url, _raw(case, headers, body))
                text = ""
            else:
                r = await client.request(case.method, case.path, content=body or None, headers=headers)
                status, text = r.status_code, r.text
            if status != case.status or (case.detail and case.detail not in text):
                wrong.append(f"{case.surface}: {case.name}: got {status} {text[:160]!r}, want {case.status}"
                             + (f" saying {case.detail!r}" if case.detail else ""))
    assert wrong == [], "\n".join(wrong)
    # what was accepted was kept, escaped, and is shown escaped
    await drained(flow)
    names = {a.alertname for a in flow.store.alerts()}
    assert {"bad\\ud800name", "nul\\x00name"} <= names
    fingerprints = {a.fingerprint for a in flow.store.alerts()}
    assert "n\\x002" in fingerprints and all(len(f) <= 64 for f in fingerprints)
    assert all(a.probe_id for a in flow.store.alerts()), "an accepted alert was not probed"


def _raw(case: Case, headers: dict[str, str], body: bytes) -> bytes:
    lines = [f"{case.method} {case.path} HTTP/1.1", "Host: opsbot.test", "Connection: close",
             *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def test_a_stalled_body_is_cut_off_and_the_service_goes_on(service):
    """Issue 13 item 11: a client that declares a length and stalls gets 408 after the read timeout."""
    url, tokens, _runtime, _slack = service
    started = time.monotonic()
    head = (f"POST /probe HTTP/1.1\r\nHost: opsbot.test\r\nAuthorization: Bearer {tokens['act']}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"roles\"").encode()
    status, answer = await asyncio.to_thread(raw_request, url, head, wait_s=8.0)
    assert status == 408 and b"not received within 1 s" in answer
    assert time.monotonic() - started < 6
    async with httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/healthz")).status_code == 200


async def test_a_replayed_slack_request_is_refused(service):
    """Issue 13 item 10: the same signed slash command twice within Slack's window runs once."""
    url, _tokens, flow, slack = service
    body = slash_body("restart decode")
    headers = signed(body)
    async with httpx.AsyncClient(base_url=url, timeout=20) as client:
        first = await client.post("/slack/events", content=body, headers=headers)
        second = await client.post("/slack/events", content=body, headers=headers)
    assert first.status_code == 200
    assert second.status_code == 401 and "replay" in second.json()["detail"]
    await slack.wait_for("chat.postMessage")
    await asyncio.sleep(0.3)
    assert len(flow.store.actions()) == 1 and len(slack.of("chat.postMessage")) == 1


async def test_status_page_shows_outside_text_escaped(service):
    """An alert naming markup, whose probe fails for good, appears on the status page as text."""
    url, tokens, flow, _slack = service
    hook = webhook(labels={"alertname": "<script>alert(1)</script>", "role": "nosuchrole"}, fingerprint="x1")
    async with httpx.AsyncClient(base_url=url, timeout=20) as client:
        r = await client.post("/alerts", content=hook, headers={"X-Opsbot-Alert-Token": ALERT_TOKEN,
                                                                "Content-Type": "application/json"})
        assert r.status_code == 200
        await drained(flow)
        page = (await client.get("/")).text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
