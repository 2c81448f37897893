"""glog-style lines of the C++ libraries under SGLang → ``GlogLine`` (severity, file, line, message).

``E0603 20:16:59.104586 27322 worker_pool.cpp:271] Worker: Process failed for slice ...`` is how
Mooncake's transfer engine (glog ``LOG(ERROR)``), NIXL and PyTorch's c10d
(``[rank1]:[E1129 10:00:01.000000000 ProcessGroupNCCL.cpp:616] ...``) write. The file names the
component that wrote the line (the table in runbooks/exceptions.yaml), which says more than the text.
UCX (NIXL's transport) writes its own format, ``[time] [host:pid:tid]  tcp_ep.c:1260 UCX  ERROR msg``
(openucx ucs/debug/log.c ``ucs_log_default_handler``); such a line carries ``library="UCX"``.
"""

from __future__ import annotations

from dataclasses import dataclass

from opsbot.parse.lines import linear

# glog: Lmmdd hh:mm:ss.uuuuuu threadid file:line] msg; c10d puts it in brackets after "[rankN]:", and
# PyTorch before 2.3 (c10 logging without glog) writes only "[E ProcessGroupNCCL.cpp:456] msg"
_GLOG = linear(
    r"^(?:\[rank\d+\]:)?(?:\[?(?P<sev>[IWEF])(?P<date>\d{4}|\d{8}) (?P<time>\d{2}:\d{2}:\d{2}\.\d+)\s+(?:(?P<thread>\d+) )?"
    r"|\[(?P<short>[IWEF]) )"
    r"(?P<file>[\w./+-]+\.(?:cpp|cc|cxx|c|h|hpp|rs|py)):(?P<line>\d+)\]\s?(?P<msg>.*)$"
)

# UCX: optional "[seconds.micros] [host:pid:tid]", then "file.c:line UCX LEVEL message" (%16s:%-4u %-4s %-5s)
_UCX = linear(
    r"^(?:\[\d+\.\d+\]\s+\[[^\]]*\]\s+)?(?P<file>[\w.+-]+\.c):(?P<line>\d+)\s+UCX\s+"
    r"(?P<level>FATAL|ERROR|WARN|DIAG|INFO|PRINT|DEBUG|TRACE\w*)(?:\s+(?P<msg>.*))?$"
)
_UCX_SEVERITY = {"FATAL": "F", "ERROR": "E", "WARN": "W"}


@dataclass(frozen=True)
class GlogLine:
    severity: str  # I, W, E or F
    file: str  # the base name, e.g. worker_pool.cpp
    line: int
    message: str
    library: str | None = None  # a library that names itself in its own line format (UCX)

    @property
    def is_error(self) -> bool:
        return self.severity in ("E", "F")


def parse_glog(message: str) -> GlogLine | None:
    """The glog line in ``message`` (journald/SGLang prefixes already stripped), or None."""
    m = _GLOG.match(message.strip())
    if not m:
        u = _UCX.match(message.strip()) if "UCX" in message else None
        if u is None:
            return None
        return GlogLine(_UCX_SEVERITY.get(u["level"], "I"), u["file"], int(u["line"]), u["msg"] or "", "UCX")
    return GlogLine(m["sev"] or m["short"], m["file"].rsplit("/", 1)[-1], int(m["line"]), m["msg"])
