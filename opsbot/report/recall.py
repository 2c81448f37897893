"""The weekly report's long-context recall: the longest length with full recall per day, and the runs that failed.

Pure: stored recall runs (``Store.recall_runs``) and the week in, the trend and its chart out.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from matplotlib.figure import Figure as MplFigure

from opsbot.parse.recall import failed_run, short_length
from opsbot.report.charts import png
from opsbot.report.model import Chart, RecallDay, RecallFailure
from opsbot.report.week import Week
from opsbot.store.store import RecallRun

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def recall_days(runs: Sequence[RecallRun], week: Week) -> list[RecallDay]:
    """Each day of the week: how many runs, and the longest length every one of them recalled fully."""
    days = []
    for i in range(7):
        start = week.start + timedelta(days=i)
        that_day = [r for r in runs if start <= r.at < start + timedelta(days=1)]
        fulls = [r.record.get("longest_full") or 0 for r in that_day if r.record.get("pattern") != "unjudged"]
        days.append(RecallDay(day=start.date(), runs=len(that_day), longest_full=min(fulls) if fulls else None,
                              failed=sum(1 for r in that_day if failed_run(r.record))))
    return days


def recall_failures(runs: Sequence[RecallRun], week: Week) -> list[RecallFailure]:
    return [RecallFailure(at=r.at, probe_id=r.probe_id, cluster=r.cluster, trigger=r.trigger,
                          pattern=str(r.record.get("pattern")), longest_full=r.record.get("longest_full"),
                          threshold=r.record.get("threshold"), errors=int(r.record.get("errors") or 0))
            for r in runs if week.start <= r.at < week.end and failed_run(r.record)]


def recall_chart(days: Sequence[RecallDay]) -> Chart | None:
    """Bars of the longest fully recalled length per day (log scale); None when no run that week."""
    if not any(d.runs for d in days):
        return None
    fig = MplFigure(figsize=(10.5, 2.8), layout="constrained")
    ax = fig.subplots()
    values = [d.longest_full or 0 for d in days]
    colours = ["#cf222e" if d.failed else "#1f6feb" for d in days]
    ax.bar(range(7), [v if v else 0.5 for v in values], color=colours, width=0.6)
    ax.set_yscale("log", base=2)
    ax.set_xticks(range(7), [f"{_DAYS[i]}\n{d.day:%d %b}" for i, d in enumerate(days)])
    top = max(values + [1024])
    ticks = [2 ** k for k in range(10, top.bit_length() + 1)]
    ax.set_yticks(ticks, [short_length(t) for t in ticks])
    for i, d in enumerate(days):
        label = "no run" if not d.runs else (short_length(d.longest_full) if d.longest_full else "none")
        ax.text(i, max(values[i], 1), label, ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("longest length, full recall")
    ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle("Long-context recall: the longest prompt with every needle found (red: a run failed)",
                 fontsize=12, x=0.01, ha="left")
    return Chart(key="recall", title="Long-context recall per day", png_base64=png(fig))
