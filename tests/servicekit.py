"""Building blocks for the service tests: a lab-shaped inventory, signed Slack requests, an app in a loop."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
from slack_sdk.signature import SignatureVerifier

from opsbot.bundle import Bundle, Trigger, read_bundle, utcnow
from opsbot.flow import Flow
from opsbot.inventory import Inventory
from opsbot.service.app import create_app
from opsbot.settings import Settings
from opsbot.store import Store
from tests.loopwatch import watching_if_armed

SCENARIOS = Path(__file__).parent / "scenarios"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"

# The lab's shape (node1: prefill + router, node2: decode) on local transports, for tests that
# replay a recorded bundle instead of probing; restarts planned against it never run.
INVENTORY = """\
clusters:
  lab:
    nodes:
      - {name: node1, address: localhost, transport: local}
      - {name: node2, address: localhost, transport: local}
    roles:
      - {role: prefill, node: node1, unit: sglang-dsv4-prefill.service, gpus: [0, 1]}
      - {role: decode, node: node2, unit: sglang-dsv4-decode.service, gpus: [0, 1]}
      - {role: router, node: node1, unit: sglang-router.service}
"""


def lab_settings(tmp_path: Path, database_url: str, **over: Any) -> Settings:
    inv = tmp_path / "inventory.yaml"
    if not inv.exists():
        inv.write_text(INVENTORY)
    over = {"report_schedule": False, **over}  # the weekly job has its own test (test_report_schedule)
    return Settings(data_dir=tmp_path, inventory=inv, database_url=database_url, coalesce_window_s=0.2, **over)


def replay(scenario: str):
    """A probe function answering a corpus bundle (fresh id and times) for the requested scope."""
    (path,) = SCENARIOS.glob(f"*/{scenario}.json")  # dev/ or test/
    recorded = read_bundle(path)
    calls: list[dict[str, Any]] = []

    async def probe(inventory: Inventory, *, cluster: str | None = None, roles: list[str] | None = None,
                    trigger: Trigger | None = None, **_: Any) -> Bundle:
        name, c = inventory.cluster(cluster)
        c.select(roles)  # unknown roles raise, as the real probe does
        calls.append({"cluster": name, "roles": roles, "trigger": trigger})
        now = utcnow()
        return recorded.model_copy(update={"id": uuid.uuid4().hex[:16], "cluster": name, "started_at": now,
                                           "finished_at": now, "trigger": trigger or Trigger()})

    probe.calls = calls  # type: ignore[attr-defined]
    return probe


def flow_for(settings: Settings, probe: Any) -> Flow:
    return Flow(settings=settings, store=Store(settings.db_url()), probe=probe)


@asynccontextmanager
async def served(settings: Settings, flow: Flow) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan running (intake worker, Slack), driven in this event loop."""
    app = create_app(settings, flow=flow)
    async with app.router.lifespan_context(app), watching_if_armed():  # the loop watchdog, when the test arms it
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://opsbot.test") as client:
            client.app = app  # type: ignore[attr-defined]
            yield client


def signed(body: str, *, secret: str = SIGNING_SECRET, timestamp: int | None = None) -> dict[str, str]:
    """Headers Slack sends: X-Slack-Signature = v0=HMAC-SHA256(secret, 'v0:ts:body')."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    sig = SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sig,
            "Content-Type": "application/x-www-form-urlencoded"}


def slash_body(text: str, *, user: str = "U0ALICE", response_url: str = "https://hooks.slack.com/commands/x",
               command: str = "/opsbot") -> str:
    """A slash command form body with the fields Slack documents (a fresh ``trigger_id`` each time)."""
    return urlencode({
        "token": "legacy-unused", "team_id": "T0LAB", "team_domain": "lab", "channel_id": "C0OPS",
        "channel_name": "gpu-ops", "user_id": user, "user_name": user.lower(), "command": command, "text": text,
        "api_app_id": "A0OPSBOT", "is_enterprise_install": "false", "response_url": response_url,
        "trigger_id": f"13345224609.738474920.{uuid.uuid4().hex}",  # Slack's is unique per request
    })


def block_actions_body(action_id: str, value: str, *, user: str, message: dict[str, Any], channel: str = "C0OPS",
                       response_url: str = "https://hooks.slack.com/actions/x", label: str = "Restart decode") -> str:
    """A ``block_actions`` interaction payload (form field ``payload``) as Slack documents it."""
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": "T0LAB"},
        "api_app_id": "A0OPSBOT", "token": "legacy-unused",
        "container": {"type": "message", "message_ts": message["ts"], "channel_id": channel, "is_ephemeral": False},
        "trigger_id": "1234.5678.abcd", "team": {"id": "T0LAB", "domain": "lab"},
        "channel": {"id": channel, "name": "gpu-ops"},
        "message": {"type": "message", "ts": message["ts"], "text": message.get("text", ""), "blocks": message["blocks"]},
        "response_url": response_url,
        "actions": [{"action_id": action_id, "block_id": "plan", "value": value, "type": "button",
                     "text": {"type": "plain_text", "text": label}, "action_ts": f"{time.time():.6f}"}],
        "state": {"values": {}},
    }
    return urlencode({"payload": json.dumps(payload)})
