"""The weekly report's output fidelity: per day, the runs that matched the baseline, diverged, or were not judged.

Pure: stored fidelity runs (``Store.fidelity_runs``) and the week in, the chart out.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from matplotlib.figure import Figure as MplFigure

from opsbot.report.charts import png
from opsbot.report.model import Chart
from opsbot.report.week import Week
from opsbot.store.store import RecallRun

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def fidelity_counts(runs: Sequence[RecallRun], week: Week) -> list[tuple[int, int, int]]:
    """Each day of the week: (runs matched, runs diverged, runs not judged)."""
    out = []
    for i in range(7):
        start = week.start + timedelta(days=i)
        day = [r.record.get("result") for r in runs if start <= r.at < start + timedelta(days=1)]
        out.append((day.count(1.0), day.count(0.0), sum(1 for v in day if v not in (0.0, 1.0))))
    return out


def fidelity_chart(runs: Sequence[RecallRun], week: Week) -> Chart | None:
    """Stacked bars of the day's fidelity runs: matched, diverged, not judged; None when no run that week."""
    counts = fidelity_counts(runs, week)
    if not any(sum(c) for c in counts):
        return None
    fig = MplFigure(figsize=(10.5, 2.6), layout="constrained")
    ax = fig.subplots()
    matched, diverged, unjudged = (list(x) for x in zip(*counts))
    ax.bar(range(7), matched, color="#1f6feb", width=0.6, label="matched the baseline")
    ax.bar(range(7), diverged, bottom=matched, color="#cf222e", width=0.6, label="diverged")
    ax.bar(range(7), unjudged, bottom=[m + d for m, d in zip(matched, diverged)], color="#9a6700", width=0.6,
           label="not judged")
    ax.set_xticks(range(7), [f"{_DAYS[i]}\n{(week.start + timedelta(days=i)):%d %b}" for i in range(7)])
    ax.set_ylabel("fidelity runs")
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("Output fidelity: greedy answers against the baseline of the last good deploy", fontsize=12,
                 x=0.01, ha="left")
    return Chart(key="fidelity", title="Output fidelity per day", png_base64=png(fig))
