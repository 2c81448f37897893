"""SGLang's log line format: ``[%(asctime)s{prefix}] %(message)s`` with datefmt ``%Y-%m-%d %H:%M:%S``.

Written to stdout, so journald records them under the unit exactly as it does SGLang's.
"""

from __future__ import annotations

import sys
import threading
import time

_lock = threading.Lock()


def line(message: str, prefix: str = "", now: float | None = None) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now if now is not None else time.time()))
    return f"[{stamp}{prefix}] {message}"


def log(message: str, prefix: str = "") -> None:
    """One log record; a multi-line message (a traceback) goes out as consecutive lines."""
    with _lock:
        sys.stdout.write(line(message, prefix) + "\n")
        sys.stdout.flush()


def tp0(message: str) -> None:
    """A scheduler record on the stats-logging rank (prefix `` TP0``)."""
    log(message, " TP0")
