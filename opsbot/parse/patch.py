"""The index-key patch as a probe sees it (parse stage, pure): the line the patched SGLang prints
at start (``kernels/sglang_patch``), read from a role's journal, as the fact group ``patch`` and the
words the reports show ("bf16, seen in the current run at 12:00", "fp8 (upstream)", "unknown").

The patch prints ``opsbot-dsv4-patch <version> attached: index_keys=<dtype> sglang=<version>`` on
success and ``opsbot-dsv4-patch refused: <reason>`` (then exits 3) when the installed SGLang is not
the one it was written for; with ``--index-keys fp8`` (upstream) it prints nothing. So no line in a
current run whose start the journal window covers means upstream fp8 keys; a run that started
before the window, or a journal not read, leaves it unknown. ``serving/patch.py`` (deploy apply's
check) parses with the same functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from opsbot.parse.lines import linear

PATCH_NAME = "opsbot-dsv4-patch"
# kernels/sglang_patch/__init__.py: PATCH_LINE_RE, REFUSAL_LINE_RE (a test keeps them equal)
_ATTACHED = linear(
    rf"{PATCH_NAME} (?P<version>\S+) attached: index_keys=(?P<index_keys>\w+) sglang=(?P<sglang>\S+)")
_REFUSED = linear(rf"{PATCH_NAME}(?: \S+)? refused:\s*(?P<reason>.+?)\s*$")
LOG_PATTERN = rf"{PATCH_NAME} "  # the journal filter keeps these lines (parse/logs.py LOG_KINDS)
_SINCE = linear(r"^-(?P<n>\d+)\s*(?P<unit>s|sec|min|m|h|hour|d|day)s?$")
_UNIT_S = {"s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}


@dataclass(frozen=True)
class PatchLine:
    """What the patched process said at start: attached (with versions and key dtype) or refused."""

    attached: bool
    version: str = ""
    index_keys: str = ""
    sglang: str = ""
    reason: str = ""


def parse_patch_line(line: str) -> PatchLine | None:
    """The patch line in one log line (any prefix, e.g. a journal timestamp), or None."""
    if m := _ATTACHED.search(line):
        return PatchLine(True, m["version"], m["index_keys"], m["sglang"])
    if m := _REFUSED.search(line):
        return PatchLine(False, reason=m["reason"].strip())  # RE2's \s is ASCII: strip as Python does
    return None


@dataclass(frozen=True)
class PatchSeen:
    """A role's index keys as its current run shows them."""

    state: str  # attached | refused | upstream | unknown
    index_keys: str | None = None
    version: str | None = None
    sglang: str | None = None
    seen_at: datetime | None = None
    reason: str | None = None

    def facts(self) -> dict[str, str]:
        """The ``patch`` fact group: state, index_keys, version, sglang, reason (absent when unknown)."""
        out = {"state": self.state, "index_keys": self.index_keys, "version": self.version,
               "sglang": self.sglang, "reason": self.reason}
        return {k: v for k, v in out.items() if v is not None}

    def describe(self) -> str:
        if self.state == "attached":
            at = f" at {self.seen_at:%H:%M}" if self.seen_at else ""
            return f"{self.index_keys}, seen in the current run{at} ({PATCH_NAME} {self.version})"
        if self.state == "refused":
            return f"patch refused: {self.reason}"
        if self.state == "upstream":
            return "fp8 (upstream)"
        return "unknown"


def window_start(since: str | None, probe_started: datetime | None) -> datetime | None:
    """When the journal excerpt begins (``journalctl --since``: a time, or ``-15min`` before the probe)."""
    since = (since or "").strip()
    try:
        at = datetime.fromisoformat(since)
        return at if at.tzinfo else None
    except ValueError:
        pass
    m = _SINCE.match(since)
    if m is None or probe_started is None:
        return None
    return probe_started - timedelta(seconds=int(m["n"]) * _UNIT_S[m["unit"]])


def seen_in(lines: list[tuple[str, datetime | None]], run_started: datetime | None, window_from: datetime | None,
            logs_ok: bool) -> PatchSeen:
    """From the journal lines (message, time) of a role: the last patch line of its current run."""
    found: tuple[PatchLine, datetime | None] | None = None
    for message, at in lines:
        if run_started is not None and at is not None and at < run_started:
            continue  # an earlier run's line says nothing about this one
        if (line := parse_patch_line(message)) is not None:
            found = (line, at)
    if found is not None:
        line, at = found
        if line.attached:
            return PatchSeen("attached", line.index_keys, line.version, line.sglang, at)
        return PatchSeen("refused", reason=line.reason, seen_at=at)
    if logs_ok and run_started is not None and window_from is not None and run_started >= window_from:
        return PatchSeen("upstream", index_keys="fp8")
    return PatchSeen("unknown")
