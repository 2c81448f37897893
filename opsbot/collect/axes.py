"""One collector per bundle section: run the command or request, return its evidence envelope.

Collectors never raise for a failed piece: a timeout, a refused connection or a failing command
becomes ``ok: false`` with the error, which is evidence too. Nothing here reads environment
variables or unit environments, so no secret reaches a bundle.
"""

from __future__ import annotations

import asyncio
import re
import time

from opsbot.bundle import (
    GPU_QUERY, GpuEvidence, HealthEvidence, KernelLogEvidence, LogsEvidence, MetricSample,
    MetricsEvidence, SystemdEvidence, utcnow,
)
from opsbot.collect.transport import CommandResult, HttpResult, Transport
from opsbot.inventory import Role
from opsbot.nodecommands import gpu_query, journal, unit_show
from opsbot.parse.lines import Regex, capped_lines, linear
from opsbot.parse.logs import LOG_FILTER
from opsbot.settings import Settings

HEALTH_BODY_CAP = 2048
KERNEL_FILTER = r"NVRM|Xid"
_LOG_RE = linear(LOG_FILTER)
_KERNEL_RE = linear(KERNEL_FILTER)
_STAMP = linear(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\S*")  # journald short-iso prefix
# journalctl exits 1 when --grep matched nothing; these stderr lines are not failures either.
_JOURNAL_QUIET = ("No journal files were found.", "-- No entries --")
_SECRET = re.compile(
    r"(?i)(\b(?:admin_api_key|api_key|hf_token|access_token|auth_token|password|passwd|secret)['\"]?\s*[=:]\s*['\"]?"
    r"|--(?:admin-api-key|api-key|hf-token)[= ]+['\"]?|\bBearer\s+)(?!(?-i:None)\b)[^'\"\s,)]+"
)


def redact(text: str) -> str:
    """Blank out API keys, tokens and passwords that a server may print (SGLang logs its args)."""
    return _SECRET.sub(lambda m: m.group(1) + "***", text)


def _failure(r: CommandResult) -> str | None:
    if r.error:
        return r.error
    if r.exit_status != 0 and not r.truncated:
        detail = r.stderr.strip().splitlines()[-1][:300] if r.stderr.strip() else "no message"
        return f"{r.argv[0]} exited with status {r.exit_status}: {detail}"
    return None


def _http_failure(r: HttpResult, what: str) -> str | None:
    if r.error:
        return r.error
    if r.location is not None:
        return f"{what}: HTTP {r.status} redirect to {redact(r.location[:200])!r}, not followed"
    if r.status != 200:
        hint = " (is the server started with --enable-metrics?)" if r.status == 404 and what == "metrics" else ""
        return f"{what}: HTTP {r.status}{hint}: {r.body.strip()[:200]}"
    return None


def _ms(t0: float) -> float:
    return round((time.monotonic() - t0) * 1000, 1)


async def collect_systemd(t: Transport, role: Role, s: Settings) -> SystemdEvidence:
    r = await t.run(unit_show(role.unit), s.command_timeout_s)
    error = _failure(r)
    return SystemdEvidence(ok=error is None, error=error, elapsed_ms=r.elapsed_ms, raw=r.stdout)


async def collect_metrics(t: Transport, role: Role, s: Settings) -> MetricsEvidence:
    """Two samples ``metrics_window_s`` apart, so counters give deltas and rates."""
    if not role.metrics_url:
        return MetricsEvidence(ok=False, error=f"the inventory gives role {role.key} no metrics_url")
    t0 = time.monotonic()
    samples: list[MetricSample] = []
    sent = t0
    for which in ("first", "second"):
        if samples:
            await asyncio.sleep(max(0.0, s.metrics_window_s - (time.monotonic() - sent)))
        sent, at = time.monotonic(), utcnow()
        r = await t.http_get(role.metrics_url, s.http_timeout_s, s.output_cap_bytes, direct=not role.http_via_ssh)
        error = _http_failure(r, "metrics")
        if error:
            return MetricsEvidence(ok=False, error=f"{which} sample: {error}", elapsed_ms=_ms(t0), samples=samples)
        extra = {"truncated": True} if r.truncated else {}
        samples.append(MetricSample(at=at, raw=r.body, **extra))
    return MetricsEvidence(ok=True, elapsed_ms=_ms(t0), samples=samples)


async def collect_health(t: Transport, role: Role, s: Settings) -> HealthEvidence:
    """``/health`` with a deadline; any HTTP answer (503 included) is collected evidence."""
    if not role.health_url:
        return HealthEvidence(ok=False, error=f"the inventory gives role {role.key} no health_url")
    endpoint = "/" + role.health_url.split("://", 1)[-1].partition("/")[2]
    r = await t.http_get(role.health_url, s.http_timeout_s, HEALTH_BODY_CAP, direct=not role.http_via_ssh)
    return HealthEvidence(
        ok=r.error is None, error=r.error, elapsed_ms=r.elapsed_ms, endpoint=endpoint, status=r.status,
        body=redact(r.body), **({"location": redact(r.location[:2048])} if r.location is not None else {}),
    )


def _filter_lines(raw: str, pattern: Regex, cap: int) -> tuple[str, bool]:
    """Matching lines (the journald prefix is not matched), oldest first, the newest ``cap`` of them;
    each line cut to ``LINE_CAP`` characters before any pattern reads it.

    journalctl 252 prints ``--grep`` results newest first; the order is put back by timestamps.
    """
    kept = []
    for line in capped_lines(raw):
        stamped = _STAMP.match(line)
        message = line.split(": ", 1)[1] if stamped and ": " in line else line
        if pattern.search(message):
            kept.append(line)
    stamps = [m.group(0) for line in kept if (m := _STAMP.match(line))]
    if len(stamps) >= 2 and stamps[0] > stamps[-1]:
        kept.reverse()
    return "\n".join(kept[-cap:]) + ("\n" if kept else ""), len(kept) > cap


def _journal_failure(r: CommandResult) -> str | None:
    if r.error or r.exit_status in (0, None) or r.truncated:
        return r.error
    noise = [ln for ln in r.stderr.strip().splitlines() if ln.strip() and ln.strip() not in _JOURNAL_QUIET]
    if r.exit_status == 1 and not noise:
        return None
    return _failure(r)


async def _journal(t: Transport, args: list[str], pattern: str, s: Settings) -> CommandResult:
    """journalctl filtered on the node with ``--grep``; without PCRE2 support, unfiltered."""
    base = journal(args, s.log_lines_cap * 4)
    r = await t.run([*base, "--grep", pattern], s.command_timeout_s)
    if r.exit_status not in (0, 1) and "pattern matching" in r.stderr:
        r = await t.run(base, s.command_timeout_s)
    return r


async def collect_logs(t: Transport, role: Role, since: str, s: Settings) -> LogsEvidence:
    r = await _journal(t, ["-u", role.unit, "--since", since], LOG_FILTER, s)
    error = _journal_failure(r)
    raw, over = _filter_lines(redact(r.stdout), _LOG_RE, s.log_lines_cap)
    return LogsEvidence(
        ok=error is None, error=error, elapsed_ms=r.elapsed_ms, since=since, raw=raw, truncated=over or r.truncated
    )


async def collect_gpu(t: Transport, s: Settings) -> GpuEvidence:
    r = await t.run(gpu_query(), s.command_timeout_s)
    error = _failure(r)
    return GpuEvidence(ok=error is None, error=error, elapsed_ms=r.elapsed_ms, query=GPU_QUERY, raw=r.stdout)


async def collect_kernel_log(t: Transport, since: str, s: Settings) -> KernelLogEvidence:
    r = await _journal(t, ["-k", "--since", since], KERNEL_FILTER, s)
    error = _journal_failure(r)
    raw, _over = _filter_lines(redact(r.stdout), _KERNEL_RE, s.log_lines_cap)
    return KernelLogEvidence(ok=error is None, error=error, elapsed_ms=r.elapsed_ms, raw=raw)
