"""PNG charts for the weekly report (matplotlib's object API on the Agg canvas: no pyplot state).

Each chart overlays this week on the week before, on one Monday-to-Sunday axis.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure as MplFigure

from opsbot.report.model import Chart
from opsbot.report.prom import WeekData
from opsbot.report.week import Week

Points = list[tuple[float, float]]
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_THIS, _PREV = "#1f6feb", "#8b949e"


def png(fig: MplFigure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def hours_into(points: Points, week: Week) -> Points:
    """Re-base points to hours since the week's start, so two weeks share one x axis."""
    origin = week.start.timestamp()
    return [((t - origin) / 3600.0, v) for t, v in points]


def _week_axis(ax: Axes, ylabel: str) -> None:
    ax.set_xlim(0, 168)
    ax.set_xticks([24 * i + 12 for i in range(7)], _DAYS)
    ax.set_xticks([24 * i for i in range(8)], minor=True)
    ax.grid(True, which="minor", axis="x", alpha=0.3)
    ax.grid(True, which="major", axis="y", alpha=0.3)
    ax.set_ylabel(ylabel)


def week_lines(title: str, panels: Sequence[tuple[str, str, Points, Points]]) -> str:
    """One panel per (name, y label, this week's points, last week's points), hours on x."""
    fig = MplFigure(figsize=(10.5, 2.6 * len(panels)), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, (name, ylabel, this, prev) in zip(axes, panels):
        if prev:
            ax.plot(*zip(*prev), color=_PREV, linestyle="--", linewidth=1.2, label="week before")
        if this:
            ax.plot(*zip(*this), color=_THIS, linewidth=1.6, label="this week")
        if not this and not prev:
            ax.text(84, 0.5, "no data", ha="center", va="center", color=_PREV)
        ax.set_title(name, loc="left", fontsize=10)
        _week_axis(ax, ylabel)
        if this or prev:
            ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=2, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=12, x=0.01, ha="left")
    return png(fig)


def incidents_bars(by_class: dict[str, int], by_class_prev: dict[str, int]) -> str:
    classes = sorted(set(by_class) | set(by_class_prev), key=lambda c: (-by_class.get(c, 0), c))
    fig = MplFigure(figsize=(10.5, 0.5 * max(len(classes), 2) + 1.2), layout="constrained")
    ax = fig.subplots()
    ys = range(len(classes))
    ax.barh([y + 0.2 for y in ys], [by_class_prev.get(c, 0) for c in classes], height=0.4,
            color=_PREV, label="week before")
    ax.barh([y - 0.2 for y in ys], [by_class.get(c, 0) for c in classes], height=0.4,
            color=_THIS, label="this week")
    ax.set_yticks(list(ys), classes)
    ax.invert_yaxis()
    ax.set_xlabel("incidents (distinct episodes)")
    ax.xaxis.get_major_locator().set_params(integer=True)  # type: ignore[call-arg]  # MaxNLocator's parameter
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    fig.suptitle("Incidents by class", fontsize=12, x=0.01, ha="left")
    return png(fig)


def weekly_charts(week: Week, this: WeekData, prev: WeekData,
                  by_class: dict[str, int], by_class_prev: dict[str, int]) -> list[Chart]:
    """The charts worth drawing from what was available; a chart without data is left out."""

    def pair(key: str) -> tuple[Points, Points]:
        return (hours_into(this.series.get(key, []), week),
                hours_into(prev.series.get(key, []), week.previous()))

    def ms(points: Points) -> Points:
        return [(t, v * 1000.0) for t, v in points]

    charts: list[Chart] = []
    ttft, itl = pair("ttft_p99"), pair("itl_p99")
    if any(ttft) or any(itl):
        charts.append(Chart(key="latency", title="Latency over the week (p99, 1 h windows)", png_base64=week_lines(
            "Latency over the week", [("Time to first token p99", "seconds", *ttft),
                                      ("Inter-token latency p99", "milliseconds", ms(itl[0]), ms(itl[1]))])))
    tps = pair("decode_tokens_per_s")
    if any(tps):
        charts.append(Chart(key="throughput", title="Decode tokens per second", png_base64=week_lines(
            "Decode throughput", [("Decode tokens/s (1 h rate)", "tokens/s", *tps)])))
    queue, kv = pair("prefill_queue_peak"), pair("kv_usage_peak")
    if any(queue) or any(kv):
        charts.append(Chart(key="pressure", title="Prefill queue and KV cache", png_base64=week_lines(
            "Prefill queue and decode KV cache", [("Prefill queue depth (hourly peak)", "requests", *queue),
                                                  ("Decode KV usage (hourly peak)", "share of pool", *kv)])))
    if by_class or by_class_prev:
        charts.append(Chart(key="incidents", title="Incidents by class",
                            png_base64=incidents_bars(by_class, by_class_prev)))
    return charts
