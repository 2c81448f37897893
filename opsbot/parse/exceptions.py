"""Exceptions as structure: Python tracebacks (SGLang's ``X hit an exception: Traceback ...`` blocks
included), argparse refusals, C++ exceptions that ended the process (``terminate called after
throwing an instance of 'c10::DistBackendError'``, then ``what():``) and Rust panics (the router)
→ ``RaisedException`` with its type, message, writer, frames and stage.

The stage is read from the frames, not from the message: an exception raised under an event loop
(``run_event_loop``, ``event_loop_*``, ``handle_loop``) happened while serving; one raised under a
constructor, a loader or the launcher (``__init__``, ``load_model``, ``init_*``, ``launch_server``,
module import) happened at start-up. Frame names are those of SGLang 0.4.6.post5 and 0.5.23
(managers/scheduler.py ``run_scheduler_process``: ``Scheduler(...)`` then ``run_event_loop()``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from opsbot.parse.lines import linear

Stage = Literal["startup", "serving", "unknown"]

_TRACEBACK = linear(r"(?:(?P<writer>[A-Z]\w*) hit an exception: )?Traceback \(most recent call last\):")
_FRAME = linear(r'^\s*File "(?P<file>[^"]*)", line \d+, in (?P<func>[\w<>.]+)')
# an exception line: a dotted identifier (a type), then ": message" or nothing; never indented
_RAISED = linear(r"^(?P<type>(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception|Exit|Interrupt))(?::\s*(?P<msg>.*))?$")
_ARGPARSE = linear(r"^(?P<prog>[\w.-]+(?:\.py)?): error: (?P<msg>.+)$")
# An uncaught C++ exception (libstdc++'s verdict), its what() on the next line, and c10's
# "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:609" after it
_TERMINATE = linear(r"terminate called after throwing an instance of '(?P<type>[\w:<>, ]+)'")
_WHAT = linear(r"^\s*what\(\):\s*(?P<msg>.*)$")
_RAISED_FROM = linear(r"^Exception raised from (?P<func>\S+) at (?P<file>\S+?):\d+")
# A Rust panic (sgl-router, SMG): "thread 'main' panicked at src/main.rs:42:10:" with the message on the
# next line (Rust >= 1.73), or "thread 'main' panicked at 'message', src/main.rs:42:10" before
_PANIC = linear(r"^thread '(?P<thread>[^']*)' panicked at (?:'(?P<msg>.*)', )?(?P<at>\S+?):?$")
# SGLang's launcher's own verdict on a failed start (entrypoints/http_server.py _wait_and_warmup,
# 0.4.6.post5 and 0.5.23: "Initialization failed. warmup error: {traceback}"; engine.py 0.5.23:
# "Initialization failed. Please see the error messages above.")
_INIT_FAILED = linear(r"Initialization failed\. (?P<msg>.*)$")
# The router's own verdict on a failed start: sglang-router 0.1.2 src/server.rs AppState::new panics with
# "Failed to create router: {error}" when Router::new fails (src/router.rs: "Timeout {}s waiting for workers to
# become healthy"); its launcher (sglang_router 0.1.2 launch_router.py, smg v1.x bindings/python/src/smg/
# launch_router.py) logs "Error starting router: {e}" for any exception around creating and starting it.
_ROUTER_FAILED = linear(r"(?:^|[\s:\]])(?P<what>Failed to create router|Error starting router): (?P<msg>.+)$")
# torch.distributed prefixes every line a rank prints ("[rank0]: ValueError: ..."); so do multiprocessing
# workers written as "(pid=123)" by some launchers
_RANK_PREFIX = linear(r"^(?:\[rank\d+\]:\s?|\((?:\w+ )?pid=\d+\)\s)")
# a multi-node launcher's task label before every line (Slurm srun --label: "0: ", the task number)
_TASK_LABEL = linear(r"^\d{1,5}:(?: |$)")
# the call a traceback's source line makes (``x = self.init_torch_distributed()``, ``return func(*a)``)
_CALL = linear(r"^(?:return\s+|await\s+|[\w.\[\], ]+?\s*=\s*)?(?P<callee>[A-Za-z_][\w.]*)\(")
# plain substring and prefix tests, not RE2 calls (each costs microseconds on every line): what _RAISED needs
# somewhere in the line, and the chained-traceback lines' openings
_TYPE_WORDS = ("Error", "Exception", "Exit", "Interrupt")
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")

_SERVING = linear(r"^(?:run_event_loop|event_loop\w*|handle_loop|process_input_requests|run_batch|process_batch_result\w*)$")
_STARTUP = linear(
    r"^(?:__init__|__post_init__|<module>|load_model|load_weights|initialize|init_\w+|_init_\w+|launch_server|launch_engine"
    r"|_launch_subprocesses|from_cli_args|parse_args|check_server_args|_handle_\w+|from_pretrained|get_config|capture\w*"
    r"|configure_scheduler_process|_set_envs_and_config|profile_max_num_token)$"
)
_STARTUP_TYPES = linear(r"(?:^|\.)(?:ImportError|ModuleNotFoundError|ArgumentError|SyntaxError)$")


@dataclass(frozen=True)
class RaisedException:
    """One exception the log shows: ``type`` as printed (``torch.OutOfMemoryError``), its message,
    the process part that wrote it (``Scheduler``, ``TokenizerManager``; None when not said), the
    frames' function names outermost first, and the stage those frames place it in."""

    type: str
    message: str
    writer: str | None = None
    frames: tuple[str, ...] = ()
    stage: Stage = "unknown"
    index: int = 0
    ts: str | None = None
    files: tuple[str, ...] = ()  # each frame's file, as printed, in the order of ``frames``

    @property
    def short_type(self) -> str:
        return self.type.rsplit(".", 1)[-1]


def stage_of(frames: Iterable[str], type_: str) -> Stage:
    """``serving`` when any frame is an event loop, else ``startup`` when a frame (or the type) is one
    of start-up's, else ``unknown`` (e.g. only ``run_scheduler_process``, which wraps both)."""
    funcs = tuple(frames)
    if any(_SERVING.match(f) for f in funcs):
        return "serving"
    if any(_STARTUP.match(f) for f in funcs) or _STARTUP_TYPES.search(type_):
        return "startup"
    return "unknown"


@dataclass
class _Open:
    writer: str | None
    start: int
    ts: str | None
    frames: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    tail: int | None = None  # a headless tail just before it in ``out`` (``_cut``)
    call: str | None = None  # the source line under its last frame: the statement it was executing


def parse_exceptions(messages: Iterable[tuple[str, str | None]]) -> list[RaisedException]:
    """Exceptions in log messages (each ``(message, timestamp)``, prefixes already stripped), in order.

    A traceback ends at its exception line; a chained traceback (``During handling of ...``) keeps
    the writer of the first. An exception line outside a traceback (a logged ``ValueError: ...``)
    counts too, without frames; so does an argparse ``prog: error: ...`` refusal (a start-up error).
    A traceback cut before its exception line is kept for its frames (``_cut``). Garbage never raises.
    """
    out: list[RaisedException] = []
    open_: _Open | None = None
    tail: int | None = None  # where in ``out`` a headless traceback tail is, while only blank lines follow it
    indented = False  # the line before was a traceback's source line or carets
    panic: RaisedException | None = None  # a panic whose message is on the next line
    thrown: RaisedException | None = None  # a C++ exception waiting for its what() line
    for i, (message, ts) in enumerate(messages):
        if panic is not None:
            out.append(replace(panic, message=message.strip()[:500]))
            panic = None
            continue
        if thrown is not None and (what := _WHAT.match(message)):
            out.append(replace(thrown, message=what["msg"].strip()[:500]))
            thrown = None
            continue
        raised_from = _RAISED_FROM.match(message) if message.startswith("Exception raised from") else None
        if raised_from and out and out[-1].writer == "c++" and not out[-1].frames:
            out[-1] = replace(out[-1], frames=(raised_from["func"],), files=(raised_from["file"],))
            continue
        cpp = _TERMINATE.search(message) if "terminate called" in message else None
        if cpp:
            thrown = RaisedException(cpp["type"], "", "c++", (), "unknown", i, ts)
            continue
        text = _TASK_LABEL.sub("", message.rstrip(), count=1) if message[:1].isdigit() else message.rstrip()
        text = _RANK_PREFIX.sub("", text, count=1) if text.startswith(("[rank", "(")) else text
        follows_source, indented = indented, text.startswith((" ", "\t")) and bool(text.strip())
        init = _INIT_FAILED.search(text) if "Initialization failed" in text else None
        if init:  # the launcher's verdict; the traceback it may carry is parsed as well
            out.append(RaisedException("InitializationFailed", init["msg"][:500], "launcher", (), "startup", i, ts))
        tb = _TRACEBACK.search(text) if "Traceback (most recent" in text else None
        if tb:
            if open_ is not None:
                _cut(open_, out)
            open_ = _Open(tb["writer"] or (open_.writer if open_ else None), i, ts, tail=tail)
            tail = None
            continue
        frame = _FRAME.match(text) if "File " in text else None
        if open_ is None and frame and frame["file"].endswith(".py"):  # a Python traceback whose header was cut
            open_, tail = _Open(None, i, ts, tail=tail), None
        if open_ is not None:
            if frame:
                open_.frames.append(frame["func"])
                open_.files.append(frame["file"])
                open_.call = None
                continue
            if open_.call is None and open_.frames and text.startswith((" ", "\t")) and not set(text) <= set("^~ \t"):
                open_.call = text.strip()
            raised = _RAISED.match(text) if _may_be_raised(text) else None
            if raised:
                out.append(_raised(raised["type"], raised["msg"] or "", open_.writer, tuple(open_.frames), open_.start, open_.ts,
                                   tuple(open_.files)))
                open_ = None
                continue
            if text.startswith((" ", "\t")) or not text or set(text) <= set("^~ "):
                continue  # source lines and carets under a frame
            if i - open_.start > 200:
                _cut(open_, out)
                open_ = None
            continue
        if text.strip():
            tail = None
        if text.startswith(_CHAINED):
            continue
        raised = _RAISED.match(text) if _may_be_raised(text) and any(w in text for w in _TYPE_WORDS) else None
        if raised:
            out.append(_raised(raised["type"], raised["msg"] or "", None, (), i, ts))
            tail = len(out) - 1 if follows_source else None
            continue
        if init:
            continue
        router = _ROUTER_FAILED.search(text) if " router: " in text and " panicked at " not in text else None
        if router:  # creating the router is start-up; "Error starting router" also wraps a run that served
            stage: Stage = "startup" if router["what"].startswith("Failed to create") else "unknown"
            out.append(RaisedException("RouterStartFailed", router["msg"].strip()[:500], "router", (), stage, i, ts))
            continue
        argp = _ARGPARSE.match(text) if ": error: " in text else None
        if argp:
            out.append(RaisedException("ArgumentError", argp["msg"], argp["prog"], (), "startup", i, ts))
            continue
        rust = _PANIC.match(text) if " panicked at " in text else None
        if rust:
            found = RaisedException("panic", rust["msg"] or "", f"thread {rust['thread']}", (), "unknown", i, ts, (rust["at"],))
            if rust["msg"] is None:
                panic = found
            else:
                out.append(found)
    if open_ is not None:
        _cut(open_, out)
    out += [x for x in (panic, thrown) if x is not None]
    return sorted(out, key=lambda x: x.index)


def _may_be_raised(text: str) -> bool:
    """Whether ``_RAISED`` can match: its type (no space) runs from the start to the first colon or the end."""
    return " " not in text.partition(":")[0]


def _cut(open_: _Open, out: list[RaisedException]) -> None:
    """Keep a traceback that never reached its exception line (the journal lost the rest, or another rank's lines
    took its place): its frames may still say where it was raised. When another rank's headless tail of it (source
    lines, then the exception line) came just before it, separated by blank lines only, the two are one
    exception: the tail's type and message with these frames. Else it counts, as type ``Traceback`` without a
    message, only when its frames place it (a start-up or serving frame): a wrapper alone says nothing. The source
    line under its last frame adds the call it was executing as one more frame (a ``self.`` method: in the
    caller's file; else the file is not known and left empty)."""
    if not open_.frames:
        return
    frames, files = tuple(open_.frames), tuple(open_.files)
    call = _CALL.match(open_.call or "")
    if call:  # the statement under its last frame: the call it was in when the rest was lost
        callee = call["callee"]
        frames += (callee.rsplit(".", 1)[-1],)
        files += (files[-1] if callee.startswith("self.") else "",)  # a method of self: the caller's own file
    if open_.tail is not None and open_.tail < len(out) and not out[open_.tail].frames:
        x = out[open_.tail]
        out[open_.tail] = replace(x, writer=open_.writer or x.writer, frames=frames, files=files, stage=stage_of(frames, x.type))
    elif (stage := stage_of(frames, "")) != "unknown":
        out.append(RaisedException("Traceback", "", open_.writer, frames, stage, open_.start, open_.ts, files))


# A native crash: Python's faulthandler ("Fatal Python error: Segmentation fault", then
# 'File "...", line 75 in transfer_sync'), UCX/glibc backtraces (' 5  /path/libuct.so(sym+0x8a) [0x..]'), or
# tvm-ffi's SIGSEGV handler, in every SGLang process (0.5.23 requires apache-tvm-ffi 0.1.11; apache/tvm-ffi v0.1.11
# src/ffi/backtrace.cc TVMFFISegFaultHandler: "!!!!!!! Segfault encountered !!!!!!!", then native frames written
# like Python's by backtrace_utils.h: '  File "<unknown>", line 0, in nixlUcxWorker::arm() const').
_CRASH = linear(r"Fatal Python error: |Caught signal \d+ \(|\*\*\* (?:SIGSEGV|SIGABRT|SIGBUS)|==== backtrace|!!! Segfault encountered")
_CRASH_FRAME = linear(
    r'^\s*(?:File "(?P<file>[^"]+)", line \d+,? in (?P<func>\S.*?)|\d+\s+(?P<lib>/\S+?)(?:\((?P<sym>[^)+]*)[^)]*\))?\s*\[0x[0-9a-f]+\])\s*$'
)


# the words each of _CRASH's alternatives holds: a line with none of them is not tried (most lines)
_CRASH_WORDS = ("Fatal Python error: ", "Caught signal ", "*** SIG", "==== backtrace", "!!! Segfault encountered")


def is_crash_line(message: str) -> bool:
    """Whether ``message`` opens a native crash dump (faulthandler's verdict, a caught signal, a backtrace)."""
    return any(w in message for w in _CRASH_WORDS) and _CRASH.search(message) is not None


def crash_frames(messages: Iterable[str]) -> list[str]:
    """The files and libraries (with the function, ``path:func``) of native crash dumps in the log."""
    out: list[str] = []
    inside = False
    for message in messages:
        if is_crash_line(message):
            inside = True
            continue
        if not inside:
            continue
        m = _CRASH_FRAME.match(message)
        if m:
            out.append(f"{m['file'] or m['lib']}:{m['func'] or m['sym'] or ''}")
        elif message.strip() and not message.lstrip().startswith(("Thread ", "Current thread", "Stack (most recent", "Extension modules")):
            inside = False
    return out


def _raised(type_: str, msg: str, writer: str | None, frames: tuple[str, ...], index: int, ts: str | None,
            files: tuple[str, ...] = ()) -> RaisedException:
    return RaisedException(type_, msg.strip()[:500], writer, frames, stage_of(frames, type_), index, ts, files)


class ExceptionClasses(Protocol):
    """What the facts need of the reviewed exception table (``runbooks/exceptions.yaml``, loaded by
    the diagnose stage): the class an exception, a component's line or a crash dump points to."""

    def incident(self, exc: RaisedException) -> str | None: ...

    def named(self, exc: RaisedException) -> bool: ...

    def component(self, file: str, library: str | None = None) -> tuple[str, str] | None: ...

    def crash_component(self, frames: list[str]) -> tuple[str, str] | None: ...
