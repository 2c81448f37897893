"""Three ``opsbot serve`` instances on one PostgreSQL behind two clustered Alertmanagers (issue 15).

Real parts: three opsbot processes, one PostgreSQL server (tests/databases.py), two
``prometheus-alertmanager`` peers gossiping over ``--cluster.*`` on loopback, each posting every
notification to all three instances (three webhook_configs in one receiver). An alert storm goes to
both Alertmanagers, as Prometheus sends it; in the middle one opsbot and one Alertmanager are
killed with SIGKILL. The probes target a cheap configured inventory (local transport, no units):
what is measured is who stores, claims and probes, not what a probe finds. Bounded: about a minute.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from opsbot.store import Store
from opsbot.store.store import decompress_bundle
from tests.databases import free_port
from tests.realparts import need_binary
from tests.serveproc import Serve

pytestmark = pytest.mark.integration

INVENTORY = """\
clusters:
  ha:
    nodes:
      - {name: node1, address: localhost, transport: local}
    roles:
      - {role: prefill, node: node1, unit: sglang-ha-prefill.service}
      - {role: decode, node: node1, unit: sglang-ha-decode.service}
      - {role: router, node: node1, unit: sglang-ha-router.service}
"""
LEASE_S, HEARTBEAT_S, WINDOW_S = 3.0, 0.5, 1.0
ALERTS, WAVES = 240, 8


def am_config(urls: list[str], token: str) -> str:
    hooks = "".join(f"""
      - url: {u}/alerts
        send_resolved: true
        http_config:
          authorization:
            type: Bearer
            credentials: {token}""" for u in urls)
    return f"""\
route:
  receiver: opsbot
  group_by: [cluster, role]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: opsbot
    webhook_configs:{hooks}
"""


class Peer:
    """One Alertmanager of a two-peer cluster on loopback."""

    def __init__(self, config: str, cluster_port: int, other_port: int) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="opsbot-am-ha-"))
        (self.dir / "am.yml").write_text(config)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (self.dir / "am.log").open("w")
        self.proc = subprocess.Popen(
            [need_binary("prometheus-alertmanager"), f"--config.file={self.dir / 'am.yml'}",
             f"--storage.path={self.dir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
             f"--cluster.listen-address=127.0.0.1:{cluster_port}", f"--cluster.peer=127.0.0.1:{other_port}",
             "--cluster.peer-timeout=1s", "--cluster.gossip-interval=100ms", "--cluster.pushpull-interval=2s",
             "--cluster.settle-timeout=2s"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self) -> None:
        for _ in range(200):
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"alertmanager did not start: {(self.dir / 'am.log').read_text()[-2000:]}")

    def peers(self) -> int:
        return len(httpx.get(f"{self.url}/api/v2/status", timeout=5).json()["cluster"].get("peers") or [])

    def stop(self, kill: bool = False) -> None:
        if self.proc.poll() is None:
            (self.proc.kill if kill else self.proc.terminate)()
            self.proc.wait(10)
        self.log.close()


def storm_wave(wave: int, at: datetime) -> list[dict]:
    roles = ("prefill", "decode", "router")
    per = ALERTS // WAVES
    return [{"labels": {"alertname": f"Storm{i % 12:02d}", "cluster": "ha", "role": roles[i % 3], "n": str(i)},
             "annotations": {"summary": f"storm alert {i}"}, "startsAt": at.isoformat(),
             "generatorURL": "http://prometheus.local/graph"}
            for i in range(wave * per, (wave + 1) * per)]


def rows(url: str, sql: str) -> list[tuple]:
    engine = create_engine(url)
    try:
        with engine.connect() as c:
            return [tuple(r) for r in c.execute(text(sql))]
    finally:
        engine.dispose()


def test_three_instances_two_alertmanagers_kill9_mid_storm(tmp_path, postgres_server):
    url = postgres_server.fresh_database()
    with Store(url) as store:
        token = store.create_token("alertmanager", ["probe"])
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(INVENTORY)
    env = {"OPSBOT_COALESCE_WINDOW_S": str(WINDOW_S), "OPSBOT_INSTANCE_LEASE_S": str(LEASE_S),
           "OPSBOT_INSTANCE_HEARTBEAT_S": str(HEARTBEAT_S)}
    bots = [Serve(tmp_path, f"opsbot{i}", url, inventory, **env).start() for i in range(3)]
    c1, c2 = free_port(), free_port()
    config = am_config([b.url for b in bots], token)
    peers = [Peer(config, c1, c2), Peer(config, c2, c1)]
    try:
        for b in bots:
            b.wait_ready()
        for p in peers:
            p.wait_ready()
        deadline = time.monotonic() + 20
        while not all(p.peers() == 2 for p in peers):
            assert time.monotonic() < deadline, "the Alertmanagers never formed a cluster"
            time.sleep(0.2)

        at = datetime.now(UTC)
        victim, dead_am = bots[0], peers[0]
        killed_at = 0.0
        held_by_victim: set[str] = set()
        for wave in range(WAVES):
            for p in peers:
                if p.proc.poll() is None:
                    assert httpx.post(f"{p.url}/api/v2/alerts", json=storm_wave(wave, at), timeout=10).status_code == 200
            time.sleep(0.7)
            if wave == WAVES // 2:
                victim.kill9()
                dead_am.stop(kill=True)
                killed_at = time.monotonic()
                held_by_victim = {f for (f,) in rows(url, f"""
                    SELECT a.fingerprint FROM alerts a JOIN instances i ON a.claimed_by = i.id
                    WHERE i.pid = {victim.proc.pid} AND a.probe_id IS NULL""")}

        deadline = time.monotonic() + 90
        took_over_after = None
        while True:
            probed = {f for (f,) in rows(url, "SELECT fingerprint FROM alerts WHERE probe_id IS NOT NULL")}
            if took_over_after is None and held_by_victim <= probed:
                took_over_after = time.monotonic() - killed_at
            stored = rows(url, "SELECT fingerprint, status, probe_id, claimed_by FROM alerts")
            if len(stored) >= ALERTS and all(r[2] for r in stored):
                break
            assert time.monotonic() < deadline, f"{len(stored)} stored, {sum(1 for r in stored if not r[2])} unprobed"
            time.sleep(0.3)

        # every alert stored once: one row per (fingerprint, status, start), all of them firing
        fingerprints = [r[0] for r in stored]
        assert len(fingerprints) == len(set(fingerprints)) == ALERTS
        assert {r[1] for r in stored} == {"firing"}
        # probed once: no alert is in the trigger of two probes, and the linked probe names it
        probes = rows(url, "SELECT id, bundle FROM probes WHERE trigger_kind = 'alert'")
        seen: dict[str, str] = {}
        for probe_id, blob in probes:
            for fp in decompress_bundle(bytes(blob)).trigger.alerts:
                assert fp not in seen, f"alert {fp} probed twice ({seen[fp]}, {probe_id})"
                seen[fp] = probe_id
        assert set(seen) == set(fingerprints)
        # the killed instance's claims were taken over, within a lease (plus a heartbeat and a window)
        assert took_over_after is not None and took_over_after <= LEASE_S + HEARTBEAT_S + WINDOW_S + 4, took_over_after
        print(f"\nHA: {ALERTS} alerts, {len(probes)} probes, {len(held_by_victim)} held by the killed instance, "
              f"taken over and probed {took_over_after:.1f} s after the kill; per instance: "
              + ", ".join(f"{c}: {n}" for c, n in rows(url, "SELECT claimed_by, count(*) FROM alerts GROUP BY 1")))
        assert not rows(url, "SELECT id FROM actions"), "no restart was planned or run"
        # the weekly report fell due before any instance ran (a fresh database): all three start its
        # catch-up, one claims the week, one report is kept per format
        assert [n for (n,) in rows(url, "SELECT count(*) FROM job_runs WHERE job = 'weekly-report'")] == [1]
        assert sorted(rows(url, "SELECT format, count(*) FROM reports WHERE kind = 'weekly' GROUP BY format")) == [
            ("html", 1), ("markdown", 1)]
        for b in bots[1:]:
            assert "Traceback" not in b.output()
    finally:
        for b in bots:
            b.stop()
        for p in peers:
            p.stop()
