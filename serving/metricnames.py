"""Which metric names exist, and which ones a PromQL expression reads (for dashboard and alert tests)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

NAMES_FILE = Path(__file__).parent / "metric_names.txt"
# Series Prometheus itself makes, and the exporter's families (serving/exporter.py; counters gain _total).
PROMETHEUS_NAMES = {"up"}
# opsbot's own /metrics (opsbot/telemetry.py) that alert rules read: the output-fidelity result
EXPORTER_NAMES = {
    "opsbot_gpu_count", "opsbot_gpu_utilization_percent", "opsbot_gpu_memory_used_bytes",
    "opsbot_gpu_memory_total_bytes", "opsbot_gpu_temperature_celsius", "opsbot_gpu_power_watts",
    "opsbot_gpu_ecc_errors_total", "opsbot_gpu_xid_events_total", "opsbot_gpu_xid_events_supported",
}
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset"}
_STRIP = [
    re.compile(r'"(?:[^"\\]|\\.)*"'),  # strings
    re.compile(r"\{[^}]*\}"),  # label matchers
    re.compile(r"\[[^\]]*\]"),  # ranges
    re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)"),  # label lists
]
_IDENT = re.compile(r"(?<![A-Za-z0-9_:.])[A-Za-z_:][A-Za-z0-9_:]*")


_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


@cache
def opsbot_metric_names() -> frozenset[str]:
    """The series opsbot's own ``/metrics`` exposes, read from a real registry (opsbot/telemetry.py)."""
    from opsbot.telemetry import Telemetry

    return frozenset(family.name + suffix for family in Telemetry().registry.collect()
                     for suffix in _SUFFIXES.get(family.type, ("",)))


@cache
def known_metric_names() -> frozenset[str]:
    """Names from reference/sglang.md (checked in as metric_names.txt), the exporter's, opsbot's own, and ``up``."""
    listed = {ln.strip() for ln in NAMES_FILE.read_text().splitlines() if ln and not ln.startswith("#")}
    return frozenset(listed | EXPORTER_NAMES | PROMETHEUS_NAMES | opsbot_metric_names())


def promql_metrics(expr: str) -> set[str]:
    """Metric names an expression selects (function names, keywords, labels and numbers left out)."""
    for pattern in _STRIP:
        expr = pattern.sub(" ", expr)
    names = set()
    for m in _IDENT.finditer(expr):
        word = m.group(0)
        end = m.end()
        if expr[end:].lstrip().startswith("("):
            continue
        if word not in _KEYWORDS and not word.isdigit():
            names.add(word)
    return names
