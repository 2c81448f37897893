"""An alert storm against a running opsbot: 10,000 Alertmanager alerts in 50 groups, with repeats
and resolves, posted concurrently to ``POST /alerts`` of a real uvicorn on loopback over raw keep-alive connections.

    python bench/alert_storm.py [--alerts 10000] [--groups 50] [--concurrency 64] [--window 2]
                                [--target local|lab] [--database sqlite|postgresql] [--queue-max 5000]
                                [--profile storm.speedscope.json|storm.trace.json] [--rate 1000]
                                [--baseline DIR --rounds N] [--db-cpu CPU]

opsbot runs as ``opsbot serve`` in its own process with a fresh SQLite file or PostgreSQL database. Its probes are
the real ``opsbot.collect.probe`` against the chosen target: ``local`` (default) is a cheap
configured no-op target, three roles on local-transport nodes with no systemd units and no
HTTP endpoints, so every axis fails fast and a probe costs milliseconds; ``lab`` uses the lab's
inventory (``opsbot lab up`` first). Baseline in the same run: ``GET /healthz`` at the same
concurrency (the HTTP floor). Closed loop by default (each connection sends its next call as soon as
the last is answered: the most the server accepts, latency = connections / rate by Little's law);
``--rate`` offers a fixed number of alerts/s on a clock instead (the latency at that load, measured
from each call's due time). Printed: accepted/s, p50/p99 latency, 503s, alerts lost (accepted
but not in the database: must be 0) and probes started per role against the coalescing bound.
``--baseline DIR`` runs another checkout's server (the code before a change) and this one's in turn,
``--rounds`` times, against the same database server; ``--db-cpu`` pins PostgreSQL to one CPU and the
service and this client to the others.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console
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


class KeepAlive:
    """One raw HTTP/1.1 keep-alive connection: the request bytes are built once, the answer is read by
    Content-Length. No client library, so that the client is not what is measured (httpx tops out
    near 160 calls/s on this machine, even for ``/healthz``)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def call(self, request: bytes) -> int:
        """Send one request, return the status; reconnects after a closed or broken connection."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        try:
            self.writer.write(request)
            head = await self.reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await self.reader.readexactly(length)
            if b"connection: close" in head.lower():
                await self.close()
            return status
        except (OSError, asyncio.IncompleteReadError, ValueError):
            await self.close()
            raise ConnectionError("connection lost") from None

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = self.reader = None


def post(path: str, body: bytes, port: int) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"X-Opsbot-Alert-Token: {TOKEN}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


def get(path: str, port: int) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()


async def fire(port: int, bodies: list[dict], concurrency: int) -> tuple[list[float], set[str], int, int, float]:
    """Post every body (retrying 503 and lost connections, as Alertmanager does) over ``concurrency``
    keep-alive connections; latencies of accepted calls, keys accepted."""
    latencies: list[float] = []
    accepted: set[str] = set()
    rejected = dropped = 0
    requests = [(post("/alerts", json.dumps(b).encode(), port), b) for b in bodies]  # encoded before the clock
    queue = iter(requests)

    async def worker() -> None:
        nonlocal rejected, dropped
        conn = KeepAlive("127.0.0.1", port)
        for request, body in queue:
            while True:
                t = time.perf_counter()
                try:
                    status = await conn.call(request)
                except ConnectionError:  # Alertmanager retries these too; duplicates dedup
                    dropped += 1
                    await asyncio.sleep(0.05)
                    continue
                if status == 503:
                    rejected += 1
                    await asyncio.sleep(0.05)
                    continue
                if status != 200:
                    raise SystemExit(f"POST /alerts answered {status}")
                latencies.append(time.perf_counter() - t)
                accepted.update(dedup_key(a) for a in body["alerts"])
                break
        await conn.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, accepted, rejected, dropped, time.perf_counter() - t0


async def paced(port: int, requests: list[bytes], rate: float, connections: int,
                on_answer: Callable[[int, int], bool]) -> tuple[list[float], float]:
    """Open loop: request ``i`` is due at ``i / rate`` s, whatever the answers before it (as Alertmanager's
    groups fire on their own clocks); latency runs from the due time, so a late start counts
    (no coordinated omission). ``on_answer(i, status)`` says whether the answer is final (False: retry)."""
    free: asyncio.Queue[KeepAlive] = asyncio.Queue()
    for _ in range(connections):
        free.put_nowait(KeepAlive("127.0.0.1", port))
    latencies: list[float] = []
    slow: list[int] = []  # the second of the run (by due time) of each call slower than 100 ms
    tasks: list[asyncio.Task[None]] = []

    async def one(i: int, due: float, conn: KeepAlive) -> None:
        try:
            while True:
                try:
                    status = await conn.call(requests[i])
                except ConnectionError:
                    await asyncio.sleep(0.05)
                    continue
                if on_answer(i, status):
                    latencies.append(time.perf_counter() - due)
                    if latencies[-1] > 0.1:
                        slow.append(int(i / rate))
                    return
                await asyncio.sleep(0.05)
        finally:
            free.put_nowait(conn)

    t0 = time.perf_counter()
    for i in range(len(requests)):
        due = t0 + i / rate
        if (wait := due - time.perf_counter()) > 0:
            await asyncio.sleep(wait)
        conn = await free.get()  # all connections busy: this call starts late, and its latency shows it
        tasks.append(asyncio.create_task(one(i, due, conn)))
    await asyncio.gather(*tasks)
    while not free.empty():
        await free.get_nowait().close()
    if slow:
        console.print("calls over 100 ms, by second of the run: "
                      + ", ".join(f"{sec} s: {n}" for sec, n in sorted(Counter(slow).items())))
    return latencies, time.perf_counter() - t0


async def fire_paced(port: int, bodies: list[dict], rate: float, connections: int
                     ) -> tuple[list[float], set[str], int, int, float]:
    """``fire`` in the open loop at ``rate`` calls/s."""
    accepted: set[str] = set()
    rejected = 0

    def answered(i: int, status: int) -> bool:
        nonlocal rejected
        if status == 503:
            rejected += 1
            return False
        if status != 200:
            raise SystemExit(f"POST /alerts answered {status}")
        accepted.update(dedup_key(a) for a in bodies[i]["alerts"])
        return True

    requests = [post("/alerts", json.dumps(b).encode(), port) for b in bodies]
    latencies, elapsed = await paced(port, requests, rate, connections, answered)
    return latencies, accepted, rejected, 0, elapsed


async def baseline_paced(port: int, calls: int, rate: float, connections: int) -> tuple[list[float], float]:
    def answered(i: int, status: int) -> bool:
        if status != 200:
            raise SystemExit("GET /healthz failed")
        return True

    return await paced(port, [get("/healthz", port)] * calls, rate, connections, answered)


async def baseline(port: int, calls: int, concurrency: int) -> tuple[list[float], float]:
    """``GET /healthz`` over the same kind of connections: the HTTP floor of this server and client."""
    latencies: list[float] = []
    request = get("/healthz", port)
    left = iter(range(calls))

    async def worker() -> None:
        conn = KeepAlive("127.0.0.1", port)
        for _ in left:
            t = time.perf_counter()
            if await conn.call(request) != 200:
                raise SystemExit("GET /healthz failed")
            latencies.append(time.perf_counter() - t)
        await conn.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies, time.perf_counter() - t0


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] * 1000 if len(values) > 1 else values[0] * 1000


def start_server(tmp: Path, port: int, db_url: str, args: argparse.Namespace,
                 checkout: Path | None = None) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "OPSBOT_DATA_DIR": str(tmp), "OPSBOT_DATABASE_URL": db_url,
           "OPSBOT_ALERT_TOKEN": TOKEN, "OPSBOT_COALESCE_WINDOW_S": str(args.window), "OPSBOT_PORT": str(port),
           "OPSBOT_ALERT_QUEUE_MAX": str(args.queue_max)}
    if args.target == "local":
        (tmp / "inventory.yaml").write_text(LOCAL_INVENTORY)
        env.update(OPSBOT_INVENTORY=str(tmp / "inventory.yaml"), OPSBOT_METRICS_WINDOW_S="0")
        cluster = "bench"
    else:
        inv = Path(os.environ.get("OPSBOT_INVENTORY", ".opsbot/inventory.yaml")).resolve()
        env["OPSBOT_INVENTORY"] = str(inv)
        cluster = next(iter(__import__("yaml").safe_load(inv.read_text())["clusters"]))
    checkout = checkout or Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = str(checkout)  # this or another checkout's opsbot (the code before a change), same interpreter
    argv = [sys.executable, "-m", "opsbot", "serve", "--log-level", "warning"]
    if args.db_cpu is not None:  # the service and the load generator off the database's core
        argv = ["taskset", "-c", args.others_cpu, *argv]
    log = open(tmp / "serve.log", "w")  # noqa: SIM115
    # started in the checkout: ``python -m`` puts the working directory first on sys.path, ahead of
    # PYTHONPATH, so a baseline started from the after tree imported the after code
    return subprocess.Popen(argv, env=env, cwd=checkout, stdout=log, stderr=subprocess.STDOUT), cluster


def start_profile(args: argparse.Namespace, pid: int) -> subprocess.Popen | None:
    """py-spy attached to the running server (needs ptrace: root), so only the storm is sampled."""
    if not args.profile:
        return None
    argv = ["py-spy", "record", "--pid", str(pid), "-o", str(args.profile), "--rate", "100", "--nonblocking"]
    if args.profile.name.endswith(".trace.json"):  # idle samples too: when the loop waited, not only what ran
        argv += ["--format", "chrometrace", "--idle"]
    else:
        argv += ["--format", "speedscope"]
    spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    time.sleep(1)  # py-spy attaches before the first call is due
    return spy


def stop_profile(spy: subprocess.Popen | None) -> None:
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        spy.wait(60)


async def wait_ready(port: int, proc: subprocess.Popen) -> None:
    for _ in range(300):
        if proc.poll() is not None:
            break
        try:
            conn = KeepAlive("127.0.0.1", port)
            if await conn.call(get("/healthz", port)) == 200:
                await conn.close()
                return
        except (ConnectionError, OSError):
            pass
        await asyncio.sleep(0.1)
    raise SystemExit("opsbot serve did not start; see serve.log")


def query(db_url: str, sql: str) -> list[tuple]:
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as c:
            return [tuple(r) for r in c.execute(text(sql))]
    finally:
        engine.dispose()


def cpu_seconds(pids: list[int]) -> float:
    """CPU time (user + system, reaped children included) these processes have used so far."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended meanwhile: its time is in its parent's reaped children
        ticks += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def postgres_pids(pg: object | None) -> list[int]:
    """The PostgreSQL server's processes: the postmaster and its children (backends, writers)."""
    if pg is None:
        return []
    postmaster = int((pg.data / "postmaster.pid").read_text().split()[0])  # type: ignore[attr-defined]
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                children.append(int(stat.parent.name))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return [postmaster, *children]


def committed(db_url: str, pg: object | None) -> int:
    """Transactions committed in the run's PostgreSQL database so far (0 on SQLite: not counted)."""
    if pg is None:
        return 0
    return int(query(db_url, "select xact_commit from pg_stat_database where datname = current_database()")[0][0])


def database(kind: str, tmp: Path, args_db_cpu: str | None = None) -> tuple[str, object | None]:
    """The database URL for the run and the PostgreSQL server to stop afterwards (if any)."""
    if kind == "sqlite":
        return f"sqlite:///{tmp / 'opsbot.db'}", None
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.databases import PostgresServer

    server = PostgresServer()
    server.start()
    if args_db_cpu is not None:  # the whole server (postmaster and its backends) on its own core
        pid = int((server.data / "postmaster.pid").read_text().split()[0])
        subprocess.run(["taskset", "-a", "-p", "-c", args_db_cpu, str(pid)], check=True, capture_output=True)
    return server.fresh_database(), server


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--alerts", type=int, default=10_000)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--per-call", type=int, default=4, help="alerts per webhook call")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--window", type=float, default=2.0, help="coalescing window, seconds")
    ap.add_argument("--target", choices=("local", "lab"), default="local")
    ap.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite",
                    help="postgresql: a throw-away server (tests/databases.py; root and Debian's postgresql)")
    ap.add_argument("--queue-max", type=int, default=5000, help="OPSBOT_ALERT_QUEUE_MAX: alerts waiting for a probe")
    ap.add_argument("--profile", type=Path,
                    help="py-spy samples the server during the storm only (not its start or the /healthz baseline) "
                         "into this file: speedscope, or Chrome's trace format (time-stamped, idle "
                         "threads included) when it ends in .trace.json")
    ap.add_argument("--rate", type=float, default=0.0,
                    help="alerts/s offered in an open loop (calls due on a clock, --concurrency connections at most); "
                         "0: closed loop, every connection sends its next call at once (the most the server takes)")
    ap.add_argument("--baseline", type=Path,
                    help="another checkout (e.g. the code before a change): each round runs its server, then this "
                         "checkout's, against the same database server (a fresh database each); a summary follows")
    ap.add_argument("--rounds", type=int, default=1, help="rounds of (baseline, this checkout) with --baseline")
    ap.add_argument("--db-cpu", help="CPU for the PostgreSQL server alone (taskset); the service and this "
                                     "load generator get the other CPUs")
    args = ap.parse_args()
    args.others_cpu = None
    if args.db_cpu is not None:
        others = sorted(os.sched_getaffinity(0) - {int(args.db_cpu)})
        args.others_cpu = ",".join(map(str, others))
        os.sched_setaffinity(0, others)

    tmp = Path(tempfile.mkdtemp(prefix="opsbot-storm-"))
    db_url, pg = database(args.database, tmp, args.db_cpu)
    here = Path(__file__).resolve().parents[1]
    runs = [("after", here)] if args.baseline is None else [("before", args.baseline.resolve()), ("after", here)]
    summary: list[tuple[str, int, dict[str, float]]] = []
    try:
        for r in range(args.rounds):
            for label, checkout in runs:
                if r or label != runs[0][0]:
                    db_url = pg.fresh_database() if pg is not None else f"sqlite:///{tmp / f'opsbot-{r}-{label}.db'}"
                console.rule(f"round {r + 1}: {label} ({checkout})")
                summary.append((label, r + 1, await run_once(args, tmp, db_url, checkout, pg)))
    finally:
        if pg is not None:
            pg.stop()
    if args.baseline is not None:
        table = Table(title=f"before ({args.baseline}) / after ({here}), {args.database}, same database server")
        for col in ("run", "round", "alerts/s", "p50 ms", "p99 ms", "healthz p99 ms", "lost",
                    "service CPU ms/call", "database CPU ms/call", "commits"):
            table.add_column(col, justify="right" if col != "run" else "left")
        for label, r, fig in summary:
            table.add_row(label, str(r), f"{fig['alerts_s']:.0f}", f"{fig['p50']:.1f}", f"{fig['p99']:.1f}",
                          f"{fig['base_p99']:.1f}", str(int(fig['lost'])), f"{fig['service_ms']:.2f}",
                          f"{fig['db_ms']:.2f}", str(fig["commits"]))
        console.print(table)
    if any(fig["failed"] for _, _, fig in summary):
        raise SystemExit("FAILED: alerts lost, left unprobed, or more probes than windows")


async def run_once(args: argparse.Namespace, tmp: Path, db_url: str, checkout: Path,
                   pg: object | None = None) -> dict[str, float]:
    """One storm against a fresh server of ``checkout`` on ``db_url`` (served by ``pg``, if PostgreSQL); its
    figures, with the CPU time the service and the database used per call during the storm (what the
    machine's load does not change, unlike the latency)."""
    port = free_port()
    proc, cluster = start_server(tmp, port, db_url, args, checkout)
    try:
        await wait_ready(port, proc)
        bodies = storm(args.alerts, args.groups, cluster, args.per_call)
        t_start = time.perf_counter()
        if args.rate:
            calls_s = args.rate / args.per_call
            base_lat, base_s = await baseline_paced(port, len(bodies), calls_s, args.concurrency)
            spy = start_profile(args, proc.pid)
            cpu = cpu_seconds([proc.pid]), cpu_seconds(postgres_pids(pg))
            commits = committed(db_url, pg)
            t_start = time.perf_counter()
            lat, accepted, rejected, dropped, elapsed = await fire_paced(port, bodies, calls_s, args.concurrency)
        else:
            base_lat, base_s = await baseline(port, len(bodies), args.concurrency)
            spy = start_profile(args, proc.pid)
            cpu = cpu_seconds([proc.pid]), cpu_seconds(postgres_pids(pg))
            commits = committed(db_url, pg)
            t_start = time.perf_counter()
            lat, accepted, rejected, dropped, elapsed = await fire(port, bodies, args.concurrency)
        service_ms = (cpu_seconds([proc.pid]) - cpu[0]) * 1000 / len(bodies)
        db_ms = (cpu_seconds(postgres_pids(pg)) - cpu[1]) * 1000 / len(bodies)
        stop_profile(spy)
        unprobed = "select count(*) from alerts where probe_id is null and probe_failed_at is null"
        polls = 1
        while query(db_url, unprobed)[0][0] and time.perf_counter() - t_start < 300:
            await asyncio.sleep(0.2)
            polls += 1
        drained = time.perf_counter() - t_start
        await asyncio.sleep(1.5)  # backends report their commits to the statistics at most once a second
        commits = committed(db_url, pg) - commits - polls
        stored_rows = [k for (k,) in query(db_url, "select dedup_key from alerts")]
        stored = set(stored_rows)
        probes = [r if isinstance(r, list) else json.loads(r)
                  for (r,) in query(db_url, "select roles from probes where trigger_kind = 'alert'")]
        left = query(db_url, unprobed)[0][0]
        lost = accepted - stored
        sent_alerts = sum(len(b["alerts"]) for b in bodies)

        loop = f"open loop at {args.rate:g} alerts/s, at most" if args.rate else "closed loop,"
        table = Table(title=f"alert storm on {args.database}: {sent_alerts} alerts in {len(bodies)} webhook calls, "
                            f"{args.groups} groups, {loop} {args.concurrency} keep-alive connections, target {args.target}, "
                            f"queue max {args.queue_max}")
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
        facts.add_row("rows stored more than once", str(len(stored_rows) - len(stored)))
        facts.add_row("503 answers (retried)", str(rejected))
        facts.add_row("connection errors (retried)", str(dropped))
        facts.add_row("alerts lost (accepted, not in the database)", str(len(lost)))
        facts.add_row("stored alerts without a probe after draining", str(left))
        facts.add_row("time until every alert was probed", f"{drained:.1f} s")
        facts.add_row("CPU per webhook call during the storm: service (with its probes)", f"{service_ms:.2f} ms")
        if pg is not None:
            facts.add_row("CPU per webhook call during the storm: PostgreSQL (every process)", f"{db_ms:.2f} ms")
            facts.add_row("transactions committed, storm and drain (the intake's group commits, the probes')",
                          str(commits))
        for r in ROLES:
            facts.add_row(f"probes started for {r} (bound: one per {args.window:g} s window = {bound})", str(per_role[r]))
        console.print(facts)
        failed = bool(lost or left or any(n > bound for n in per_role.values()))
        if failed:
            console.print("[red]FAILED: alerts lost, left unprobed, or more probes than windows")
        return {"alerts_s": sent_alerts / elapsed, "p50": pct(lat, 50), "p99": pct(lat, 99),
                "base_p99": pct(base_lat, 99), "lost": len(lost), "failed": failed,
                "service_ms": service_ms, "db_ms": db_ms, "commits": commits}
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    asyncio.run(main())
