"""The weekly report's Prometheus figures: PromQL over a week, fetched off the event loop.

prometheus-api-client is synchronous (requests), so each query runs in a worker thread
(``asyncio.to_thread``). Nothing here raises for Prometheus being down, erroring or slow: a
figure that could not be had comes back absent, with the reason, and the report says so.
"""

from __future__ import annotations

import asyncio
import math
import re
from dataclasses import dataclass, field

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from opsbot.parse.metricnames import (
    ITL,
    QUEUE_REQS,
    REALTIME_TOKENS,
    TOKEN_USAGE,
    TTFT,
    exposed,
)
from opsbot.report.week import Week

# ``_M`` marks where the deployment's job matcher goes (see ``promql``).
_M = "__JOBS__"
_TOKENS = exposed(REALTIME_TOKENS, "_total")
_TTFT = f"{exposed(TTFT, '_bucket')}{{{_M}}}"
_ITL = f"{exposed(ITL, '_bucket')}{{{_M}}}"
_DECODE_TOKENS = f'{_TOKENS}{{mode="decode"{_M}}}'
_PREFILL_TOKENS = f'{_TOKENS}{{mode="prefill_compute"{_M}}}'
_PREFILL_QUEUE = f'{exposed(QUEUE_REQS)}{{engine_type="prefill"{_M}}}'
_KV_USAGE = f'{exposed(TOKEN_USAGE)}{{engine_type="decode"{_M}}}'
_ALL_TOKENS = f"{_TOKENS}{{{_M}}}"


@dataclass(frozen=True)
class FigureQuery:
    """An instant query at the week's end over the whole week; ``{r}`` is the range, ``{s}`` its seconds."""

    key: str
    label: str
    unit: str
    promql: str
    lower_is_better: bool = True


FIGURES: tuple[FigureQuery, ...] = (
    FigureQuery("ttft_p50", "Time to first token p50", "s",
                f"histogram_quantile(0.5, sum by (le) (increase({_TTFT}[{{r}}])))"),
    FigureQuery("ttft_p99", "Time to first token p99", "s",
                f"histogram_quantile(0.99, sum by (le) (increase({_TTFT}[{{r}}])))"),
    FigureQuery("itl_p50", "Inter-token latency p50", "s",
                f"histogram_quantile(0.5, sum by (le) (increase({_ITL}[{{r}}])))"),
    FigureQuery("itl_p99", "Inter-token latency p99", "s",
                f"histogram_quantile(0.99, sum by (le) (increase({_ITL}[{{r}}])))"),
    FigureQuery("decode_tokens_per_s", "Decode tokens/s (week mean)", "tok/s",
                f"sum(increase({_DECODE_TOKENS}[{{r}}])) / {{s}}", lower_is_better=False),
    FigureQuery("prefill_tokens_per_s", "Prefill tokens/s (week mean)", "tok/s",
                f"sum(increase({_PREFILL_TOKENS}[{{r}}])) / {{s}}", lower_is_better=False),
    FigureQuery("decode_tokens_per_s_peak", "Decode tokens/s (busiest hour)", "tok/s",
                f"max_over_time(sum(rate({_DECODE_TOKENS}[1h]))[{{r}}:15m])", lower_is_better=False),
    FigureQuery("prefill_queue_peak", "Peak prefill queue", "requests",
                f"max(max_over_time({_PREFILL_QUEUE}[{{r}}]))"),
    FigureQuery("kv_usage_mean", "Decode KV cache usage (mean)", "ratio",
                f"avg(avg_over_time({_KV_USAGE}[{{r}}]))"),
    FigureQuery("kv_usage_peak", "Decode KV cache usage (peak)", "ratio",
                f"max(max_over_time({_KV_USAGE}[{{r}}]))"),
    FigureQuery("restarts", "Role restarts (counter resets)", "",
                f"sum(max by (job, instance) (resets({_ALL_TOKENS}[{{r}}])))"),
)

SERIES: dict[str, str] = {
    "ttft_p50": f"histogram_quantile(0.5, sum by (le) (rate({_TTFT}[1h])))",
    "ttft_p99": f"histogram_quantile(0.99, sum by (le) (rate({_TTFT}[1h])))",
    "itl_p99": f"histogram_quantile(0.99, sum by (le) (rate({_ITL}[1h])))",
    "decode_tokens_per_s": f"sum(rate({_DECODE_TOKENS}[1h]))",
    "prefill_queue_peak": f"max(max_over_time({_PREFILL_QUEUE}[1h]))",
    "kv_usage_peak": f"max(max_over_time({_KV_USAGE}[1h]))",
}
SERIES_STEP = "1h"


@dataclass
class WeekData:
    """What Prometheus said about one week."""

    values: dict[str, float] = field(default_factory=dict)
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)


def promql(template: str, jobs: list[str] | None = None) -> str:
    """The query with its series limited to the deployment's Prometheus jobs (all series without)."""
    if not jobs:
        return template.replace(f"{{{_M}}}", "").replace(_M, "")
    # RE2 metacharacters escaped inside a PromQL string literal (hence the doubled backslash)
    alternatives = "|".join(re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\\\1", j) for j in jobs)
    matcher = f'job=~"{alternatives}"'
    return template.replace(f"{{{_M}}}", f"{{{matcher}}}").replace(_M, f",{matcher}")


def figure_promql(q: FigureQuery, week: Week, jobs: list[str] | None = None) -> str:
    return promql(q.promql, jobs).replace("{r}", f"{week.seconds}s").replace("{s}", str(week.seconds))


def _client(url: str, timeout_s: float) -> PrometheusConnect:
    # No retries with back-off: a report should say "missing" in seconds, not minutes.
    retry = Retry(total=0, read=False, status=0, raise_on_status=False)
    return PrometheusConnect(url=url, disable_ssl=True, retry=retry, timeout=timeout_s)


def _reason(exc: Exception, url: str, timeout_s: float) -> str:
    if isinstance(exc, requests.Timeout):
        return f"Prometheus at {url} did not answer within {timeout_s:g} s"
    if isinstance(exc, requests.ConnectionError):
        return f"Prometheus at {url} is unreachable"
    if isinstance(exc, PrometheusApiClientException):
        return f"Prometheus at {url} answered an error: {str(exc)[:200]}"
    return f"Prometheus query failed: {type(exc).__name__}: {str(exc)[:200]}"


def _scalar(result: list[dict]) -> float | None:
    if not result:
        return None
    value = float(result[0]["value"][1])
    return None if math.isnan(value) or math.isinf(value) else value


def _points(result: list[dict]) -> list[tuple[float, float]]:
    if not result:
        return []
    return [(float(t), float(v)) for t, v in result[0]["values"] if not math.isnan(float(v))]


async def fetch_week(url: str, week: Week, *, timeout_s: float = 10.0, jobs: list[str] | None = None) -> WeekData:
    """Every figure and chart series of ``week`` (of the series of ``jobs`` when given); never raises."""
    client = _client(url, timeout_s)
    data = WeekData()
    end = week.end.timestamp()
    try:
        await asyncio.to_thread(client.custom_query, "vector(1)", {"time": end})
    except Exception as exc:  # noqa: BLE001 - any failure means: no figures, and why
        reason = _reason(exc, url, timeout_s)
        data.missing = {q.key: reason for q in FIGURES} | {f"series:{k}": reason for k in SERIES}
        client.close()
        return data

    async def instant(q: FigureQuery) -> None:
        try:
            result = await asyncio.to_thread(client.custom_query, figure_promql(q, week, jobs), {"time": end})
        except Exception as exc:  # noqa: BLE001
            data.missing[q.key] = _reason(exc, url, timeout_s)
            return
        value = _scalar(result)
        if value is None:
            data.missing[q.key] = "no samples in Prometheus for this week"
        else:
            data.values[q.key] = value

    async def ranged(key: str, template: str) -> None:
        try:
            result = await asyncio.to_thread(
                client.custom_query_range, promql(template, jobs), week.start, week.end, SERIES_STEP)
        except Exception as exc:  # noqa: BLE001
            data.missing[f"series:{key}"] = _reason(exc, url, timeout_s)
            return
        data.series[key] = _points(result)

    queries = [instant(q) for q in FIGURES] + [ranged(k, p) for k, p in SERIES.items()]
    try:
        await asyncio.gather(*queries)
    finally:
        client.close()
    return data
