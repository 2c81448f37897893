"""The corpus split: every bundle goes to ``dev/`` or ``test/`` by a hash of its thread's URL.

The split is made once and never by hand: ``part(source)`` is the first byte of
sha256(label.source) (< 0.7 * 256 → dev), so all bundles of one thread land in the same part and
a new bundle's part is known before anyone looks at it. Lab-captured bundles have no thread; they
are the lab's, not the field's, and always go to ``dev/``. Runbooks, patterns and the exception
table are written looking at ``dev/`` only; ``test/`` measures how the rules generalize.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).parent
DEV, TEST = ROOT / "dev", ROOT / "test"
DEV_SHARE = 0.7


def part(source: str) -> Path:
    """The folder a bundle citing ``source`` belongs in."""
    return DEV if hashlib.sha256(source.encode("utf-8")).digest()[0] < int(DEV_SHARE * 256) else TEST


def write(scenarios: dict[str, Callable[[], dict]]) -> list[Path]:
    """Write each scenario's bundle as ``<part>/<name>.json``, the part chosen by its label's source."""
    paths = []
    for name, build in scenarios.items():
        data = build()
        out = part(data["label"]["source"])
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
        label = json.loads(path.read_text(encoding="utf-8"))["label"]
        rows.setdefault((path.parent.name, label["source"]), []).append((path.stem, label["expected"]))
        per = counts.setdefault(label["expected"], {"dev": 0, "test": 0})
        per[path.parent.name] += 1
    threads = {part: len({s for (p, s) in rows if p == part and s.startswith("http")}) for part in ("dev", "test")}
    out = ["| class | dev | test |", "|---|---|---|"]
    out += [f"| `{c}` | {n['dev']} | {n['test']} |" for c, n in sorted(counts.items())]
    out += [f"| all bundles | {sum(n['dev'] for n in counts.values())} | {sum(n['test'] for n in counts.values())} |",
            f"| public threads | {threads['dev']} | {threads['test']} |", ""]
    out += ["| part | thread | bundle | class |", "|---|---|---|---|"]
    for (where, source), bundles in sorted(rows.items()):
        for stem, expected in bundles:
            out.append(f"| {where} | {source} | `{stem}` | `{expected}` |")
    return "\n".join(out)


if __name__ == "__main__":
    print(table())
