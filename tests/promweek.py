"""Weeks of realistic SGLang PD samples as OpenMetrics text, with the true figures alongside.

The generator is deterministic (seeded) and keeps, per ISO week, the totals a correct weekly report
must reproduce: histogram bucket increments for TTFT and ITL, decode/prefill tokens, the peak
prefill queue, KV usage and the restarts it put in. Tests compare the rendered report with these.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

MODEL = "deepseek-ai/DeepSeek-V4-Flash"
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08,
               0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 6.0, 8.0)
PREFILL = {"job": "sglang-prefill", "instance": "node1:30000", "engine_type": "prefill"}
DECODE = {"job": "sglang-decode", "instance": "node2:30001", "engine_type": "decode"}


@dataclass
class WeekTruth:
    """What happened in one ISO week, summed from the generated observations."""

    ttft_buckets: list[float] = field(default_factory=lambda: [0.0] * (len(TTFT_BUCKETS) + 1))
    itl_buckets: list[float] = field(default_factory=lambda: [0.0] * (len(ITL_BUCKETS) + 1))
    decode_tokens: float = 0.0
    prefill_tokens: float = 0.0
    peak_prefill_queue: float = 0.0
    kv_usage: list[float] = field(default_factory=list)
    restarts: int = 0

    def quantile(self, which: str, q: float) -> float:
        """histogram_quantile's linear interpolation, done by hand from the bucket counts."""
        bounds = TTFT_BUCKETS if which == "ttft" else ITL_BUCKETS
        counts = self.ttft_buckets if which == "ttft" else self.itl_buckets
        cumulative, running = [], 0.0
        for c in counts:
            running += c
            cumulative.append(running)
        rank = q * cumulative[-1]
        i = bisect_left(cumulative, rank)
        if i >= len(bounds):
            return bounds[-1]
        lower = 0.0 if i == 0 else bounds[i - 1]
        below = 0.0 if i == 0 else cumulative[i - 1]
        return lower + (bounds[i] - lower) * (rank - below) / (cumulative[i] - below)


@dataclass
class Generated:
    text: str
    weeks: dict[str, WeekTruth]
    step_s: int


def _labels(base: dict[str, str], **extra: str) -> str:
    merged = {"model_name": MODEL, **base, **extra}
    return "{" + ",".join(f'{k}="{v}"' for k, v in merged.items()) + "}"


def _iso_week(t: datetime) -> str:
    year, week, _ = t.isocalendar()
    return f"{year}-W{week:02d}"


def _spread(n: float, weights: list[float]) -> list[float]:
    total = sum(weights)
    return [round(n * w / total) for w in weights]


def generate(start: datetime, end: datetime, *, step_s: int = 300, seed: int = 7,
             busy_factor: dict[str, float] | None = None,
             incident_at: datetime | None = None, restart_at: datetime | None = None) -> Generated:
    """Samples every ``step_s`` from ``start`` to ``end`` (UTC): a daily load curve, an optional
    prefill-queue incident (TTFT in seconds, queue in the tens) and an optional decode restart
    (its counters reset to zero after ten minutes without samples)."""
    rng = random.Random(seed)
    busy_factor = busy_factor or {}
    fams = {
        "sglang:time_to_first_token_seconds": "histogram",
        "sglang:inter_token_latency_seconds": "histogram",
        "sglang:realtime_tokens": "counter",
        "sglang:num_queue_reqs": "gauge",
        "sglang:token_usage": "gauge",
    }
    by_family: dict[str, dict[str, list[str]]] = {f: {} for f in fams}
    weeks: dict[str, WeekTruth] = {}
    ttft_cum = [0.0] * (len(TTFT_BUCKETS) + 1)
    itl_cum = [0.0] * (len(ITL_BUCKETS) + 1)
    ttft_sum = itl_sum = 0.0
    dec_tok = pre_tok = cache_tok = 0.0
    down_until: datetime | None = None
    t = start
    while t < end:
        week = weeks.setdefault(_iso_week(t), WeekTruth())
        ts = f"{t.timestamp():.3f}"
        if restart_at is not None and restart_at <= t and down_until is None:
            down_until = t + timedelta(minutes=10)
            ttft_cum = [0.0] * len(ttft_cum)
            itl_cum = [0.0] * len(itl_cum)
            ttft_sum = itl_sum = dec_tok = 0.0
            week.restarts += 1
        decode_up = down_until is None or t >= down_until
        hour = t.hour + t.minute / 60
        load = busy_factor.get(_iso_week(t), 1.0) * (1.0 + 0.6 * math.sin((hour - 8) / 24 * 2 * math.pi))
        in_incident = incident_at is not None and incident_at <= t < incident_at + timedelta(hours=2)
        requests = max(1, round(60 * load * step_s / 60 * (0.9 + 0.2 * rng.random())))
        queue = float(rng.randint(0, 3))
        if in_incident:
            queue = float(30 + rng.randint(0, 25))
            ttft_w = [0, 0, 0, 0, 0, 1, 3, 10, 20, 25, 20, 15, 6, 0, 0, 0, 0, 0, 0]
        else:
            ttft_w = [2, 20, 45, 20, 8, 3, 1.5, 0.5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        calm = [0, 0, 0, 0, 1, 4, 15, 30, 25, 12, 7, 4, 1.5, 0.5, 0, 0, 0, 0, 0, 0, 0, 0]
        busy = [0, 0, 0, 0, 0, 1, 5, 15, 25, 22, 15, 10, 5, 2, 0, 0, 0, 0, 0, 0, 0, 0]
        a = min(1.0, max(0.0, (load - 0.4) / 1.4))
        itl_w = [(1 - a) * c + a * b for c, b in zip(calm, busy)]
        tokens = requests * 350
        usage = min(0.97, 0.25 + 0.35 * load + (0.3 if in_incident else 0.0) + 0.05 * rng.random())
        if decode_up:
            ttft = _spread(requests, ttft_w)
            itl = _spread(tokens, itl_w)
            for i, c in enumerate(ttft):
                ttft_cum[i] += c
                week.ttft_buckets[i] += c
            for i, c in enumerate(itl):
                itl_cum[i] += c
                week.itl_buckets[i] += c
            ttft_sum += sum(c * (TTFT_BUCKETS[min(i, len(TTFT_BUCKETS) - 1)]) for i, c in enumerate(ttft))
            itl_sum += sum(c * ITL_BUCKETS[min(i, len(ITL_BUCKETS) - 1)] for i, c in enumerate(itl))
            dec_tok += tokens
            week.decode_tokens += tokens
            week.kv_usage.append(usage)
            for fam, cum, bounds, total in (
                ("sglang:time_to_first_token_seconds", ttft_cum, TTFT_BUCKETS, ttft_sum),
                ("sglang:inter_token_latency_seconds", itl_cum, ITL_BUCKETS, itl_sum),
            ):
                running = 0.0
                for i, le in enumerate([*map(str, bounds), "+Inf"]):
                    running += cum[i]
                    key = f"{fam}_bucket{_labels(DECODE, le=le)}"
                    by_family[fam].setdefault(key, []).append(f"{key} {running:.0f} {ts}")
                for suffix, value in (("_count", running), ("_sum", total)):
                    key = f"{fam}{suffix}{_labels(DECODE)}"
                    by_family[fam].setdefault(key, []).append(f"{key} {value:.6f} {ts}")
            key = f"sglang:realtime_tokens_total{_labels(DECODE, mode='decode')}"
            by_family["sglang:realtime_tokens"].setdefault(key, []).append(f"{key} {dec_tok:.0f} {ts}")
            key = f"sglang:token_usage{_labels(DECODE)}"
            by_family["sglang:token_usage"].setdefault(key, []).append(f"{key} {usage:.4f} {ts}")
        pre = requests * 2400
        pre_tok += pre
        cache_tok += requests * 1600
        week.prefill_tokens += pre
        week.peak_prefill_queue = max(week.peak_prefill_queue, queue)
        for mode, value in (("prefill_compute", pre_tok), ("prefill_cache", cache_tok)):
            key = f"sglang:realtime_tokens_total{_labels(PREFILL, mode=mode)}"
            by_family["sglang:realtime_tokens"].setdefault(key, []).append(f"{key} {value:.0f} {ts}")
        for base, q in ((PREFILL, queue), (DECODE, 0.0)):
            if base is DECODE and not decode_up:
                continue
            key = f"sglang:num_queue_reqs{_labels(base)}"
            by_family["sglang:num_queue_reqs"].setdefault(key, []).append(f"{key} {q:.0f} {ts}")
        t += timedelta(seconds=step_s)
    lines: list[str] = []
    for fam, kind in fams.items():
        lines.append(f"# TYPE {fam} {kind}")
        for samples in by_family[fam].values():
            lines.extend(samples)
    lines.append("# EOF")
    return Generated(text="\n".join(lines) + "\n", weeks=weeks, step_s=step_s)


def week_start(iso: str) -> datetime:
    year, week = iso.split("-W")
    return datetime.fromisocalendar(int(year), int(week), 1).replace(tzinfo=timezone.utc)
