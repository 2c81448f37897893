"""The facts runbooks see: plain nested maps built from a bundle by the pure parsers.

One fact map per role instance (its own ``unit``/``metrics``/``delta``/``rate``/``health``/
``logs``, its node's ``gpu``, probe-level ``window_s`` and ``failed``) plus ``roles.<kind>`` and
``roles.<name>`` for the other roles. A fact that could not be collected is *absent*, never a
default: conditions that need it come out unknown. runbooks/README.md documents every name.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from functools import lru_cache, partial
from typing import Any

from opsbot.bundle import Bundle, Canary, MetricSample, NodeEvidence, RoleEvidence
from opsbot.parse.gpu import parse_gpu_csv
from opsbot.parse.exceptions import ExceptionClasses, RaisedException, Stage, crash_frames, is_crash_line, parse_exceptions
from opsbot.parse.glog import parse_glog
from opsbot.parse.kernel import driver_faults, parse_xid
from opsbot.parse.lines import Regex, linear, linear_error, linear_set
from opsbot.parse.logs import LogEntry, Pattern, parse_log_lines
from opsbot.parse.metricnames import (
    COUNTERS, GAUGES, PROGRESS_COUNTER, PROGRESS_SOURCES, REALTIME_TOKENS, ROUTER_REQUEST_SOURCES,
)
from opsbot.parse.metrics import parse_samples
from opsbot.parse.patch import PatchSeen, seen_in, window_start
from opsbot.parse.ranks import RANK_FACTS, rank_facts
from opsbot.parse.fidelity import FIDELITY_FACTS, fidelity_facts
from opsbot.parse.recall import CANARY_FACTS, RECALL_FACTS, canary_facts, recall_facts
from opsbot.parse.templates import RoleHistory, role_templates, with_history
from opsbot.parse.unit import parse_unit
from opsbot.parse.verdict import (
    FAILURE_COUNTERS, IDLE_GAUGE_HOLD_S, VERDICT_FACTS, batch_recency, is_abnormal, probe_wide_reasons, role_verdict,
    with_reasons,
)

UNIT_FACTS = frozenset(
    "id load_state active_state sub_state result n_restarts exec_main_status exec_main_code main_pid memory_current".split()
)
# read from the unit's state machine and systemd's own journal lines, not from SGLang's text
UNIT_DERIVED = frozenset("restarting crash_looping restarts_logged exit_code exit_signal restarts_moved start_limit_hit".split())
EXCEPTION_FACTS = frozenset(
    "count startup serving unknown incidents startup_incident ended_run_incident looping_incident type message stage"
    " writer".split()
)
ENGINE_FACTS = frozenset("errors transfer nccl components crash crash_incident".split())
PROGRESS_FACTS = frozenset(
    "decode_tokens decode_source prefill_tokens prefill_source decode_stalled prefill_stalled batches transfer_waiting"
    " tokens_moved last_batch_age_s".split()
)
# Requests parked between prefill and decode, waiting for their KV cache to move (SGLang 0.4.6.post5 to
# 0.5.23 metrics: decode's prealloc and transfer queues, prefill's inflight queue).
TRANSFER_QUEUES = ("num_decode_prealloc_queue_reqs", "num_decode_transfer_queue_reqs", "num_prefill_inflight_queue_reqs")
ROUTING_FACTS = frozenset("no_worker_errors breaker_open stalled overloaded empty_pool checks_since_passed".split())
# The request side (issue 24, fourth round): what became of the requests a role was given, from its own request
# counters and gauges, not its log lines (a router that drops a request, or a server that keeps one nobody waits for,
# writes none). ``failed``: requests the router answered with a 5xx or counted as failed by its own counters;
# ``in_flight``: requests the router has in flight to its workers; ``routed``: requests it routed in the window;
# ``held``: requests an engine holds parked between prefill and decode; ``refused``: requests an engine answered with
# an error status in its current run (its access lines) or counted as aborted.
# Issue 24, fifth round: ``rejected``: requests an engine answered with an error status in its current run (access
# lines of a ``POST``, without the aborted counter: a client that left is not a refusal); ``transfer_failed``: the
# transfer failures an engine wrote or counted itself (its kv-transfer lines that report a failure, not a client's
# abort; its transfer engine's glog errors; its failed-transfer and failed-bootstrap counters); ``transfer_uncaused``:
# those of its lines that name no cause of their own (TRANSFER_UNCAUSED); ``leg_refused``: requests the PD peer
# refused while this pair's transfer failed or waits with no cause of its own (_leg_refused); ``leg_failed``:
# requests this engine holds parked for a leg that failed elsewhere, where nothing else is wrong with it
# (_request_side).
REQUEST_FACTS = frozenset("failed in_flight routed held refused rejected transfer_failed transfer_uncaused leg_refused"
                          " leg_failed".split())
# A KV receiver's failure that names no cause of its own: it waited and gave up, or its peer reported the room failed
# without a reason (SGLang 0.5.23, reference/sglang.md §4.1: disaggregation/common/conn.py:313
# DEFAULT_PREFILL_FAILURE_REASON "Failed to get kvcache from prefill instance, it might be dead", recorded when the
# prefill's status for the room is Failed; :2894 and mooncake/conn.py:1892 (0.5.12) the decode's waiting timeout
# "Request {room} timed out after {t}s in KVPoll.WaitingForInput" after warning_once "Some requests fail to receive
# KV Cache transfer done signal after bootstrapping"; :2396, mooncake/conn.py:1729 the bootstrap timeout "... in
# KVPoll.Bootstrapping" after "Some requests timed out when bootstrapping"; :103-116 "Failed due to an unknown reason
# from another rank"; :2600 "Timed out waiting for prefill completion"). A transport's own words (RDMA, a session, a
# lost connection, a chunk it could not send) are a cause.
TRANSFER_UNCAUSED = linear(r"timed out after [0-9.]+s in KVPoll\.\w+|Failed to get kvcache from prefill instance"
                           r"|unknown reason from another rank|timed out when bootstrapping|fail to receive KV Cache transfer"
                           r"|Timed out waiting for prefill completion")
_CLIENT_ABORT = "Aborted by AbortReq."
# The router's counters of requests it failed, by family (sglang-router 0.2.x, smg-project/smg bda5d7095 src/metrics.rs:
# 312 sgl_router_request_errors_total{route,error_type}, :426 sgl_router_pd_errors_total{error_type}, :433
# sgl_router_pd_prefill_errors_total{worker}, :440 sgl_router_pd_decode_errors_total{worker}, :447
# sgl_router_pd_stream_errors_total{worker}, recorded at src/routers/http/pd_router.rs:437,535,695,791,815; SMG and
# sglang-router >= 0.3.2: c7f9bf9f5 src/observability/metrics.rs smg_http_responses_total{path,status_code,error_code}
# and smg_router_request_errors_total{...,error_type}, the type from the status (routers/grpc/utils.rs:1034-1041: 400
# validation_error, 404 no_workers, 408/504 timeout, 5xx backend_error, else internal_error)). The "no worker" types
# are router-no-healthy-workers' (``routing.no_worker_errors``); a 400 (validation_error, invalid_request) is the
# client's own request.
ROUTER_FAILURE_COUNTERS = ("sgl_router_pd_prefill_errors", "sgl_router_pd_decode_errors", "sgl_router_pd_stream_errors")
ROUTER_ERROR_TYPED = ("smg_router_request_errors", "sgl_router_request_errors", "sgl_router_pd_errors")
_CLIENT_ERROR_TYPES = frozenset({"validation_error", "invalid_request", "bad_request"})
# Requests the router has in flight per worker (c7f9bf9f5 src/core/worker.rs:670-673 update_running_requests_metrics:
# smg_worker_requests_active{worker} set from the worker's load at each increment and decrement, a live count, not a
# periodic one) and what it routed (metricnames.ROUTER_REQUEST_SOURCES).
# The families ``requests.*`` is made from, per kind of role (RunbookSet.metric_facts parses only these).
REQUEST_FAMILIES = {
    "router": ("smg_worker_requests_active", "smg_http_responses", *ROUTER_FAILURE_COUNTERS, *ROUTER_ERROR_TYPED,
               "smg_router_requests", "sgl_router_processed_requests", "sgl_router_requests", "sgl_router_pd_requests"),
    "engine": ("num_aborted_requests", *TRANSFER_QUEUES, "num_prefill_bootstrap_queue_reqs"),
}
# Workers the router has in its pool, per kind (smg 1.13.0 observability/metrics.rs smg_worker_pool_size
# {worker_type}; sglang-router 0.2.1 metrics.rs sgl_router_active_workers): none of a kind, none to route to.
# SMG sets the gauge per (worker_type, connection_mode, model) of the workers it registers (model_gateway/src/
# core/steps/worker/shared/register.rs; worker_type "regular", "prefill" or "decode"): a PD pool whose series
# name one kind only has never had a worker of the other.
POOL_GAUGES = ("smg_worker_pool_size", "smg_worker_pool_size_prefill", "smg_worker_pool_size_decode", "sgl_router_active_workers")
# The error codes of the router's own 503 when it has no worker to send a request to (smg
# model_gateway/src/routers/http/pd_router.rs and router.rs, v1.9.0: no_prefill_servers, server_selection_failed
# "No available servers: ...", no_healthy_worker_pair, no_workers). no_available_workers says so only with the
# regular router's words (router.rs "All workers are unavailable (circuit breaker open or unhealthy)"): SMG
# also sheds load with that code when every worker is overloaded (routers/common/overload.rs), no health failure.
NO_WORKER_CODES = frozenset({"no_workers", "no_prefill_servers", "no_healthy_worker_pair", "server_selection_failed"})
# The router's counters of failed routing, by error_type (sglang-router 0.2.1 sgl_router_*; sglang-router 0.3.2
# and smg 1.13.0 smg_router_request_errors_total): the types that mean "no worker to send it to" start with
# "no_" (no_workers, no_available_workers, no_healthy_worker_pair, no_prefill_servers, ...) or are a failed
# server selection (sglang-router 0.2.1 handle_server_selection_error: "server_selection").
ROUTING_ERROR_COUNTERS = ("smg_router_request_errors", "sgl_router_request_errors", "sgl_router_pd_errors")
ROUTING_GAUGES = ("smg_worker_cb_state", "smg_worker_stalled", "smg_workers_overloaded", "smg_worker_pool_size",
                  "sgl_router_active_workers")
# Older names of the same figures → the names runbooks read (SGLang 0.4.6.post5 / 0.5.0rc2
# metrics/collector.py; sglang-router 0.2.1 sgl_router_*, SMG/sglang-router >= 0.3 smg_*).
METRIC_ALIASES = {
    "num_prefill_infight_queue_reqs": "num_prefill_inflight_queue_reqs",
    "num_prefill_prealloc_queue_reqs": "num_prefill_bootstrap_queue_reqs",
    "total_retracted_reqs": "num_retracted_reqs",
    "sgl_router_worker_health": "smg_worker_health",
    "sgl_router_cb_state": "smg_worker_cb_state",
    "sgl_router_worker_cb_state": "smg_worker_cb_state",  # the in-tree sgl-router's per-worker breaker, 0/1/2
    "sgl_router_running_requests": "smg_worker_requests_active",
}
# Families read only when the current names are absent (an older SGLang or router): parsed in a second
# pass, so a current server pays nothing for them.
FALLBACK_METRICS = frozenset(
    {name for sources in PROGRESS_SOURCES.values() for _group, name, _label in sources[1:]} | set(METRIC_ALIASES)
)


def _current_names(deltas: dict[str, float], gauges: dict[str, float]) -> bool:
    """Whether the role exports the current names (SGLang's realtime_tokens_total, the router's smg_*)."""
    return any(k.startswith((REALTIME_TOKENS, "smg_")) for k in (*deltas, *gauges))
HEALTH_FACTS = frozenset("answered status elapsed_ms timed_out".split())
PATCH_FACTS = frozenset("state index_keys version sglang reason".split())
GPU_FACTS = frozenset(
    "count expected missing lost memory_used_mib memory_used_mib_sum memory_total_mib utilization_pct temperature_c xid xid_codes"
    " hardware_xid driver_fault idle busy".split()
)
# Xids an application causes (NVIDIA's Xid catalog, docs.nvidia.com/deploy/xid-errors: 13 graphics engine
# exception, 31 GPU memory page fault, 43 GPU stopped processing, 45 preemptive cleanup): a software fault
# such as an illegal memory access in a kernel, not a bad GPU. Every other code counts as hardware.
APPLICATION_XIDS = frozenset({13, 31, 43, 45})
ROLE_ROOTS = frozenset(
    "unit metrics delta rate health logs logs_window gpu failed role name node exception engine progress routing"
    " patch verdict requests".split()
) | {"ranks"}  # DP attention: per-rank facts (opsbot/parse/ranks.py)
TOP_ROOTS = ROLE_ROOTS | {"roles", "window_s", "router_blocked", "routed_errors", "recall", "canary"}  # the last two: probe-wide
TOP_ROOTS = TOP_ROOTS | {"fidelity"}  # probe-wide: the output-fidelity run (opsbot/parse/fidelity.py)
AXES = ("systemd", "metrics", "health", "logs", "gpu", "kernel_log")



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
    if root in ("window_s", "failed", "role", "name", "node", "router_blocked", "routed_errors"):
        return f"{path}: {root} has no fields" if rest else None
    if not rest:
        return None  # the whole map, e.g. `"x" in logs`
    leaf = rest[0]
    if len(rest) > 1:
        return f"{path}: {root}.{leaf} has no fields"
    known = {
        "unit": UNIT_FACTS | UNIT_DERIVED,
        "exception": EXCEPTION_FACTS,
        "engine": ENGINE_FACTS,
        "progress": PROGRESS_FACTS,
        "routing": ROUTING_FACTS,
        "requests": REQUEST_FACTS,
        "health": HEALTH_FACTS,
        "patch": PATCH_FACTS,
        "verdict": VERDICT_FACTS,
        "gpu": GPU_FACTS,
        "logs": pattern_names,
        "logs_window": pattern_names,
        "metrics": GAUGES | set(METRIC_ALIASES.values()),
        "recall": RECALL_FACTS,
        "canary": CANARY_FACTS,
        "ranks": RANK_FACTS,
        "fidelity": FIDELITY_FACTS,
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


def _unit(
    ev: RoleEvidence, failed: list[str], problems: list[str]
) -> tuple[dict[str, Any], datetime | None, datetime | None, datetime | None]:
    """The ``unit.*`` facts; when the unit is active, when its current run started; when its last run
    started whatever its state (systemd keeps ExecMainStartTimestamp after the process exits); and when
    its state last changed."""
    if not ev.systemd.ok:
        failed.append("systemd")
        return {}, None, None, None
    try:
        u = parse_unit(ev.systemd.raw)
    except ValueError as exc:
        failed.append("systemd")
        problems.append(f"{ev.key}: systemd: {exc}")
        return {}, None, None, None
    last_run = _systemd_time(u.exec_main_start_timestamp) or _systemd_time(u.active_enter_timestamp)
    started = last_run if u.active_state == "active" else None
    facts = _clean({k: getattr(u, k, None) for k in UNIT_FACTS})
    facts["restarting"] = u.sub_state == "auto-restart" or (u.active_state == "activating" and (u.n_restarts or 0) > 0)
    if u.exec_main_code == 1 and u.exec_main_status is not None:
        facts["exit_code"] = u.exec_main_status  # CLD_EXITED
    elif u.exec_main_code in (2, 3) and u.exec_main_status:
        facts["exit_signal"] = _signal_name(u.exec_main_status)  # CLD_KILLED, CLD_DUMPED
    return facts, started, last_run, _systemd_time(u.state_change_timestamp)


# Longer than any start-up: weights load in minutes, torch's NCCL and store timeouts at initialisation
# are 10 and 30 minutes. A process still writing this long after its run started was past start-up.
SERVING_AFTER = timedelta(hours=1)


def _ran_past_startup(entries: Sequence[LogEntry], last_run: datetime | None) -> bool:
    """Whether the last run (ExecMainStartTimestamp) wrote a line ``SERVING_AFTER`` or more after it began:
    what it then raised happened while serving, even when no batch line or metric shows it."""
    if last_run is None:
        return False
    times = (_line_time(e.ts) for e in entries if e.process != "systemd")
    return any(at is not None and at - last_run >= SERVING_AFTER for at in times)


def _lasted(unit: dict[str, Any], last_run: datetime | None, left: datetime | None, now: datetime | None) -> bool:
    """Whether the unit's last run lasted ``SERVING_AFTER`` or more by systemd's own clocks, whatever its
    journal kept: it left ``active`` (StateChangeTimestamp) that long after its ExecMainStartTimestamp, or it
    waits to be restarted (RestartSec: seconds) and that run began that long before the probe. A run that
    served for hours and died is not a start-up failure, even when the lines before its death are gone."""
    if last_run is None or unit.get("active_state") == "active":
        return False
    if left is not None and left - last_run >= SERVING_AFTER:
        return True
    return unit.get("sub_state") == "auto-restart" and now is not None and now - last_run >= SERVING_AFTER


def _raised_while_serving(raised: Sequence[RaisedException], last_run: datetime | None) -> bool:
    """Whether the last run raised an exception under its event loop (its frames say ``serving``): the loop ran, so
    the run was past start-up, whatever else it printed (a cut traceback, an error line) before or after."""
    return any(x.stage == "serving" and (last_run is None or (at := _line_time(x.ts)) is None or at >= last_run)
               for x in raised)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _crash_looping(unit: dict[str, Any], restarts_logged: int | None) -> bool:
    """systemd restarts it again and again: waiting to restart, or gave up after restarts or at its start
    limit, or (not active now) its own journal shows two restarts or more in the window. A unit running
    again is not."""
    restarts = unit.get("n_restarts") or 0
    return bool(
        unit.get("restarting")
        or (unit.get("active_state") in ("failed", "activating") and (restarts >= 1 or unit.get("start_limit_hit")))
        or ((restarts_logged or 0) >= 2 and unit.get("active_state") != "active")
    )


_SYSTEMD_TIME = linear(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.\d+)? (UTC|GMT|Z|[+-]\d{2}:?\d{2})$")


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
    return _clock(m[1]).replace(tzinfo=tz)


def _clock(text: str) -> datetime:
    """``2026-11-30 15:28:30`` (as _SYSTEMD_TIME found it) → a naive datetime: what ``strptime`` with
    ``%Y-%m-%d %H:%M:%S`` gives, built from the digits (strptime costs ~9 us); out of range, strptime's own error."""
    try:
        return datetime(int(text[:4]), int(text[5:7]), int(text[8:10]), int(text[11:13]), int(text[14:16]), int(text[17:19]))
    except ValueError:
        return datetime.strptime(text, "%Y-%m-%d %H:%M:%S")


def _line_time(ts: str | None) -> datetime | None:
    """A journald ``short-iso`` stamp (``2026-11-30T15:28:24+0000``); a bare SGLang stamp has no zone: None."""
    if not ts:
        return None
    try:
        at = datetime.fromisoformat(ts.replace(",", "."))
    except ValueError:
        return None
    return at if at.tzinfo else None


# re: one sub per body; it opens with a literal "\n" (each line read as "\n" + line), which re searches for fast:
# half the time of "^...\n?" with re.M
_UNREAD = re.compile(r"\n(?:# HELP [^\n]*|[^#\n][^\n{ ]*_bucket[{ ][^\n]*)")


def _without_unread(raw: str) -> str:
    """``raw`` without its HELP lines and histogram buckets, each line dropped with the newline after it."""
    text, dropped = _UNREAD.subn("", "\n" + raw + "\n")
    text = text[1:-1]
    if dropped and not raw.endswith("\n") and dropped <= raw.count("\n") and _UNREAD.fullmatch(raw[raw.rfind("\n"):]):
        text += "\n"  # a last line dropped without a newline after it leaves the newline before it
    return text


def _unread_dropped(samples: list[MetricSample]) -> list[MetricSample]:
    """The samples without histogram buckets and HELP lines, which no fact uses: half the parsing."""
    return [MetricSample(at=s.at, raw=_without_unread(s.raw)) for s in samples]


def _metrics(
    ev: RoleEvidence, failed: list[str], problems: list[str], wanted: frozenset[str] | None
) -> tuple[dict, dict, dict, float | None]:
    if not ev.metrics.ok or not ev.metrics.samples:
        failed.append("metrics")
        return {}, {}, {}, None
    try:
        samples = _unread_dropped(ev.metrics.samples)
        m = parse_samples(samples, wanted)
        if wanted is not None and not _current_names(m.deltas, m.gauges):
            m = parse_samples(samples, wanted | FALLBACK_METRICS)
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


_NOT_ALTERNABLE = linear(r"\\[1-9]|\(\?P=|\(\?[aiLmsux]")


@lru_cache(maxsize=8)
def _any_pattern(patterns: tuple[Pattern, ...]) -> Regex | None:
    """One regex that matches where any pattern without ``words`` does (most lines match none), or None
    if unsafe. Patterns with ``words`` are tried on their own, after their cheap substring test."""
    patterns = tuple(p for p in patterns if not p.words)
    if any(_NOT_ALTERNABLE.search(p.regex.pattern) for p in patterns):
        return None  # a backreference or inline flag would change meaning inside an alternation
    try:
        return linear("|".join(f"(?:{p.regex.pattern})" for p in patterns))
    except linear_error:
        return None


def _unless_texts(patterns: tuple[Pattern, ...]) -> list[str]:
    return list(dict.fromkeys(p.unless.pattern for p in patterns if p.unless is not None))


@lru_cache(maxsize=8)
def _pattern_set(patterns: tuple[Pattern, ...]) -> Callable[[str], list[int] | None] | None:
    """One RE2 pass over a line telling which patterns' regexes match in it (indices), where trying each
    pattern costs RE2's per-call overhead 23 times. The set's entry ``len(patterns)`` matches every line, so an
    answer without it (RE2's DFA out of memory on a hostile line gives no answer) is told from "none match"; the
    caller then tries the patterns one by one. After it, each distinct ``unless`` text (``_unless_entries``): the
    same pass says whether a pattern's ``unless`` matches too. None if RE2 refuses the set."""
    try:
        return linear_set([p.regex.pattern for p in patterns] + [""] + _unless_texts(patterns))
    except linear_error:
        return None


@lru_cache(maxsize=8)
def _unless_entries(patterns: tuple[Pattern, ...]) -> tuple[int, ...]:
    """Each pattern's ``unless`` entry in ``_pattern_set`` (-1 without ``unless``)."""
    texts = _unless_texts(patterns)
    return tuple(len(patterns) + 1 + texts.index(p.unless.pattern) if p.unless is not None else -1 for p in patterns)


@dataclass
class _LogRead:
    """What one pass over a role's journal gives: pattern counts, exceptions, engine lines, restarts."""

    current: dict[str, Any] = field(default_factory=dict)
    window: dict[str, Any] = field(default_factory=dict)
    raised: list[RaisedException] = field(default_factory=list)
    engine: dict[str, Any] = field(default_factory=dict)
    restarts_logged: int | None = None
    batch_lines: int = 0
    current_batch_lines: int | None = None
    error_line: LogEntry | None = None  # the application's last error line, when no line names a class
    native: list[RaisedException] = field(default_factory=list)  # glog E/F lines of the current run, as exceptions
    start_limit: bool = False  # systemd logged that the unit hit its start limit
    entries: list[LogEntry] = field(default_factory=list)  # the journal, parsed once for every reader
    now: list[LogEntry] = field(default_factory=list)  # its lines of the current run (the last run, when down)


# Lines that name their own class (a runbook reads them); a start-up error line is one of the others.
_SPECIFIC_KINDS = frozenset({"oom", "nccl", "native", "kv-transfer", "watchdog", "xid", "health", "retract"})
_ERROR_KINDS = frozenset({"crash", "traceback", "error"})
# Lines whose text the exception table may class (NCCL, out of memory) without an exception printed
_NAMED_LINE_KINDS = frozenset({"nccl", "oom"})
# a C++ exception's own lines after libstdc++'s "terminate called" (parse_exceptions reads them with it)
_EXCEPTION_TRAIL = ("what():", "Exception raised from ")
# NCCL's own log levels below WARN (NCCL_DEBUG=INFO prints hundreds at every start): not errors
_NCCL_CHATTER = linear(r"\bNCCL (?:INFO|TRACE)\b")
_RESTART = linear(r"Scheduled restart job, restart counter is at (\d+)")
# systemd's words when a unit hit StartLimitBurst (its Result is then start-limit-hit)
_START_LIMIT = "Start request repeated too quickly"
_GLOG_START = linear(r"^\s*(?:\[rank\d+\]:)?(?:\[?[IWEF]\d{4}|\[[IWEF] \w)")
_GLOG_FIRST = frozenset("[IWEF")


# a unit in one of these states (or waiting to restart) is not running: its last run has ended
_DOWN = frozenset({"failed", "inactive"})


def _down_now(unit: dict[str, Any]) -> bool:
    """Not running: stopped, failed, or waiting to be restarted (its last run has ended)."""
    return unit.get("active_state") in _DOWN or unit.get("sub_state") == "auto-restart"


def _recent(entry: LogEntry, started: datetime | None, main_pid: int | None = None) -> bool:
    """Whether the line is the current run's. Both times are to the second, and systemd restarts a unit 100 ms
    after it died: in the second the run started, a line is the run's only when its process is the run's
    main process (journald names the process that opened the stream, the main one), when both are known."""
    at = _line_time(entry.ts) if started else None
    if started is None or at is None or at > started:
        return True
    if at < started:
        return False
    return main_pid is None or entry.pid is None or entry.process == "systemd" or entry.pid == main_pid


def _logs(
    ev: RoleEvidence, patterns: list[Pattern], started: datetime | None, failed: list[str], table: ExceptionClasses | None,
    pid: int | None = None,
) -> _LogRead:
    """Pattern counts since the unit's current run started (``logs``) and over the whole journal window
    (``logs_window``); exceptions over the window (``exception``); C++ components' error lines of the
    current run (``engine``); systemd's restart lines. ``started``: when the current run began, or for a
    unit that is down for good (failed, inactive), its last run: what stopped it is there, not in the runs
    before. A unit waiting to restart counts the window: its recent runs keep failing the same way.
    Without a known start (timestamp unreadable) the current run is the window; a line whose time is
    unknown counts in both. ``pid``: the running unit's main process, which decides the run's first second."""
    if not ev.logs.ok:
        failed.append("logs")
        return _LogRead()
    window = dict.fromkeys((p.name for p in patterns), 0)
    current = dict(window)
    anything = _any_pattern(tuple(patterns))
    matching = _pattern_set(tuple(patterns))
    unless = _unless_entries(tuple(patterns))
    worded = [p for p in patterns if p.words]
    entries = parse_log_lines(ev.logs.raw)
    engine: dict[str, Any] = {"errors": 0, "transfer": 0, "nccl": 0, "components": []}
    restarts = batches = current_batches = 0
    error_line, specific, start_limit = None, False, False
    native: list[RaisedException] = []
    attributed: list[tuple[int, str, str]] = []  # (line, component, incident) of the current run's E/F lines
    crash_at: int | None = None  # where the current run's first native crash dump begins
    now: list[LogEntry] = []  # the current run's lines, in order
    for i, entry in enumerate(entries):
        message = entry.message
        recent = _recent(entry, started, pid)
        if recent:
            now.append(entry)
        if crash_at is None and entry.process != "systemd" and recent and is_crash_line(message):
            crash_at = i
        if entry.process != "systemd":
            specific = specific or entry.kind in _SPECIFIC_KINDS
            if entry.kind in _ERROR_KINDS:
                error_line = entry
            elif (entry.kind in _NAMED_LINE_KINDS and table is not None and recent
                  and not message.lstrip().startswith(_EXCEPTION_TRAIL) and not _NCCL_CHATTER.search(message)):
                line = RaisedException("ErrorLine", message.strip()[:500], None, (), "unknown", i, entry.ts)
                if table.named(line):  # e.g. an "NCCL WARN" line: the table names its class by the text
                    native.append(line)
        if entry.kind == "batch":  # the heartbeat: no pattern is about it, and most lines are batch lines
            batches += 1
            current_batches += recent
            continue
        # _GLOG_START needs "[" or a level letter first after any whitespace (RE2's \s): no RE2 call on other lines
        if (message.lstrip(" \t\n\f\r")[:1] in _GLOG_FIRST and _GLOG_START.match(message)) or " UCX " in message:
            native += _engine_line(message, entry, i, started, table, engine, attributed, pid)
        elif entry.process == "systemd" and _RESTART.search(message):
            restarts += 1
        elif entry.process == "systemd" and _START_LIMIT in message:
            start_limit = True
        hits = matching(message) if matching is not None else None
        if hits is not None and len(patterns) in hits:  # RE2 answered: the patterns whose regex (and unless) match
            found = [patterns[i] for i in hits if i < len(patterns) and patterns[i].holds(message, unless[i] in hits)]
        else:
            plain = anything is None or anything.search(message) is not None
            found = [p for p in (patterns if plain else worded) if p.matches(message)]
        for p in found:
            window[p.name] += 1
            current[p.name] += int(recent)
    raised = parse_exceptions((e.message, e.ts) for e in entries)
    # a crash before the current run is history
    crashed = table.crash_component(crash_frames(e.message for e in now)) if table is not None else None
    if crashed is None and crash_at is not None:
        # a dump without a frame that names a component: the component whose error line came just before it
        before = [(name, incident) for at, name, incident in attributed if at < crash_at]
        crashed = before[-1] if before else None
    if crashed:
        engine["crash"], engine["crash_incident"] = crashed
    return _LogRead(current, window, raised, engine, restarts, batches, current_batches, None if specific else error_line,
                    native, start_limit, entries, now)


def _engine_line(
    message: str, entry: LogEntry, index: int, started: datetime | None, table: ExceptionClasses | None, out: dict,
    attributed: list[tuple[int, str, str]], pid: int | None = None,
) -> list[RaisedException]:
    """Count a C++ component's E/F line of the current run; return it as an exception (type: the file it
    names), which is a start-up error when the role never served."""
    line = parse_glog(message)
    if line is None or not line.is_error or not _recent(entry, started, pid):
        return []
    out["errors"] += 1
    found = table.component(line.file, line.library) if table is not None else None
    native = [RaisedException(line.file, line.message[:500], found[0] if found else None, (), "unknown", index, entry.ts)]
    if found is None:
        return native
    name, incident = found
    attributed.append((index, name, incident))
    if name not in out["components"]:
        out["components"].append(name)
    if incident == "kv-transfer-failure":
        out["transfer"] += 1
    elif incident == "nccl-failure":
        out["nccl"] += 1
    return native


def _exception_facts(
    raised: list[RaisedException], table: ExceptionClasses | None, served: bool, error_line: LogEntry | None = None,
    native: Sequence[RaisedException] = (), ended: tuple[datetime | None] | None = None, placed: Stage = "startup",
) -> dict[str, Any]:
    """``exception.*``: counts per stage, the classes the table gives, and the cause's type and text.

    An exception whose frames do not say (none printed, or only a wrapper such as ``run_scheduler_process``)
    in a role that never served in the window (no batch line, no /metrics) is placed at start-up: nothing
    ran after start-up to raise it; so are, there, a C++ component's E/F lines and the lines whose text
    the table classes without an exception (``native``: ``NCCL WARN ...``, out-of-memory text). The cause of a
    start-up failure is the last start-up exception a table rule names (by type, text or frame), else the
    last one: the launcher's verdict after an NCCL error (``Initialization failed``) is not the cause.
    """
    if not served:
        said = [f"{x.short_type}: {x.message}" for x in raised if x.message]
        native = [n for n in native if not any(text in n.message for text in said)]  # an exception's own line
        raised = [replace(x, stage=placed) if x.stage == "unknown" else x
                  for x in sorted([*raised, *native], key=lambda x: x.index)]
        if error_line is not None and not any(x.stage == "startup" for x in raised):
            # no exception printed as such: the application's last error line is the start-up error
            raised.append(RaisedException("ErrorLine", error_line.message[:500], None, (), placed, 10**9, error_line.ts))
    if not raised:
        return {"count": 0, "startup": 0, "serving": 0, "unknown": 0, "incidents": []}
    classes = [table.incident(x) if table is not None else None for x in raised]
    out: dict[str, Any] = {
        "count": len(raised),
        "startup": sum(x.stage == "startup" for x in raised),
        "serving": sum(x.stage == "serving" for x in raised),
        "unknown": sum(x.stage == "unknown" for x in raised),
        "incidents": sorted({c for c in classes if c}),
    }
    if ended is not None:
        since = ended[0]
        fatal = [c for x, c in zip(raised, classes) if c and (since is None or (at := _line_time(x.ts)) is None or at >= since)]
        if fatal:
            out["ended_run_incident"] = fatal[-1]
    startup = [(x, c) for x, c in zip(raised, classes) if x.stage == "startup"]
    named = [(x, c) for x, c in startup if c and table is not None and table.named(x)]
    cause = (named or startup)[-1] if startup else None
    if cause is not None and cause[1]:
        out["startup_incident"] = cause[1]
    last = cause[0] if cause is not None else raised[-1]  # the start-up error is the cause of a crash loop
    out.update(type=last.type, message=last.message[:200], stage=last.stage)
    if last.writer:
        out["writer"] = last.writer
    return out


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
            out["hardware_xid"] = sum(c not in APPLICATION_XIDS for c in codes)
            out["driver_fault"] = driver_faults(node.kernel_log.raw)
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
    mine = [r.utilization_pct for r in rows if r.utilization_pct is not None and (not indices or r.index in indices)]
    if mine:  # the role's GPUs at 0 % and above: one rank idle while the others work is a stalled rank
        out["idle"], out["busy"] = sum(u == 0 for u in mine), sum(u > 0 for u in mine)
    for name in ("memory_total_mib", "utilization_pct", "temperature_c"):
        vals = [getattr(r, name) for r in rows if getattr(r, name) is not None]
        if vals:
            out[name] = max(vals)
    return out


def _aliased(gauges: dict[str, float], deltas: dict[str, float]) -> None:
    """Older names of a figure also give it under the name runbooks read (when the new name is absent)."""
    for old, new in METRIC_ALIASES.items():
        for group in (gauges, deltas):
            if old in group and new not in group:
                group[new] = group[old]


def _progress(
    gauges: dict[str, float], deltas: dict[str, float], window: float | None, batches: int | None = None,
    fresh: int | None = None, age: float | None = None, unserved: bool = False,
) -> dict[str, Any]:
    """Token progress per phase from the best source the role's SGLang exports, naming the source.
    ``batches``: the current run's batch lines (None: the journal was not read); ``fresh``: the role's own
    batch lines stamped near the probe (None: the journal was not read or its stamps cannot be compared);
    ``unserved``: the role's own server did not serve (its /health failed, every rank canary timed out)."""
    out: dict[str, Any] = {}
    groups = {"delta": deltas, "metrics": gauges}
    for phase, sources in PROGRESS_SOURCES.items():
        for group, name, label in sources:
            if name in groups[group]:
                value = groups[group][name]
                out[f"{phase}_tokens"] = value * window if group == "metrics" and window else value
                out[f"{phase}_source"] = label
                break
    # "stalled" needs a proof: the per-token counter did not move, or (older SGLang) no request finished
    # and the last Decode batch line's throughput was 0. A finish counter alone at 0 proves nothing.
    # A batch line younger than the idle path's gauge hold: the scheduler worked moments ago and its running
    # gauge may be the last batch's (opsbot/parse/verdict.py IDLE_GAUGE_HOLD_S): a flat counter proves nothing yet.
    # Unless the server itself says it does not serve: an idle scheduler answers /health and a pinned canary.
    recent = age is not None and age < IDLE_GAUGE_HOLD_S and not unserved
    if PROGRESS_COUNTER["decode"] in deltas:
        out["decode_stalled"] = deltas[PROGRESS_COUNTER["decode"]] == 0 and not recent
    elif "generation_tokens" in deltas and ("gen_throughput" in gauges or fresh is not None):
        # gen_throughput is a last-value gauge, set by the last Decode batch line: a wedged 0.4.x scheduler
        # writes no more lines and the gauge keeps its value. No request finished and no Decode batch line
        # stamped near the probe (opsbot/parse/verdict.py BATCH_FRESH_S) is a stall, whatever the gauge says.
        out["decode_stalled"] = deltas["generation_tokens"] == 0 and (gauges.get("gen_throughput") == 0 or fresh == 0)
    if PROGRESS_COUNTER["prefill"] in deltas:
        out["prefill_stalled"] = deltas[PROGRESS_COUNTER["prefill"]] == 0 and not recent
    elif deltas.get("prompt_tokens") == 0 and batches == 0:
        # Before realtime_tokens_total: no request finished, and the current run's journal holds no
        # Prefill batch line, which the scheduler writes for every prefill batch it forms (0.5.3
        # managers/scheduler_metrics_mixin.py log_prefill_stats; 0.4.6.post5 managers/scheduler.py).
        out["prefill_stalled"] = True
    moved = [v for k, v in deltas.items() if k.startswith(REALTIME_TOKENS + "_")]
    if moved:  # every mode (prefill_compute, prefill_cache, decode, ...): did the role move any token at all
        out["tokens_moved"] = sum(moved)
    waiting = [gauges[q] for q in TRANSFER_QUEUES if q in gauges]
    if waiting:
        out["transfer_waiting"] = sum(waiting)
    return out


def _unserved(ev: RoleEvidence, ranks: dict[str, Any]) -> bool:
    """The role's own server did not serve during the probe: /health answered 5xx (SGLang's health check
    timed out on its scheduler), or every rank canary sent timed out and none answered."""
    health_failed = ev.health.status is not None and ev.health.status >= 500
    return health_failed or (bool(ranks.get("canary_timed_out")) and not ranks.get("canary_answered"))


def _with_journal_xids(gpu: dict[str, Any], ev: RoleEvidence) -> dict[str, Any]:
    """Xid lines in the role's own journal count too (``hardware_xid``), by the same code rule."""
    if ev.logs.ok and "Xid" in ev.logs.raw:
        codes = [x.xid for x in parse_xid(ev.logs.raw)]
        gpu["hardware_xid"] = gpu.get("hardware_xid", 0) + sum(c not in APPLICATION_XIDS for c in codes)
        gpu["xid_codes"] = sorted(set(gpu.get("xid_codes", [])) | set(codes))
    if ev.logs.ok and "NVRM" in ev.logs.raw:  # the driver's own fault lines, relayed into the role's journal
        gpu["driver_fault"] = gpu.get("driver_fault", 0) + driver_faults(ev.logs.raw)
    if ev.logs.ok:
        gpu.setdefault("hardware_xid", 0)
    return gpu


def _routing(gauges: dict[str, float], deltas: dict[str, float]) -> dict[str, Any]:
    """The router's own view: routing failures for want of a worker, breakers open, stalled/overloaded workers."""
    if not any(k.startswith(("smg_", "sgl_router_")) for k in (*gauges, *deltas)):
        return {}
    errors = 0.0
    for key, value in deltas.items():
        for base in ROUTING_ERROR_COUNTERS:
            kind = key[len(base) + 1:] if key.startswith(base + "_") else ""
            if kind.startswith("no_") or kind == "server_selection":
                errors += value
    out: dict[str, Any] = {"no_worker_errors": errors}
    if "smg_worker_cb_state" in gauges:
        out["breaker_open"] = gauges["smg_worker_cb_state"] > 0  # 0 closed, 1 open, 2 half-open
    if "smg_worker_stalled" in gauges:
        out["stalled"] = gauges["smg_worker_stalled"]
    if "smg_workers_overloaded" in gauges:
        out["overloaded"] = gauges["smg_workers_overloaded"]
    pools = [gauges[name] for name in POOL_GAUGES if name in gauges]
    if pools:
        out["empty_pool"] = min(pools) == 0
    if ("smg_worker_pool_size_prefill" in gauges) != ("smg_worker_pool_size_decode" in gauges):
        out["empty_pool"] = True  # a PD pool with one kind's series only: the other kind was never registered
    return out


def _is_5xx(fact: str) -> bool:
    """A response counter's fact for a 5xx status class: its name ends ``_5NN``."""
    return fact[-4:-2] == "_5" and fact[-2:].isdigit()


def _requests(role: str, gauges: dict[str, float], deltas: dict[str, float], current: Sequence[LogEntry],
              engine_transfer: float = 0) -> dict[str, Any]:
    """``requests.*``: the request side of one role, from its own counters and gauges (REQUEST_FACTS)."""
    out: dict[str, Any] = {}
    if role == "router":
        if not any(k.startswith(("smg_", "sgl_router_")) for k in (*gauges, *deltas)):
            return out
        answered = sum(v for k, v in deltas.items() if k.startswith("smg_http_responses_") and _is_5xx(k))
        counted = sum(deltas.get(name, 0.0) for name in ROUTER_FAILURE_COUNTERS)
        for key, value in deltas.items():
            for base in ROUTER_ERROR_TYPED:
                kind = key[len(base) + 1:] if key.startswith(base + "_") else ""
                if kind and not kind.startswith("no_") and kind != "server_selection" and kind not in _CLIENT_ERROR_TYPES:
                    counted += value
        out["failed"] = max(answered, counted)  # one failed request is counted by both families
        if "smg_worker_requests_active" in gauges:
            out["in_flight"] = gauges["smg_worker_requests_active"]
        routed = [deltas[name] for name in ROUTER_REQUEST_SOURCES if name in deltas]
        if "sgl_router_pd_requests" in deltas:
            routed.append(deltas["sgl_router_pd_requests"])
        if routed:
            out["routed"] = max(routed)
        return out
    waiting = [gauges[q] for q in TRANSFER_QUEUES + ("num_prefill_bootstrap_queue_reqs",) if q in gauges]
    if waiting:
        out["held"] = sum(waiting)
    refused = sum(e.kind == "access" and '"POST ' in e.message for e in current)
    out["refused"] = refused + deltas.get("num_aborted_requests", 0.0)
    out["rejected"] = refused
    transfer = [e.message for e in current if e.kind == "kv-transfer" and _CLIENT_ABORT not in e.message and is_abnormal(e)]
    uncaused = sum(TRANSFER_UNCAUSED.search(m) is not None for m in transfer)
    counted = sum(v for k, v in deltas.items() if k.startswith(FAILURE_COUNTERS))
    out["transfer_failed"] = len(transfer) + engine_transfer + counted
    out["transfer_uncaused"] = uncaused
    return out


def checks_since_passed(routing: dict[str, Any], gauges: dict[str, float], logs: dict[str, Any]) -> bool:
    """``routing.checks_since_passed``: the router's health checker failed checks in this run, every failure line it
    wrote is its health checker's (no request failed), and its own view now says every worker passes (the health gauge,
    the minimum over its workers, at 1; no worker stalled, no routing failed for want of a worker, no breaker open):
    workers that were starting or restarting, history. Read by the verdict (a note) and by router-no-healthy-workers
    (not a finding), so both say the same."""
    unreachable, checks_failed = logs.get("router_worker_unreachable", 0), logs.get("router_health_check_failed", 0)
    return bool(checks_failed > 0 and unreachable <= checks_failed and gauges.get("smg_worker_health") == 1
                and not routing.get("stalled") and not routing.get("no_worker_errors") and not routing.get("breaker_open"))


def role_facts(
    bundle: Bundle, ev: RoleEvidence, patterns: list[Pattern], problems: list[str], metrics: frozenset[str] | None = None,
    table: ExceptionClasses | None = None, templates: bool = False,
) -> dict[str, Any]:
    """The facts of one role instance, without the cross-role ``roles`` map.

    ``metrics`` names the metric facts wanted (``RunbookSet.metric_facts``): only the families
    they come from are parsed, and other metric facts may be absent. None parses everything.
    ``templates``: the verdict keeps the current run's log templates (``verdict.templates``, opsbot/parse/
    templates.py), what a healthy probe teaches and a probe with history compares.
    """
    failed: list[str] = []
    gauges, deltas, rates, window = _metrics(ev, failed, problems, metrics)
    _aliased(gauges, deltas)
    unit, started, last_run, changed = _unit(ev, failed, problems)
    read = _logs(ev, patterns, started or (last_run if unit.get("active_state") in _DOWN else None), failed, table,
                 (unit.get("main_pid") or None) if started else None)  # the running unit's main process
    logs, logs_window = read.current, read.window
    current = read.now
    probe_at = _line_time(bundle.started_at)
    fresh, age = batch_recency(current, probe_at, partial(_stamp, probe_at=probe_at), ev.role) if ev.logs.ok else (None, None)
    if unit:
        if read.restarts_logged is not None:
            unit["restarts_logged"] = read.restarts_logged
        if unit.get("result") == "start-limit-hit" or (read.start_limit and unit.get("active_state") == "failed"):
            unit["start_limit_hit"] = True
        unit["crash_looping"] = _crash_looping(unit, read.restarts_logged)
    gpu = _with_journal_xids(_gpu(bundle.node(ev.node), ev.gpus, failed, problems), ev)
    # a role that stopped (or restarts) without an Xid on its node: its last error line may be the start-up error
    stopped = unit.get("active_state") in ("failed", "activating") or unit.get("n_restarts") or read.restarts_logged
    down = _down_now(unit)
    ranks = rank_facts(ev)
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
        "gpu": gpu,
        "exception": _exception_facts(
            read.raised, table, bool(gauges) or read.batch_lines > 0 or _ran_past_startup(read.entries, last_run)
            or _raised_while_serving(read.raised, last_run) or _lasted(unit, last_run, changed, probe_at),
            read.error_line if stopped and not gpu.get("xid_codes") else None, read.native,
            (last_run,) if down else None, "unknown" if down and not unit.get("crash_looping") else "startup",
        ) if ev.logs.ok else {},
        "engine": read.engine,
        "progress": _progress(gauges, deltas, window, read.current_batch_lines, fresh, age, _unserved(ev, ranks)) | (
            {"batches": read.current_batch_lines} if read.current_batch_lines is not None else {}
        ) | ({"last_batch_age_s": age} if age is not None else {}),
        "routing": _routing(gauges, deltas),
        "patch": patch_seen(bundle, ev, started, read.entries).facts(),
        "ranks": ranks,
    }
    if facts["exception"] and unit.get("active_state") == "active" and started is not None:
        looping = _looping(read.raised, table, started, _line_time(bundle.started_at))
        if looping is not None:
            facts["exception"]["looping_incident"] = looping
    if ev.role == "router":
        facts["routing"]["checks_since_passed"] = checks_since_passed(facts["routing"], gauges, logs)
    facts["requests"] = _requests(ev.role, gauges, deltas, current, read.engine.get("transfer", 0))
    facts["failed"] = failed
    if window is not None:
        facts["window_s"] = window
    facts["verdict"] = role_verdict(facts, current, fresh)
    if templates and ev.logs.ok:
        facts["verdict"]["templates"] = role_templates(current)
    return facts


_TIME_ONLY = linear(r"^\d{2}:\d{2}:\d{2}(?:[.,]\d+)?$")


def _stamp(ts: str | None, probe_at: datetime | None) -> datetime | None:
    """A line's time to compare with the probe's: a journal stamp as is; SGLang's own stamp, which has no
    zone, in the probe's zone; a time-only ``[HH:MM:SS TP0]`` header on the probe's date (the day before
    when that would be later than the probe)."""
    at = _line_time(ts)
    if at is not None or not ts or probe_at is None:
        return at
    try:
        if _TIME_ONLY.match(ts):
            clock = datetime.strptime(ts.replace(",", ".").split(".")[0], "%H:%M:%S").time()
            at = datetime.combine(probe_at.date(), clock, probe_at.tzinfo)
            return at - timedelta(days=1) if at - probe_at > timedelta(hours=1) else at
        return datetime.fromisoformat(ts.replace(",", ".")).replace(tzinfo=probe_at.tzinfo)
    except ValueError:
        return None


def _looping(raised: Sequence[RaisedException], table: ExceptionClasses | None, started: datetime,
             now: datetime | None) -> str | None:
    """The class of what keeps ending the unit's runs, while the current run has not yet outlived them: the
    last two classed exceptions before the run started are of one class, raised at least a second apart (two
    runs, not two ranks of one), and the run is younger than twice the time between those two deaths.
    systemd restarted it and it serves for now; the runs before served as long, then died the same way."""
    if table is None or now is None:
        return None
    deaths = [(at, c) for x in raised if (c := table.incident(x)) and (at := _line_time(x.ts)) is not None and at < started]
    if len(deaths) < 2:
        return None
    (before, first), (last, second) = deaths[-2], deaths[-1]
    apart = (last - before).total_seconds()
    if first != second or apart < 1:
        return None
    return second if (now - started).total_seconds() < 2 * apart else None


def run_started(ev: RoleEvidence) -> datetime | None:
    """When the unit's current run started (systemd's timestamps), if known."""
    return _unit(ev, [], [])[1]


def patch_seen(bundle: Bundle, ev: RoleEvidence, started: datetime | None, entries: list[LogEntry] | None = None) -> PatchSeen:
    """The role's index keys as its current run's journal shows them (opsbot/parse/patch.py); ``entries``:
    the journal already parsed."""
    if not ev.logs.ok:
        return PatchSeen("unknown")
    entries = parse_log_lines(ev.logs.raw) if entries is None else entries
    lines = [(e.message, _line_time(e.ts)) for e in entries if e.kind == "patch"]
    return seen_in(lines, started, window_start(ev.logs.since, _line_time(bundle.started_at)), True)


def _restarts_moved(own: dict[str, dict[str, Any]], previous: Bundle) -> None:
    """``unit.restarts_moved``: how far NRestarts moved since an earlier probe of the same role."""
    for ev in previous.roles:
        unit = own.get(ev.key, {}).get("unit")
        if not unit or "n_restarts" not in unit or not ev.systemd.ok:
            continue
        try:
            before = parse_unit(ev.systemd.raw).n_restarts
        except ValueError:
            continue
        if before is not None:
            unit["restarts_moved"] = unit["n_restarts"] - before
            unit["crash_looping"] = unit["crash_looping"] or unit["restarts_moved"] > 0


def _moved(facts: dict[str, Any]) -> bool | None:
    """Whether an engine role moved work in the window: a batch line younger than the idle gauge hold, a token
    counter that moved (every ``realtime_tokens_total`` mode; older: a request finished), or a running or queued
    request. None when none of it could be read."""
    progress, deltas, gauges = facts.get("progress", {}), facts.get("delta", {}), facts.get("metrics", {})
    age = progress.get("last_batch_age_s")
    if (age is not None and age < IDLE_GAUGE_HOLD_S) or gauges.get("num_running_reqs") or gauges.get("num_queue_reqs"):
        return True
    if "tokens_moved" in progress:
        return progress["tokens_moved"] > 0
    older = [deltas[k] for k in ("generation_tokens", "prompt_tokens") if k in deltas]
    return any(v > 0 for v in older) if older else None


def _request_side(own: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """Reasons, per role key, read across roles from the request side: requests held for a leg that already failed,
    or held by the router while nothing serves them. Each needs two signs from two places, so that one gauge's last
    published value (an idle decode's transfer queue) is never enough.

    * an engine holds requests parked between prefill and decode while it moves nothing, and its PD peer failed or
      refused requests in this window (its access lines, its aborted counter) and holds none: the peer's leg failed
      and the router did not cancel this one (sgl-project/sglang PR #24159, smg-project/smg#831: the PD router's
      ``tokio::join!`` of both legs, c7f9bf9f5 src/routers/http/pd_router.rs:577-578, waits on the leg that can no
      longer finish);
    * the router has requests in flight to its workers (``smg_worker_requests_active``), routed none in the window,
      and no worker moves anything: requests it holds for nothing (a failed leg it still waits on, a stream whose
      client left), which no log line of any role shows.
    """
    out: dict[str, list[str]] = {}
    engines = {k: f for k, f in own.items() if f.get("role") in ("prefill", "decode")}
    moved = {k: _moved(f) for k, f in engines.items()}
    # issue 24, fifth round: a router that failed a request's leg to a worker in transport (its reqwest/hyper lines,
    # patterns.yaml router_worker_unreachable; one such line alone is otherwise a keep-alive reset's note) is the
    # failed leg's sign too: the peer that holds the request can no longer hand it over (smg-project/smg#831)
    transport = {k: f.get("logs", {}).get("router_worker_unreachable", 0) for k, f in own.items()
                 if f.get("role") == "router" and f.get("logs", {}).get("router_worker_unreachable", 0) > 0}
    for key, facts in engines.items():
        held = facts.get("requests", {}).get("held", 0)
        if not held or moved[key] is not False:
            continue
        for peer, other in engines.items():
            side = other.get("requests", {})
            if other["role"] == facts["role"] or side.get("held", 0) != 0:
                continue
            if side.get("refused", 0) > 0:
                said = f"{peer} failed or refused {side['refused']:g} request(s) in this window and holds none"
            elif transport:
                said = (f"the router's request to a worker failed in transport ({sum(transport.values()):g} line(s) of "
                        f"{', '.join(sorted(transport))}) and {peer} holds none")
                for router in transport:
                    out.setdefault(router, []).append(
                        f"a transport failure to a worker while {key} holds {held:g} request(s) parked that it can no "
                        "longer hand over and moves nothing: not a keep-alive connection's reset")
            else:
                continue
            out.setdefault(key, []).append(
                f"{held:g} request(s) parked waiting for the {other['role']} leg while this role moves nothing; {said}")
            if not facts.get("verdict", {}).get("abnormal"):  # nothing else is wrong with it (router-no-healthy-workers)
                facts["requests"]["leg_failed"] = held
            break
    idle = [m for m in moved.values()]
    for key, facts in own.items():
        side = facts.get("requests", {})
        if (facts.get("role") == "router" and side.get("in_flight", 0) > 0 and side.get("routed") == 0
                and idle and all(m is False for m in idle)):
            out.setdefault(key, []).append(
                f"the router holds {side['in_flight']:g} request(s) in flight to a worker, routed none in the window, "
                "and no worker moves anything: requests held that nothing serves")
    return out


def _leg_refused(own: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    """``requests.leg_refused`` on both engines of a PD pair, and reasons: one engine (running, no transfer failure of
    its own: no transfer line, no transfer-engine error, no failed-transfer counter) answered requests with an error
    status in its current run, while its peer's transfer failed with no cause of its own (it waited and timed out, or
    was told the room failed without a reason: TRANSFER_UNCAUSED), or its peer holds requests parked while it moves
    nothing and the refusing engine holds none. The transfer never started because that leg was refused: the request
    side (the router's join of the two legs, c7f9bf9f5 src/routers/http/pd_router.rs:577-578), not the transfer
    path, and a restart fixes nothing (runbooks/kv-transfer-failure.yaml yields to it)."""
    out: dict[str, list[str]] = {}
    engines = {k: f for k, f in own.items() if f.get("role") in ("prefill", "decode")}
    for key, facts in engines.items():
        side = facts.get("requests", {})
        if (not side.get("rejected") or side.get("transfer_failed", 0) > 0
                or facts.get("unit", {}).get("active_state") != "active"):
            continue
        for peer, other in engines.items():
            theirs = other.get("requests", {})
            if other["role"] == facts["role"] or other.get("unit", {}).get("active_state") != "active":
                continue
            counted = sum(v for k, v in other.get("delta", {}).items() if k.startswith(FAILURE_COUNTERS))
            uncaused = theirs.get("transfer_uncaused", 0)
            caused = theirs.get("transfer_failed", 0) - counted - uncaused
            parked = theirs.get("held", 0) > 0 and side.get("held", 0) == 0 and _moved(other) is False
            if caused > 0 or not (uncaused > 0 or parked):
                continue
            facts["requests"]["leg_refused"] = other["requests"]["leg_refused"] = side["rejected"]
            if uncaused:
                out.setdefault(peer, []).append(
                    f"its KV transfer failed with no cause of its own ({uncaused:g} line(s): a timeout, or a room its "
                    f"peer failed without a reason) while {key} refused {side['rejected']:g} request(s) in this run and "
                    "wrote no transfer failure: the transfer never started, its leg was refused")
    return out


def _router_blocked(router: dict[str, Any]) -> bool:
    """The router says it cannot route to a worker (its lines, its error counters, an open breaker)."""
    routing = router.get("routing", {})
    return bool(
        router.get("logs", {}).get("router_no_workers") or routing.get("no_worker_errors") or routing.get("breaker_open")
        or routing.get("empty_pool")
    )


def _error_code(body: str) -> str | None:
    """``error.code`` of a JSON error body (SMG's ``{"error": {"code": ...}}``), if the body is one."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else None


def _canary_no_worker(canary: Canary | None, patterns: list[Pattern]) -> bool | None:
    """Whether the router answered the canary with an error because it has no worker to send it to: the
    error code of its JSON body, else (sgl-router's plain-text answers) the router's own no-worker words."""
    if canary is None or canary.status is None or canary.status < 500:
        return None
    body = canary.body or ""
    code = _error_code(body)
    said = any(p.name == "router_no_workers" and p.matches(body) for p in patterns)
    if code is not None:
        return code in NO_WORKER_CODES or (code == "no_available_workers" and said)
    return said


def bundle_facts(
    bundle: Bundle, patterns: list[Pattern], metrics: Mapping[str, frozenset[str] | None] | None = None,
    table: ExceptionClasses | None = None, previous: Bundle | None = None,
    history: Mapping[str, RoleHistory] | None = None,
) -> BundleFacts:
    """Fact maps for every role in the bundle, each with ``roles`` pointing at the others.

    ``metrics``: per role kind, the metric facts wanted (``RunbookSet.metric_facts``); a kind
    it does not name, or no mapping, gets every family parsed. ``history``: per role key, what the store
    knows of it while healthy; given (even empty), each verdict keeps its log templates and a role that is
    not healthy says which of its lines are new since healthy (``verdict.since_healthy``).
    """
    out = BundleFacts(problems=[f"bundle: {p}" for p in bundle.problems])
    canary = canary_facts(bundle.canary)
    if (no_worker := _canary_no_worker(bundle.canary, patterns)) is not None:
        canary["no_worker"] = no_worker
    probe_wide = {"recall": recall_facts(bundle.recall), "canary": canary}
    probe_wide["fidelity"] = fidelity_facts(bundle.fidelity)
    wanted = metrics or {}
    own = {ev.key: role_facts(bundle, ev, patterns, out.problems, wanted.get(ev.role), table, history is not None)
           for ev in bundle.roles}
    if previous is not None:
        _restarts_moved(own, previous)
    peers: dict[str, dict[str, Any]] = {}
    for ev in bundle.roles:
        peers.setdefault(ev.role, own[ev.key])  # roles.<kind>: the first instance of that kind
        peers[ev.key] = own[ev.key]
    routers = [own[ev.key] for ev in bundle.roles if ev.role == "router"]
    blocked = any(_router_blocked(r) for r in routers) or bool(canary.get("no_worker"))
    wide = probe_wide_reasons(canary, probe_wide["recall"], blocked)
    side, refused = _request_side(own), _leg_refused(own)
    for key in {**side, **refused}:
        own[key]["verdict"] = with_reasons(own[key]["verdict"], side.get(key, []) + refused.get(key, []))
    for ev in bundle.roles:
        if ev.role == "router" or not routers:
            own[ev.key]["verdict"] = with_reasons(own[ev.key]["verdict"], wide)
    if history is not None:  # after the probe-wide reasons: they can make a role abnormal
        for ev in bundle.roles:
            own[ev.key]["verdict"] = with_history(own[ev.key]["verdict"], ev.key, history.get(ev.key, RoleHistory()))
    for ev in bundle.roles:
        # the 5xx answers the router logged from workers of this role's kind (SMG/sgl-router pd_router lines)
        routed = sum(r.get("logs", {}).get(f"{ev.role}_error_status", 0) for r in routers)
        out.scopes[ev.key] = {**own[ev.key], **probe_wide, "roles": peers, "router_blocked": blocked,
                              "routed_errors": routed}
        out.kinds[ev.key] = ev.role
    return out
