"""What a role's logs say that they never said while it was healthy (issue 24: "what differs from the role's
own recent healthy probes").

Each line of a role's current run is reduced to a template (numbers, ids, hex, paths, quoted values and
addresses masked), and the template to a short hash. The store keeps, per cluster and role, the templates
seen in probes whose verdict on that role was healthy (only healthy probes teach); the flow reads them
before diagnosing and passes them in as a ``RoleHistory``. A role that is not healthy then says which of
its lines have templates never seen on it while healthy: strong evidence of what changed. Pure: no clock,
no store; a bundle diagnosed offline has no history and gets none of this.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from opsbot.parse.lines import linear
from opsbot.parse.logs import LogEntry

TEMPLATE_CAP = 200  # characters of a template kept (and hashed)
MIN_HEALTHY_PROBES = 3  # healthy probes of a role before its templates are compared with
FIRST_NEW = 3  # lines shown of the templates new since healthy
LINE_SHOWN = 160  # characters of each line shown
TEMPLATES_PER_PROBE = 400  # at most this many templates of one role are taken from one probe

# Masked, in this order of preference at a position: a quoted value, a path, any token that holds a digit (a
# number, a request id, an address, "TP3", "0x7f3a"; not across ":" or "=", so "rid=" and "port:" stay), a hex
# id in letters only ("deadbeefcafe"). None of them tells one digit, or one length of a run of digits, from
# another, so a line's template is its ``_shape``'s: that is what is cached (batch lines come in a few shapes).
# RE2: linear.
_MASK = linear(r"'[^']*'|\"[^\"]*\"|(?:/[\w.+-]+)+/?|[\pL\pN_.@#%+-]*\pN[\pL\pN_.@#%+-]*|\b[0-9a-fA-F]{8,}\b")
_RUNS = linear(r"<\*>(?:[\s,;|]*<\*>)+")  # a list of masked values is one value, whatever its length
_ZERO = str.maketrans("123456789", "000000000")
# C0 and C1 control characters and DEL: shown escaped, never passed to a terminal, Slack or PostgreSQL (NUL)
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}


def visible(text: str) -> str:
    """``text`` with control characters written as ``\\xNN``: safe on a terminal, in Slack and in a database."""
    return text.translate(_CONTROL)


def _shape(text: str) -> str:
    """``text`` with each run of ASCII digits written as one ``0``: lines that differ only in their numbers."""
    text = text.translate(_ZERO)
    while "00" in text:
        text = text.replace("00", "0")
    return text


def _masked(m: object) -> str:
    return "<*>"


@lru_cache(maxsize=4096)
def _template(shape: str) -> tuple[str, str]:
    """(template, key) of a shape: masked, lists of masked values as one, spaces collapsed, control characters
    escaped, capped."""
    t = visible(" ".join(_RUNS.sub(_masked, _MASK.sub(_masked, shape)).split()))[:TEMPLATE_CAP]
    return t, template_key(t)


def line_template(message: str) -> str:
    """A log message's template: variable parts masked (``<*>``), spaces collapsed, control characters
    escaped, capped at ``TEMPLATE_CAP`` characters; repeats of one message give one template."""
    return _template(_shape(message[:2 * TEMPLATE_CAP]))[0]


def template_key(template: str) -> str:
    """The template's hash as the store keys it: 32 hex characters."""
    return hashlib.blake2b(template.encode("utf-8", "replace"), digest_size=16).hexdigest()


@dataclass(frozen=True)
class RoleHistory:
    """What the store knows of one role while it was healthy: how many healthy probes taught it, and the
    keys of the templates seen in them (at most the store's cap, the most recently seen)."""

    healthy_probes: int = 0
    keys: frozenset[str] = frozenset()


def role_templates(entries: Iterable[LogEntry]) -> dict[str, tuple[str, str]]:
    """Each distinct template of ``entries``, in order of first appearance: key → (template, its first line);
    at most ``TEMPLATES_PER_PROBE`` of them (a flood of distinct lines teaches no more than that)."""
    out: dict[str, tuple[str, str]] = {}
    for e in entries:
        t, key = _template(_shape(e.message[:2 * TEMPLATE_CAP]))
        if not t:
            continue
        if key not in out:
            if len(out) >= TEMPLATES_PER_PROBE:
                break
            out[key] = (t, e.message)
    return out


_FRAME = linear(r'^(?:\s|File "|Traceback \(most recent call last\))')


def _frame(line: str) -> bool:
    """A traceback's frame, code or header line: shown after the lines that say something (its exception)."""
    return _FRAME.search(line) is not None


def since_healthy(role: str, seen: Mapping[str, tuple[str, str]], history: RoleHistory) -> str:
    """One line for a role that is not healthy: its lines whose templates were never seen on it while it was
    healthy (how many, the first few: traceback frames after the lines that say something), or that it has
    too little healthy history to tell."""
    if history.healthy_probes < MIN_HEALTHY_PROBES:
        return (f"no healthy history yet: {history.healthy_probes} healthy probe(s) of {visible(role)} recorded, "
                f"{MIN_HEALTHY_PROBES} needed to compare its log lines with")
    new = sorted((line for key, (_t, line) in seen.items() if key not in history.keys), key=_frame)  # stable
    if not new:
        return (f"new since healthy: none: every log line of this run has a template seen on {visible(role)} "
                f"while healthy ({history.healthy_probes} healthy probes)")
    shown = " | ".join(visible(line.strip()[:LINE_SHOWN]) for line in new[:FIRST_NEW])
    more = f" (first {FIRST_NEW})" if len(new) > FIRST_NEW else ""
    return (f"new since healthy: {len(new)} template(s) never seen on {visible(role)} while healthy "
            f"({history.healthy_probes} healthy probes){more}: {shown}")


def with_history(verdict: dict[str, Any], role: str, history: RoleHistory | None) -> dict[str, Any]:
    """``verdict`` with ``since_healthy`` said when the role is not healthy and its history was given."""
    if history is None or verdict.get("state") == "healthy":
        return verdict
    return {**verdict, "since_healthy": since_healthy(role, verdict.get("templates", {}), history)}
