"""Three ``opsbot serve`` instances on one PostgreSQL behind two clustered Alertmanagers (issue 15).

Real parts: three opsbot processes, one PostgreSQL server (tests/databases.py), two
``prometheus-alertmanager`` peers gossiping over ``--cluster.*`` on loopback, each posting every
notification to all three instances (three webhook_configs in one receiver), the session's lab
(real systemd + sshd nodes) with its decode stopped, so the alerts' probes find ``role-down`` with a
restart remedy, and the Slack recording server as Slack. An alert storm goes to both Alertmanagers,
as Prometheus sends it; in the middle one opsbot and one Alertmanager are killed with SIGKILL.
Asserted across the three: every alert stored once and probed once, one restart plan per finding,
one Slack message per incident and per alert group, the dead instance's claims taken over.
Bounded: about a minute once the lab is up.
"""

from __future__ import annotations

import subprocess
from collections import Counter
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from opsbot.lab.nodes import Lab
from opsbot.store import Store
from opsbot.store.store import decompress_bundle
from tests.databases import free_port
from tests.gameday import RecorderThread
from tests.realparts import need_binary
from tests.serveproc import Serve

pytestmark = pytest.mark.integration

CHANNEL = "C0HA"
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


def storm_wave(wave: int, at: datetime, cluster: str) -> list[dict]:
    roles = ("prefill", "decode", "router")
    per = ALERTS // WAVES
    return [{"labels": {"alertname": f"Storm{i % 12:02d}", "cluster": cluster, "role": roles[i % 3], "n": str(i)},
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


def slack_env(recorder_url: str) -> dict[str, str]:
    return {"OPSBOT_SLACK_BOT_TOKEN": "xoxb-ha", "OPSBOT_SLACK_SIGNING_SECRET": "ha-signing-secret",
            "OPSBOT_SLACK_API_URL": recorder_url, "OPSBOT_SLACK_ALERT_CHANNEL": CHANNEL}


def restart_findings(url: str) -> set[str]:
    """``probe:role`` for every restart an alert probe's findings ask approval for: what act plans once."""
    keys: set[str] = set()
    for probe_id, detail in rows(url, """SELECT f.probe_id, f.detail FROM findings f JOIN probes p ON p.id = f.probe_id
                                        WHERE p.trigger_kind = 'alert'"""):
        for remedy in (detail or {}).get("remedies") or []:
            if remedy.get("kind") == "restart" and remedy.get("approval") == "required" and remedy.get("role"):
                keys.add(f"{probe_id}:{remedy['role']}")
    return keys


def test_three_instances_two_alertmanagers_kill9_mid_storm(tmp_path, postgres_server, lab: Lab):
    url = postgres_server.fresh_database()
    with Store(url) as store:
        token = store.create_token("alertmanager", ["probe"])
    cluster = next(iter(lab.inventory.clusters))
    lab.reset()  # whatever earlier tests left on the shared lab
    lab.break_class("role-down")  # decode stopped: its alerts' probes find role-down, with a restart remedy
    slack = RecorderThread()
    env = {"OPSBOT_COALESCE_WINDOW_S": str(WINDOW_S), "OPSBOT_INSTANCE_LEASE_S": str(LEASE_S),
           "OPSBOT_INSTANCE_HEARTBEAT_S": str(HEARTBEAT_S), **slack_env(slack.recorder.url)}
    bots = [Serve(tmp_path, f"opsbot{i}", url, lab.inventory_path, **env).start() for i in range(3)]
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
                    r = httpx.post(f"{p.url}/api/v2/alerts", json=storm_wave(wave, at, cluster), timeout=10)
                    assert r.status_code == 200
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
            posted = rows(url, "SELECT id FROM incidents WHERE slack_ts IS NULL")
            if len(stored) >= ALERTS and all(r[2] for r in stored) and not posted:
                break
            assert time.monotonic() < deadline, (f"{len(stored)} stored, {sum(1 for r in stored if not r[2])} unprobed, "
                                                 f"{len(posted)} incidents without a message")
            time.sleep(0.3)
        time.sleep(2 * WINDOW_S)  # a late duplicate (a post, a plan) would land now

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

        # every finding that asks for a restart has its plan, made once whichever instance probed: the plan of
        # its own probe, or (act/remedies.py) the plan its class's restart of that role already has waiting;
        # never a second plan beside a waiting one (the incident stays open and nobody approves here)
        wanted = restart_findings(url)
        plans = rows(url, "SELECT plan_key, role, reason FROM actions")
        assert any(k.endswith(":decode") for k in wanted), "the stopped decode was found, with a restart remedy"
        assert {k for k, _, _ in plans} <= wanted, (plans, wanted)
        assert {k.split(":", 1)[1] for k in wanted} == {r for _, r, _ in plans}, (plans, wanted)
        per_class_role = Counter((reason.split(" (", 1)[0], role) for _, role, reason in plans)
        assert set(per_class_role.values()) == {1}, per_class_role
        assert not rows(url, "SELECT id FROM actions WHERE state <> 'planned'"), "nothing restarted without approval"
        # one incident per class and roles, one Slack message each, and one approval asked per incident
        incidents = rows(url, "SELECT id, incident, roles, timeline FROM incidents")
        assert any(i[1] == "role-down" and "decode" in i[2] for i in incidents), incidents
        assert len({(i[1], tuple(i[2])) for i in incidents}) == len(incidents)
        top = slack.recorder.posted(CHANNEL)
        per_incident = Counter(((m.get("metadata") or {}).get("event_payload") or {}).get("incident") for m in top)
        for incident_id, incident, roles, timeline in incidents:
            assert per_incident[incident_id] == 1, f"{incident} on {roles}: {per_incident[incident_id]} messages"
            asked = [e for e in timeline if str(e.get("what", "")).startswith("approval asked")]
            assert len(asked) <= 1, f"{incident} on {roles}: approval asked {len(asked)} times"
        # findings outside an incident go to one thread per Alertmanager group: one top-level message each
        threads = Counter(m["text"] for m in top if not m.get("metadata"))
        assert all(n == 1 for n in threads.values()), threads
        print(f"\nHA: {ALERTS} alerts, {len(probes)} probes, {len(held_by_victim)} held by the killed instance, "
              f"taken over and probed {took_over_after:.1f} s after the kill; {len(plans)} restart plans for "
              f"{len(wanted)} findings asking one; {len(incidents)} incidents, {len(top)} top-level Slack messages; "
              "per instance: " + ", ".join(f"{c}: {n}" for c, n in rows(url, "SELECT claimed_by, count(*) FROM alerts GROUP BY 1")))
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
        slack.stop()
        lab.reset()
