"""Long-context recall, judged: answers against needles, the grid, where recall ends, and its facts.

Pure functions of a bundle's ``recall`` section (spec/probe-bundle-v1.md) and ``canary`` section.
The shape of a loss tells the classes apart (spec/incidents.md, long-context-recall-regression):

- ``threshold``: every needle found up to some length, lost at two depths or more at the first
  length that loses any, and mostly lost (at least half) at every longer length;
- ``flat``: lost at every length, the shortest included (a broken prompt or a tokenizer mismatch);
- ``positional``: lost only at depth 0 or 1 (the model's edges, not its context length);
- ``scattered``: losses that fit none of these; ``full``: nothing lost; ``unjudged``: nothing judged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from opsbot.bundle import Canary, Recall, RecallCase
from opsbot.parse.lines import linear

FILLERS = ("prose", "code", "config")
EDGES = (0.0, 1.0)
LOST_MOSTLY = 0.5  # a length counts as lost when at least this share of its judged needles is lost
_LENGTH = linear(r"^\s*(\d+(?:\.\d+)?)\s*([kKmM]?)\s*$")


def parse_lengths(text: str) -> list[int]:
    """``"1k,2k,4k"`` → ``[1024, 2048, 4096]`` (k = 1024 tokens, m = 1024k); sorted, unique."""
    out: set[int] = set()
    for part in text.split(","):
        m = _LENGTH.match(part)
        if not m:
            raise ValueError(f"length {part.strip()!r}: write a token count such as 4096, 4k or 1m")
        value = float(m[1]) * {"": 1, "k": 1024, "m": 1024 * 1024}[m[2].lower()]
        if value < 64 or value != int(value):
            raise ValueError(f"length {part.strip()!r}: a whole number of tokens, at least 64")
        out.add(int(value))
    return sorted(out)


def parse_depths(text: str) -> list[float]:
    """``"0,0.5,1"`` → depths in [0, 1], sorted and unique."""
    out: set[float] = set()
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"depth {part.strip()!r}: write a number from 0 (start) to 1 (end)") from None
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"depth {part.strip()!r}: a depth is from 0 (start) to 1 (end)")
        out.add(value)
    return sorted(out)


def parse_fillers(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    bad = [n for n in names if n not in FILLERS]
    if bad or not names:
        raise ValueError(f"filler {', '.join(bad) or text!r}: choose from {', '.join(FILLERS)}")
    return list(dict.fromkeys(names))


def short_length(tokens: int) -> str:
    """4096 → ``4k``; 1536 → ``1536``."""
    if tokens % (1024 * 1024) == 0:
        return f"{tokens // (1024 * 1024)}m"
    return f"{tokens // 1024}k" if tokens % 1024 == 0 else str(tokens)


def judge(answer: str, value: str) -> bool:
    """Whether ``answer`` holds the needle's value as a whole word (``4821`` is not in ``948213``)."""
    return re.search(rf"(?<![0-9A-Za-z]){re.escape(value)}(?![0-9A-Za-z])", answer) is not None


@dataclass(frozen=True)
class LengthRow:
    tokens: int
    found: int
    lost: int
    errors: int

    @property
    def judged(self) -> int:
        return self.found + self.lost

    @property
    def lost_share(self) -> float:
        return self.lost / self.judged if self.judged else 0.0


@dataclass(frozen=True)
class RecallSummary:
    rows: list[LengthRow]
    depths: list[float]
    pattern: str
    threshold: int | None = None  # the first length that lost a needle, after full recall below it
    longest_full: int | None = None  # the longest length up to which every judged needle was found
    lost_depths: list[float] = field(default_factory=list)

    @property
    def judged(self) -> int:
        return sum(r.judged for r in self.rows)

    @property
    def found(self) -> int:
        return sum(r.found for r in self.rows)

    @property
    def errors(self) -> int:
        return sum(r.errors for r in self.rows)


def _rows(cases: list[RecallCase]) -> list[LengthRow]:
    lengths = sorted({c.tokens for c in cases})
    return [
        LengthRow(
            tokens=n,
            found=sum(1 for c in cases if c.tokens == n and c.error is None and c.found is True),
            lost=sum(1 for c in cases if c.tokens == n and c.error is None and c.found is False),
            errors=sum(1 for c in cases if c.tokens == n and (c.error is not None or c.found is None)),
        )
        for n in lengths
    ]


def _pattern(rows: list[LengthRow], lost: list[RecallCase]) -> str:
    judged = [r for r in rows if r.judged]
    if not judged:
        return "unjudged"
    if not lost:
        return "full"
    if all(c.depth in EDGES for c in lost):
        return "positional"
    if judged[0].lost:
        return "flat" if all(r.lost_share >= LOST_MOSTLY for r in judged) else "scattered"
    first = next(i for i, r in enumerate(judged) if r.lost)
    edge, beyond = judged[first], judged[first + 1:]  # the edge may be blurred; beyond it, mostly lost
    if edge.lost >= min(2, edge.judged) and all(r.lost_share >= LOST_MOSTLY for r in beyond):
        return "threshold"
    return "scattered"


def summarize(recall: Recall) -> RecallSummary:
    """The per-length table and the shape of the loss."""
    cases = recall.cases
    rows = _rows(cases)
    lost = [c for c in cases if c.error is None and c.found is False]
    pattern = _pattern(rows, lost)
    longest_full = threshold = None
    for r in (r for r in rows if r.judged):
        if r.lost:
            threshold = r.tokens if longest_full is not None else None
            break
        longest_full = r.tokens
    return RecallSummary(
        rows=rows, depths=sorted({c.depth for c in cases}), pattern=pattern, threshold=threshold,
        longest_full=longest_full, lost_depths=sorted({c.depth for c in lost}),
    )


def grid(recall: Recall) -> tuple[list[int], list[float], dict[tuple[int, float], str]]:
    """Lengths × depths → ``found``, ``lost``, ``error`` or ``mixed`` (several fillers disagree)."""
    cells: dict[tuple[int, float], set[str]] = {}
    for c in recall.cases:
        mark = "error" if c.error is not None or c.found is None else ("found" if c.found else "lost")
        cells.setdefault((c.tokens, c.depth), set()).add(mark)
    merged = {k: next(iter(v)) if len(v) == 1 else "mixed" for k, v in cells.items()}
    return sorted({k[0] for k in cells}), sorted({k[1] for k in cells}), merged


def recall_facts(recall: Recall | None) -> dict[str, Any]:
    """The ``recall.*`` facts runbooks read (runbooks/README.md); empty when no recall ran."""
    if recall is None:
        return {}
    s = summarize(recall)
    judged = [r for r in s.rows if r.judged]
    facts: dict[str, Any] = {
        "ran": True,
        "cases": len(recall.cases),
        "judged": s.judged,
        "found": s.found,
        "errors": s.errors,
        "pattern": s.pattern,
        "lengths": [r.tokens for r in s.rows],
        "lost_lengths": [r.tokens for r in judged if r.lost],
        "lost_depths": s.lost_depths,
        "depths": len(s.depths),
        "depths_lost_at_threshold": 0,
    }
    deploy = getattr(recall, "after_deploy", None)
    if isinstance(deploy, str) and deploy:
        facts["after_deploy"] = deploy
    if s.judged:
        facts["found_ratio"] = round(s.found / s.judged, 4)
    if judged:
        facts["shortest"], facts["longest"] = judged[0].tokens, judged[-1].tokens
    if s.longest_full is not None:
        facts["longest_full"] = s.longest_full
    if s.threshold is not None:
        facts["threshold"] = s.threshold
        at = [c for c in recall.cases if c.tokens == s.threshold and c.error is None and c.found is False]
        facts["depths_lost_at_threshold"] = len({c.depth for c in at})
    return facts


def canary_facts(canary: Canary | None) -> dict[str, Any]:
    """The ``canary.*`` facts; empty when the bundle has no canary (older bundles, canary off) or the probe
    did not wait for it (its other axes had already named a class)."""
    if canary is None or canary.not_awaited:
        return {}
    err = (canary.error or "").lower()
    facts: dict[str, Any] = {
        "ok": canary.ok,
        "answered": canary.status is not None,
        "timed_out": canary.status is None and ("no answer within" in err or "timed out" in err or "timeout" in err),
    }
    for name in ("status", "ttft_ms", "total_ms", "tokens"):
        value = getattr(canary, name)
        if value is not None:
            facts[name] = value
    if canary.elapsed_ms is not None:
        facts["elapsed_ms"] = canary.elapsed_ms
    return facts


RECALL_FACTS = frozenset(
    "ran cases judged found errors pattern lengths lost_lengths lost_depths depths depths_lost_at_threshold "
    "found_ratio shortest longest longest_full threshold after_deploy".split()
)
# no_worker: set by parse.facts (it reads the router's own words from the runbooks' patterns)
CANARY_FACTS = frozenset("ok answered timed_out status ttft_ms total_ms tokens elapsed_ms no_worker".split())


def run_record(recall: Recall) -> dict[str, Any]:
    """What the store keeps beside the bundle for trends: the run's outcome in a few numbers."""
    s = summarize(recall)
    return {
        "pattern": s.pattern, "judged": s.judged, "found": s.found, "errors": s.errors,
        "longest_full": s.longest_full, "threshold": s.threshold,
        "longest": max((r.tokens for r in s.rows), default=None), "model": recall.model,
    }


def failed_run(record: dict[str, Any]) -> bool:
    """A run that lost needles, or could not judge any of them."""
    return record.get("pattern") not in ("full",)


def worse(record: dict[str, Any], good: dict[str, Any] | None) -> bool:
    """Whether a run recalls less than the last good one: a shorter full-recall length, or a loss where it had none."""
    if good is None:
        return failed_run(record) and record.get("pattern") != "unjudged"
    mine, theirs = record.get("longest_full") or 0, good.get("longest_full") or 0
    return mine < theirs or (failed_run(record) and record.get("pattern") != "unjudged" and not failed_run(good))
