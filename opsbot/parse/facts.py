"""The facts runbooks see: plain nested maps built from a bundle by the pure parsers.

One fact map per role instance (its own ``unit``/``metrics``/``delta``/``rate``/``health``/
``logs``, its node's ``gpu``, probe-level ``window_s`` and ``failed``) plus ``roles.<kind>`` and
``roles.<name>`` for the other roles. A fact that could not be collected is *absent*, never a
default: conditions that need it come out unknown. runbooks/README.md documents every name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from opsbot.bundle import Bundle, MetricSample, NodeEvidence, RoleEvidence
from opsbot.parse.gpu import parse_gpu_csv
from opsbot.parse.kernel import parse_xid
from opsbot.parse.logs import parse_log_lines
from opsbot.parse.metrics import parse_samples
from opsbot.parse.recall import CANARY_FACTS, RECALL_FACTS, canary_facts, recall_facts
from opsbot.parse.unit import parse_unit

if TYPE_CHECKING:
    from opsbot.diagnose.runbook import Pattern

UNIT_FACTS = frozenset(
    "id load_state active_state sub_state result n_restarts exec_main_status exec_main_code main_pid memory_current".split()
)
HEALTH_FACTS = frozenset("answered status elapsed_ms timed_out".split())
GPU_FACTS = frozenset(
    "count expected missing lost memory_used_mib memory_used_mib_sum memory_total_mib utilization_pct temperature_c xid xid_codes".split()
)
ROLE_ROOTS = frozenset("unit metrics delta rate health logs logs_window gpu failed role name node".split())
TOP_ROOTS = ROLE_ROOTS | {"roles", "window_s", "recall", "canary"}  # recall, canary: probe-wide
AXES = ("systemd", "metrics", "health", "logs", "gpu", "kernel_log")

# Metric names without the sglang:/sglang_ prefix (reference/sglang.md §1.4, §1.6).
GAUGES = frozenset(
    """num_running_reqs num_queue_reqs num_grammar_queue_reqs gen_throughput cache_hit_rate decode_sum_seq_lens
    token_usage full_token_usage swa_token_usage mamba_usage num_used_tokens kv_available_tokens kv_evictable_tokens
    kv_used_tokens swa_available_tokens swa_evictable_tokens swa_used_tokens num_retracted_reqs num_paused_reqs
    num_prefill_bootstrap_queue_reqs num_prefill_inflight_queue_reqs num_decode_prealloc_queue_reqs
    num_decode_transfer_queue_reqs num_decode_host_receive_queue_reqs num_decode_deferred_kv_release_reqs
    pending_prealloc_token_usage prealloc_full_token_usage prealloc_swa_token_usage utilization fwd_occupancy
    new_token_ratio is_cuda_graph max_total_num_tokens max_total_num_tokens_swa context_len page_size num_pages
    weight_memory_usage_gb kv_cache_memory_usage_gb startup_available_gpu_memory_gb spec_accept_length
    spec_accept_rate http_requests_active hicache_host_used_tokens hicache_host_total_tokens
    max_running_requests_under_SLO num_unique_running_routing_keys
    smg_worker_pool_size smg_worker_health smg_worker_connections_active smg_worker_requests_active
    smg_worker_cb_state smg_worker_cb_consecutive_failures smg_http_connections_active""".split()
)
COUNTERS = frozenset(
    """realtime_tokens prompt_tokens generation_tokens num_requests num_aborted_requests cached_tokens
    num_retracted_requests num_retracted_input_tokens num_retracted_output_tokens num_bootstrap_failed_reqs
    num_transfer_failed_reqs num_prefill_retries cuda_graph_passes forward_execution_seconds
    scheduler_idle_seconds prefill_effective_tokens evicted_tokens http_requests http_responses
    num_grammar_aborted num_grammar_timeout process_cpu_seconds failed_session_recoveries
    time_to_first_token_seconds inter_token_latency_seconds e2e_request_latency_seconds queue_time_seconds
    kv_transfer_latency_ms kv_transfer_speed_gb_s kv_transfer_bootstrap_ms kv_transfer_alloc_ms kv_transfer_total_mb
    per_stage_req_latency_seconds
    smg_http_requests smg_http_responses smg_router_requests smg_router_request_errors smg_router_upstream_responses
    smg_worker_health_checks smg_worker_errors smg_worker_retries smg_worker_retries_exhausted
    smg_worker_selection smg_worker_cb_transitions smg_worker_cb_outcomes""".split()
)


def unknown_fact(path: str, pattern_names: set[str]) -> str | None:
    """Why ``path`` names no fact opsbot produces, or None when it is a real fact name."""
    parts = path.split(".")
    if parts[0] == "roles":
        if len(parts) < 3:
            return f"{path}: write roles.<prefill|decode|router|name>.<axis>.<fact>"
        parts = parts[2:]
        if parts[0] not in ROLE_ROOTS:
            return f"{path}: {parts[0]!r} is not a per-role fact group ({', '.join(sorted(ROLE_ROOTS))})"
    elif parts[0] not in TOP_ROOTS:
        return f"{path}: no fact group {parts[0]!r}; known: {', '.join(sorted(TOP_ROOTS))}"
    root, rest = parts[0], parts[1:]
    if root in ("window_s", "failed", "role", "name", "node"):
        return f"{path}: {root} has no fields" if rest else None
    if not rest:
        return None  # the whole map, e.g. `"x" in logs`
    leaf = rest[0]
    if len(rest) > 1:
        return f"{path}: {root}.{leaf} has no fields"
    known = {
        "unit": UNIT_FACTS,
        "health": HEALTH_FACTS,
        "gpu": GPU_FACTS,
        "logs": pattern_names,
        "logs_window": pattern_names,
        "metrics": GAUGES,
        "recall": RECALL_FACTS,
        "canary": CANARY_FACTS,
    }.get(root)
    if known is not None:
        return None if leaf in known else f"{path}: {leaf!r} is not a {root} fact (see runbooks/README.md)"
    # delta / rate: a counter, a counter with its label value appended, or a histogram _count/_sum
    base = leaf.removesuffix("_count").removesuffix("_sum")
    if leaf in COUNTERS or base in COUNTERS or any(leaf.startswith(c + "_") for c in COUNTERS):
        return None
    return f"{path}: {leaf!r} is not a known SGLang counter (names drop the sglang: prefix and _total)"


@dataclass
class BundleFacts:
    """Fact maps per role key, and the problems met while building them (parse errors)."""

    scopes: dict[str, dict[str, Any]] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _unit(ev: RoleEvidence, failed: list[str], problems: list[str]) -> tuple[dict[str, Any], datetime | None]:
    """The ``unit.*`` facts and, when the unit is active, when its current run started."""
    if not ev.systemd.ok:
        failed.append("systemd")
        return {}, None
    try:
        u = parse_unit(ev.systemd.raw)
    except ValueError as exc:
        failed.append("systemd")
        problems.append(f"{ev.key}: systemd: {exc}")
        return {}, None
    started = None
    if u.active_state == "active":
        started = _systemd_time(u.exec_main_start_timestamp) or _systemd_time(u.active_enter_timestamp)
    return _clean({k: getattr(u, k, None) for k in UNIT_FACTS}), started


_SYSTEMD_TIME = re.compile(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.\d+)? (UTC|GMT|Z|[+-]\d{2}:?\d{2})$")


def _systemd_time(text: str | None) -> datetime | None:
    """``Mon 2026-11-30 15:28:30 UTC`` → an aware datetime; a zone named otherwise (CET) is not guessed."""
    m = _SYSTEMD_TIME.search(text or "")
    if not m:
        return None
    zone = m[2]
    if zone in ("UTC", "GMT", "Z"):
        tz = timezone.utc
    else:
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
    return datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S").replace(tzinfo=tz)


def _line_time(ts: str | None) -> datetime | None:
    """A journald ``short-iso`` stamp (``2026-11-30T15:28:24+0000``); a bare SGLang stamp has no zone: None."""
    if not ts:
        return None
    try:
        at = datetime.fromisoformat(ts.replace(",", "."))
    except ValueError:
        return None
    return at if at.tzinfo else None


_UNREAD = re.compile(r"^(?:# HELP [^\n]*|[^#\n][^\n{ ]*_bucket[{ ][^\n]*)\n?", re.M)


def _unread_dropped(samples: list[MetricSample]) -> list[MetricSample]:
    """The samples without histogram buckets and HELP lines, which no fact uses: half the parsing."""
    return [MetricSample(at=s.at, raw=_UNREAD.sub("", s.raw)) for s in samples]


def _metrics(
    ev: RoleEvidence, failed: list[str], problems: list[str], wanted: frozenset[str] | None
) -> tuple[dict, dict, dict, float | None]:
    if not ev.metrics.ok or not ev.metrics.samples:
        failed.append("metrics")
        return {}, {}, {}, None
    try:
        m = parse_samples(_unread_dropped(ev.metrics.samples), wanted)
    except ValueError as exc:
        failed.append("metrics")
        problems.append(f"{ev.key}: metrics: {exc}")
        return {}, {}, {}, None
    problems.extend(f"{ev.key}: metrics: {p}" for p in m.problems)
    if not m.gauges and not m.deltas:
        failed.append("metrics")
        return {}, {}, {}, None
    return dict(m.gauges), dict(m.deltas), dict(m.rates), m.window_s


def _health(ev: RoleEvidence, failed: list[str]) -> dict[str, Any]:
    h = ev.health
    if not h.ok and h.status is None:
        failed.append("health")
        err = (h.error or "").lower()
        return {"answered": False, "timed_out": "timeout" in err or "timed out" in err, "elapsed_ms": h.elapsed_ms}
    return _clean({"answered": h.status is not None, "status": h.status, "elapsed_ms": h.elapsed_ms, "timed_out": False})


_NOT_ALTERNABLE = re.compile(r"\\[1-9]|\(\?P=|\(\?[aiLmsux]")


@lru_cache(maxsize=8)
def _any_pattern(patterns: tuple[Pattern, ...]) -> re.Pattern[str] | None:
    """One regex that matches where any pattern does (most lines match none), or None if unsafe."""
    if any(_NOT_ALTERNABLE.search(p.regex.pattern) or p.regex.flags != re.UNICODE for p in patterns):
        return None  # a backreference or inline flag would change meaning inside an alternation
    try:
        return re.compile("|".join(f"(?:{p.regex.pattern})" for p in patterns))
    except re.error:
        return None


def _logs(
    ev: RoleEvidence, patterns: list[Pattern], started: datetime | None, failed: list[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Pattern counts since the unit's current run started (``logs``) and over the whole journal window
    (``logs_window``). Without a known start (unit not active, timestamp unreadable) both are the window;
    a line whose time is unknown counts in both."""
    if not ev.logs.ok:
        failed.append("logs")
        return {}, {}
    window = dict.fromkeys((p.name for p in patterns), 0)
    current = dict(window)
    anything = _any_pattern(tuple(patterns))
    for entry in parse_log_lines(ev.logs.raw):
        if anything is not None and anything.search(entry.message) is None:
            continue
        at = _line_time(entry.ts) if started else None
        recent = started is None or at is None or at >= started
        for p in patterns:
            if p.matches(entry.message):
                window[p.name] += 1
                current[p.name] += int(recent)
    return current, window


_GPU_LOST = ("Unable to determine the device handle", "GPU is lost", "No devices were found", "Unknown Error")


def _gpu(node: NodeEvidence | None, indices: list[int], failed: list[str], problems: list[str]) -> dict[str, Any]:
    """Node GPU facts; with the role's GPU indices also ``expected`` and ``missing`` (not listed or unreadable)."""
    out: dict[str, Any] = {}
    if indices:
        out["expected"] = len(indices)
    if node is None:
        failed.append("gpu")
        return out
    if node.kernel_log is not None:
        if node.kernel_log.ok:
            codes = [x.xid for x in parse_xid(node.kernel_log.raw)]
            out["xid"], out["xid_codes"] = len(codes), sorted(set(codes))
        else:
            failed.append("kernel_log")
    raw = node.gpu.raw or ""
    lost = sum(1 for line in raw.splitlines() if any(s in line for s in _GPU_LOST))
    if not node.gpu.ok and not lost:
        failed.append("gpu")
        return out
    try:
        rows = parse_gpu_csv(raw) if node.gpu.ok else []
    except ValueError as exc:
        problems.append(f"{node.node}: gpu: {exc}")
        rows = []
    out["lost"] = lost
    out["count"] = len(rows)
    if indices and node.gpu.ok:
        readable = {r.index for r in rows if r.memory_used_mib is not None}
        out["missing"] = sum(1 for i in indices if i not in readable)
    used = [r.memory_used_mib for r in rows if r.memory_used_mib is not None]
    if used:
        out["memory_used_mib"], out["memory_used_mib_sum"] = max(used), sum(used)
    for name in ("memory_total_mib", "utilization_pct", "temperature_c"):
        vals = [getattr(r, name) for r in rows if getattr(r, name) is not None]
        if vals:
            out[name] = max(vals)
    return out


def role_facts(
    bundle: Bundle, ev: RoleEvidence, patterns: list[Pattern], problems: list[str], metrics: frozenset[str] | None = None
) -> dict[str, Any]:
    """The facts of one role instance, without the cross-role ``roles`` map.

    ``metrics`` names the metric facts wanted (``RunbookSet.metric_facts``): only the families
    they come from are parsed, and other metric facts may be absent. None parses everything.
    """
    failed: list[str] = []
    gauges, deltas, rates, window = _metrics(ev, failed, problems, metrics)
    unit, started = _unit(ev, failed, problems)
    logs, logs_window = _logs(ev, patterns, started, failed)
    facts: dict[str, Any] = {
        "role": ev.role,
        "name": ev.key,
        "node": ev.node,
        "unit": unit,
        "metrics": gauges,
        "delta": deltas,
        "rate": rates,
        "health": _health(ev, failed),
        "logs": logs,
        "logs_window": logs_window,
        "gpu": _gpu(bundle.node(ev.node), ev.gpus, failed, problems),
    }
    facts["failed"] = failed
    if window is not None:
        facts["window_s"] = window
    return facts


def bundle_facts(
    bundle: Bundle, patterns: list[Pattern], metrics: Mapping[str, frozenset[str] | None] | None = None
) -> BundleFacts:
    """Fact maps for every role in the bundle, each with ``roles`` pointing at the others.

    ``metrics``: per role kind, the metric facts wanted (``RunbookSet.metric_facts``); a kind
    it does not name, or no mapping, gets every family parsed.
    """
    out = BundleFacts()
    out.problems.extend(getattr(bundle, "section_problems", None) or [])
    probe_wide = {"recall": recall_facts(bundle.recall), "canary": canary_facts(bundle.canary)}
    wanted = metrics or {}
    own = {ev.key: role_facts(bundle, ev, patterns, out.problems, wanted.get(ev.role)) for ev in bundle.roles}
    peers: dict[str, dict[str, Any]] = {}
    for ev in bundle.roles:
        peers.setdefault(ev.role, own[ev.key])  # roles.<kind>: the first instance of that kind
        peers[ev.key] = own[ev.key]
    for ev in bundle.roles:
        out.scopes[ev.key] = {**own[ev.key], **probe_wide, "roles": peers}
        out.kinds[ev.key] = ev.role
    return out
