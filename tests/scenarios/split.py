"""The corpus split: every bundle goes to ``dev/`` or ``test/`` by a hash of its thread's URL, or to
``holdout/`` when its thread was opened on or after ``CUTOFF``.

The split is made once and never by hand: ``part(source, opened)`` is ``holdout/`` for a thread
opened on or after 2026-06-01 (``label.opened``, the date the thread's page shows for its opening),
else the first byte of sha256(label.source) (< 0.7 * 256 → dev), so all bundles of one thread land
in the same part and a new bundle's part is known before anyone looks at it. Lab-captured bundles
have no thread; they are the lab's, not the field's, and always go to ``dev/``. Runbooks, patterns
and the exception table are written looking at ``dev/`` only; ``test/`` measures how the rules
generalize; ``holdout/`` is read once, at the end of the issue that added it (issue 24).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import date
from pathlib import Path

ROOT = Path(__file__).parent
DEV, TEST, HOLDOUT = ROOT / "dev", ROOT / "test", ROOT / "holdout"
PARTS = ("dev", "test", "holdout")
DEV_SHARE = 0.7
CUTOFF = date(2026, 6, 1)  # threads opened on or after this day go to holdout/, whatever their hash


def part(source: str, opened: str | None = None) -> Path:
    """The folder a bundle citing ``source`` belongs in; ``opened`` is the thread's opening date (ISO)."""
    if opened is not None and date.fromisoformat(opened) >= CUTOFF:
        return HOLDOUT
    return DEV if hashlib.sha256(source.encode("utf-8")).digest()[0] < int(DEV_SHARE * 256) else TEST


def write(scenarios: dict[str, Callable[[], dict]]) -> list[Path]:
    """Write each scenario's bundle as ``<part>/<name>.json``, the part chosen by its label's source."""
    paths = []
    for name, build in scenarios.items():
        data = build()
        label = data["label"]
        # a holdout thread opened before the cut-off, taken only because too few after it were found
        out = HOLDOUT if label.get("holdout_reason") else part(label["source"], label.get("opened"))
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{name}.json"
        path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def table() -> str:
    """The README's tables: bundles per class and part, then thread → bundles → class."""
    rows: dict[tuple[str, str], list[tuple[str, str]]] = {}
    counts: dict[str, dict[str, int]] = {}
    for path in sorted(ROOT.glob("*/*.json")):
        if path.parent.name not in PARTS:  # holdout2/ (holdout2.py) joins the table when the lead wires it in
            continue
        label = json.loads(path.read_text(encoding="utf-8"))["label"]
        rows.setdefault((path.parent.name, label["source"]), []).append((path.stem, label["expected"]))
        per = counts.setdefault(label["expected"], dict.fromkeys(PARTS, 0))
        per[path.parent.name] += 1
    threads = {part: len({s for (p, s) in rows if p == part and s.startswith("http")}) for part in PARTS}
    out = ["| class | " + " | ".join(PARTS) + " |", "|---|---|---|---|"]
    out += [f"| `{c}` | " + " | ".join(str(n[p]) for p in PARTS) + " |" for c, n in sorted(counts.items())]
    out += ["| all bundles | " + " | ".join(str(sum(n[p] for n in counts.values())) for p in PARTS) + " |",
            "| public threads | " + " | ".join(str(threads[p]) for p in PARTS) + " |", ""]
    out += ["| part | thread | bundle | class |", "|---|---|---|---|"]
    for (where, source), bundles in sorted(rows.items()):
        for stem, expected in bundles:
            out.append(f"| {where} | {source} | `{stem}` | `{expected}` |")
    return "\n".join(out)


if __name__ == "__main__":
    print(table())
