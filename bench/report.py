"""Report generation over a year of history: status and weekly reports, built and rendered, on SQLite.

    PYTHONPATH=. .venv/bin/python bench/report.py [--every-min 15] [--repeat 5]

Seeds one year of probes (every ``--every-min`` minutes, each with its compressed bundle),
findings on about 3 % of them, alerts, restarts, notes and decisions. Then times:

* opsbot: ``build_status`` / ``build_weekly`` (bounded queries on light columns; the bundle of the
  latest probe only) and the render to Markdown + HTML + Block Kit;
* baseline: the naive way, the same reports composed after loading every row of the year through
  the Store's list methods (``probes``/``findings``/``actions`` with no bounds) and filtering in Python.

Prometheus is left out (the weekly report says so); its queries are timed by the integration tests.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opsbot.report.prom import WeekData  # noqa: E402
from opsbot.report.render import render  # noqa: E402
from opsbot.report.status import (  # noqa: E402
    build_status,
    compose_status,
    current_state,
    load_context,
)
from opsbot.report.week import parse_week, zone  # noqa: E402
from opsbot.report.weekly import build_weekly, compose_weekly  # noqa: E402
from opsbot.settings import Settings  # noqa: E402
from opsbot.store import Store  # noqa: E402
from opsbot.store.models import Action, Decision, Finding, Note, Probe  # noqa: E402
from opsbot.store.periods import AlertRow, History, ProbeRow  # noqa: E402
from opsbot.store.store import compress_bundle  # noqa: E402
from tests.reportseed import CLUSTER, QUEUE, WEDGED, bundle_at  # noqa: E402

NOW = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc)
WEEK = "2026-W27"


def seed(store: Store, every: timedelta, progress: Progress) -> int:
    """A year of rows, written in batches through the Store's session (the bundle blob shared)."""
    rng = random.Random(1)
    blob = compress_bundle(bundle_at(NOW))
    start = NOW - timedelta(days=365)
    total = int(timedelta(days=365) / every)
    task = progress.add_task("seeding a year of history", total=total)
    t, n = start, 0
    while t < NOW:
        parents: list[object] = []
        rows: list[object] = []
        for _ in range(2000):
            if t >= NOW:
                break
            pid = f"p{n:08d}"
            sick = rng.random() < 0.03
            finding = rng.choice([QUEUE, WEDGED]) if sick else None
            parents.append(Probe(id=pid, cluster=CLUSTER, roles=["prefill", "decode", "router"], started_at=t,
                              finished_at=t + timedelta(seconds=5), trigger_kind="alert" if sick else "schedule",
                              trigger_user=None, top_incident=finding.incident if finding else None,
                              ok_axes={}, bundle=blob))
            if finding:
                rows.append(Finding(probe_id=pid, cluster=CLUSTER, incident=finding.incident, severity=finding.severity,
                                    roles=finding.roles, title=finding.title, summary=finding.summary,
                                    evidence=finding.evidence, detail=finding.model_dump(), at=t))
                if finding is WEDGED and rng.random() < 0.3:
                    rows.append(Action(id=f"a{n:08d}", kind="restart", cluster=CLUSTER, role="decode", state="succeeded",
                                       plan={"units": ["sglang-dsv4-decode.service"]}, reason="wedged",
                                       requested_by="alice", surface="slack", created_at=t, expires_at=t,
                                       approved_by="bob", approved_surface="slack", started_at=t, finished_at=t,
                                       outcome="verified"))
            if n % 500 == 0:
                rows.append(Note(kind=rng.choice(["done", "doing", "blocked", "next"]), text=f"item {n}", actor="alice",
                                 created_at=t))
                rows.append(Decision(text=f"decision {n}", why="because", actor="bob", created_at=t))
            t += every
            n += 1
        store.write(lambda s, parents=parents, rows=rows: (s.add_all(parents), s.flush(), s.add_all(rows)))
        progress.update(task, completed=n)
    return n


def naive_history(store: Store, since: datetime, until: datetime) -> History:
    """What a first version would do: list everything, filter in Python."""
    probes = [p for p in store.probes(limit=10**9) if since <= p.started_at]
    return History(
        since=since, until=until,
        probes=[ProbeRow(p.id, p.cluster, p.started_at, p.finished_at, p.trigger_kind, p.top_incident) for p in probes],
        findings=[f for f in store.findings() if since <= f.at < until],
        alerts=[AlertRow(a.probe_id, a.starts_at, a.received_at) for a in store.alerts(limit=10**9) if a.probe_id],
        actions=[a for a in store.actions(limit=10**9) if since <= a.created_at < until],
        notes=[n for n in store.notes() if n.created_at < until],
        decisions=[d for d in store.decisions() if d.created_at < until])


def timed(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--every-min", type=float, default=15.0)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    console = Console()
    settings = Settings(report_timezone="UTC", goal="bench")
    week = parse_week(WEEK, zone("UTC"))
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(f"sqlite:///{Path(tmp) / 'year.db'}")
        with Progress(console=console, transient=True) as progress:
            probes = seed(store, timedelta(minutes=args.every_min), progress)
        db_mb = (Path(tmp) / "year.db").stat().st_size / 2**20

        def ours_status() -> None:
            r = build_status(store, None, settings, now=NOW)
            for fmt in ("markdown", "html", "blocks"):
                render(r, fmt)

        def ours_weekly() -> None:
            r = asyncio.run(build_weekly(store, None, week, settings=settings, now=NOW))
            for fmt in ("markdown", "html", "blocks"):
                render(r, fmt)

        def naive_status() -> None:
            since = NOW - timedelta(days=7)
            h = naive_history(store, since, NOW)
            context = load_context(settings, None)
            r = compose_status(now=NOW, since=since, history=h, current=current_state(store, None, NOW, None),
                               context=context, goal=settings.goal)
            for fmt in ("markdown", "html", "blocks"):
                render(r, fmt)

        def naive_weekly() -> None:
            h = naive_history(store, week.previous().start, week.end)
            parts = {"current": current_state(store, None, NOW, None), "context": load_context(settings, None),
                     "goal": settings.goal}
            r = compose_weekly(week=week, now=NOW, history=h, this=WeekData(), prev=WeekData(), status_parts=parts)
            for fmt in ("markdown", "html", "blocks"):
                render(r, fmt)

        rows = [("status, last 7 days", timed(ours_status, args.repeat), timed(naive_status, 1)),
                (f"weekly {WEEK} (charts)", timed(ours_weekly, args.repeat), timed(naive_weekly, 1))]
        store.close()
    table = Table(title=f"report over a year of history: {probes:,} probes, SQLite {db_mb:.0f} MiB "
                        f"(median of {args.repeat}; baseline once)")
    for col in ("report", "opsbot (s)", "baseline: load all, filter (s)", "speed-up"):
        table.add_column(col, justify="right")
    for name, ours, naive in rows:
        table.add_row(name, f"{ours:.3f}", f"{naive:.3f}", f"{naive / ours:.0f}x")
    console.print(table)


if __name__ == "__main__":
    main()
