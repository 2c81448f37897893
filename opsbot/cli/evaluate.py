"""``opsbot eval DIR``: score diagnosis on labelled bundles, part by part (dev/, test/, ...)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from opsbot.datafiles import data_dir

if TYPE_CHECKING:
    from opsbot.diagnose import RunbookSet
    from opsbot.diagnose.scorecard import Score


def parts(directory: Path) -> dict[str, list[Path]]:
    """The labelled bundles of ``directory``: its own files as one part, each sub-folder as another."""
    out: dict[str, list[Path]] = {}
    own = sorted(directory.glob("*.json"))
    if own:
        out[f"{directory.name or directory}/"] = own
    for sub in sorted(p for p in directory.iterdir() if p.is_dir()):
        files = sorted(sub.rglob("*.json"))
        if files:
            out[f"{sub.name}/"] = files
    return out


def no_restart_classes(rs: RunbookSet) -> frozenset[str]:
    """Classes whose runbook says a restart cannot help (a ``no-restart`` remedy, whatever the facts)."""
    return frozenset(rb.id for rb in rs.runbooks if any(r.kind == "no-restart" and not r.when for r in rb.spec.remedies))


def score_part(name: str, files: list[Path], rs: RunbookSet) -> tuple[Score, list[str]]:
    """Diagnose every labelled bundle of a part; files that are not labelled bundles are listed."""
    from opsbot.bundle import BundleError, parse_bundle
    from opsbot.diagnose import diagnose
    from opsbot.diagnose.scorecard import Score, case_from

    score, skipped = Score(name, no_restart=no_restart_classes(rs)), []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
            label = json.loads(text).get("label")
            if not isinstance(label, dict) or not label.get("expected"):
                skipped.append(f"{path}: no label.expected")
                continue
            score.cases.append(case_from(path.stem, label, diagnose(parse_bundle(text, str(path)), rs)))
        except (OSError, UnicodeDecodeError, ValueError, BundleError) as exc:
            skipped.append(f"{path}: {exc}")
    return score, skipped


def eval_cmd(
    directory: Path = typer.Argument(..., help="a folder of labelled bundles, e.g. tests/scenarios"),
    misses: bool = typer.Option(False, "--misses", help="also list each bundle not diagnosed as labelled"),
    runbooks: Path | None = typer.Option(None, "--runbooks", help="runbook directory (default: the runbooks opsbot ships)"),
) -> None:
    """Top-1 and top-3 per class, the confusion table, false all-clears and unsafe advice for each part of DIR.

    False all-clear: a broken bundle answered healthy. Unsafe advice: a restart advised on a healthy
    bundle, on a failure of no known class (``any-finding``), or where the labelled class's runbook
    says a restart cannot help. A label ``expected: any-finding`` is right when any finding is on top.
    Exit status 1 when any part has a false all-clear or unsafe advice, 2 on bad input.
    """
    if not directory.is_dir():
        typer.echo(f"error: {directory}: not a folder of labelled bundles", err=True)
        raise typer.Exit(2)
    from opsbot.diagnose import load_runbooks
    from opsbot.diagnose.scorecard import confusion_lines, summary_lines

    rs = load_runbooks(runbooks or data_dir("runbooks"))
    found = parts(directory)
    if not found:
        typer.echo(f"error: {directory}: no *.json bundles in it or its sub-folders", err=True)
        raise typer.Exit(2)
    unsafe = 0
    for name, files in found.items():
        score, skipped = score_part(name, files, rs)
        typer.echo("\n".join(summary_lines(score) + confusion_lines(score)) + "\n")
        for c in score.unsafe():
            typer.echo(f"  unsafe: {name}{c.name}: restart advised by {', '.join(c.restarts)} (labelled {c.expected})")
        for c in score.false_all_clear():
            typer.echo(f"  false all-clear: {name}{c.name}: answered healthy (labelled {c.expected})")
        if misses:
            for c in score.cases:
                why = c.miss()
                if why:
                    typer.echo(f"  miss: {name}{c.name}: {why}")
        for s in skipped:
            typer.echo(f"  skipped: {s}", err=True)
        unsafe += len(score.unsafe()) + len(score.false_all_clear())
    raise typer.Exit(1 if unsafe else 0)
