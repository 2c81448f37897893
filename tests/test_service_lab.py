"""The service end to end with real parts on the lab: Prometheus' Alertmanager → opsbot (uvicorn) →
probe → finding stored → the incident's Slack message (the resolve closes it); and a Slack click that restarts the
wedged decode over SSH."""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import uvicorn

from opsbot.flow import Flow
from opsbot.service.app import create_app
from opsbot.store import Store
from tests.databases import free_port
from tests.realparts import need_binary
from tests.slackrecorder import SlackRecorder

pytestmark = [pytest.mark.lab, pytest.mark.integration]

AM_CONFIG = """\
route:
  receiver: opsbot
  group_by: [cluster, role, alertname]
  group_wait: 1s
  group_interval: 2s
  repeat_interval: 1h
receivers:
  - name: opsbot
    webhook_configs:
      - url: http://127.0.0.1:{port}/alerts
        send_resolved: true
        http_config:
          authorization:
            type: Bearer
            credentials: {token}
"""


class Alertmanager:
    """The Debian ``prometheus-alertmanager`` binary on loopback, single node."""

    def __init__(self, opsbot_port: int, token: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="opsbot-am-"))
        (self.dir / "am.yml").write_text(AM_CONFIG.format(port=opsbot_port, token=token))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(self.dir / "am.log", "w")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [need_binary("prometheus-alertmanager"), f"--config.file={self.dir / 'am.yml'}",
             f"--storage.path={self.dir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
             "--cluster.listen-address="],
            stdout=self.log, stderr=subprocess.STDOUT,
        )

    async def ready(self, client: httpx.AsyncClient) -> None:
        for _ in range(100):
            try:
                if (await client.get(f"{self.url}/-/ready")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
        raise AssertionError(f"alertmanager did not start: {(self.dir / 'am.log').read_text()[-2000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


async def test_alert_through_alertmanager_probes_the_lab_and_threads_in_slack(lab, tmp_path):
    cluster = next(iter(lab.inventory.clusters))
    slack = await SlackRecorder().start()
    settings = lab.settings.model_copy(update={
        "inventory": lab.inventory_path, "database_url": f"sqlite:///{tmp_path / 'opsbot.db'}",
        "coalesce_window_s": 0.5, "slack_bot_token": "xoxb-test", "slack_signing_secret": "s3cret",
        "slack_api_url": slack.url, "slack_alert_channel": "C0ALERTS",
    })
    store = Store(settings.db_url())
    token = store.create_token("alertmanager", ["probe"])
    flow = Flow(settings=settings, store=store)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings, flow=flow), host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    am = Alertmanager(port, token)
    lab.inject("decode", "wedged")
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            await am.ready(client)
            start = datetime.now(UTC)
            alert = {"labels": {"alertname": "DecodeStalled", "cluster": cluster, "role": "decode", "severity": "critical"},
                     "annotations": {"summary": "decode tokens flat with running requests"},
                     "startsAt": start.isoformat(), "generatorURL": "http://prometheus.local/graph"}
            assert (await client.post(f"{am.url}/api/v2/alerts", json=[alert])).status_code == 200

            (first,) = await slack.wait_for("chat.postMessage", 1, timeout=90)
            assert first.args["channel"] == "C0ALERTS" and "thread_ts" not in first.args
            text = str(first.args["blocks"])
            assert "DecodeStalled" in text and "decode-wedged" in text and "Restart decode" in text
            (row,) = store.alerts()
            assert row.status == "firing" and row.role == "decode" and row.probe_id
            probe = next(p for p in store.probes() if p.id == row.probe_id)
            assert probe.trigger_kind == "alert" and probe.top_incident == "decode-wedged"

            lab.reset()
            resolved = {**alert, "endsAt": (datetime.now(UTC) - timedelta(seconds=1)).isoformat()}
            assert (await client.post(f"{am.url}/api/v2/alerts", json=[resolved])).status_code == 200
            parent_ts = "1700000000.000001"  # the incident's one message: its thread says it resolved, it is edited
            (reply,) = await slack.wait_for("chat.postMessage", 1, timeout=90, where=lambda c: c.args.get(
                "thread_ts") == parent_ts and "time to recovery" in c.args.get("text", ""))
            (update,) = await slack.wait_for("chat.update", 1, timeout=10,
                                             where=lambda c: c.args["text"].startswith("[resolved]"))
            assert update.args["ts"] == parent_ts and "Resolved" in str(update.args["blocks"])
            assert [m for m in slack.messages if not m.get("thread_ts")] == [slack.messages[0]]
            assert sorted(a.status for a in store.alerts()) == ["firing", "resolved"]
            for _ in range(300):  # the incident closes before the resolved alert's own probe ends
                if all(a.probe_id for a in store.alerts()):
                    break
                await asyncio.sleep(0.1)
            assert all(a.probe_id for a in store.alerts())
    finally:
        am.stop()
        server.should_exit = True
        await serving
        await slack.stop()
        store.close()
        lab.reset()


async def test_slack_click_restarts_the_wedged_decode_on_the_lab(lab, tmp_path):
    """/opsbot decode is stuck → finding with a Restart button → an allowed click runs the guarded
    restart over SSH on the lab → the message shows who approved and how it went."""
    from tests.servicekit import block_actions_body, served, signed, slash_body

    slack = await SlackRecorder().start()
    secret = "8f742231b10e8888abcd99yyyzzz85a5"
    settings = lab.settings.model_copy(update={
        "inventory": lab.inventory_path, "database_url": f"sqlite:///{tmp_path / 'opsbot.db'}",
        "slack_bot_token": "xoxb-test", "slack_signing_secret": secret, "slack_api_url": slack.url,
        "slack_approvers": ["U0ALICE"], "verify_deadline_s": 60.0,
    })
    store = Store(settings.db_url())
    lab.inject("decode", "wedged", until_restart=True)  # the restart clears it; the click re-checks it still holds
    try:
        async with served(settings, Flow(settings=settings, store=store)) as client:
            body = slash_body("decode is stuck")
            assert (await client.post("/slack/events", content=body, headers=signed(body, secret=secret))).status_code == 200
            (post,) = await slack.wait_for("chat.postMessage", timeout=90)
            assert "decode-wedged" in str(post.args["blocks"])
            (actions,) = [b for b in post.args["blocks"] if b["type"] == "actions"]
            plan_id = actions["elements"][0]["value"]
            click = block_actions_body("restart_approve", plan_id, user="U0ALICE",
                                       message={"ts": "1700000000.000001", "blocks": post.args["blocks"]})
            assert (await client.post("/slack/events", content=click, headers=signed(click, secret=secret))).status_code == 200
            updates = await slack.wait_for("chat.update", 2, timeout=180)
            final = updates[-1].args["blocks"][-1]["text"]["text"]
            action = store.action(plan_id)
            assert action.approved_by == "slack:U0ALICE" and action.started_at is not None and action.execution
            assert action.state == "succeeded", action.outcome
            assert "approved by <@U0ALICE>" in final and "*succeeded*" in final
    finally:
        await slack.stop()
        store.close()
        lab.reset()
