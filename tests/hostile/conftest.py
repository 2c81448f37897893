"""The hostile tests' service: opsbot under real uvicorn over a real database (SQLite file, then
PostgreSQL), with Slack pointed at a local recorder, and tokens of every kind."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest

from tests.hostile.uvicornkit import uvicorn_served
from tests.servicekit import SIGNING_SECRET, lab_settings, replay, flow_for
from tests.slackrecorder import SlackRecorder

ALERT_TOKEN = "am-shared-secret"


async def drained(flow: Any, timeout: float = 20.0) -> None:
    """Until every stored alert has a probe (or was given up on), or ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(a.probe_id or a.probe_failed_at for a in flow.store.alerts()):
            return
        await asyncio.sleep(0.1)


@pytest.fixture
async def service(tmp_path, database_url):
    """(base URL, tokens by name, flow, Slack recorder) of a served opsbot."""
    slack = await SlackRecorder().start()
    settings = lab_settings(
        tmp_path, database_url, alert_token=ALERT_TOKEN, probe_wait_s=5.0, body_read_timeout_s=1.0,
        slack_bot_token="xoxb-test", slack_signing_secret=SIGNING_SECRET, slack_api_url=slack.url,
        slack_approvers=["U0ALICE"], slack_alert_channel="C0ALERTS",
    )
    flow = flow_for(settings, replay("decode-hang-health-200"))
    store = flow.store
    tokens = {"read": store.create_token("reader", ["read"]), "probe": store.create_token("prober", ["probe"]),
              "act": store.create_token("operator", ["act"]), "revoked": store.create_token("old", ["act"]),
              "expired": store.create_token("temp", ["act"], timedelta(seconds=1)), "forged": "opsbot_forged"}
    store.revoke_token("old")
    try:
        with uvicorn_served(settings, flow) as url:
            await asyncio.sleep(1.0)  # the 1-second token has expired by now
            yield url, tokens, flow, slack
    finally:
        await slack.stop()
        flow.store.close()
