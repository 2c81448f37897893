"""Journal and SGLang log lines → ``LogEntry`` with a ``kind`` naming what the line is about.

``LOG_KINDS`` is the one list of what matters in an SGLang log (reference/sglang.md §4 and §7);
the collector builds its node-side filter from the same list, so what is collected and how it
is classified cannot drift apart. Patterns are written to mean the same in Python ``re`` and in
PCRE2 (``journalctl --grep``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from typing import Literal

from pydantic import BaseModel

from opsbot.parse.lines import Regex, capped, capped_lines, linear, linear_set
from opsbot.parse.patch import LOG_PATTERN as PATCH_LOG_PATTERN

# A launcher that relays the process's output puts its own label before every line: Slurm's
# `srun --label` the task number ("0: "), `docker compose up` the service name padded to the
# widest one and ending in the replica's number ("sglang-prefill-1  | "; a level such as
# "ERROR    | " is not one). The node-side filter lets it stand before anchored patterns;
# parse_log_line drops it, so every reader sees what the process wrote.
RELAY_PREFIX = r"(?:[0-9]{1,5}: |[A-Za-z0-9][A-Za-z0-9_.-]*[-_][0-9]+[ ]+\| )"

LOG_KINDS: tuple[tuple[str, str], ...] = (
    ("patch", PATCH_LOG_PATTERN),  # the index-key patch's start line (opsbot/parse/patch.py)
    ("abort", r"Aborted by AbortReq\."),
    (
        "kv-transfer",
        r"KVTransferError|(Decode|Prefill) (transfer|bootstrap|handshake) failed|(Lost|Losing) connection with"
        r" prefill|Failed to send kv chunk|Could not fetch prefill|timed out when bootstrapping|fail to receive"
        r" KV Cache transfer|Failed to get kvcache|Transfer thread failed|Mooncake memory registration failed"
        r"|retry counter exceeded|Work Request Flushed|Failed to modify QP|Error fetching prefill|segment descriptor"
        r"|[Mm]ooncake|NIXL|nixl|UCX|RDMA|ibv_",
    ),
    ("watchdog", r"watchdog timeout|Watchdog timeout"),
    ("retract", r"KV cache pool is full\. Retract requests|retract_decode"),
    (
        "oom",
        r"out of memory|OutOfMemoryError|Not enough memory|Not enough host memory|runs out of memory"
        r"|Capture cuda graph failed",
    ),
    ("hicache", r"HiCache|hicache"),
    ("nccl", r"NCCL|collective operation timeout"),
    ("xid", r"NVRM|Xid"),
    (
        "crash",
        r"hit an exception|Received sigquit|SIGQUIT received|crashed with exit code|Initialization failed"
        r"|Main process exited|Failed with result|restart counter is at"
        # the router's own failed start (sglang-router 0.1.2 src/server.rs) and a Rust panic (std: "thread '...' panicked at")
        r"|Failed to create router|' panicked at ",
    ),
    ("health", r"Health check failed"),
    # the router's worker-health strings (reference/sglang.md §6.2), logged at WARN as often as ERROR
    (
        "router-workers",
        r"No healthy worker|no_healthy_worker|insufficient healthy workers"
        r"|[Nn]o available (?:(?:prefill|decode|encode|PD|encode/prefill/decode) )?(?:workers?|servers|pairs?|worker pairs|worker set)\b"
        r"|No (?:prefill|decode|encode) (?:workers|servers) available"
        r"|Failed to select PD pair|circuits open|circuit breaker open|Circuit breaker state transition",
    ),
    # glog E/F lines of the C++ libraries (Mooncake, NIXL, c10d) and native crash dumps (faulthandler, UCX, tvm-ffi)
    (
        "native",
        rf"^{RELAY_PREFIX}?(\[rank[0-9]+\]:)?\[?[EF][0-9]{{4}} [0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}"
        rf"|^{RELAY_PREFIX}?(\[rank[0-9]+\]:)?\[[EF] [A-Za-z0-9_.]+\.(cpp|cc|h|hpp):[0-9]+\]"
        r"|Fatal Python error|Caught signal [0-9]+|==== backtrace|!!! Segfault encountered"
        rf"|^{RELAY_PREFIX}?\s*[0-9]+\s+/\S.*\[0x[0-9a-f]+\]\s*$",  # "/\S.*", not "/\S+.*": PCRE2 on the node backtracks
    ),
    ("queue-full", r"The request queue is full\.|Request (waiting|running) timeout reached"),
    # an HTTP server's access line answering with a client (4xx) or server (5xx) error: uvicorn's
    # '"POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error' (SGLang's HTTP server)
    ("access", r"\"[A-Z]+ \S+ HTTP/[0-9.]+\" [45][0-9][0-9]\b"),
    ("traceback", rf"Traceback \(most recent call last\)|^{RELAY_PREFIX}?\s+File \"|^{RELAY_PREFIX}?[A-Za-z_.]*(Error|Exception)\b"),
    # the grammar backend (structured output) at run time and at compile time: SGLang's own report of a token the
    # request's grammar rejected (0.5.23 managers/scheduler_components/batch_result_processor.py:727,871
    # logger.error "Grammar accept_token failed for req ... with token ...: <exc>"; constrained/xgrammar_backend.py:103
    # ValueError "Tokens not accepted: N"), xgrammar's own warnings on a rejected token (cpp/grammar_matcher.cc:1205,
    # 1211, 1221 "[HH:MM:SS] .../grammar_matcher.cc:N: Warning: ... Rejecting the token."), and the compile stage's
    # reports of a request's grammar that does not compile (constrained/*_backend.py "Hit invalid json_schema: ...",
    # grammar_manager.py:308,316 "Grammar compilation raised an exception", "Failed to compile json_schema grammar");
    # the compile stage's older words (0.3.x-0.4.x xgrammar/outlines backends: logging.warning("Skip invalid
    # json_schema: ..."), the scheduler's abort "Invalid grammar request: req.grammar_key=..."); SGLang's llguidance
    # wrapper before it raised (0.4.x-0.5.x constrained/llguidance_backend.py accept_token:
    # logger.warning(f"matcher error: {self.ll_matcher.get_error()}")); and any line SGLang's grammar modules wrote,
    # named by the file a format with a location prints ("[ TP0 xgrammar_backend.py:406]") or by the logger's name
    (
        "grammar",
        r"Grammar accept_token failed|Tokens not accepted|Rejecting the token|after accepting the stop token"
        r"|[Mm]atcher error|Hit invalid (?:json_schema|ebnf|regex|grammar|structural_tag)"
        r"|[Ss]kip invalid (?:json[_ ]schema|regex|ebnf|grammar)|Invalid grammar request"
        r"|Failed to compile [a-z_]+ grammar|Grammar compilation raised"
        r"|(?:xgrammar|llguidance|outlines|reasoner_grammar|base_grammar)_backend\.py:[0-9]+\]|grammar_manager\.py:[0-9]+\]"
        r"|sglang\.srt\.constrained\."
        # any grammar component's words for a token it would not take, in either order within the line
        r"|(?:[Gg]rammar|xgrammar|llguidance|[Mm]atcher|FSM)\b.{0,200}\b(?:[Rr]ejected|not accepted|not allowed"
        r"|cannot accept|[Ff]ailed to (?:accept|advance))"
        r"|\b(?:[Rr]ejected|not accepted|cannot accept)\b.{0,200}\b(?:[Gg]rammar|xgrammar|llguidance|[Mm]atcher|FSM)\b",
    ),
    ("batch", r"(Prefill|Decode) batch[ ,.\[]"),  # 0.4.x writes "Decode batch. #running-req: ..."
    ("error", r"ERROR|CRITICAL|FATAL|Error|error|Exception|exception|abort"),
    # last, so that a line saying "error" keeps that kind (a start-up error): a client's transport failure to its
    # upstream (the router's health checker and its HTTP/gRPC client: hyper, reqwest, tonic), whatever the level it
    # was logged at, kept by the node-side filter; whose it is, the router's runbook reads (router_worker_unreachable)
    # (smg 1.x and sglang-router 0.3.2 core/worker.rs:939,948: "HTTP health check returned non-success status for
    # {url}: {status}" and "HTTP health check failed for {url}: {err:?}" at WARN; :912,916 their gRPC twins)
    (
        "upstream",
        r"health check failed|health check returned non-success|gRPC health (?:RPC error|timed out)|IncompleteMessage"
        r"|ConnectionReset|[Cc]onnection reset by peer|connection closed before message completed",
    ),
)

_KINDS = linear_set([pattern for _kind, pattern in LOG_KINDS])  # one pass for every kind, not 16
LOG_FILTER = "|".join(f"(?:{pattern})" for _kind, pattern in LOG_KINDS)

# Python's re: RE2 takes 15 us a line on this one (its submatches), re 1.3 us; anchored, and no two
# adjacent quantifiers share a character, so linear as written (tests/hostile/test_linear_patterns.py times it)
_JOURNAL = re.compile(
    r"^(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)\s+"
    r"(?P<host>\S+)\s+(?P<process>[^\s\[:]+)(?:\[(?P<pid>\d{1,10})\])?:\s?(?P<message>.*)$"
)
# Python's re, as _JOURNAL: RE2's call and its named groups cost ~15 us a line here, re ~1 us. Anchored, and the
# rank loop's pieces are disjoint ([A-Z_] then digits, each opening with a space), so linear as written; RE2's own
# classes spelled out (\d is ASCII, \s has no \v, "." stops at \n, "$" only at the end: \Z) so both read alike.
_SGLANG = re.compile(
    # the date is optional: some SGLang builds and relays print a time-only header, "[10:00:01 TP0] ..."
    r"^\[(?P<ts>(?:[0-9]{4}-[0-9]{2}-[0-9]{2} )?[0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?)(?P<ranks>(?: [A-Z_]+[0-9]+)*)\]"
    r"[\t\n\f\r ]?(?P<message>[^\n]*)\Z"
)
_RANK = linear(r"([A-Z_]+?)(\d+)")
_RELAY = linear("^" + RELAY_PREFIX)
_ANSI = linear(r"\x1b\[[0-9;]*[A-Za-z]")  # SGR colour (and other CSI) sequences


class LogEntry(BaseModel):
    ts: str | None = None
    host: str | None = None
    process: str | None = None
    pid: int | None = None
    tp_rank: int | None = None
    dp_rank: int | None = None
    message: str
    kind: str | None = None


def classify(message: str) -> str | None:
    """The first ``LOG_KINDS`` entry the message matches, or None."""
    hits = _KINDS(message)
    return LOG_KINDS[min(hits)][0] if hits else None


@lru_cache(maxsize=256)
def _ranks(text: str) -> dict[str, int]:
    """`` TP0 DP1`` → ``{"TP": 0, "DP": 1}``; a handful of headers recur on every line (callers only read it)."""
    return {name: int(num) for name, num in _RANK.findall(text)}


def parse_log_line(line: str) -> LogEntry:
    """One line, journald-prefixed or bare (cut to ``LINE_CAP``); anything unrecognised is kept whole with ts None.
    Terminal colour codes are dropped first: SMG's tracing layer writes them whatever its output is
    (model_gateway/src/observability/logging.rs: ``with_ansi(config.colorize)``, ``colorize: true`` in server.rs)."""
    line = capped(line)
    if "\x1b[" in line:
        line = _ANSI.sub("", line)
    entry: dict = {"message": line}
    m = _JOURNAL.match(line)
    if m:
        entry.update(ts=m["ts"], host=m["host"], process=m["process"], message=m["message"])
        entry["pid"] = int(m["pid"]) if m["pid"] else None
    message = entry["message"]
    # each RE2 call costs microseconds whatever it finds: a pattern is tried only where the text it needs is
    # there (a relay's label holds ": " in its first 7 characters or "| "; SGLang's header opens with "[")
    if message[:1].isalnum() and (": " in message[:7] or "| " in message):
        entry["message"] = _RELAY.sub("", message, count=1)
    s = _SGLANG.match(entry["message"]) if entry["message"].startswith("[") else None
    if s:
        ranks = _ranks(s["ranks"]) if s["ranks"] else {}
        entry.update(message=s["message"], tp_rank=ranks.get("TP"), dp_rank=ranks.get("DP"))
        entry.setdefault("ts", None)
        if entry["ts"] is None:
            entry["ts"] = s["ts"]
    entry["kind"] = classify(entry["message"])
    return LogEntry(**entry)


def parse_log_lines(raw: str) -> list[LogEntry]:
    """Every non-empty line becomes an entry; garbage and binary bytes never raise."""
    return [parse_log_line(line) for line in capped_lines(raw) if line.strip() and line.strip() != "-- No entries --"]


_BATCH = linear(r"^(?P<phase>Prefill|Decode) batch(?: \[\d+\])?[.,] (?P<rest>.*)$")
_FIELD = linear(r"(#?[A-Za-z][\w ()/-]*?): (-?\d+(?:\.\d+)?)(?:,|$)")  # the comma is consumed: RE2 has no lookahead


class BatchLine(BaseModel):
    """The figures of one periodic ``Prefill batch`` / ``Decode batch`` line (reference §4.5)."""

    phase: Literal["prefill", "decode"]
    fields: dict[str, float]


def parse_batch(message: str) -> BatchLine | None:
    """``Decode batch, #running-req: 8, ... gen throughput (token/s): 317.49`` → its numbers.

    Field names are as printed without ``#``: ``running-req``, ``queue-req``, ``full token usage``,
    ``gen throughput (token/s)``. These are the evidence when ``/metrics`` is not enabled.
    """
    m = _BATCH.match(message.strip())
    if not m:
        return None
    fields = {k.strip().lstrip("#"): float(v) for k, v in _FIELD.findall(m["rest"])}
    return BatchLine(phase=m["phase"].lower(), fields=fields)


def count_kinds(entries: list[LogEntry]) -> dict[str, int]:
    """How many lines of each kind (``batch`` lines, the heartbeat, and the patch's start line excluded)."""
    counts: dict[str, int] = {}
    for e in entries:
        if e.kind and e.kind not in ("batch", "patch"):
            counts[e.kind] = counts.get(e.kind, 0) + 1
    return counts


@dataclass(frozen=True)
class Pattern:
    """A named log pattern of ``runbooks/patterns.yaml``, compiled: plain ``words`` first, then its regex."""

    name: str
    regex: Regex
    unless: Regex | None
    words: tuple[str, ...] = ()

    def matches(self, line: str) -> bool:
        if self.words and not any(w in line for w in self.words):
            return False
        return self.regex.search(line) is not None and (self.unless is None or self.unless.search(line) is None)

    def holds(self, line: str, unless_found: bool | None = None) -> bool:
        """``matches``, for a line ``regex`` is known to match (a set of patterns' one pass said so);
        ``unless_found``: whether ``unless`` matches the line, when that pass said so too."""
        if self.words and not any(w in line for w in self.words):
            return False
        if self.unless is None:
            return True
        return not unless_found if unless_found is not None else self.unless.search(line) is None
