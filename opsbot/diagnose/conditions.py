"""CEL conditions over facts, evaluated by ``common-expression-language`` (never ``eval``).

CEL's ``&&`` and ``||`` absorb errors (``false && error`` is false), which is exactly the
three-valued logic a probe needs: a condition that still depends on a fact that could not be
collected comes out *unknown*, and the outcome names the missing facts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from opsbot.diagnose.celengine import cel

_STRING = re.compile(r"""[rRbB]{0,2}(?:'''.*?'''|\"\"\".*?\"\"\"|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')""", re.S)
_CHAIN = re.compile(r"(?<![\w.])([A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*)(\s*\()?")
_MACRO_VAR = re.compile(r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_]\w*)\s*,")
_HAS = re.compile(r"\bhas\s*\(\s*([A-Za-z_][\w.]*)\s*\)")
_WORDS = frozenset({"true", "false", "null", "in"})


class ConditionError(ValueError):
    """A condition that CEL refuses to compile."""


def fact_paths(expr: str) -> tuple[str, ...]:
    """The dotted fact names an expression reads, e.g. ``metrics.num_running_reqs``."""
    code = _STRING.sub('""', expr)
    bound = set(_MACRO_VAR.findall(code))
    out: list[str] = []
    for m in _CHAIN.finditer(code):
        parts = [p.strip() for p in m.group(1).split(".")]
        if m.group(2):  # a call: the last name is a function or method
            parts = parts[:-1]
        if not parts or parts[0] in _WORDS or parts[0] in bound:
            continue
        path = ".".join(parts)
        if path not in out:
            out.append(path)
    return tuple(out)


def lookup(facts: dict[str, Any], path: str) -> tuple[bool, Any]:
    """(found, value) of a dotted fact name in nested fact maps."""
    node: Any = facts
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


@dataclass(frozen=True)
class Outcome:
    """``value`` is True, False, or None for unknown; ``missing`` names the facts not collected."""

    value: bool | None
    missing: tuple[str, ...] = ()
    error: str | None = None
    used: dict[str, Any] = field(default_factory=dict)


class Condition:
    """A compiled CEL condition and the facts it reads."""

    def __init__(self, expr: str):
        self.expr = expr
        try:
            self.program  # noqa: B018 - compiled now: a condition CEL refuses is refused at load
        except (ValueError, RuntimeError) as exc:
            raise ConditionError(f"CEL does not compile: {exc}") from exc
        self.facts = fact_paths(expr)
        self.guarded = frozenset(_HAS.findall(_STRING.sub('""', expr)))  # has(x) asks, so x may be absent

    @cached_property
    def program(self) -> cel.Program:
        return cel.compile(self.expr)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the compiled program (CEL's cannot be pickled): compiled again on first use."""
        return {k: v for k, v in self.__dict__.items() if k not in ("program", "_split_paths")}

    def _paths(self, needs: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The fact names to look up (the condition's, then ``needs``), each with its parts: split once per ``needs``."""
        known: dict[tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]] = self.__dict__.setdefault("_split_paths", {})
        paths = known.get(needs)
        if paths is None:
            paths = known[needs] = tuple((path, tuple(path.split("."))) for path in dict.fromkeys(self.facts + needs))
        return paths

    def evaluate(self, context: cel.Context, facts: dict[str, Any], needs: tuple[str, ...] = ()) -> Outcome:
        used, missing = {}, []
        for path, parts in self._paths(tuple(needs)):
            node: Any = facts
            for part in parts:  # as lookup(facts, path)
                if not isinstance(node, dict) or part not in node:
                    break
                node = node[part]
            else:
                used[path] = node
                continue
            if path not in self.guarded:
                missing.append(path)
        if any(n in missing for n in needs):
            return Outcome(None, tuple(missing), None, used)
        try:
            result = self.program.execute(context)
        except (KeyError, RuntimeError, TypeError, ValueError) as exc:
            if missing:
                return Outcome(None, tuple(missing), None, used)
            return Outcome(None, (), f"{type(exc).__name__}: {exc}", used)
        if not isinstance(result, bool):
            return Outcome(None, tuple(missing), f"condition gave {type(result).__name__}, not a bool", used)
        return Outcome(result, tuple(missing), None, used)
