"""Prometheus text exposition, rendered the way SGLang's prometheus_client multiprocess mode does.

Label names sorted, values as Python floats (``3.0``), counters as ``<family>_total`` (in the
``# TYPE`` line too, as prometheus_client munges counters for the 0.0.4 text format),
histograms as cumulative ``_bucket{le=...}`` + ``_sum`` + ``_count``, no ``_created`` series.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

Labels = tuple[tuple[str, str], ...]
INF = float("inf")


def format_value(v: float) -> str:
    """prometheus_client's floatToGoString."""
    if v == INF:
        return "+Inf"
    if v == -INF:
        return "-Inf"
    if math.isnan(v):
        return "NaN"
    return repr(float(v))


def _escape(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels)) + "}"


@dataclass
class Family:
    name: str  # without _total for counters
    kind: str  # counter | gauge | histogram
    help: str
    buckets: tuple[float, ...] = ()
    values: dict[Labels, float] = field(default_factory=dict)
    hist: dict[Labels, list[float]] = field(default_factory=dict)  # bucket counts..., sum, count

    def render(self) -> list[str]:
        shown = f"{self.name}_total" if self.kind == "counter" else self.name  # text format 0.0.4 munging
        out = [f"# HELP {shown} {self.help}", f"# TYPE {shown} {self.kind}"]
        if self.kind == "histogram":
            for labels, h in sorted(self.hist.items()):
                acc = 0.0
                for bound, n in zip((*self.buckets, INF), h[:-2]):
                    acc += n
                    out.append(f"{self.name}_bucket{_labels(labels + (('le', format_value(bound)),))} {format_value(acc)}")
                out.append(f"{self.name}_count{_labels(labels)} {format_value(h[-1])}")
                out.append(f"{self.name}_sum{_labels(labels)} {format_value(h[-2])}")
            return out
        suffix = "_total" if self.kind == "counter" else ""
        for labels, v in sorted(self.values.items()):
            out.append(f"{self.name}{suffix}{_labels(labels)} {format_value(v)}")
        return out


class Registry:
    """A thread-safe set of metric families with the handful of operations the emulator needs."""

    def __init__(self, base: dict[str, str] | None = None):
        self.base: Labels = tuple(sorted((base or {}).items()))
        self._families: dict[str, Family] = {}
        self._lock = threading.Lock()

    def view(self, base: dict[str, str]) -> Registry:
        """The same families under other base labels: one DP rank's scheduler writing into the server's
        one exposition, as SGLang's multiprocess registry merges every rank's series."""
        other = Registry(base)
        other._families, other._lock = self._families, self._lock
        return other

    def family(self, name: str, kind: str, help: str, buckets: tuple[float, ...] = ()) -> Family:
        key = name.removesuffix("_total") if kind == "counter" else name
        with self._lock:
            if key not in self._families:
                self._families[key] = Family(key, kind, help, buckets)
            return self._families[key]

    def _key(self, labels: dict[str, str] | None, base: bool) -> Labels:
        extra = tuple((labels or {}).items())
        return tuple(sorted((self.base if base else ()) + extra))

    def set(self, name: str, value: float, labels: dict[str, str] | None = None, base: bool = True) -> None:
        fam = self._families[name]
        with self._lock:
            fam.values[self._key(labels, base)] = float(value)

    def inc(self, name: str, amount: float = 1.0, labels: dict[str, str] | None = None, base: bool = True) -> None:
        fam = self._families[name.removesuffix("_total")]
        key = self._key(labels, base)
        with self._lock:
            fam.values[key] = fam.values.get(key, 0.0) + amount

    def observe(self, name: str, value: float, labels: dict[str, str] | None = None, base: bool = True) -> None:
        fam = self._families[name]
        key = self._key(labels, base)
        with self._lock:
            h = fam.hist.setdefault(key, [0.0] * (len(fam.buckets) + 3))
            idx = next((i for i, b in enumerate(fam.buckets) if value <= b), len(fam.buckets))
            h[idx] += 1
            h[-2] += value
            h[-1] += 1

    def get(self, name: str, labels: dict[str, str] | None = None, base: bool = True) -> float:
        fam = self._families[name.removesuffix("_total")]
        with self._lock:
            return fam.values.get(self._key(labels, base), 0.0)

    def render(self) -> str:
        with self._lock:
            lines = [line for fam in self._families.values() for line in fam.render()]
        return "\n".join(lines) + "\n"
