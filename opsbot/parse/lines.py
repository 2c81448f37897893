"""Text as every pattern reads it: lines cut to ``LINE_CAP`` characters, patterns compiled by RE2.

A backtracking engine (Python's ``re``) can take time polynomial in a line's length on a pattern
with nested or adjacent quantifiers, and ``re`` holds the GIL, so one crafted log line froze every
probe and page (issue 23). Two guards, both here so that every reader shares them: a line longer than
``LINE_CAP`` is cut before any pattern sees it, and a pattern is compiled by RE2 (google-re2), whose
matching time is linear in the text. RE2 has no lookaround and no backreference; a pattern that
needs one cannot be compiled here, which is the point.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias

import re2

# characters: room for any line a pattern reads (an error and its message, a frame, a batch line); the
# rest of a longer line (SGLang's one-line ServerArgs dump, say) is dropped before any pattern sees it
LINE_CAP = 4096

Regex: TypeAlias = re2._Regexp
linear_error = re2.error  # what ``linear`` raises for a pattern RE2 refuses

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a refused pattern is reported by the caller, not printed by RE2


def linear(pattern: str) -> Regex:
    """``pattern`` compiled by RE2 (matching time linear in the text); ``re2.error`` if it needs backtracking."""
    return re2.compile(pattern, _OPTIONS)


def refusal(exc: Exception) -> str:
    """RE2's reason for refusing a pattern, as text (it gives bytes)."""
    reason = exc.args[0] if exc.args else exc
    return reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)


def linear_set(patterns: Sequence[str]) -> Callable[[str], list[int]]:
    """One RE2 pass over a text telling which of ``patterns`` match in it: their indices, in any order."""
    compiled = re2.Set.SearchSet(_OPTIONS)
    for pattern in patterns:
        compiled.Add(pattern)
    compiled.Compile()
    return compiled.Match


def capped(line: str) -> str:
    """``line`` cut to ``LINE_CAP`` characters, with any lone surrogate (not UTF-8) replaced for RE2."""
    line = line[:LINE_CAP]
    if not line.isascii():
        line = line.encode("utf-8", "replace").decode("utf-8")
    return line


def capped_lines(raw: str) -> list[str]:
    """Every line of ``raw``, each ``capped``: what a log reader iterates over."""
    return [capped(line) for line in raw.splitlines()]
