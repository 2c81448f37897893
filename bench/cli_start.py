"""How long an ``opsbot`` command takes from start to exit, against importing typer and rich alone.

    python bench/cli_start.py [--runs 15] [--before PYTHON]

Each row starts a fresh interpreter (``python -m opsbot ...``) ``--runs`` times, rows interleaved
so that load on a shared machine falls on all of them alike; wall and CPU (user + system of the
child) milliseconds, median and p90. The baseline, ``python -c "import typer, rich"``, is the floor
any typer + rich command line pays. ``--before PYTHON`` also times the opsbot installed for another
interpreter (e.g. the .venv of a checkout of main before a change) in the same run.

The children run as an installed opsbot does after its first command: with bytecode (written under
the run's temporary folder, ``PYTHONPYCACHEPREFIX``, even where ``PYTHONDONTWRITEBYTECODE`` is set:
pip compiles a wheel's modules when it installs it) and with the shipped runbooks compiled
(``opsbot/diagnose/runbook_cache.py``, in the run's own ``XDG_CACHE_HOME``); an untimed round first
writes both. The row "first run" times ``diagnose`` without a compiled runbook set (its cache folder
cannot be made), as after an install or an upgrade.
Goal: ``--help`` within 2x of the baseline, ``diagnose`` within 4x. Figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
BUNDLE = REPO / "tests" / "scenarios" / "dev" / "decode-wedged.json"


def run_once(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU milliseconds of one child process, started outside any checkout (as an operator would)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(argv, env=env, cwd=env["OPSBOT_DATA_DIR"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = (time.perf_counter() - t) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000


def p90(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=10)[8] if len(xs) >= 2 else xs[0]


def child_env(data: Path) -> dict[str, str]:
    """The environment of every timed child: bytecode and compiled runbooks kept in ``data``."""
    env = {**os.environ, "OPSBOT_DATA_DIR": str(data), "PYTHONPYCACHEPREFIX": str(data / "pycache"),
           "XDG_CACHE_HOME": str(data / "cache")}
    for name in ("PYTHONPATH", "OPSBOT_DATABASE_URL", "PYTHONDONTWRITEBYTECODE"):
        env.pop(name, None)
    return env


def rows_for(label: str, python: str, data: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    env = child_env(data)
    opsbot = [python, "-m", "opsbot"]
    no_cache = {**env, "XDG_CACHE_HOME": str(BUNDLE / "not-a-folder")}  # no runbook set kept: each run compiles
    return {
        f"{label}opsbot --help": (opsbot + ["--help"], env),
        f"{label}opsbot diagnose BUNDLE": (opsbot + ["diagnose", str(BUNDLE)], env),
        f"{label}opsbot diagnose BUNDLE, first run": (opsbot + ["diagnose", str(BUNDLE)], no_cache),
        f"{label}opsbot history": (opsbot + ["history"], env),
    }


def which_opsbot(python: str, env: dict[str, str]) -> str:
    out = subprocess.run([python, "-c", "import opsbot; print(opsbot.__file__)"], env=env, cwd=env["OPSBOT_DATA_DIR"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--before", metavar="PYTHON", help="an interpreter with another opsbot installed, timed alike")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        rows = {"baseline: python -c 'import typer, rich'": ([sys.executable, "-c", "import typer, rich"], child_env(data))}
        rows |= rows_for("", sys.executable, data)
        if args.before:
            rows |= rows_for("before: ", args.before, data)
        for python in {sys.executable, args.before or sys.executable}:
            env = rows_for("", python, data)["opsbot history"][1]
            Console(stderr=True).print(f"{python}: opsbot from {which_opsbot(python, env)}", highlight=False)
        subprocess.run([sys.executable, "-m", "opsbot", "db", "upgrade"], env=rows_for("", sys.executable, data)["opsbot history"][1],
                       cwd=data, check=True, capture_output=True)  # history reads a migrated database, as it would in use
        for argv, env in rows.values():  # untimed: bytecode written, the shipped runbooks compiled
            run_once(argv, env)
        times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in rows}
        for _ in range(args.runs):
            for name, (argv, env) in rows.items():
                wall, cpu = run_once(argv, env)
                times[name][0].append(wall)
                times[name][1].append(cpu)
    base_wall, base_cpu = (statistics.median(x) for x in times[next(iter(rows))])
    t = Table(title=f"opsbot start-up: {args.runs} runs each, interleaved; a fresh interpreter per run")
    for col in ("command", "median ms", "p90 ms", "median CPU ms", "p90 CPU ms", "× baseline (wall)", "× baseline (CPU)"):
        t.add_column(col, justify="left" if col == "command" else "right")
    for name, (wall, cpu) in times.items():
        t.add_row(name, f"{statistics.median(wall):.0f}", f"{p90(wall):.0f}", f"{statistics.median(cpu):.0f}",
                  f"{p90(cpu):.0f}", f"{statistics.median(wall) / base_wall:.1f}", f"{statistics.median(cpu) / base_cpu:.1f}")
    Console().print(t)
    for name, goal in (("opsbot --help", 2), ("opsbot diagnose BUNDLE", 4)):
        ratio = statistics.median(times[name][1]) / base_cpu
        Console().print(f"goal: {name} within {goal}x of the baseline (CPU): {'met' if ratio <= goal else 'NOT met'} ({ratio:.1f}x)")
    Console().print(f"load average during the run: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
