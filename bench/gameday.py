"""Game day, timed: for each class the lab can break, seconds from the break to (a) the alert firing
in Prometheus, (b) opsbot's finding, (c) the Slack message, (d) recovery after approval (where the
message offers a restart), and the incident resolved; median over runs. "incidents" and "plans": the
most incidents opened and restart plans made in one run, from the break to its end (1 and at most 1:
the alerts a restart causes join the restart's incident, later probes reuse the waiting plan).

    python bench/gameday.py [--runs 3] [--classes decode-wedged,config-crashloop] [--timeout 60]

Boots its own two-node lab (root; the cached root file system), starts the lab's monitoring (real
Prometheus with the rendered rules at game-day timings, real Alertmanager) and ``opsbot serve`` with
the Slack recording server (tests/gameday.py), and drives each class as the end-to-end tests do:
break, wait, click Restart as the approver when offered, else heal the lab as an operator would.

Baseline in the same run: a bare probe of the broken role (``opsbot.collect.probe``) right after
its run, the floor of (b) - (a). Goal: (b) - (a) <= one metrics window + 1 s; (d) within the
restart's verify deadline; every class named correctly on every run.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opsbot.collect.probe import probe  # noqa: E402
from opsbot.lab.breaks import BREAKS  # noqa: E402
from opsbot.lab.nodes import Lab, isolated_settings  # noqa: E402
from opsbot.settings import Settings  # noqa: E402
from tests.gameday import GameDay, GameDayError, Run, alerted_by  # noqa: E402

# classes whose alert the lab's monitoring cannot raise, with why
OFF_GAMEDAY = {
    "output-corruption": "its rule reads opsbot's own opsbot_fidelity_result, which the lab's Prometheus does not "
                         "scrape (tests/test_dpranks_lab.py names it from the fidelity run)",
}

console = Console(width=220)


def bare_probe_s(lab: Lab, role: str) -> float:
    """One probe of the role as ``opsbot probe ROLE`` takes it (the metrics window included)."""
    started = time.perf_counter()
    asyncio.run(probe(lab.inventory, roles=[role], settings=Settings()))
    return time.perf_counter() - started


def rule_incidents(rules_file: Path) -> set[str]:
    """The incident labels of the alert rules Prometheus was loaded with."""
    groups = yaml.safe_load(rules_file.read_text())["groups"]
    return {r["labels"]["incident"] for g in groups for r in g["rules"] if "alert" in r and "incident" in r.get("labels", {})}


def median(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--classes", default=",".join(BREAKS))
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds each step may take")
    args = ap.parse_args()
    classes = [c for c in args.classes.split(",") if c]
    work = Path(tempfile.mkdtemp(prefix="opsbot-gameday-"))
    lab = Lab(isolated_settings(work / "lab"))
    window = Settings().metrics_window_s
    results: dict[str, list[Run]] = {}
    failures: dict[str, list[str]] = {}
    baselines: dict[str, list[float]] = {}
    console.print(f"booting the lab in {work} ...")
    day = GameDay(lab, work / "opsbot")
    try:
        lab.up(2)
        day.start().quiet()
        announced = rule_incidents(lab.monitoring.dir / "prometheus" / "rules" / "sglang-pd.rules.yml")
        silent = [c for c in classes if not alerted_by(c) & announced]
        for cls in silent:  # e.g. long-context-recall-regression: the recall probe finds it, no metric shows it
            console.print(f"{cls}: no alert rule announces it or what it explains; not a game-day class")
        classes = [c for c in classes if c not in silent]
        for cls in [c for c in classes if c in OFF_GAMEDAY]:
            console.print(f"{cls}: {OFF_GAMEDAY[cls]}; not a game-day class")
        classes = [c for c in classes if c not in OFF_GAMEDAY]
        for cls in classes:
            for i in range(args.runs):
                console.print(f"{cls} run {i + 1}/{args.runs} ...")
                try:
                    results.setdefault(cls, []).append(day.run(cls, timeout=args.timeout))
                except GameDayError as exc:
                    failures.setdefault(cls, []).append(str(exc))
                    console.print(f"  [red]{exc}[/red]")
                finally:
                    day.quiet()
                baselines.setdefault(cls, []).append(bare_probe_s(lab, BREAKS[cls].role))
    finally:
        day.stop()
        lab.down()
    table = Table(title=f"game day on the lab, median of {args.runs} runs (s from the break); "
                        f"metrics window {window:g} s, goal (b)-(a) <= {window + 1:g} s")
    for col in ("class", "ok runs", "named right", "(a) alert", "(b) finding", "(c) Slack", "(d) recovered",
                "resolved", "(b)-(a)", "bare probe", "restart offered", "incidents", "plans"):
        table.add_column(col)
    for cls in classes:
        runs = results.get(cls, [])
        named = sum(r.named == cls and r.messages == 1 for r in runs)
        gap = median([r.finding_s - r.alert_s for r in runs if r.finding_s is not None and r.alert_s is not None])
        table.add_row(cls, f"{len(runs)}/{args.runs}", f"{named}/{args.runs}",
                      fmt(median([r.alert_s for r in runs])), fmt(median([r.finding_s for r in runs])),
                      fmt(median([r.slack_s for r in runs])), fmt(median([r.recovery_s for r in runs])),
                      fmt(median([r.resolved_s for r in runs])), fmt(gap), fmt(median(list(baselines.get(cls, [])))),
                      "yes" if any(r.restart_offered for r in runs) else "no",
                      str(max((r.incidents_opened for r in runs), default=0)), str(max((r.plans for r in runs), default=0)))
    console.print(table)
    for cls, errs in failures.items():
        console.print(f"[red]{cls}[/red]: " + "; ".join(sorted(set(errs))))
    for cls, runs in results.items():
        for r in runs:
            for note in r.notes:
                console.print(f"[dim]{cls}: {note}[/dim]")


if __name__ == "__main__":
    main()
