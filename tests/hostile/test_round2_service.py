"""Issue 23 against the served app (uvicorn, SQLite file and PostgreSQL): crafted log lines (item 2),
two clusters and alert intake (item 3), ``opsbot incidents`` on rich markup (item 7), ``since`` out
of range (item 8), a corrupt stored bundle and a malformed stored plan (item 11)."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone

import httpx
from sqlalchemy import update
from typer.testing import CliRunner

from opsbot.bundle import Trigger
from opsbot.cli import app
from opsbot.settings import get_settings
from opsbot.store.models import Action, Probe
from tests.hostile.conftest import ALERT_TOKEN, drained
from tests.hostile.test_surfaces import webhook
from tests.hostile.uvicornkit import uvicorn_served
from tests.servicekit import INVENTORY, flow_for, lab_settings, replay

# The attacks of item 2: a crash line then "1 /" and 4,000 "(" (cubic in _CRASH_FRAME: 7.9 s), and one
# 32,000-character line for the native kind and _TRACEBACK (quadratic: 4.7 s per page view).
CRASH = "2026-12-01T09:00:00+00:00 node2 python3[4242]: Fatal Python error: Segmentation fault"
ATTACKS = [f"2026-12-01T09:00:01+00:00 node2 python3[4242]: 1 /{'(' * 4000}",
           "2026-12-01T09:00:02+00:00 node2 python3[4242]: 1 /" + "a" * 32_000,
           "2026-12-01T09:00:03+00:00 node2 python3[4242]: " + "PPPP" * 8000 + " hit an exception: ",
           "2026-12-01T09:00:04+00:00 node2 python3[4242]: Traceback " + "Z" * 32_000]


def crafted(scenario: str):
    """The corpus bundle with the attack lines in every role's journal, as a node would return them."""
    recorded = replay(scenario)

    async def probe(inventory, **kw):
        bundle = await recorded(inventory, **kw)
        roles = [r.model_copy(update={"logs": r.logs.model_copy(
            update={"ok": True, "raw": r.logs.raw + "\n".join([CRASH, *ATTACKS]) + "\n"})}) for r in bundle.roles]
        return bundle.model_copy(update={"roles": roles})

    return probe


async def _timed_healthz(client: httpx.AsyncClient, stop: asyncio.Event) -> float:
    """The slowest /healthz answer while ``stop`` is not set: how long the event loop was held."""
    worst = 0.0
    while not stop.is_set():
        t0 = time.monotonic()
        assert (await client.get("/healthz")).status_code == 200
        worst = max(worst, time.monotonic() - t0)
        await asyncio.sleep(0.02)
    return worst


async def test_crafted_log_lines_slow_neither_probe_nor_page(tmp_path, database_url):
    settings = lab_settings(tmp_path, database_url, probe_wait_s=30.0)
    flow = flow_for(settings, crafted("decode-hang-health-200"))
    token = flow.store.create_token("prober", ["probe"])
    h = {"Authorization": f"Bearer {token}"}
    try:
        with uvicorn_served(settings, flow) as url:
            async with httpx.AsyncClient(base_url=url, timeout=30) as client, httpx.AsyncClient(
                    base_url=url, timeout=30) as watcher:
                stop = asyncio.Event()
                watch = asyncio.create_task(_timed_healthz(watcher, stop))
                t0 = time.monotonic()
                probed = await client.post("/probe", json={"wait_s": 30}, headers=h)
                probe_s = time.monotonic() - t0
                assert probed.status_code == 200, probed.text
                probe_id = probed.json()["result"]["probe_id"]
                t0 = time.monotonic()
                for _ in range(5):
                    page = await client.get(f"/probes/{probe_id}")
                    assert page.status_code == 200 and "decode" in page.text
                page_s = (time.monotonic() - t0) / 5
                t0 = time.monotonic()
                assert (await client.get("/")).status_code == 200
                status_s = time.monotonic() - t0
                stop.set()
                stalled = await watch
    finally:
        flow.store.close()
    assert probe_s < 5.0, f"the probe took {probe_s:.1f} s"
    assert page_s < 0.5, f"GET /probes/{{id}} took {page_s:.2f} s"
    assert status_s < 2.0, f"GET / took {status_s:.2f} s"
    assert stalled < 1.0, f"/healthz waited {stalled:.2f} s while the probe and pages ran"


async def test_page_views_read_stored_figures_not_logs(tmp_path, database_url):
    """The roles table comes from the probe row: blanking the stored bundle's logs changes nothing shown."""
    settings = lab_settings(tmp_path, database_url)
    flow = flow_for(settings, replay("decode-hang-health-200"))
    try:
        result = await flow.run_probe(None, None, Trigger(kind="cli"))
        stored = flow.store.probe_figures(result.probe_id)
        assert stored and {f.role for f in stored} == {r.key for r in result.bundle.roles}
        flow.store.write(lambda s: s.execute(update(Probe).where(Probe.id == result.probe_id).values(
            figures=[{**f.model_dump(mode="json"), "state": "marked-as-stored"} for f in stored])))
        with uvicorn_served(settings, flow) as url:
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                page = await client.get(f"/probes/{result.probe_id}")
                status = await client.get("/")
        assert page.status_code == 200 and "marked-as-stored" in page.text
        assert status.status_code == 200 and "marked-as-stored" in status.text
    finally:
        flow.store.close()


TWO_CLUSTERS = INVENTORY + """\
  staging:
    nodes:
      - {name: s1, address: localhost, transport: local}
    roles:
      - {role: decode, node: s1, unit: sglang-dsv4-decode.service, gpus: [0]}
"""


async def test_two_clusters_without_a_default_still_take_alerts(tmp_path, database_url):
    (tmp_path / "inventory.yaml").write_text(TWO_CLUSTERS)
    settings = lab_settings(tmp_path, database_url, alert_token=ALERT_TOKEN)
    assert settings.cluster is None
    flow = flow_for(settings, replay("decode-hang-health-200"))
    headers = {"X-Opsbot-Alert-Token": ALERT_TOKEN, "Content-Type": "application/json"}
    try:
        with uvicorn_served(settings, flow) as url:
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                labelled = webhook(labels={"alertname": "DecodeStuck", "role": "decode", "cluster": "lab"},
                                   fingerprint="lab1")
                bare = webhook(labels={"alertname": "DecodeStuck", "role": "decode"}, fingerprint="bare1",
                               groupKey="{}:{x}")
                for body in (labelled, bare):
                    r = await client.post("/alerts", content=body, headers=headers)
                    assert r.status_code == 200 and r.json()["stored"] == 1, r.text
                await drained(flow)
    finally:
        alerts = {a.fingerprint: a for a in flow.store.alerts()}
        flow.store.close()
    assert alerts["lab1"].cluster == "lab" and alerts["lab1"].probe_id is not None
    assert alerts["bare1"].probe_id is None and alerts["bare1"].probe_failed_at is not None
    assert "several clusters" in (alerts["bare1"].probe_error or "")


async def test_since_out_of_range_is_422_and_markup_in_names_is_text(service):
    url, tokens, flow, _slack = service
    h = {"Authorization": f"Bearer {tokens['read']}"}
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for since in ("0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"):
            r = await client.get("/incidents", params={"since": since}, headers=h)
            assert r.status_code == 422 and "since" in r.json()["detail"], r.text
        for since in ("0001-01-01T00:00:00Z", "9999-12-31T00:00:00+00:00", "2026-12-01T00:00:00+14:00"):
            assert (await client.get("/incidents", params={"since": since}, headers=h)).status_code == 200
        hook = webhook(labels={"alertname": "X [/] [bold]y", "role": "decode"}, fingerprint="markup1")
        r = await client.post("/alerts", content=hook,
                              headers={"X-Opsbot-Alert-Token": ALERT_TOKEN, "Content-Type": "application/json"})
        assert r.status_code == 200
        await drained(flow)
        # the incident is recorded just after the alert's probe is linked: wait for it, not for the probe alone
        deadline = time.monotonic() + 20
        while not any("X [/] [bold]y" in i.alertnames for i in flow.store.incidents(limit=10)):
            assert time.monotonic() < deadline, "no incident for the alert named with markup"
            await asyncio.sleep(0.1)
    env = {"OPSBOT_DATA_DIR": str(flow.settings.data_dir), "OPSBOT_DATABASE_URL": flow.settings.db_url(),
           "COLUMNS": "300"}
    get_settings.cache_clear()
    try:
        listed = CliRunner().invoke(app, ["incidents"], env=env)
        odd = CliRunner().invoke(app, ["incidents", "--since", "[/]"], env=env)
    finally:
        get_settings.cache_clear()
    assert listed.exit_code == 0, listed.output
    assert "X [/] [bold]y" in listed.output
    assert odd.exit_code != 0 and "MarkupError" not in repr(odd.exception)


async def test_corrupt_bundle_and_malformed_plan_are_not_500(service):
    url, tokens, flow, _slack = service
    h = {"Authorization": f"Bearer {tokens['act']}"}
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        probed = await client.post("/probe", json={"roles": ["decode"], "wait_s": 10}, headers=h)
        assert probed.status_code == 200, probed.text
        probe_id = probed.json()["result"]["probe_id"]
        planned = await client.post("/actions/restart", json={"role": "decode"}, headers=h)
        assert planned.status_code == 201, planned.text
        action_id = planned.json()["id"]
        for plan in ([1, 2], "text", {"steps": "x"}, {"steps": [1, {"argv": "ls"}, {"argv": ["systemctl", 3]}]}):
            flow.store.write(lambda s, p=plan: s.execute(update(Action).where(Action.id == action_id).values(plan=p)))
            r = await client.get(f"/actions/{action_id}", headers=h)
            assert r.status_code == 200, (plan, r.text)
        # the newest probe's bundle is corrupted on disk: every page still answers, saying so
        flow.store.write(lambda s: s.execute(update(Probe).where(Probe.id == probe_id).values(
            bundle=b"not zlib", figures=None, started_at=datetime.now(timezone.utc))))
        for path in ("/", "/status", f"/probes/{probe_id}"):
            r = await client.get(path, headers=h)
            assert r.status_code in (200, 422), (path, r.status_code, r.text[:300])
            assert "unreadable" in r.text, (path, r.text[:300])
        again = await client.post("/probe", json={"roles": ["decode"], "wait_s": 10}, headers=h)
        assert again.status_code == 200
        fresh_id = again.json()["result"]["probe_id"]
        assert (await client.get(f"/probes/{fresh_id}")).status_code == 200
