"""Prometheus ``/metrics`` samples → gauges, counter deltas and rates per role.

Fact names are the metric name without the ``sglang:`` / ``sglang_`` prefix (router ``smg_*``
names are kept as they are). The combination rules follow how SGLang exports its metrics
(reference/sglang.md §1): ranks of one TP group report the same gauge (max), DP ranks hold
separate requests (sum for counts, max for ratios), multiprocess ``pid`` series are collapsed
(max), and counters that went down were reset by a restart (delta counted from 0).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache

from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, Field

from opsbot.bundle import MetricSample
from opsbot.parse.lines import linear
from opsbot.parse.metricnames import PREFIXES, PROGRESS_SOURCES, REALTIME_TOKENS, ROUTER_REQUEST_SOURCES

# Labels that identify a process or a series' bookkeeping rather than what is counted; a counter
# is summed over them. Every other label on a counter is "distinguishing" and gets its own fact.
IDENTITY_LABELS = frozenset(
    {
        "model_name", "engine_type", "tp_rank", "dp_rank", "pp_rank", "pp_size", "moe_ep_rank",
        "attn_cp_rank", "attn_cp_size", "pid", "is_streaming", "priority", "cache_type",
        "storage_backend", "worker_addr", "model", "connection_mode", "le", "quantile", "gt",
    }
)

Series = tuple[str, frozenset[tuple[str, str]]]
# re, not RE2, where a pattern is linear as written and called per sample: RE2's call costs ~10x here
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,40}")

# The family filter (``wanted``): blocks of the exposition that begin at a ``# HELP``/``# TYPE``
# line. A block is dropped only when it is written so plainly that prometheus_client would read
# it without error and without touching the families around it; anything unusual keeps the text.
_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# Both read "\n" + text: a pattern that opens with a literal is searched for fast.
_HEADER = re.compile(r"\n# (?:HELP|TYPE) ([^ \t\n\r\x0b\x0c]*)")
# a line the parser strips, or a HELP/TYPE comment spelled other than "# HELP name"
_ODD = re.compile(r"\n(?:[^\S\n]|#[^\S\n]+(?:HELP|TYPE)(?:[^\S\n]|$)(?<!# HELP )(?<!# TYPE ))", re.M)
_NUM = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?|Inf|NaN)"
# a label's value unrolled ("[^"\\\n]*(?:\\.[^"\\\n]*)*", not "(?:[^"\\\n]|\\.)*": the same strings, without a branch per
# character; linear, its two pieces disjoint): the family proof in ~0.6x the time on a lab body
_LABEL = r'(?!__)[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*(?:\\.[^"\\\n]*)*"'
_PLAIN_FAMILY = re.compile(
    rf"(?=# (?:HELP|TYPE) (?P<n>{_NAME.pattern})[ \n])"
    rf"(?:(?:# HELP (?P=n)(?: [^\n]*)?|# TYPE (?P=n) [a-z]+"
    rf"|(?P=n)(?:_total|_count|_sum|_bucket|_created)?(?:\{{(?:{_LABEL}(?:,{_LABEL})*,?)?\}})? {_NUM}(?: {_NUM})?)?\n)*"
)
# Blocks one after another, each plain: a block's lines all read as its family's (a line is one iteration, so the
# atomic group takes exactly the block, whose next line is a header of another name); no backtracking across blocks.
_PLAIN_FAMILIES = re.compile(f"(?>{_PLAIN_FAMILY.pattern})*")
_LABEL_NAME = linear(r"[{,]([a-zA-Z_][a-zA-Z0-9_]*)=")  # not a backreference: quadratic on many labels
_FAMILY_SUFFIXES = ("_total", "_count", "_sum", "_bucket", "_created")


class RankMetrics(BaseModel):
    """One DP-attention rank's own series (label ``dp_rank``, sglang 0.5.23 observability/metrics_collector.py:
    1391-1392): its last running/queued/KV-usage gauges and its token counter's movement per mode."""

    dp_rank: int
    running: float | None = None
    queued: float | None = None
    token_usage: float | None = None
    tokens: dict[str, float] = Field(default_factory=dict, description="realtime_tokens_total delta per mode")


class RoleMetrics(BaseModel):
    """What one role's ``/metrics`` samples say: last gauges, counter movement over the window."""

    gauges: dict[str, float] = Field(default_factory=dict)
    deltas: dict[str, float] = Field(default_factory=dict)
    rates: dict[str, float] = Field(default_factory=dict)
    window_s: float | None = None
    problems: list[str] = Field(default_factory=list)
    ranks: list[RankMetrics] = Field(default_factory=list, description="per DP rank, when the role has several")


def fact_name(metric: str) -> str:
    for prefix in PREFIXES:
        if metric.startswith(prefix):
            return metric[len(prefix):]
    return metric


@lru_cache(maxsize=4096)
def covers(wanted: frozenset[str], metric: str) -> bool:
    """Whether a fact named in ``wanted`` can come from the family ``metric``.

    Every fact of a family starts with its base name (the fact name without ``_total`` and the
    like), maybe followed by ``_<label value>`` or ``_count``/``_sum``.
    """
    base = fact_name(metric)
    for end in _FAMILY_SUFFIXES:
        if base.endswith(end):
            base = base[: -len(end)]
            break
    stem = base + "_"
    return any(w == base or w.startswith(stem) for w in wanted)


def family_blocks(raw: str) -> list[tuple[str, str]] | None:
    """``raw`` cut where each family begins (its first ``# HELP``/``# TYPE`` line): (name, text).

    prometheus_client reads each block alone as it does within the whole text, since every
    block opens with a HELP/TYPE line of a new name. None when a line could blur that: one the
    parser strips, or a HELP/TYPE comment not spelled ``# HELP name``.
    """
    lines = "\n" + raw
    if _ODD.search(lines):
        return None
    starts: list[tuple[int, str]] = []  # each header whose name is not the one before's
    before = None
    for m in _HEADER.finditer(lines):
        if m[1] != before:
            before = m[1]
            starts.append((m.start(), before))  # m.start() is the line's start in raw
    if not starts or any(_NAME.fullmatch(name) is None for _, name in starts):
        return None
    ends = [pos for pos, _ in starts[1:]] + [len(raw)]
    lead = [("", raw[: starts[0][0]])] if starts[0][0] else []
    return lead + [(name, raw[pos:end]) for (pos, name), end in zip(starts, ends)]


@lru_cache(maxsize=1024)
def _duplicate_label(labels: str) -> bool:
    names = _LABEL_NAME.findall(labels)
    return len(names) != len(set(names))


def plain_family(block: str) -> bool:
    """Whether prometheus_client reads this block without error and keeps it to its own family."""
    text = block if block.endswith("\n") else block + "\n"
    if _PLAIN_FAMILY.fullmatch(text) is None:
        return False
    return "{" not in text or not any(_duplicate_label(labels) for labels in set(_label_sets(text)))


def plain_families(blocks: list[str]) -> bool:
    """Whether every one of ``blocks`` (``family_blocks`` texts, in order) is a ``plain_family``, in one regex
    call: most bodies have dozens of families no runbook reads, each otherwise checked alone."""
    text = "".join(blocks)
    text = text if text.endswith("\n") else text + "\n"
    if _PLAIN_FAMILIES.fullmatch(text) is None:
        return False
    return "{" not in text or not any(_duplicate_label(labels) for labels in set(_label_sets(text)))


def _label_sets(text: str) -> list[str]:
    """The label sets of a block: on each line, from its first ``{`` to its last ``}``, what RE2's
    ``findall`` of ``\\{[^\\n]*\\}`` gives (leftmost-first, then nothing of the line is left) without a
    regex call per block; linear in the text."""
    found = []
    for line in text.split("\n"):
        start = line.find("{")
        if start != -1:
            end = line.rfind("}")
            if end > start:
                found.append(line[start:end + 1])
    return found


def _is_count(name: str) -> bool:
    """Gauges that count things add up across DP ranks; ratios and levels do not."""
    return name.startswith("num_") or name.endswith(("_tokens", "_reqs", "_size")) or name == "decode_sum_seq_lens"


def _counter_base(sample_name: str, family_type: str) -> str | None:
    """The fact name of a monotonic sample (``*_total``, histogram ``_count``/``_sum``), else None."""
    if sample_name.endswith("_total"):
        return fact_name(sample_name[: -len("_total")])
    if family_type in ("histogram", "summary", "gaugehistogram") and sample_name.endswith(("_count", "_sum")):
        return fact_name(sample_name)
    return None


@dataclass
class _Parsed:
    gauges: dict[Series, float] = field(default_factory=dict)
    counters: dict[Series, float] = field(default_factory=dict)

    def add(self, other: _Parsed) -> None:
        """Take in the series of the text that follows (as one parse of both texts would)."""
        self.gauges.update(other.gauges)
        for key, value in other.counters.items():
            self.counters[key] = self.counters.get(key, 0.0) + value


def _parse_body(raw: str) -> _Parsed:
    """One exposition body → raw gauge and counter series (raises ValueError on bad text)."""
    out = _Parsed()
    for family in text_string_to_metric_families(raw):
        for sample in family.samples:
            if sample.name.endswith(("_created", "_bucket")) or math.isnan(sample.value):
                continue
            labels = frozenset(sample.labels.items())
            base = _counter_base(sample.name, family.type)
            if base is not None:
                out.counters[(base, labels)] = out.counters.get((base, labels), 0.0) + sample.value
            elif family.type not in ("histogram", "summary"):
                out.gauges[(fact_name(sample.name), labels)] = sample.value
    return out


def _collapse(series: dict[Series, float], label: str, how) -> dict[Series, float]:
    groups: dict[Series, list[float]] = defaultdict(list)
    for (name, labels), value in series.items():
        rest = frozenset((k, v) for k, v in labels if k != label)
        groups[(name, rest)].append(value)
    return {key: how(key[0], values) for key, values in groups.items()}


def _fold(name: str, values: list[float]) -> float:
    if "health" in name:
        return min(values)  # one unhealthy worker is the news
    return sum(values) if _is_count(name) else max(values)


def _combine_gauges(series: dict[Series, float]) -> dict[str, float]:
    """Apply the pid/tp_rank/dp_rank rules, then fold remaining labels into one figure per name.

    A remaining label whose values are plain words (``worker_type="decode"``) also gets one
    figure per value: ``smg_worker_pool_size_decode``.
    """
    totals = {k: v for k, v in series.items() if dict(k[1]).get("priority", "") == ""}
    totals = _collapse(totals, "pid", lambda n, vs: max(vs))
    totals = _collapse(totals, "tp_rank", lambda n, vs: max(vs))
    totals = _collapse(totals, "dp_rank", lambda n, vs: sum(vs) if _is_count(n) else max(vs))
    folded: dict[str, list[float]] = defaultdict(list)
    for (name, labels), value in totals.items():
        folded[name].append(value)
        for key, label_value in labels:
            if key not in IDENTITY_LABELS and _WORD.fullmatch(label_value):
                folded[f"{name}_{label_value}"].append(value)
    return {name: _fold(name, values) for name, values in folded.items()}


def _label_key(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", value).strip("_")


def _counter_facts(deltas: dict[Series, float]) -> dict[str, float]:
    """Sum series deltas per name, plus one entry per value of each distinguishing label."""
    out: dict[str, float] = defaultdict(float)
    owner: dict[str, str] = {}
    for (base, labels), delta in deltas.items():
        out[base] += delta
        for key, value in sorted(labels):
            if key in IDENTITY_LABELS or not _label_key(value):
                continue
            stem, suffix = base, ""
            for end in ("_count", "_sum"):
                if base.endswith(end):
                    stem, suffix = base[: -len(end)], end
            fact = f"{stem}_{_label_key(value)}{suffix}"
            if owner.setdefault(fact, f"{base}/{key}") != f"{base}/{key}":
                continue  # two labels map to one name: keep the first, never mix them
            out[fact] += delta
    return dict(out)


def _increase(values: list[float]) -> float:
    """Prometheus ``increase`` without extrapolation: a drop means a reset, counted from 0."""
    total = 0.0
    for prev, cur in zip(values, values[1:]):
        total += cur - prev if cur >= prev else cur
    return total


def _timestamp(at: str) -> datetime | None:
    try:
        ts = datetime.fromisoformat(at)
    except (TypeError, ValueError):
        return None
    return ts if ts.tzinfo is not None else None


def parse_samples(samples: Iterable[MetricSample], wanted: frozenset[str] | None = None) -> RoleMetrics:
    """Turn two or more ``/metrics`` bodies into facts; unreadable bodies become ``problems``.

    With ``wanted`` (fact names), families no wanted fact comes from are not parsed when they
    are plainly written: the facts named in ``wanted`` have the values a full parse gives them,
    other facts may be absent. Whenever that leaves a problem or no metric, all is parsed.
    """
    samples = list(samples)
    if wanted is not None:
        cut = _parse_samples(samples, wanted)
        if not cut.problems and (cut.gauges or cut.deltas):
            return cut
    return _parse_samples(samples, None)


def _gauge_only(name: str, text: str) -> bool:
    """Whether a family block gives gauges only: ``# TYPE name gauge``, then samples of that very name (the parser
    keeps them to its family as gauges; a ``name_total`` or another TYPE line would make a family of its own)."""
    head = f"# TYPE {name} gauge\n"
    if not text.startswith(head) or name.endswith("_total"):
        return False
    own = (name + "{", name + " ")
    return all(not line or line.startswith(own) for line in text[len(head):].split("\n"))


class _Bodies:
    """Parses texts once per role: the samples of one role repeat most of their families."""

    def __init__(self, wanted: frozenset[str] | None, leave_gauges: bool = True):
        self.wanted = wanted
        self.seen: dict[str, _Parsed | None] = {}
        self.plain: set[str] = set()  # unread blocks proven plain (a role's samples share most of them)
        self.leave_gauges = leave_gauges
        self.gauges_left = False  # an earlier sample's gauge blocks were left unparsed
        self.read: dict[str, bool] = {}  # covers(wanted, name) of each family met (samples repeat their names)

    def parse(self, raw: str, last: bool = True) -> _Parsed:
        """``raw``'s series; of a sample before the last (``last`` false), wanted families that give gauges only
        are proven plain, as unread ones, and not parsed: facts read gauges from the last sample alone."""
        blocks = family_blocks(raw) if self.wanted is not None else None
        if blocks is None:
            return self._block(raw, "") or _Parsed()  # a nameless block is always read
        wanted, read = self.wanted, self.read
        for name, _text in blocks:
            if name not in read:
                read[name] = covers(wanted, name)
        earlier = not last and self.leave_gauges
        skip = [bool(name) and (not read[name] or (earlier and _gauge_only(name, text))) for name, text in blocks]
        skipped = [text for (_name, text), s in zip(blocks, skip) if s]
        new = [text for text in skipped if text not in self.plain]
        unread = bool(skipped) and (not new or plain_families(new))  # else each is checked alone (_block)
        if unread:
            self.plain.update(new)
            self.gauges_left = self.gauges_left or earlier
        out = _Parsed()
        for (name, text), s in zip(blocks, skip):
            if unread and s:
                continue
            parsed = self._block(text, name)
            if parsed is not None:
                out.add(parsed)
        return out

    def _block(self, text: str, name: str) -> _Parsed | None:
        if text not in self.seen:
            unread = bool(name) and self.wanted is not None and not covers(self.wanted, name) and plain_family(text)
            self.seen[text] = None if unread else _parse_body(text)
        return self.seen[text]


def _parse_samples(samples: list[MetricSample], wanted: frozenset[str] | None, leave_gauges: bool = True) -> RoleMetrics:
    problems: list[str] = []
    parsed: list[tuple[MetricSample, _Parsed]] = []
    bodies = _Bodies(wanted, leave_gauges)
    last_read = False
    for i, sample in enumerate(samples, start=1):
        try:
            parsed.append((sample, bodies.parse(sample.raw, last=i == len(samples))))
            last_read = i == len(samples)
        except Exception as exc:  # prometheus_client raises ValueError and, on odd input, others
            head = sample.raw.strip()[:80]
            problems.append(f"sample {i} (at {sample.at}) is not Prometheus text ({exc}); it starts with {head!r}")
    if bodies.gauges_left and not last_read:
        return _parse_samples(samples, wanted, leave_gauges=False)  # the last readable sample is an earlier one
    if not parsed:
        if not problems:
            problems.append("no /metrics samples")
        return RoleMetrics(problems=problems)

    gauges = _combine_gauges(parsed[-1][1].gauges)
    if not gauges and not parsed[-1][1].counters:
        problems.append("the last /metrics sample holds no metrics")

    window_s: float | None = None
    deltas: dict[str, float] = {}
    if len(parsed) >= 2:
        first, last = _timestamp(parsed[0][0].at), _timestamp(parsed[-1][0].at)
        if first is None or last is None:
            problems.append("sample timestamps are not RFC 3339 with a zone; no window")
        else:
            window_s = (last - first).total_seconds()
        history: dict[Series, list[float]] = defaultdict(list)
        for _sample, body in parsed:
            for key, value in body.counters.items():
                history[key].append(value)
        deltas = _counter_facts({k: _increase(v) for k, v in history.items() if len(v) >= 2})
    elif parsed:
        problems.append("only one readable /metrics sample: no counter deltas")

    rates = {k: v / window_s for k, v in deltas.items()} if window_s and window_s > 0 else {}
    ranks = rank_metrics([body for _sample, body in parsed])
    return RoleMetrics(gauges=gauges, deltas=deltas, rates=rates, window_s=window_s, problems=problems, ranks=ranks)


# the per-rank figures: gauge fact -> RankMetrics field
RANK_GAUGES = {"num_running_reqs": "running", "num_queue_reqs": "queued", "token_usage": "token_usage"}


def _rank_of(labels: frozenset[tuple[str, str]]) -> int | None:
    value = dict(labels).get("dp_rank")
    return int(value) if value is not None and value.isdigit() else None


def rank_metrics(bodies: list[_Parsed]) -> list[RankMetrics]:
    """Each DP rank's series, when the scheduler gauges name two ranks or more (radix-cache series carry
    ``dp_rank="0"`` without DP attention too, metrics_collector.py:2424-2432, so ranks are read from the
    scheduler's ``num_running_reqs`` only). TP ranks of one rank and pids are collapsed (max)."""
    if not bodies:
        return []
    last = bodies[-1].gauges
    ranks = sorted({r for (name, labels) in last if name == "num_running_reqs" and (r := _rank_of(labels)) is not None})
    if len(ranks) < 2:
        return []
    out = {r: RankMetrics(dp_rank=r) for r in ranks}
    for (name, labels), value in last.items():
        rank = _rank_of(labels)
        if name in RANK_GAUGES and rank in out and dict(labels).get("priority", "") == "":
            current = getattr(out[rank], RANK_GAUGES[name])
            setattr(out[rank], RANK_GAUGES[name], value if current is None else max(current, value))
    history: dict[Series, list[float]] = defaultdict(list)
    for body in bodies:
        for key, value in body.counters.items():
            if key[0] == REALTIME_TOKENS and _rank_of(key[1]) in out:
                history[key].append(value)
    for (_name, labels), values in history.items():
        if len(values) >= 2:
            tokens = out[_rank_of(labels)].tokens  # type: ignore[index]
            mode = dict(labels).get("mode", "")
            tokens[mode] = max(tokens.get(mode, 0.0), _increase(values))  # TP ranks of one rank: the same count
    return [out[r] for r in ranks]


def tokens_delta(metrics: RoleMetrics, kind: str) -> float | None:
    """Tokens the role processed over the window from the best source its SGLang exports (``PROGRESS_SOURCES``,
    the same fallbacks as the diagnosis), None when it exports none; the one "tokens moving" rule."""
    groups = {"delta": metrics.deltas, "metrics": metrics.gauges}
    for group, name, _what in PROGRESS_SOURCES.get(kind, ()):
        if name in groups[group] and (group == "delta" or metrics.window_s):
            value = groups[group][name]
            return value * metrics.window_s if group == "metrics" and metrics.window_s else value
    return metrics.deltas.get(REALTIME_TOKENS)


def requests_rate(metrics: RoleMetrics) -> float | None:
    """Requests a router routed per second, from the first of ``ROUTER_REQUEST_SOURCES`` it exports."""
    return next((metrics.rates[name] for name in ROUTER_REQUEST_SOURCES if name in metrics.rates), None)
