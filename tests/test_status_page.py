"""The status page in a real browser: headless Chromium loads ``GET /`` from a running uvicorn."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import httpx
import pytest
import uvicorn

from opsbot.bundle import Trigger
from opsbot.service.app import create_app
from tests.databases import free_port
from tests.realparts import need_binary
from tests.servicekit import flow_for, lab_settings, replay

ARTIFACT = Path(__file__).parent / "artifacts" / "status-page.png"  # refreshed with OPSBOT_UPDATE_ARTIFACTS=1

pytestmark = pytest.mark.integration


def chromium(*args: str, timeout: float = 60) -> str:
    profile = tempfile.mkdtemp(prefix="opsbot-chromium-")
    try:
        out = subprocess.run(
            [need_binary("chromium"), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--window-size=1280,1100", *args],
            capture_output=True, text=True, timeout=timeout, check=True,
        )
        return out.stdout
    finally:
        shutil.rmtree(profile, ignore_errors=True)


async def test_status_page_shows_roles_incident_probes_and_actions(tmp_path):
    settings = lab_settings(tmp_path, f"sqlite:///{tmp_path / 'opsbot.db'}")
    flow = flow_for(settings, replay("decode-hang-health-200"))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings, flow=flow), host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.05)
        result = await flow.run_probe(None, None, Trigger(kind="cli", user="test"))
        action, _ = await flow.request_restart(["decode"], None, actor="alice", surface="cli", reason="wedged")
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"http://127.0.0.1:{port}/")).status_code == 200
        url = f"http://127.0.0.1:{port}/"
        dom = await asyncio.to_thread(chromium, "--dump-dom", url)
        for role in ("prefill", "decode", "router"):
            assert f"<b>{role}</b>" in dom
        assert 'id="incident-decode-wedged"' in dom and result.probe_id in dom and action.id in dom
        assert "planned" in dom and "alice via cli" in dom
        shot = tmp_path / "status-page.png"
        await asyncio.to_thread(chromium, f"--screenshot={shot}", url)
        assert shot.stat().st_size > 10_000
        if os.environ.get("OPSBOT_UPDATE_ARTIFACTS") == "1":
            shutil.copyfile(shot, ARTIFACT)
    finally:
        server.should_exit = True
        await task
