"""An alert storm against a running opsbot: 10,000 Alertmanager alerts in 50 groups, with repeats
and resolves, posted concurrently to ``POST /alerts`` of a real uvicorn on loopback.

    python bench/alert_storm.py [--alerts 10000] [--groups 50] [--concurrency 64] [--window 2]
                                [--target local|lab] [--queue-max 5000]

opsbot runs as ``opsbot serve`` in its own process with a fresh SQLite database. Its probes are
the real ``opsbot.collect.probe`` against the chosen target: ``local`` (default) is a cheap
configured no-op target, three roles on local-transport nodes with no systemd units and no
HTTP endpoints, so every axis fails fast and a probe costs milliseconds; ``lab`` uses the lab's
inventory (``opsbot lab up`` first). Baseline in the same run: ``GET /healthz`` at the same
concurrency (the HTTP floor). Printed: accepted/s, p50/p99 latency, 503s, alerts lost (accepted
but not in the database: must be 0) and probes started per role against the coalescing bound.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

console = Console()
TOKEN = "bench-alert-token"
LOCAL_INVENTORY = """\
clusters:
  bench:
    nodes:
      - {name: node1, address: localhost, transport: local}
      - {name: node2, address: localhost, transport: local}
    roles:
      - {role: prefill, node: node1, unit: sglang-bench-prefill.service}
      - {role: decode, node: node2, unit: sglang-bench-decode.service}
      - {role: router, node: node1, unit: sglang-bench-router.service}
"""
ROLES = ("prefill", "decode", "router")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def storm(n_alerts: int, n_groups: int, cluster: str, per_call: int, seed: int = 7) -> list[dict]:
    """Webhook bodies: each group fires its alerts, Alertmanager resends some, then resolves some."""
    rng = random.Random(seed)
    t0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    fresh, sent = [], []
    for i in range(n_alerts):
        g = i % n_groups
        kind = rng.random()
        if sent and kind < 0.25:  # a resend (group_interval, HA peer): same fingerprint, status, start
            fresh.append(dict(rng.choice(sent)))
            continue
        if sent and kind < 0.35:  # a resolve of something that fired
            fired = rng.choice(sent)
            fresh.append({**fired, "status": "resolved", "endsAt": (t0 + timedelta(minutes=5)).isoformat()})
            continue
        alert = {
            "status": "firing",
            "labels": {"alertname": f"Storm{g:02d}", "cluster": cluster, "role": ROLES[g % 3], "instance": f"i{i}"},
            "annotations": {"summary": f"storm alert {i}"},
            "startsAt": (t0 + timedelta(seconds=i % 600)).isoformat(),
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus.local/graph",
            "fingerprint": f"{g:02x}{i:014x}",
        }
        sent.append(alert)
        fresh.append(alert)
    bodies = []
    for k in range(0, len(fresh), per_call):
        chunk = fresh[k:k + per_call]
        g = int(chunk[0]["labels"]["alertname"][5:])
        bodies.append({
            "version": "4", "groupKey": f'{{}}:{{alertname="Storm{g:02d}"}}', "truncatedAlerts": 0,
            "status": "firing" if any(a["status"] == "firing" for a in chunk) else "resolved", "receiver": "opsbot",
            "groupLabels": {"alertname": f"Storm{g:02d}"}, "commonLabels": {}, "commonAnnotations": {},
            "externalURL": "http://am.local", "alerts": chunk,
        })
    return bodies


def dedup_key(a: dict) -> str:
    return f"{a['fingerprint']}:{a['status']}:{datetime.fromisoformat(a['startsAt']).isoformat()}"


async def fire(url: str, bodies: list[dict], concurrency: int) -> tuple[list[float], set[str], int, int, float]:
    """Post every body (retrying 503 as Alertmanager does); latencies of accepted calls, keys accepted."""
    latencies: list[float] = []
    accepted: set[str] = set()
    rejected = dropped = 0
    sem = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=60, headers={"X-Opsbot-Alert-Token": TOKEN}) as client:
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("posting alerts", total=len(bodies))

            async def one(body: dict) -> None:
                nonlocal rejected, dropped
                async with sem:
                    while True:
                        t = time.perf_counter()
                        try:
                            r = await client.post(f"{url}/alerts", json=body)
                        except httpx.TransportError:  # Alertmanager retries these too; duplicates dedup
                            dropped += 1
                            continue
                        if r.status_code == 503:
                            rejected += 1
                            await asyncio.sleep(0.05)
                            continue
                        r.raise_for_status()
                        latencies.append(time.perf_counter() - t)
                        accepted.update(dedup_key(a) for a in body["alerts"])
                        progress.advance(task)
                        return

            t0 = time.perf_counter()
            await asyncio.gather(*(one(b) for b in bodies))
            elapsed = time.perf_counter() - t0
    return latencies, accepted, rejected, dropped, elapsed


async def baseline(url: str, calls: int, concurrency: int) -> tuple[list[float], float]:
    sem = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=concurrency)) as client:
        async def one() -> None:
            async with sem:
                t = time.perf_counter()
                (await client.get(f"{url}/healthz")).raise_for_status()
                latencies.append(time.perf_counter() - t)

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(calls)))
        return latencies, time.perf_counter() - t0


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] * 1000 if len(values) > 1 else values[0] * 1000


def start_server(tmp: Path, port: int, window: float, target: str, queue_max: int) -> tuple[subprocess.Popen, Path, str]:
    db = tmp / "opsbot.db"
    env = {**os.environ, "OPSBOT_DATA_DIR": str(tmp), "OPSBOT_DATABASE_URL": f"sqlite:///{db}",
           "OPSBOT_ALERT_TOKEN": TOKEN, "OPSBOT_COALESCE_WINDOW_S": str(window), "OPSBOT_PORT": str(port),
           "OPSBOT_ALERT_QUEUE_MAX": str(queue_max)}
    if target == "local":
        (tmp / "inventory.yaml").write_text(LOCAL_INVENTORY)
        env.update(OPSBOT_INVENTORY=str(tmp / "inventory.yaml"), OPSBOT_METRICS_WINDOW_S="0")
        cluster = "bench"
    else:
        inv = Path(os.environ.get("OPSBOT_INVENTORY", ".opsbot/inventory.yaml")).resolve()
        env["OPSBOT_INVENTORY"] = str(inv)
        cluster = next(iter(__import__("yaml").safe_load(inv.read_text())["clusters"]))
    log = open(tmp / "serve.log", "w")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "opsbot", "serve", "--log-level", "warning"], env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    return proc, db, cluster


async def wait_ready(url: str) -> None:
    async with httpx.AsyncClient() as client:
        for _ in range(200):
            try:
                if (await client.get(f"{url}/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit("opsbot serve did not start; see serve.log")


def unprocessed(db: Path) -> int:
    with sqlite3.connect(db) as c:
        return c.execute("select count(*) from alerts where probe_id is null").fetchone()[0]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--alerts", type=int, default=10_000)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--per-call", type=int, default=4, help="alerts per webhook call")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--window", type=float, default=2.0, help="coalescing window, seconds")
    ap.add_argument("--target", choices=("local", "lab"), default="local")
    ap.add_argument("--queue-max", type=int, default=5000, help="OPSBOT_ALERT_QUEUE_MAX: alerts waiting for a probe")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="opsbot-storm-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc, db, cluster = start_server(tmp, port, args.window, args.target, args.queue_max)
    try:
        await wait_ready(url)
        bodies = storm(args.alerts, args.groups, cluster, args.per_call)
        base_lat, base_s = await baseline(url, len(bodies), args.concurrency)
        t_start = time.perf_counter()
        lat, accepted, rejected, dropped, elapsed = await fire(url, bodies, args.concurrency)
        while unprocessed(db) and time.perf_counter() - t_start < 300:
            await asyncio.sleep(0.2)
        drained = time.perf_counter() - t_start
        with sqlite3.connect(db) as c:
            stored = {k for (k,) in c.execute("select dedup_key from alerts")}
            probes = [json.loads(r) for (r,) in c.execute("select roles from probes where trigger_kind = 'alert'")]
            left = c.execute("select count(*) from alerts where probe_id is null").fetchone()[0]
        lost = accepted - stored
        sent_alerts = sum(len(b["alerts"]) for b in bodies)

        table = Table(title=f"alert storm: {sent_alerts} alerts in {len(bodies)} webhook calls, {args.groups} groups, "
                            f"concurrency {args.concurrency}, target {args.target}, queue max {args.queue_max}")
        for col in ("what", "calls/s", "alerts/s", "p50 ms", "p99 ms"):
            table.add_column(col, justify="right" if col != "what" else "left")
        table.add_row("baseline GET /healthz", f"{len(base_lat) / base_s:.0f}", "—", f"{pct(base_lat, 50):.1f}", f"{pct(base_lat, 99):.1f}")
        table.add_row("POST /alerts (accepted)", f"{len(lat) / elapsed:.0f}", f"{sent_alerts / elapsed:.0f}",
                      f"{pct(lat, 50):.1f}", f"{pct(lat, 99):.1f}")
        console.print(table)
        bound = math.ceil(drained / args.window) + 1
        per_role = {r: sum(1 for p in probes if p == [r]) for r in ROLES}
        facts = Table(title="what happened to them")
        facts.add_column("figure")
        facts.add_column("value", justify="right")
        facts.add_row("distinct alerts stored (dedup by fingerprint+status+start)", str(len(stored)))
        facts.add_row("503 answers (retried)", str(rejected))
        facts.add_row("connection errors (retried)", str(dropped))
        facts.add_row("alerts lost (accepted, not in the database)", str(len(lost)))
        facts.add_row("stored alerts without a probe after draining", str(left))
        facts.add_row("time until every alert was probed", f"{drained:.1f} s")
        for r in ROLES:
            facts.add_row(f"probes started for {r} (bound: one per {args.window:g} s window = {bound})", str(per_role[r]))
        console.print(facts)
        if lost or left or any(n > bound for n in per_role.values()):
            raise SystemExit("FAILED: alerts lost, left unprobed, or more probes than windows")
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    asyncio.run(main())
