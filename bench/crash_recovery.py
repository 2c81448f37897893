"""Crash recovery: an alert burst to a real ``opsbot serve``, killed with SIGKILL twice in the middle
and restarted at once; is every acknowledged alert stored, probed once, and how soon?

    PYTHONPATH=. .venv/bin/python bench/crash_recovery.py [--alerts 1200] [--per-call 10]
                                  [--kills 2] [--postgres]

opsbot runs as ``opsbot serve`` in its own process (a fresh SQLite file, or with ``--postgres`` a
fresh database on a private PostgreSQL server),
probing a cheap local target (three roles on local-transport nodes with no units or endpoints,
so a probe costs milliseconds). The sender acts as Alertmanager: it posts notifications
concurrently and retries any call that got no answer (duplicates are de-duplicated), so an alert
is *acknowledged* when a call carrying it answered 200. When a third and two thirds of the
notifications are acknowledged, the server gets SIGKILL and is started again at once.

Printed: acknowledged, stored, taken over (claimed by a killed instance, then by a live one),
probed, lost (acknowledged but not stored), probed twice (an
alert named by two recorded probes), and the time from the last restart until every
acknowledged alert had its probe (and from the last acknowledgement until then). Baselines in the
same run: the same burst with no kill, and with kills but claims held 600 s (the claim TTL before
leases: what a killed instance held waits that long).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx

TOKEN = "crash-alert-token"
INVENTORY = """\
clusters:
  crash:
    nodes:
      - {name: node1, address: localhost, transport: local}
      - {name: node2, address: localhost, transport: local}
    roles:
      - {role: prefill, node: node1, unit: sglang-crash-prefill.service}
      - {role: decode, node: node2, unit: sglang-crash-decode.service}
      - {role: router, node: node1, unit: sglang-crash-router.service}
"""
ROLES = ("prefill", "decode", "router")


@dataclass
class Figures:
    acknowledged: int
    stored: int
    probed: int
    lost: int
    probed_twice: int
    drain_s: float | None  # from the last restart until every acknowledged alert was probed
    after_last_ack_s: float | None  # from the last acknowledgement until then
    taken_over: int  # alerts a restarted instance took over from a killed one (its log says so)
    kills: int
    wall_s: float


def bodies(n_alerts: int, per_call: int) -> list[dict]:
    """Webhook notifications: ``n_alerts`` distinct firing alerts over three roles."""
    out = []
    for start in range(0, n_alerts, per_call):
        alerts = []
        for i in range(start, min(start + per_call, n_alerts)):
            role = ROLES[i % 3]
            alerts.append({"status": "firing", "labels": {"alertname": f"Crash{i % 7}", "cluster": "crash", "role": role},
                           "annotations": {}, "startsAt": "2026-12-01T09:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
                           "generatorURL": "", "fingerprint": f"c{i:06d}"})
        out.append({"version": "4", "groupKey": f"{{}}:{{burst=\"{start}\"}}", "truncatedAlerts": 0, "status": "firing",
                    "receiver": "opsbot", "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
                    "externalURL": "http://am", "alerts": alerts})
    return out


class Server:
    """``opsbot serve`` on a fixed port; ``kill()`` is SIGKILL, ``start()`` starts a new process."""

    def __init__(self, tmp: Path, port: int, database_url: str, lease_s: float | None = None) -> None:
        (tmp / "inventory.yaml").write_text(INVENTORY)
        self.env = {**os.environ, "OPSBOT_DATA_DIR": str(tmp), "OPSBOT_DATABASE_URL": database_url,
                    "OPSBOT_INVENTORY": str(tmp / "inventory.yaml"), "OPSBOT_ALERT_TOKEN": TOKEN,
                    "OPSBOT_PORT": str(port), "OPSBOT_METRICS_WINDOW_S": "0", "OPSBOT_COALESCE_WINDOW_S": "0.5",
                    "OPSBOT_LOG_SINCE": "-1min", **({"OPSBOT_INSTANCE_LEASE_S": str(lease_s)} if lease_s else {})}
        self.log = tmp / "serve.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "opsbot", "serve", "--log-level", "warning"],
                                         env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


async def _post_all(url: str, notes: list[dict], concurrency: int, on_ack) -> set[str]:
    """Post every notification until answered 200 (retrying, as Alertmanager does); fingerprints acknowledged."""
    acked: set[str] = set()
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=10, headers={"X-Opsbot-Alert-Token": TOKEN}) as client:
        async def one(body: dict) -> None:
            async with sem:
                while True:
                    try:
                        r = await client.post(f"{url}/alerts", json=body)
                    except httpx.TransportError:
                        await asyncio.sleep(0.05)
                        continue
                    if r.status_code == 200:
                        acked.update(a["fingerprint"] for a in body["alerts"])
                        await on_ack(len(acked))
                        return
                    await asyncio.sleep(0.05)  # 503 (queue full, starting): retried

        await asyncio.gather(*(one(b) for b in notes))
    return acked


def _state(database_url: str) -> tuple[dict[str, bool], Counter[str]]:
    """(fingerprint -> has a probe) for stored alerts, and how many recorded probes name each fingerprint."""
    from opsbot.store import Store

    with Store(database_url, migrate=False) as store:
        alerts = {a.fingerprint: a.probe_id is not None for a in store.alerts(limit=1_000_000)}
        named: Counter[str] = Counter()
        for p in store.probes(limit=1_000_000):
            named.update(set(store.load_bundle(p.id).trigger.alerts))
    return alerts, named


async def run(tmp: Path, database_url: str, *, n_alerts: int, per_call: int, kills: int,
              concurrency: int = 8, deadline_s: float = 60.0, lease_s: float | None = None) -> Figures:
    """One burst with ``kills`` SIGKILLs spread through it; figures once drained (or at the deadline)."""
    from tests.databases import free_port  # one free-port helper for tests and benchmarks

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = Server(tmp, port, database_url, lease_s)
    notes = bodies(n_alerts, per_call)
    marks = [n_alerts * (k + 1) // (kills + 1) for k in range(kills)]
    restarted_at = last_ack = time.monotonic()
    done_kills = 0
    lock = asyncio.Lock()

    async def on_ack(count: int) -> None:
        nonlocal restarted_at, done_kills, last_ack
        last_ack = time.monotonic()
        async with lock:
            if done_kills < kills and count >= marks[done_kills]:
                server.kill()
                server.start()  # at once: no wait for the old claims to expire
                restarted_at = time.monotonic()
                done_kills += 1

    t0 = time.monotonic()
    server.start()
    try:
        acked = await asyncio.wait_for(_post_all(url, notes, concurrency, on_ack), timeout=600)
        drain_s = after_ack = None
        while time.monotonic() - restarted_at < deadline_s:
            stored, _ = await asyncio.to_thread(_state, database_url)
            if all(stored.get(fp) for fp in acked):
                drain_s, after_ack = time.monotonic() - restarted_at, time.monotonic() - last_ack
                break
            await asyncio.sleep(0.25)
        await asyncio.sleep(1.0)  # anything probed twice would show up now
        stored, named = await asyncio.to_thread(_state, database_url)
    finally:
        server.stop()
    taken = sum(int(m.group(1)) for m in re.finditer(r"took over (\d+) stored alerts", server.log.read_text()))
    return Figures(taken_over=taken, acknowledged=len(acked), stored=sum(fp in stored for fp in acked),
                   probed=sum(bool(stored.get(fp)) for fp in acked), lost=sum(fp not in stored for fp in acked),
                   probed_twice=sum(named[fp] > 1 for fp in acked), drain_s=drain_s, after_last_ack_s=after_ack,
                   kills=done_kills,
                   wall_s=time.monotonic() - t0)


def main() -> None:
    from rich.console import Console
    from rich.table import Table

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--alerts", type=int, default=1200)
    ap.add_argument("--per-call", type=int, default=10)
    ap.add_argument("--kills", type=int, default=2)
    ap.add_argument("--postgres", action="store_true", help="a private PostgreSQL server instead of SQLite files")
    args = ap.parse_args()
    from tests.databases import PostgresServer

    pg = PostgresServer() if args.postgres else None
    if pg is not None:
        pg.start()
    table = Table(title=f"crash recovery: {args.alerts} alerts, {args.per_call} per call")
    for col in ("run", "kills", "acknowledged", "stored", "taken over", "probed", "lost", "probed twice", "drain s",
                "after last ack s", "wall s"):
        table.add_column(col, justify="right" if col != "run" else "left")
    runs = (("baseline: no kill", 0, None), (f"SIGKILL x{args.kills}, restart at once", args.kills, None),
            ("same, claims held 600 s (as before leases)", args.kills, 600.0))
    for name, kills, lease_s in runs:
        with tempfile.TemporaryDirectory(prefix="opsbot-crash-") as tmp:
            url = pg.fresh_database() if pg is not None else f"sqlite:///{Path(tmp) / 'opsbot.db'}"
            f = asyncio.run(run(Path(tmp), url, n_alerts=args.alerts, per_call=args.per_call, kills=kills,
                                lease_s=lease_s))
        drain = "not drained in 60 s" if f.drain_s is None else f"{f.drain_s:.1f}"
        table.add_row(name, str(f.kills), str(f.acknowledged), str(f.stored), str(f.taken_over), str(f.probed), str(f.lost),
                      str(f.probed_twice), drain, "-" if f.after_last_ack_s is None else f"{f.after_last_ack_s:.1f}",
                      f"{f.wall_s:.1f}")
    if pg is not None:
        pg.stop()
    Console(width=150).print(table)


if __name__ == "__main__":
    main()
