"""On the lab (real journald, systemd and the emulator's own lines): the flow's healthy probes teach each role's
log templates, a further healthy probe prints nothing new, and after a crash the decode's verdict names the
crash's lines as never seen on it while healthy."""

from __future__ import annotations

import asyncio
import time

import pytest

from opsbot.bundle import Trigger
from opsbot.flow import Flow
from opsbot.parse.templates import MIN_HEALTHY_PROBES
from opsbot.store import Store

pytestmark = pytest.mark.lab

SENTINEL = "ValueError: templates lab sentinel: --kv-cache-dtype fp4 is not supported with page size 77"


async def test_healthy_probes_teach_and_a_crash_s_lines_are_new_since_healthy(lab, tmp_path):
    s = lab.settings.model_copy(update={"data_dir": tmp_path, "database_url": f"sqlite:///{tmp_path}/opsbot.db",
                                        "metrics_window_s": 3.0, "inventory": lab.inventory_path})
    flow = Flow(settings=s, store=Store(s.db_url()))
    trigger = Trigger(kind="cli", user="alice")
    lab.reset()
    try:
        taught = [await flow.run_probe(None, None, trigger) for _ in range(MIN_HEALTHY_PROBES)]
        assert all(r.diagnosis.healthy for r in taught), [(f.incident, f.summary) for r in taught for f in r.diagnosis.findings]
        cluster = taught[0].bundle.cluster
        history = flow.store.role_history(cluster, ["prefill", "decode", "router"])
        assert history["decode"].healthy_probes == MIN_HEALTHY_PROBES and history["decode"].keys
        again = await flow.run_probe(None, None, trigger)  # the emulator's lines under light load: nothing new
        decode = next(r for r in again.diagnosis.roles if r.role == "decode")
        assert decode.templates is not None and set(decode.templates) <= history["decode"].keys, (
            {t for k, t in decode.templates.items() if k not in history["decode"].keys})
        lab.inject("decode", "crash", message=SENTINEL)
        deadline = time.monotonic() + 30
        while True:
            await asyncio.sleep(2.0)
            broken = await flow.run_probe(None, None, trigger)
            decode = next(r for r in broken.diagnosis.roles if r.role == "decode")
            said = [r for r in decode.reasons if "since healthy" in r]
            if said and "sentinel" in said[0] or time.monotonic() > deadline:
                break
        assert broken.diagnosis.findings and decode.state != "healthy"
        assert said and said[0].startswith("new since healthy: ") and "never seen on decode while healthy" in said[0], (
            decode.reasons)
        assert "templates lab sentinel" in said[0]
        assert flow.store.role_history(cluster, ["decode"])["decode"].healthy_probes == MIN_HEALTHY_PROBES + 1
    finally:
        lab.reset()
        flow.store.close()
