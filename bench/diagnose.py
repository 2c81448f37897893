"""How long diagnosing a three-role bundle with the full runbook set takes.

    python bench/diagnose.py [--runs 1000] [--bundle FILE]

Rows, each timed over many runs in this process (median and p99):
  parse    the baseline: ``parse_bundle`` of the JSON text alone;
  facts    parse + every parser (unit, metrics, logs, GPU, Xid) into fact maps;
  diagnose parse + ``diagnose`` with the loaded runbooks (facts, 36 CEL conditions, templates);
  cold     load and compile every runbook and pattern, then diagnose once (first run of a process).
Goal: diagnose under 10 ms median. Figures are written down in bench/README.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from opsbot.bundle import parse_bundle
from opsbot.diagnose import diagnose, load_runbooks
from opsbot.diagnose.evaluate import RUNBOOKS_DIR
from opsbot.diagnose.facts import bundle_facts

DEFAULT = Path(__file__).resolve().parents[1] / "tests/scenarios/written/prefill-saturation-unbootstrapped.json"


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98] if len(xs) >= 2 else xs[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--bundle", type=Path, default=DEFAULT)
    args = ap.parse_args()
    text = args.bundle.read_text(encoding="utf-8")
    rs = load_runbooks(RUNBOOKS_DIR)
    b = parse_bundle(text)
    d = diagnose(b, rs)
    conditions = sum(1 for r in b.roles for rb in rs.runbooks if r.role in rb.spec.roles)
    cold_runs = max(5, args.runs // 50)
    rows = {
        "parse (baseline)": timed(lambda: parse_bundle(text), args.runs),
        "parse + facts": timed(lambda: bundle_facts(parse_bundle(text), rs.patterns), args.runs),
        "parse + diagnose": timed(lambda: diagnose(parse_bundle(text), rs), args.runs),
        "cold: load runbooks + diagnose": timed(lambda: diagnose(parse_bundle(text), load_runbooks(RUNBOOKS_DIR)), cold_runs),
    }
    base = statistics.median(rows["parse (baseline)"])
    t = Table(title=f"diagnose: {args.bundle.name}, {len(b.roles)} roles, {len(rs.runbooks)} runbooks, "
                    f"{conditions} conditions, {len(rs.patterns)} patterns → {[f.incident for f in d.findings]}")
    for col in ("step", "runs", "median ms", "p99 ms", "× parse"):
        t.add_column(col, justify="right" if col != "step" else "left")
    for name, xs in rows.items():
        med = statistics.median(xs)
        t.add_row(name, str(len(xs)), f"{med:.3f}", f"{p99(xs):.3f}", f"{med / base:.1f}")
    Console().print(t)
    goal = statistics.median(rows["parse + diagnose"])
    Console().print(f"goal: diagnose median < 10 ms: {'met' if goal < 10 else 'NOT met'} ({goal:.2f} ms)")


if __name__ == "__main__":
    main()
