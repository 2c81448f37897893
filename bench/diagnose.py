"""How long diagnosing a three-role bundle with the full runbook set takes.

    python bench/diagnose.py [--runs 1000] [--bundle FILE] [--before GITREF]

Rows, each timed over many runs in this process (median and p99):
  parse      ``parse_bundle`` of the JSON text alone (the unit the last column counts in);
  facts      every parser (unit, metrics via prometheus_client, logs, GPU, Xid) into fact maps,
             parsing every metric family (before) or only those the runbooks read (now);
  runbooks   the runbook engine alone over those facts: CEL conditions, ordering, templates;
  diagnose   end to end: parse + facts + runbooks, before (every family) and now (``diagnose``);
  cold       load and compile every runbook and pattern, then diagnose once (a process's first run);
  GITREF     with --before: the same end-to-end diagnosis by opsbot and runbooks/ as of GITREF (e.g. a
             commit before a change), extracted with ``git archive`` and timed in a child process
             between two rounds of ``now``, so both see the same machine load.
Goal: diagnose under 10 ms median. Figures are written down in bench/README.md.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from opsbot.bundle import parse_bundle
from opsbot.datafiles import data_dir
from opsbot.diagnose import diagnose, load_runbooks
from opsbot.diagnose.evaluate import evaluate
from opsbot.parse.facts import bundle_facts

DEFAULT = Path(__file__).resolve().parents[1] / "tests/scenarios/dev/prefill-saturated.json"


def timed(fn: Callable[[], object], runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU milliseconds per run (CPU time is what a loaded, shared machine distorts least)."""
    wall, cpu = [], []
    for _ in range(runs):
        t, c = time.perf_counter(), time.process_time()
        fn()
        cpu.append((time.process_time() - c) * 1000)
        wall.append((time.perf_counter() - t) * 1000)
    return wall, cpu


_CHILD = """
import json, sys, time
from pathlib import Path
from opsbot.bundle import parse_bundle
from opsbot.diagnose import diagnose, load_runbooks
root, bundle, runs = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
text = bundle.read_text(encoding="utf-8")
rs = load_runbooks(root / "runbooks")
found = [f.incident for f in diagnose(parse_bundle(text), rs).findings]
wall, cpu = [], []
for _ in range(runs):
    t, c = time.perf_counter(), time.process_time()
    diagnose(parse_bundle(text), rs)
    cpu.append((time.process_time() - c) * 1000)
    wall.append((time.perf_counter() - t) * 1000)
print(json.dumps({"wall": wall, "cpu": cpu, "found": found}))
"""


def time_before(ref: str, bundle: Path, runs: int) -> tuple[list[float], list[float], list[str]]:
    """Time the end-to-end diagnosis of opsbot as of ``ref`` (``git archive``) in a child process."""
    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(repo), "archive", ref, "opsbot", "runbooks"],
                                 capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        # cwd=tmp: `python -c` puts the working directory first on sys.path, which would import today's opsbot
        out = subprocess.run([sys.executable, "-c", _CHILD, tmp, str(bundle.resolve()), str(runs)], capture_output=True,
                             text=True, check=True, env={**os.environ, "PYTHONPATH": tmp}, cwd=tmp)
    data = json.loads(out.stdout)
    return data["wall"], data["cpu"], data["found"]


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98] if len(xs) >= 2 else xs[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--bundle", type=Path, default=DEFAULT)
    ap.add_argument("--before", metavar="GITREF", help="also time opsbot as of this git ref, in the same run")
    args = ap.parse_args()
    text = args.bundle.read_text(encoding="utf-8")
    rs = load_runbooks(data_dir("runbooks"))
    b = parse_bundle(text)
    d = diagnose(b, rs)
    conditions = sum(1 for r in b.roles for rb in rs.runbooks if r.role in rb.spec.roles)
    cold_runs = max(5, args.runs // 50)
    table = rs.exceptions  # diagnose reads the exception table too: the rows below time the same work
    facts = bundle_facts(b, rs.patterns, rs.metric_facts, table)
    if evaluate(bundle_facts(b, rs.patterns, table=table), rs, b.id).model_dump() != d.model_dump():
        raise SystemExit("the diagnosis differs between a full parse and the runbooks' families")
    rows: dict[str, tuple[list[float], list[float]]] = {}
    if args.before:  # now, before, now: both see the same load
        half = max(1, args.runs // 2)
        first = timed(lambda: diagnose(parse_bundle(text), rs), half)
        wall, cpu, found = time_before(args.before, args.bundle, args.runs)
        second = timed(lambda: diagnose(parse_bundle(text), rs), args.runs - half)
        rows[f"end to end as of {args.before} (before)"] = (wall, cpu)
        rows["end to end now (same rounds)"] = (first[0] + second[0], first[1] + second[1])
        Console().print(f"{args.before} finds {found}; now finds {[f.incident for f in d.findings]}")
    rows |= {
        "parse JSON": timed(lambda: parse_bundle(text), args.runs),
        "facts, every family (before)": timed(lambda: bundle_facts(b, rs.patterns, table=table), args.runs),
        "facts, runbooks' families (now)": timed(lambda: bundle_facts(b, rs.patterns, rs.metric_facts, table), args.runs),
        "runbooks over facts": timed(lambda: evaluate(facts, rs, b.id), args.runs),
        "end to end, every family (before)": timed(
            lambda: evaluate(bundle_facts(pb := parse_bundle(text), rs.patterns, table=table), rs, pb.id), args.runs
        ),
        "end to end: parse + diagnose (now)": timed(lambda: diagnose(parse_bundle(text), rs), args.runs),
        "cold: load runbooks + diagnose": timed(lambda: diagnose(parse_bundle(text), load_runbooks(data_dir("runbooks"))), cold_runs),
    }
    base = statistics.median(rows["parse JSON"][1])
    t = Table(title=f"diagnose: {args.bundle.name}, {len(b.roles)} roles, {len(rs.runbooks)} runbooks, "
                    f"{conditions} conditions, {len(rs.patterns)} patterns, metric facts read {', '.join(f'{k} {len(v or ())}' for k, v in rs.metric_facts.items())} "
                    f"→ {[f.incident for f in d.findings]}")
    for col in ("step", "runs", "median ms", "p99 ms", "median CPU ms", "p99 CPU ms", "× parse JSON (CPU)"):
        t.add_column(col, justify="right" if col != "step" else "left")
    for name, (wall, cpu) in rows.items():
        med = statistics.median(cpu)
        t.add_row(name, str(len(wall)), f"{statistics.median(wall):.2f}", f"{p99(wall):.2f}", f"{med:.2f}", f"{p99(cpu):.2f}",
                  f"{med / base:.1f}")
    Console().print(t)
    before, now = (statistics.median(rows[k][1]) for k in ("end to end, every family (before)", "end to end: parse + diagnose (now)"))
    Console().print(f"end to end, CPU: {before:.2f} ms before → {now:.2f} ms now ({before / now:.1f}× faster)")
    if args.before:
        was, now = (statistics.median(rows[k][1]) for k in (f"end to end as of {args.before} (before)", "end to end now (same rounds)"))
        Console().print(f"end to end, CPU: {was:.2f} ms as of {args.before} → {now:.2f} ms now ({now / was:.2f}× the time)")
    for name in ("runbooks over facts", "end to end: parse + diagnose (now)"):
        wall, cpu = (statistics.median(x) for x in rows[name])
        Console().print(f"goal < 10 ms median, {name}: {'met' if wall < 10 else 'NOT met'} (wall {wall:.2f} ms, CPU {cpu:.2f} ms)")
    Console().print(f"load average during the run: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
