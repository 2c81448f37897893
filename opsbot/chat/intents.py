"""What an operator's question asks (pure): deterministic intents over the store, else a probe.

``parse_intent("what happened since 02:00")`` → ``Intent("happened", window=Window("since", ...))``;
``resolve`` turns a window into UTC bounds in the operator's time zone, given the time now (no clock
here). Words that match no intent are a probe-and-diagnose request, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time, timedelta, tzinfo
from typing import Literal

from opsbot.parse.lines import linear

IntentKind = Literal["help", "happened", "why-restart", "safe-restart", "incidents", "history", "probe"]
WindowKind = Literal["last-night", "since", "today", "yesterday", "this-week", "last-week", "last"]

HELP: list[tuple[str, str]] = [
    ("what happened last night | since 02:00 | today | this week | in the last 6h",
     "incidents and actions in that window (your time zone)"),
    ("why did decode restart", "the latest restart of the role: who approved it, its evidence and outcome"),
    ("is it safe to restart prefill", "the guards' dry run: cooldown, budget, lock, the prefill/decode pair"),
    ("incidents", "open incidents and the latest resolved ones"),
    ("history decode 24h", "probes, findings, actions and audit entries of a role in a window"),
    ("anything else, e.g. decode is stuck", "probe the roles your words name and diagnose"),
]
DESCRIBE: dict[str, str] = {
    "help": "help", "happened": "what happened", "why-restart": "why a role restarted",
    "safe-restart": "is a restart safe (dry run)", "incidents": "incidents", "history": "history",
    "probe": "probe and diagnose",
}
ROLE_WORD = r"(?P<role>[a-z][a-z0-9-]{0,63})"
_UNITS = {"m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60, "h": 3600, "hr": 3600, "hrs": 3600,
          "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400, "w": 604800, "week": 604800,
          "weeks": 604800}
_AMOUNT = r"(?P<n>\d{1,4})\s*(?P<unit>" + "|".join(sorted(_UNITS, key=len, reverse=True)) + r")\b"
MAX_SPAN = timedelta(days=366)
# An operator's words longer than this are refused before any pattern reads them ("too long").
MAX_TEXT = 2000

# every pattern compiled once, by RE2: matching time is linear in the (bounded) text
_PUNCT = linear(r"[?!.,;]+(\s|$)")
_SINCE = linear(r"\bsince (?P<h>[01]?\d|2[0-3])(?::(?P<m>[0-5]\d))?\s*(?P<ampm>am|pm)?\b")
_LAST = linear(r"\b(?:last|past|in the last|in the past)?\s*" + _AMOUNT)
_WINDOWS = tuple((linear(rf"\b{words}\b"), kind) for words, kind in (
    ("this week", "this-week"), ("last week", "last-week"), ("yesterday", "yesterday"), ("today", "today"),
    ("last day", "last")))
_WHY_RESTART = linear(rf"\bwhy (?:did|was|is|has) (?:the )?{ROLE_WORD} (?:been )?restart")
_SAFE_RESTART = (linear(rf"\b(?:is it |it's |is )?safe to restart (?:the )?{ROLE_WORD}\b"),
                 linear(rf"\bcan (?:i|we) restart (?:the )?{ROLE_WORD}\b"))
_HISTORY = linear(rf"^history(?: (?:of|for))?(?: {ROLE_WORD})?\b")
_NOT_A_ROLE = frozenset({"last", "past", "since"})  # "history last 6h" names a window, not a role
_INCIDENTS = linear(r"(?:list |show |open |recent |the )*incidents?(?: (?:list|open|now))?")
_HAPPENED = linear(r"\bwhat (?:has )?happen(?:ed|s)\b|\bwhat went (?:on|wrong)\b|\bany incidents\b")


class TooLong(ValueError):
    """The operator's words are longer than ``MAX_TEXT``: answered at once, never parsed."""


def bounded(text: str) -> str:
    """``text`` if it is at most ``MAX_TEXT`` characters, else ``TooLong`` saying so."""
    if len(text) > MAX_TEXT:
        raise TooLong(f"too long: {len(text)} characters; ask in at most {MAX_TEXT}")
    return text


@dataclass(frozen=True)
class Window:
    kind: WindowKind
    at: time | None = None  # "since": the local time of day
    span: timedelta | None = None  # "last": how far back

    def describe(self) -> str:
        if self.kind == "since" and self.at is not None:
            return f"since {self.at:%H:%M}"
        if self.kind == "last" and self.span is not None:
            return f"in the last {_span(self.span)}"
        return self.kind.replace("-", " ")


@dataclass(frozen=True)
class Intent:
    kind: IntentKind
    text: str
    role: str | None = None
    window: Window | None = None

    def understood(self) -> str:
        """The line every answer starts with: which intent the words were read as."""
        bits = [DESCRIBE[self.kind]]
        if self.role:
            bits.append(self.role)
        if self.window:
            bits.append(self.window.describe())
        return "understood: " + ", ".join(bits)


def _norm(text: str) -> str:
    return " ".join(_PUNCT.sub(" ", text.lower()).split())


def parse_window(text: str) -> Window | None:
    """The first time window the words name, or None."""
    t = _norm(text)
    if "last night" in t or "overnight" in t or "tonight" in t:
        return Window("last-night")
    if m := _SINCE.search(t):
        hour = int(m["h"])
        if m["ampm"] == "pm" and hour < 12:
            hour += 12
        elif m["ampm"] == "am" and hour == 12:
            hour = 0
        return Window("since", at=time(hour, int(m["m"] or 0)))
    if m := _LAST.search(t):
        span = timedelta(seconds=int(m["n"]) * _UNITS[m["unit"]])
        if timedelta(0) < span <= MAX_SPAN:
            return Window("last", span=span)
    for pattern, kind in _WINDOWS:
        if pattern.search(t):
            return Window(kind, span=timedelta(days=1) if kind == "last" else None)  # type: ignore[arg-type]
    return None


def parse_intent(text: str) -> Intent:
    """The intent of an operator's words; never raises, unknown words are a probe request."""
    t = _norm(text)
    if t in ("", "help", "-h", "--help", "?") or t.startswith("help ") or "what can you do" in t:
        return Intent("help", text)
    if m := _WHY_RESTART.search(t):
        return Intent("why-restart", text, role=m["role"])
    if m := _SAFE_RESTART[0].search(t) or _SAFE_RESTART[1].search(t):
        return Intent("safe-restart", text, role=m["role"])
    if m := _HISTORY.match(t):
        role = m["role"] if m["role"] not in _NOT_A_ROLE else None
        return Intent("history", text, role=role, window=parse_window(t) or Window("last", span=timedelta(days=1)))
    if _INCIDENTS.fullmatch(t):
        return Intent("incidents", text)
    if _HAPPENED.search(t):
        return Intent("happened", text, window=parse_window(t) or Window("last", span=timedelta(days=1)))
    return Intent("probe", text)


def resolve(window: Window, now: datetime, tz: tzinfo) -> tuple[datetime, datetime]:
    """(since, until), aware, for a window read in ``tz`` at ``now`` (aware); since <= until <= now."""
    local = now.astimezone(tz)
    midnight = datetime.combine(local.date(), time(0), tz)
    if window.kind == "last-night":
        since = datetime.combine(local.date() - timedelta(days=1), time(18), tz)  # 18:00 to 09:00
        until = datetime.combine(local.date(), time(9), tz)
    elif window.kind == "since" and window.at is not None:
        since = datetime.combine(local.date(), window.at, tz)
        if since > local:
            since -= timedelta(days=1)
        until = local
    elif window.kind == "today":
        since, until = midnight, local
    elif window.kind == "yesterday":
        since, until = midnight - timedelta(days=1), midnight
    elif window.kind == "this-week":
        since, until = midnight - timedelta(days=local.weekday()), local
    elif window.kind == "last-week":
        this_monday = midnight - timedelta(days=local.weekday())
        since, until = this_monday - timedelta(days=7), this_monday
    else:
        since, until = local - (window.span or timedelta(days=1)), local
    return since.astimezone(now.tzinfo), min(until, local).astimezone(now.tzinfo)


def _span(span: timedelta) -> str:
    s = int(span.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s % size == 0:
            return f"{s // size} {unit}"
    return f"{s} s"
