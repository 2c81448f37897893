"""Whether one role is healthy, on positive evidence only (spec/incidents.md: "healthy is earned").

A role is ``healthy`` when every axis says so: its unit runs and is not being restarted; it makes
progress by a signal that cannot go stale (a counter moved, or a batch line stamped inside the probe's
window), or it is idle with nothing running or queued; ``/health`` answered; and its current run wrote
no error, exception, traceback, crash dump or out-of-memory line. Evidence against it makes it
``abnormal`` (the ``unexplained`` runbook's input when no other runbook claims it); evidence that could
not be read makes it ``unknown``, with what was missing. Pure: the facts and the parsed journal in,
a map of facts out (``verdict.*``, runbooks/README.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from opsbot.parse.lines import linear
from opsbot.parse.logs import LogEntry

# since_healthy: said only with the role's history (opsbot/parse/templates.py), never offline
VERDICT_FACTS = frozenset("state abnormal unknown reasons lines severity notes stalled since_healthy".split())
HEALTHY, UNKNOWN, ABNORMAL = "healthy", "unknown", "abnormal"
FIRST_LINES = 5  # the abnormal lines a finding shows: the first of the current run
# How recent a batch line must be to show progress: SGLang writes one every 40 decode steps under load
# (--decode-log-interval) and one per prefill batch, seconds apart (8 requests at 186 token/s: one every
# 2 s); a wedged scheduler writes none, whatever its gauges still say. Read only where no
# realtime_tokens_total counter says it.
BATCH_FRESH_S = 90.0

# A level an error line carries (Python logging, Rust tracing, glog's E/F, a Rust panic); SGLang's own
# format prints no level, so its errors are read by what they are (kinds below).
_ERROR_LEVEL = linear(
    r"(?:^|[\s\[|:(])(?:ERROR|CRITICAL|FATAL|PANIC)(?:[\s\]|:)]|$)|\blevel=(?:error|fatal)\b|' panicked at "
)
_LEVEL = linear(r"(?:^|[\s\[|:(])(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)(?:[\s\]|:)]|$)")
_FAILURE_LEVELS = frozenset({"WARNING", "WARN", "ERROR", "CRITICAL", "FATAL"})
_WARNING_LEVEL = linear(r"(?:^|[\s\[|:(])(?:WARNING|WARN)(?:[\s\]|:)]|$)|\bUserWarning\b|\bwarnings\.warn\b")
# Line kinds (opsbot/parse/logs.py LOG_KINDS) that are errors by what they say, whatever their level.
_ERROR_KINDS = frozenset({"crash", "traceback", "native", "oom", "health"})
# NCCL at WARN or an error; INFO/TRACE chatter at start-up is not one
_NCCL_ERROR = linear(r"NCCL WARN|NCCL error|ncclSystemError|ncclInternalError|ncclUnhandledCudaError"
                         r"|collective operation timeout|ncclRemoteError|ncclInvalidUsage")
_XID = linear(r"\bXid\b")
# a transfer line that reports a failure, not a statistic or a start-up step
# (not a bare "timeout": start-up lines print their settings, "timeout=30")
_FAILURE_WORDS = linear(r"Error\b|\b(?:[Ff]ail(?:ed|ure|s)?|timed out|exceeded|mismatch|[Uu]nreachable"
                            r"|[Ll]ost|[Ll]osing|Flushed|refused|[Cc]ould not|[Uu]nable to)\b")
# An HTTP access line's status (uvicorn: '"POST /v1/responses HTTP/1.1" 500 Internal Server Error'): the class says
# whose fault it is. A 5xx is the server failing a request (an error of the current run, whatever else moves); a
# 4xx is the client's own bad request (a note: the server refused it and goes on).
_ACCESS_STATUS = linear(r'"[A-Z]+ \S+ HTTP/[0-9.]+" ([45])[0-9][0-9]\b')
# SGLang's own format prints no level ("[time TP0] message"), so a logger.error() reads like any other line. Its
# error reports have one shape: what failed, named as an error or exception, then a colon and the detail
# ("Tool call parsing error: ...", "Reasoning parsing error: ...", "error: 'NoneType' object is not iterable").
# A line with a level is read by its level instead (a WARNING saying "error" is a warning).
_ERROR_REPORT = linear(r"^(?:[A-Za-z][\w .-]{0,60}?\b)?(?:[Ee]rror|[Ee]xception)\s?: \S")
# The soft watchdog: SGLang 0.5.23 utils/watchdog.py WatchdogRaw._watchdog_once logs
# "{debug_name} watchdog timeout (self.watchdog_timeout=..., self.soft=True)" and goes on (soft: no SIGQUIT);
# the TokenizerManager's (managers/tokenizer_manager.py:855) and the DataParallelController's
# (managers/data_parallel_controller.py:259) are always soft, and so was the detokenizer's.
SOFT_WATCHDOG = linear(r"self\.soft=True|(?:Detokenizer|Tokenizer)Manager watchdog timeout"
                           r"|DataParallelController watchdog timeout")
# The grammar backend's lines (logs.py kind "grammar") by the stage of the request's grammar they report. At compile
# time the grammar is the client's own (a schema it sent that does not compile: SGLang answers 400 and goes on, a
# note); at run time the grammar rejects a token the server itself produced (SGLang 0.5.23
# batch_result_processor.py:727,871 logger.error "Grammar accept_token failed ...", the request aborted with 500;
# xgrammar's grammar_matcher.cc:1205-1221 warnings "... Rejecting the token."): a request the server failed, an
# error of the run whatever the level it was written at.
_GRAMMAR_COMPILE = linear(r"Hit invalid|Failed to compile [a-z_]+ grammar|Grammar compilation raised|Skip unsupported"
                          r"|grammar containing a NUL byte|[Ss]kip invalid (?:json[_ ]schema|regex|ebnf|grammar)"
                          r"|Invalid grammar request")
# The router's upstream client failing on a worker's connection (reqwest/hyper as SMG and sgl-router print them;
# runbooks/patterns.yaml router_worker_unreachable): one such line alone is a pooled keep-alive connection the worker
# closed (SMG retries it once, routers/http/router.rs:1565 send_with_stale_conn_retry); more, or a failed health
# check, is a worker the router cannot reach.
ROUTER_TRANSPORT = linear(
    r"error sending request|request or response body error|error decoding response body|error reading a body"
    r"|connection closed before message completed|[Cc]onnection (?:reset|refused|closed before)|IncompleteMessage"
    r"|ConnectionReset|ConnectionRefused|ConnectionAborted|BrokenPipe|[Bb]roken pipe|tcp connect error"
    r"|error trying to connect|[Tt]ransport error|Stream error from (?:decode|prefill) server|Server ?[Dd]isconnected"
    r"|Cannot connect to host|peer closed connection without sending complete message"
)
# SMG's response logger (sglang-router 0.3.2 src/middleware.rs:349, target smg::response) on every 5xx it answers: the
# one request a stale connection failed says it too
_ROUTER_5XX = linear(r"request failed with server error")
# systemd's own words for a run that ended badly (its lines of the current run count too)
_SYSTEMD_FAILED = linear(r"Failed with result|Main process exited, code=(?:killed|dumped)"
                             r"|Main process exited, code=exited, status=[1-9]|oom-kill|Out of memory")
# A line's masked template: numbers, hex, paths and quoted values replaced, so repeats of one message match.
_MASK = linear(r"0x[0-9a-fA-F]+|(?:/[\w.+-]+)+|'[^']*'|\"[^\"]*\"|\p{Nd}+(?:\.\p{Nd}+)?")  # Unicode digits too


def template(message: str) -> str:
    """``message`` with numbers, hex, paths and quoted values masked (``<*>``), capped at 200 characters."""
    return _MASK.sub("<*>", message[:400])[:200]


def is_soft_watchdog(message: str) -> bool:
    return SOFT_WATCHDOG.search(message) is not None


def access_status_class(message: str) -> str | None:
    """``"4"`` or ``"5"`` for an HTTP access line answering with a client or a server error, else None."""
    m = _ACCESS_STATUS.search(message)
    return m.group(1) if m else None


def _error_report(message: str) -> bool:
    """A level-less line shaped as an error report (``<what> error: <detail>``); a line with a level is read by it."""
    return _ERROR_REPORT.search(message) is not None and _WARNING_LEVEL.search(message) is None and " INFO" not in message


def is_abnormal(entry: LogEntry) -> bool:
    """Whether a journal line is evidence that something went wrong (an error, not a warning)."""
    message = entry.message
    if entry.process == "systemd":
        return _SYSTEMD_FAILED.search(message) is not None
    kind = entry.kind
    if kind == "access":
        return access_status_class(message) == "5"
    if kind == "grammar":  # run time, written at error or warning level (or with none: SGLang's own format)
        leveled = _LEVEL.search(message)
        return _GRAMMAR_COMPILE.search(message) is None and (leveled is None or leveled.group(1) in _FAILURE_LEVELS)
    if kind == "error" and _error_report(message):
        return True
    if kind in (None, "batch", "patch", "abort"):
        return kind is None and _ERROR_LEVEL.search(message) is not None
    if kind == "watchdog":
        return not is_soft_watchdog(message)
    if kind in _ERROR_KINDS:
        return True
    if kind == "nccl":
        return _NCCL_ERROR.search(message) is not None
    if kind == "xid":
        return _XID.search(message) is not None
    if kind in ("retract", "router-workers", "queue-full"):  # requests set back, refused or unroutable
        return "state transition" not in message or "to Open" in message
    if kind == "kv-transfer":
        return _FAILURE_WORDS.search(message) is not None or _ERROR_LEVEL.search(message) is not None
    return _ERROR_LEVEL.search(message) is not None


# The counters that move while a role does its own work (SGLang 0.5.x realtime_tokens_total{mode}, older
# generation_tokens_total / prompt_tokens_total): a decode's prefill modes move on a wedged decode too.
_OWN_COUNTERS = {"decode": ("realtime_tokens_decode", "generation_tokens"),
                 "prefill": ("realtime_tokens_prefill_compute", "prompt_tokens")}
# Counters of failed work (SGLang 0.5.23 observability/metrics_collector.py num_bootstrap_failed_reqs_total,
# num_transfer_failed_reqs_total; smg's PD failures): any increase in the window is abnormal evidence.
FAILURE_COUNTERS = ("num_bootstrap_failed_reqs", "num_transfer_failed_reqs", "smg_pd_kv_transfer_failures",
                    "smg_pd_bootstrap_failures")


def _progress_state(facts: dict[str, Any], fresh_batches: int | None) -> tuple[str, str]:
    """(``moving`` | ``idle`` | ``stalled`` | ``unknown``, why) from counters and batch-line stamps, never a
    last-value gauge alone (0.4.x's ``gen_throughput`` keeps its value when the scheduler stops)."""
    deltas, gauges = facts.get("delta", {}), facts.get("metrics", {})
    counters = {k: v for k, v in deltas.items() if k in _OWN_COUNTERS.get(facts.get("role", ""), ())}
    realtime = [k for k in counters if k.startswith("realtime_tokens")]
    if realtime:  # the older counters are read only without it (parse/facts.py FALLBACK_METRICS)
        counters = {realtime[0]: counters[realtime[0]]}
    age = facts.get("progress", {}).get("last_batch_age_s")
    if realtime:  # moves every few steps: authoritative, moved or not
        if counters[realtime[0]] > 0:
            return "moving", f"{realtime[0]} moved"
        if age is not None and age < IDLE_GAUGE_HOLD_S:
            return "moving", f"a batch line {age:.0f} s ago (its gauges may hold for {IDLE_GAUGE_HOLD_S:.0f} s once idle)"
    elif any(v > 0 for v in counters.values()):
        return "moving", "requests finished (token counters moved)"
    elif fresh_batches:
        return "moving", f"{fresh_batches} batch line(s) in the last {BATCH_FRESH_S:.0f} s"
    waiting = [gauges[k] for k in ("num_running_reqs", "num_queue_reqs") if k in gauges]
    if waiting and not any(waiting):
        return "idle", "nothing running or queued"
    if not waiting and not counters:
        return "unknown", "no /metrics and no recent batch line: progress could not be read"
    if counters or fresh_batches == 0:
        held = ", ".join(f"{k} {v:g}" for k, v in (("running", gauges.get("num_running_reqs")),
                                                      ("queued", gauges.get("num_queue_reqs"))) if v)
        flat = ", ".join(sorted(counters)) or "no counter"
        return "stalled", f"{held or 'work pending'} but {flat} did not move and no batch line is recent"
    return "unknown", "requests pending and no token counter or stamped batch line to tell progress"


_PHASE = {"decode": "Decode batch", "prefill": "Prefill batch"}
# A scheduler that went idle keeps its gauges (num_running_reqs, gen_throughput) for up to 30 s before it
# publishes idle values (SGLang 0.5.23 managers/scheduler_components/metrics_reporter.py:1487-1498, and
# GEN_THROUGHPUT_STALENESS_SECONDS = 30.0 at :74, "far above any healthy decode-stats gap"): a flat counter
# with running requests proves a stall only once the role's last batch line is that old.
IDLE_GAUGE_HOLD_S = 30.0


def batch_recency(entries: Iterable[LogEntry], at: datetime | None,
                  line_time: Callable[[str | None], datetime | None], role: str) -> tuple[int | None, float | None]:
    """The role's own batch lines (a decode's ``Decode batch``, a prefill's ``Prefill batch``) in ``entries``:
    how many are stamped within ``BATCH_FRESH_S`` of the probe (0 when there is none at all; None when the
    lines there have no stamp that can be compared), and the age in seconds of the last stamped one."""
    phase = _PHASE.get(role)
    if at is None or phase is None:
        return None, None
    seen = fresh = 0
    last: datetime | None = None
    for e in entries:
        if e.kind != "batch" or phase not in e.message:
            continue
        seen += 1
        t = line_time(e.ts)
        if t is None:
            continue
        last = t if last is None or t > last else last
        fresh += abs((at - t).total_seconds()) <= BATCH_FRESH_S
    if last is None:
        return (None if seen else 0), None
    return fresh, (at - last).total_seconds()


def _notes(current: Sequence[LogEntry], moving: bool) -> list[str]:
    """Warnings that repeat while the role progresses: a decision (benign), said as a note."""
    if not moving:
        return []
    counts: Counter[str] = Counter()
    for e in current:
        if e.process == "systemd" or e.kind in ("batch", "patch") or (
                e.kind != "watchdog" and "WARN" not in e.message and "arning" not in e.message):
            continue  # a substring test first: most lines are neither
        if (e.kind == "watchdog" and is_soft_watchdog(e.message)) or (
                not is_abnormal(e) and _WARNING_LEVEL.search(e.message)):
            counts[template(e.message)] += 1
    return [f"benign while progressing ({n}x): {t}" for t, n in counts.most_common(3)]


def role_verdict(facts: dict[str, Any], current: Sequence[LogEntry], fresh_batches: int | None) -> dict[str, Any]:
    """``verdict.*`` for one role: its state, the reasons, the first abnormal lines, a severity, notes.

    ``current``: the journal lines of the role's current run (its last run when it is down);
    ``fresh_batches``: its batch lines stamped near the probe (None: none could be compared)."""
    unit, health, failed = facts.get("unit", {}), facts.get("health", {}), facts.get("failed", [])
    abnormal: list[str] = []
    unknown: list[str] = []
    notes: list[str] = []
    severity = "warning"
    if not unit:
        unknown.append("systemd state could not be read")
    elif unit.get("active_state") != "active" or unit.get("sub_state") not in (None, "running"):
        abnormal.append(f"unit {unit.get('active_state')}/{unit.get('sub_state')}, result {unit.get('result')}")
        severity = "critical"
    elif unit.get("crash_looping") or unit.get("restarting"):
        abnormal.append(f"unit restarting ({unit.get('n_restarts')} restarts)")
        severity = "critical"
    gpu = facts.get("gpu", {})
    if gpu.get("hardware_xid") or gpu.get("driver_fault") or gpu.get("lost") or gpu.get("missing"):
        abnormal.append(f"GPU: hardware Xid {gpu.get('hardware_xid', 0)}, driver faults {gpu.get('driver_fault', 0)},"
                        f" lost {gpu.get('lost', 0)}, missing {gpu.get('missing', 0)}")
        severity = "critical"
    deltas = facts.get("delta", {})
    failures = {k: v for k, v in deltas.items() if v > 0 and k.startswith(FAILURE_COUNTERS)}
    aborts = sum(e.kind == "abort" for e in current)
    if failures and aborts:  # an aborted request's transfer counts as failed: the client left, benign alone
        notes.append(f"failure counters moved with {aborts} client abort line(s): "
                     + ", ".join(f"{k} +{v:g}" for k, v in sorted(failures.items())))
    elif failures:
        abnormal.append("failure counters moved: " + ", ".join(f"{k} +{v:g}" for k, v in sorted(failures.items())))
        severity = "critical" if severity == "critical" else "high"
    lines = [e for e in current if is_abnormal(e)]
    router_logs = facts.get("logs", {}) if facts.get("role") == "router" else {}
    unreachable = router_logs.get("router_worker_unreachable", 0)
    checks_failed = router_logs.get("router_health_check_failed", 0)
    transient = unreachable == 1 and not checks_failed
    answered = [e for e in lines if _ROUTER_5XX.search(e.message)]
    if unreachable and facts.get("routing", {}).get("checks_since_passed"):  # parse/facts.py checks_since_passed
        notes.append(f"{checks_failed} failed health check(s) earlier in this run (workers starting or restarting); "
                     "the router marks every worker healthy now")
        lines = [e for e in lines if ROUTER_TRANSPORT.search(e.message) is None]
        transient = True
    elif transient and len(answered) <= 1:  # one reset of a pooled connection and its one 5xx answer, said as a note
        notes.append("one transport failure to a worker (a keep-alive connection the worker closed): "
                     + next((e.message.strip()[:200] for e in current if ROUTER_TRANSPORT.search(e.message)), ""))
        lines = [e for e in lines if ROUTER_TRANSPORT.search(e.message) is None and e not in answered]
    else:
        transient = False
    if lines:
        abnormal.append(f"{len(lines)} error line(s) in the current run")
        if any(e.kind in ("crash", "native", "traceback", "oom") for e in lines):
            severity = "critical" if severity == "critical" or any(e.kind in ("crash", "native") for e in lines) else "high"
    elif "logs" in failed:
        unknown.append("journal could not be read")
    stalled = False
    if facts.get("role") in ("prefill", "decode"):
        state, why = _progress_state(facts, fresh_batches)
        if state == "stalled":
            stalled = True
            abnormal.append(f"stalled: {why}")
            severity = "critical" if severity == "critical" else "high"
        elif state == "unknown":
            unknown.append(why)
        moving = state == "moving"
    else:
        moving = True
        routing, gauges = facts.get("routing", {}), facts.get("metrics", {})
        if unreachable and not transient:  # its health checker or its client could not reach a worker, at any level
            abnormal.append(f"the router could not reach a worker ({unreachable} transport or health-check failure line(s))")
            severity = "critical" if severity == "critical" else "high"
        # the request side: requests the router itself answered with a 5xx or counted as failed (parse/facts.py
        # _requests), whether or not it wrote a line; one, with the one keep-alive reset it answered, is that reset's
        failed_requests = facts.get("requests", {}).get("failed", 0)
        if failed_requests and not (transient and failed_requests <= 1):
            abnormal.append(f"the router failed {failed_requests:g} request(s) in the window by its own counters "
                            "(5xx answers, request errors)")
            severity = "critical" if severity == "critical" else "high"
        if routing.get("no_worker_errors") or routing.get("breaker_open"):
            abnormal.append("the router failed requests for want of a worker")
            severity = "critical" if severity == "critical" else "high"
        # the router's own view of its workers: a health gauge at 0 (smg_worker_health, the minimum over workers;
        # sglang-router 0.2.1 sgl_router_worker_health), a worker it marked stalled (smg_worker_stalled)
        if gauges.get("smg_worker_health") == 0 or routing.get("stalled"):
            abnormal.append(f"the router marks a worker unhealthy (health {gauges.get('smg_worker_health')}, "
                            f"stalled {routing.get('stalled', 0)})")
            severity = "critical" if severity == "critical" else "high"
    client_errors = sum(e.kind == "access" and access_status_class(e.message) == "4" for e in current)
    if client_errors:  # the server refused a client's own bad request and went on: said, not held against it
        notes.append(f"{client_errors} request(s) answered with a client error (4xx): the client's request, not the server")
    uncompiled = sum(e.kind == "grammar" and _GRAMMAR_COMPILE.search(e.message) is not None for e in current)
    if uncompiled:  # a client's schema the grammar backend could not compile: its own request, refused with 400
        notes.append(f"{uncompiled} grammar compile report(s): a client's schema that does not compile, its request refused")
    busy_note = []
    if not health.get("answered"):
        said = "/health did not answer" + (" (timed out)" if health.get("timed_out") else "")
        if moving and facts.get("role") != "router":  # SGLang skips /health while its scheduler is busy
            busy_note.append(f"{said} while tokens moved: SGLang skips /health on a busy scheduler")
        else:
            unknown.append(said)
    elif health.get("status") != 200 and facts.get("role") == "router":  # alone it proves nothing either way
        unknown.append(f"/health answered {health.get('status')}")
    elif health.get("status") != 200 and not moving:
        abnormal.append(f"/health answered {health.get('status')}")
    state = ABNORMAL if abnormal else UNKNOWN if unknown else HEALTHY
    return {
        "state": state,
        "abnormal": bool(abnormal),
        "unknown": bool(unknown) and not abnormal,
        "reasons": abnormal or unknown,
        "lines": [e.message.strip()[:300] for e in lines[:FIRST_LINES]],
        "severity": severity if abnormal else "info",
        "notes": notes + busy_note + _notes(current, moving and not abnormal),
        "stalled": stalled,
    }


def probe_wide_reasons(canary: dict[str, Any], recall: dict[str, Any], router_blocked: bool) -> list[str]:
    """Evidence of the whole path rather than one role: the canary through the router failed, the recall
    probe lost needles, a router said it cannot route. Said on the router (else on every role)."""
    out = []
    if canary and canary.get("ok") is False:
        out.append(f"canary through the router failed (status {canary.get('status')}"
                   f"{', timed out' if canary.get('timed_out') else ''})")
    lost, full = recall.get("lost_lengths") or [], recall.get("longest_full")
    if full is not None and lost and min(lost) > full:  # found everything up to a length, lost some past it
        out.append(f"recall probe: every needle found up to {full} tokens, some lost at {lost}")
    if router_blocked:
        out.append("a router says it cannot route to a worker")
    return out


def with_reasons(verdict: dict[str, Any], reasons: list[str]) -> dict[str, Any]:
    """``verdict`` made abnormal by ``reasons`` (probe-wide evidence), if any."""
    if not reasons:
        return verdict
    was = verdict["reasons"] if verdict["abnormal"] else []
    severity = verdict["severity"] if verdict["abnormal"] else "high"
    return {**verdict, "state": ABNORMAL, "abnormal": True, "unknown": False, "reasons": was + reasons,
            "severity": severity, "notes": []}
