"""Every pattern that reads a log line, a probe's evidence or an operator's words takes linear time.

Issue 23: ``_CRASH_FRAME`` was cubic on ``1 /`` + many ``(`` (4,000 characters froze a probe for
7.9 s), the ``native`` kind and ``_TRACEBACK`` quadratic, ``_norm`` quadratic on a run of dots; Python's
``re`` holds the GIL, so one line froze the service. Each compiled pattern of ``runbooks/patterns.yaml``,
``opsbot/parse/`` and ``opsbot/chat/`` is fed 50,000-character adversarial strings (runs of every
character and class the pattern uses, its own words repeated, nested brackets, long tokens) and must
answer ``search`` and ``match`` within 50 ms each. Lines are also cut to ``LINE_CAP`` before any
pattern sees them: a property test checks every reader does so.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import opsbot.chat
import opsbot.parse
from opsbot.collect.axes import _filter_lines
from opsbot.diagnose.runbook import load_patterns
from opsbot.parse.kernel import parse_xid
from opsbot.parse.lines import LINE_CAP, Regex, capped_lines, linear
from opsbot.parse.logs import LOG_FILTER, LOG_KINDS, parse_log_lines

N = 50_000
BUDGET_S = 0.050
RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"
# Patterns left to Python's re (short, frequent inputs where RE2's call costs ~10x, or whole metrics bodies),
# each linear as written (anchored, adjacent repeats over disjoint characters); the same budget holds for them.
STDLIB_RE = {"opsbot.parse.logs._JOURNAL", "opsbot.parse.logs._SGLANG", "opsbot.parse.facts._UNREAD", "opsbot.parse.gpu._NUMBER",
             "opsbot.parse.metrics._NAME", "opsbot.parse.metrics._WORD", "opsbot.parse.metrics._HEADER", "opsbot.parse.metrics._ODD",
             "opsbot.parse.metrics._PLAIN_FAMILY", "opsbot.parse.metrics._PLAIN_FAMILIES"}


def _compiled(value: object) -> list[re.Pattern[str] | Regex]:
    if isinstance(value, (re.Pattern, Regex)):
        return [value]
    if isinstance(value, tuple):
        return [p for item in value for p in _compiled(item)]
    return []


def every_pattern() -> dict[str, re.Pattern[str] | Regex]:
    """Module-level patterns of opsbot.parse and opsbot.chat (tuples of them too), the node filter,
    and the named patterns of runbooks/patterns.yaml (``unless`` included)."""
    out: dict[str, re.Pattern[str] | Regex] = {}
    for pkg in (opsbot.parse, opsbot.chat):
        for info in pkgutil.iter_modules(pkg.__path__):
            module = importlib.import_module(f"{pkg.__name__}.{info.name}")
            for name, value in vars(module).items():
                for i, p in enumerate(_compiled(value)):
                    out[f"{module.__name__}.{name}" + (f"[{i}]" if isinstance(value, tuple) else "")] = p
    out["LOG_FILTER"] = linear(LOG_FILTER)
    out.update({f"LOG_KINDS.{kind}": linear(pattern) for kind, pattern in LOG_KINDS})  # classify's RE2 set
    patterns, problems = load_patterns(RUNBOOKS / "patterns.yaml")
    assert not problems
    for p in patterns:
        out[f"patterns.yaml:{p.name}"] = p.regex
        if p.unless is not None:
            out[f"patterns.yaml:{p.name}.unless"] = p.unless
    return out


PATTERNS = every_pattern()
CLASSES = "aZ0 _./-:,=()[]{}\"'#\t\\é"  # one of every class a log pattern uses, and a non-ASCII letter


def _alphabet(pattern: str) -> list[str]:
    """Characters and words the pattern itself uses, with one of every common class."""
    chars = {c for c in pattern if c.isprintable()} | set(CLASSES)
    words = set(re.findall(r"[A-Za-z][A-Za-z_ :]{2,}", pattern))
    return sorted(chars) + sorted(words)


def _slowest(p: re.Pattern[str] | Regex, text: str) -> float:
    """The slower of ``search`` and ``match`` on ``text``, best of three when over budget (a busy CI)."""
    worst = 0.0
    for call in (p.search, p.match):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            call(text)
            best = min(best, time.perf_counter() - t0)
            if best <= BUDGET_S:
                break
        worst = max(worst, best)
    return worst


def _fixed_attacks(p: re.Pattern[str] | Regex) -> list[str]:
    """Long runs of every character and word of the alphabet, alone and after each word, and brackets."""
    out = ["(" * (N // 2) + ")" * (N // 2), "[" * (N // 2) + "]" * (N // 2), "{" * (N // 2) + "}" * (N // 2),
           "1 /" + "(" * N, '  File "' + "a" * N, "Traceback " * (N // 10), "a: " * (N // 3), "." * N + "x"]
    alphabet = _alphabet(p.pattern)
    words = [a for a in alphabet if len(a) > 1]
    for a in alphabet:
        out.append((a * (N // len(a) + 1))[:N])
    for w in words:
        out.extend((w + " " + c * N)[:N] for c in "a0 (/.")
    return out


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_no_pattern_is_slow_on_fixed_attacks(name):
    p = PATTERNS[name]
    for text in _fixed_attacks(p):
        took = _slowest(p, text)
        assert took <= BUDGET_S, f"{name} took {took * 1000:.0f} ms on {text[:60]!r}... ({len(text)} chars)"


@st.composite
def attacks(draw, pattern: str) -> str:
    """A 50,000-character string: a short random sequence of the pattern's own pieces, repeated."""
    alphabet = _alphabet(pattern)
    unit = "".join(draw(st.lists(st.sampled_from(alphabet), min_size=1, max_size=6)))
    head = draw(st.sampled_from(["", *alphabet]))
    return (head + unit * (N // len(unit) + 1))[:N]


@pytest.mark.parametrize("name", sorted(PATTERNS))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_no_pattern_is_slow_on_generated_attacks(name, data):
    p = PATTERNS[name]
    text = data.draw(attacks(p.pattern))
    took = _slowest(p, text)
    assert took <= BUDGET_S, f"{name} took {took * 1000:.0f} ms on {text[:60]!r}..."


def test_parse_and_chat_compile_with_re2_only():
    """A pattern added to parse/ or chat/ with ``re.compile`` fails here: it would be backtracking."""
    stdlib = {name for name, p in PATTERNS.items() if isinstance(p, re.Pattern)}
    assert stdlib <= STDLIB_RE, f"compile these with opsbot.parse.lines.linear: {sorted(stdlib - STDLIB_RE)}"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=3 * LINE_CAP), min_size=1, max_size=4))
def test_every_reader_caps_lines(lines):
    raw = "\n".join(lines)
    assert all(len(line) <= LINE_CAP for line in capped_lines(raw))
    assert all(len(e.message) <= LINE_CAP for e in parse_log_lines(raw))
    kept, _ = _filter_lines(raw, linear("."), 1000)
    assert all(len(line) <= LINE_CAP for line in kept.splitlines())
    assert all(len(x.message) <= LINE_CAP for x in parse_xid("NVRM: Xid (PCI:0000:01:00): 79, " + raw))


def test_a_backtracking_pattern_in_patterns_yaml_is_refused_with_its_line(tmp_path):
    spec = tmp_path / "patterns.yaml"
    spec.write_text('patterns:\n  ok:\n    regex: "a+b"\n    source: "x"\n'
                    '  lookahead:\n    regex: "(a+)+(?=b)"\n    source: "x"\n'
                    '  backref:\n    regex: "(a)\\\\1"\n    source: "x"\n')
    patterns, problems = load_patterns(spec)
    assert [p.name for p in patterns] == ["ok"]
    assert [(p.where, p.line) for p in problems] == [("patterns.lookahead", 5), ("patterns.backref", 8)]
    assert all("RE2 syntax" in p.message and "b'" not in p.message for p in problems)


def test_node_filter_does_not_backtrack_on_journald_lines():
    """The node runs LOG_FILTER with PCRE2 (``journalctl --grep``), a backtracking engine, on lines
    journald cuts at LineMax (48K by default); Python's re stands in for it here."""
    node = re.compile(LOG_FILTER)
    k = 48_000
    for text in ("1 /" + "a" * k, "1 /" + "(" * k, " 1 /x" + " " * k, '  File "' + "a" * k, "Traceback " * (k // 10),
                 "[E1203 12:00:00" + "0" * k, "sglang-1 " * (k // 9), "a-1" * (k // 3), "Error" + "." * k):
        took = _slowest(node, text)
        assert took <= 5 * BUDGET_S, f"LOG_FILTER (backtracking) took {took * 1000:.0f} ms on {text[:40]!r}..."
