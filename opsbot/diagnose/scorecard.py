"""How diagnosis scores on labelled bundles (tests/scenarios/README.md): top-1 and top-3 per class,
the confusion table, and unsafe advice, for ``opsbot eval DIR`` and the corpus tests. Pure."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from opsbot.contracts.findings import Diagnosis

HEALTHY = "healthy"
UNKNOWN = "unknown"  # no finding, but a role's evidence could not be read: not an all-clear
ANY_FINDING = "any-finding"  # a real failure of no known class: any finding on top is right, healthy is not


@dataclass(frozen=True)
class Case:
    """One labelled bundle and what diagnosis said about it."""

    name: str
    expected: str
    found: tuple[str, ...]  # incident ids, most likely first; () = healthy
    restarts: tuple[str, ...] = ()  # incident ids of findings that advise a restart
    also: frozenset[str] = frozenset()
    must_not: frozenset[str] = frozenset()

    @property
    def top(self) -> str:
        return self.found[0] if self.found else HEALTHY

    @property
    def top1(self) -> bool:
        if self.expected == ANY_FINDING:
            return self.top not in (HEALTHY, UNKNOWN)
        return self.top == self.expected

    @property
    def top3(self) -> bool:
        return self.top1 if self.expected in (HEALTHY, ANY_FINDING) else self.expected in self.found[:3]

    @property
    def false_all_clear(self) -> bool:
        """A broken bundle answered healthy: the worst answer an ops bot can give."""
        return self.expected != HEALTHY and self.top == HEALTHY

    def miss(self) -> str | None:
        """Why the diagnosis is not the label's (the corpus test's strict reading), or None."""
        if self.expected == HEALTHY:
            return f"expected healthy, got {list(self.found)}" if self.found else None
        if self.expected == ANY_FINDING:
            return None if self.top1 else f"expected a finding, got {list(self.found) or [HEALTHY]}"
        if not self.top1:
            return f"expected {self.expected} first, got {list(self.found)}"
        extra = set(self.found) - {self.expected} - self.also
        if extra:
            return f"unexpected extra findings {sorted(extra)}"
        if self.must_not & set(self.found):
            return f"must not report {sorted(self.must_not & set(self.found))}"
        return None


def case_from(name: str, label: dict[str, Any], d: Diagnosis) -> Case:
    """``found`` is the findings' classes, or ``("unknown",)`` when there is none but a role is not
    healthy on its evidence (an answer that is not an all-clear)."""
    return Case(
        name=name,
        expected=str(label.get("expected", "")),
        found=tuple(f.incident for f in d.findings) or (() if d.healthy else (UNKNOWN,)),
        restarts=tuple(f.incident for f in d.findings if any(r.kind == "restart" for r in f.remedies)),
        also=frozenset(label.get("also", [])),
        must_not=frozenset(label.get("must_not", [])),
    )


@dataclass
class Score:
    """The figures of one part of a corpus."""

    part: str
    cases: list[Case] = field(default_factory=list)
    no_restart: frozenset[str] = frozenset()  # classes whose runbook says a restart cannot help

    @property
    def top1(self) -> float:
        return sum(c.top1 for c in self.cases) / len(self.cases) if self.cases else 0.0

    @property
    def top3(self) -> float:
        return sum(c.top3 for c in self.cases) / len(self.cases) if self.cases else 0.0

    def false_all_clear(self) -> list[Case]:
        return [c for c in self.cases if c.false_all_clear]

    def unsafe(self) -> list[Case]:
        """Bundles where a restart is advised on a healthy bundle or where the class says it cannot help."""
        return [c for c in self.cases
                if c.restarts and (c.expected in (HEALTHY, ANY_FINDING, UNKNOWN) or c.expected in self.no_restart)]

    def per_class(self) -> dict[str, tuple[int, int, int]]:
        """class → (bundles, top-1 hits, top-3 hits)."""
        out: dict[str, list[int]] = {}
        for c in self.cases:
            row = out.setdefault(c.expected, [0, 0, 0])
            row[0] += 1
            row[1] += c.top1
            row[2] += c.top3
        return {k: (v[0], v[1], v[2]) for k, v in sorted(out.items())}

    def confusion(self) -> Counter[tuple[str, str]]:
        return Counter((c.expected, c.top) for c in self.cases)


def confusion_lines(score: Score) -> list[str]:
    """The confusion table as text: rows are the labels, columns the top finding (column n = row n)."""
    matrix = score.confusion()
    classes = sorted({e for e, _ in matrix} | {p for _, p in matrix})
    if not classes:
        return []
    width = max(len(c) for c in classes) + 5
    lines = [f"{score.part}: expected \\ top finding".ljust(width) + " ".join(f"{i:>3}" for i in range(len(classes)))]
    for i, e in enumerate(classes):
        lines.append(f"{i:>2}. {e}".ljust(width) + " ".join(f"{matrix.get((e, p), 0) or '.':>3}" for p in classes))
    return lines


def summary_lines(score: Score) -> list[str]:
    """Per class top-1/top-3, then the part's totals and its unsafe advice count."""
    lines = [f"{score.part}: class".ljust(32) + "bundles  top-1   top-3"]
    for cls, (n, t1, t3) in score.per_class().items():
        lines.append(f"  {cls}".ljust(32) + f"{n:>7}  {t1 / n:>5.0%}  {t3 / n:>6.0%}")
    lines.append(
        f"{score.part}: {len(score.cases)} bundles, top-1 {score.top1:.1%}, top-3 {score.top3:.1%}, "
        f"false all-clear {len(score.false_all_clear())}, unsafe advice {len(score.unsafe())}"
    )
    return lines
