"""Store throughput: probes and alerts written per second, history read latency; SQLite and PostgreSQL.

    PYTHONPATH=. .venv/bin/python bench/store_writes.py [--probes 300] [--alerts 2000]

PostgreSQL runs on a throw-away server (tests/databases.py; needs root and Debian's postgresql).
The baseline row in each table is the same work through bare sqlite3 inserts of the same bytes
(no ORM, no retry wrapper), so the cost of the Store's layer is visible.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opsbot.bundle import Bundle, utcnow  # noqa: E402
from opsbot.store import AlertIn, Store  # noqa: E402
from opsbot.store.store import compress_bundle  # noqa: E402
from tests.databases import PostgresServer  # noqa: E402


def bundle(i: int) -> Bundle:
    ok = {"ok": True}
    logs = "\n".join(f"2026-11-30T10:00:{j % 60:02d}+0000 node2 python3[42]: [TP0] Decode batch #{j}" for j in range(300))
    metrics = "\n".join(f'sglang:num_running_reqs{{tp_rank="{t}"}} {i % 7}' for t in range(8))
    return Bundle.model_validate({"cluster": "lab", "started_at": utcnow(), "finished_at": utcnow(), "roles": [
        {"role": role, "node": "node2", "unit": f"sglang-{role}.service", "systemd": {**ok, "raw": "ActiveState=active"},
         "metrics": {**ok, "samples": [{"at": utcnow(), "raw": metrics}] * 2}, "health": ok,
         "logs": {**ok, "raw": logs}} for role in ("prefill", "decode", "router")]})


def run(url: str, probes: list[Bundle], alerts: int) -> dict[str, float]:
    store = Store(url)
    t = time.perf_counter()
    for b in probes:
        store.save_probe(b)
    probe_s = time.perf_counter() - t
    t = time.perf_counter()
    for i in range(alerts):
        store.save_alert(AlertIn(fingerprint=f"fp{i % (alerts // 2)}", status="firing", labels={"alertname": "X"}))
    alert_s = time.perf_counter() - t
    lat = []
    for _ in range(20):
        t = time.perf_counter()
        store.history(role="decode", limit=200)
        lat.append(time.perf_counter() - t)
    store.close()
    return {"probes/s": len(probes) / probe_s, "alerts/s": alerts / alert_s,
            "history p50 ms": statistics.median(lat) * 1000}


def baseline(path: Path, probes: list[Bundle], alerts: int) -> dict[str, float]:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE p (id TEXT PRIMARY KEY, b BLOB)")
    db.execute("CREATE TABLE a (k TEXT UNIQUE)")
    t = time.perf_counter()
    for b in probes:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO p VALUES (?, ?)", (b.id, compress_bundle(b)))
        db.execute("COMMIT")
    probe_s = time.perf_counter() - t
    t = time.perf_counter()
    for i in range(alerts):
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT OR IGNORE INTO a VALUES (?)", (f"fp{i % (alerts // 2)}",))
        db.execute("COMMIT")
    return {"probes/s": len(probes) / probe_s, "alerts/s": alerts / (time.perf_counter() - t),
            "history p50 ms": float("nan")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--probes", type=int, default=300)
    ap.add_argument("--alerts", type=int, default=2000)
    args = ap.parse_args()
    probes = [bundle(i) for i in range(args.probes)]
    raw = len(probes[0].to_json(indent=None))
    packed = len(compress_bundle(probes[0]))
    rows: list[tuple[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as d:
        rows.append(("baseline: bare sqlite3", baseline(Path(d) / "base.db", probes, args.alerts)))
        rows.append(("Store on SQLite (WAL)", run(f"sqlite:///{d}/opsbot.db", probes, args.alerts)))
    if PostgresServer.why_not() is None:
        pg = PostgresServer()
        try:
            pg.start()
            rows.append(("Store on PostgreSQL 15", run(pg.fresh_database(), probes, args.alerts)))
        finally:
            pg.stop()
    table = Table(title=f"store writes: {args.probes} probes ({raw} B JSON -> {packed} B zlib), "
                        f"{args.alerts} alerts (half duplicates)")
    for col in ("backend", "probes/s", "alerts/s", "history p50 ms"):
        table.add_column(col, justify="right")
    for name, r in rows:
        table.add_row(name, *(f"{r[k]:.1f}" for k in ("probes/s", "alerts/s", "history p50 ms")))
    Console().print(table)


if __name__ == "__main__":
    main()
