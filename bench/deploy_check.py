"""How long `opsbot deploy check` and `render` take, against reading the flags from the wheels each time.

    python bench/deploy_check.py [--repeat 20] [--wheels DIR]

(a) load the spec and run every rule with the checked-in flag lists (what `deploy check` does);
(b) the baseline it replaces: extract the flags from the pinned wheels with ast on every check;
(c) render every file (scripts, units, Prometheus, Alertmanager, Grafana, inventory).
The figures are written down in bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from serving.flags import known_flags, router_flags_from_wheel, sglang_flags_from_wheel
from serving.render import render
from serving.rules import check
from serving.spec import load_spec

SPEC = Path(__file__).resolve().parents[1] / "serving" / "examples" / "dsv4-flash-1node.yaml"


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--wheels", type=Path, default=Path(os.environ.get(
        "OPSBOT_WHEEL_CACHE", Path.home() / ".cache" / "opsbot" / "wheels")))
    args = ap.parse_args()
    known_flags("sglang"), known_flags("router")  # warm the cache once, as a long-lived process would
    rows = [("(a) load + every rule (checked-in flag lists)", timed(lambda: check(load_spec(SPEC)), args.repeat))]
    sg = next(args.wheels.glob("sglang-0.5.23-*.whl"), None)
    rt = next(args.wheels.glob("sglang_router-0.3.2-*.whl"), None)
    if sg and rt:
        rows.append(("(b) baseline: flags from the wheels with ast per check",
                     timed(lambda: (sglang_flags_from_wheel(sg), router_flags_from_wheel(rt)), max(3, args.repeat // 5))))
    spec = load_spec(SPEC)
    rows.append(("(c) render every file", timed(lambda: render(spec), args.repeat)))
    table = Table(title=f"deploy check / render ({SPEC.name})")
    for col in ("step", "runs", "median ms", "min ms", "max ms"):
        table.add_column(col, justify="right" if col != "step" else "left")
    for name, ms in rows:
        table.add_row(name, str(len(ms)), f"{statistics.median(ms):.1f}", f"{min(ms):.1f}", f"{max(ms):.1f}")
    Console().print(table)


if __name__ == "__main__":
    main()
