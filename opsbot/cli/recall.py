"""``opsbot recall``: the long-context needle grid through the router, judged, kept and diagnosed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

if TYPE_CHECKING:
    from rich.table import Table

    from opsbot.bundle import Recall, RecallCase, Trigger
    from opsbot.collect.recall import RecallPlan
    from opsbot.flow import Flow, RecallResult
    from opsbot.settings import Settings

err = Console(stderr=True, soft_wrap=True)
MARKS = {"found": "[green]found[/]", "lost": "[red]lost[/]", "error": "[yellow]error[/]", "mixed": "[magenta]mixed[/]"}


def cost_line(plan: RecallPlan) -> str:
    """What the grid will cost, said before anything is sent."""
    from opsbot.parse.recall import short_length

    return (f"recall grid: {len(plan.lengths)} lengths x {len(plan.depths)} depths x {len(plan.fillers)} filler(s) = "
            f"{plan.cases()} requests, {plan.cost_tokens():,} prompt tokens of prefill "
            f"(longest {short_length(max(plan.lengths))}), at most {plan.concurrency} in flight")


def grid_table(recall: Recall) -> Table:
    from rich.table import Table

    from opsbot.parse.recall import grid, short_length

    lengths, depths, cells = grid(recall)
    table = Table("length", *(f"depth {d:g}" for d in depths), title="needles found / lost")
    for n in lengths:
        table.add_row(short_length(n), *(MARKS.get(cells.get((n, d), ""), "-") for d in depths))
    return table


def summary_line(recall: Recall) -> str:
    from opsbot.parse.recall import short_length, summarize

    s = summarize(recall)
    where = {
        "full": f"every needle found up to {short_length(s.longest_full or 0)}",
        "threshold": f"full recall up to {short_length(s.longest_full or 0)}, needles lost from "
                     f"{short_length(s.threshold or 0)} at every depth",
        "flat": "needles lost at every length, the shortest included (a broken prompt or tokenizer?)",
        "positional": f"needles lost only at the edges (depths {', '.join(f'{d:g}' for d in s.lost_depths)})",
        "scattered": "needles lost here and there, no length threshold",
        "unjudged": "no needle could be judged",
    }[s.pattern]
    unjudged = f"; {s.errors} case(s) could not be judged" if s.errors else ""
    return f"{where} ({s.found}/{s.judged} found{unjudged})"


def run_with_progress(flow: Flow, cluster: str | None, plan: RecallPlan, trigger: Trigger) -> RecallResult:
    """The flow's recall run (recorded, diagnosed, compared) with a progress bar on stderr."""
    import asyncio

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from opsbot.parse.recall import short_length

    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("recall", total=plan.cases())

        def on_case(what: str, case: RecallCase | None) -> None:
            if what == "waiting":
                bar.update(task, description="waiting: the prefill queue is above its limit")
            elif what == "case" and case is not None:
                mark = "error" if case.error else ("found" if case.found else "lost")
                bar.update(task, advance=1, description=f"{short_length(case.tokens)} @ {case.depth:g}: {mark}")

        def on_axis(name: str, status: str) -> None:
            bar.update(task, description=f"probing the roles: {name}")

        return asyncio.run(flow.run_recall(cluster, trigger, plan=plan, progress=on_case, probe_progress=on_axis))


def show_result(result: RecallResult) -> None:
    """The grid, what it means, the tokenizer, the notes, how it compares, and the diagnosis."""
    from opsbot.bundle import Recall
    from opsbot.cli.diagnosis_view import render
    from opsbot.parse.recall import short_length

    recall = result.bundle.recall or Recall()
    out = Console()
    out.print(grid_table(recall))
    out.print(summary_line(recall), markup=False, highlight=False)
    out.print(f"tokenizer: {recall.tokenizer or 'none'}; model: {recall.model}", markup=False, highlight=False)
    for note in recall.notes:
        out.print(f"note: {note}", markup=False, highlight=False)
    good = result.worse_than
    if good is not None:
        out.print(f"[red]worse than the last good run[/] ({good.at:%Y-%m-%d %H:%M} UTC, full recall up to "
                  f"{short_length(good.record.get('longest_full') or 0)})", highlight=False)
    out.print(render(result.diagnosis))


def _plan(s: Settings, lengths: str | None, depths: str | None, fillers: str | None, distractors: int | None,
          model: str | None, concurrency: int | None) -> RecallPlan:
    from opsbot.collect.recall import plan_from
    from opsbot.parse.recall import parse_depths, parse_fillers, parse_lengths

    try:
        return plan_from(
            s, lengths=tuple(parse_lengths(lengths)) if lengths else None,
            depths=tuple(parse_depths(depths)) if depths else None,
            fillers=tuple(parse_fillers(fillers)) if fillers else None,
            distractors=distractors, model=model, concurrency=concurrency)
    except ValueError as exc:
        err.print(f"error: {exc}", style="red", markup=False)
        raise typer.Exit(2) from exc


def recall_command(
    lengths: str = typer.Option(None, "--lengths", help="prompt lengths in the server's tokens, e.g. 1k,2k,4k,8k,16k,32k,64k,128k"),
    depths: str = typer.Option(None, "--depths", help="needle depths, 0 = start, 1 = end, e.g. 0,0.25,0.5,0.75,1"),
    fillers: str = typer.Option(None, "--fillers", help="haystack kinds: prose,code,config"),
    distractors: int = typer.Option(None, "--distractors", min=0, max=64, help="near-miss keys around each needle"),
    cluster: str | None = typer.Option(None, "--cluster", "-c", help="cluster in the inventory"),
    model: str | None = typer.Option(None, "--model", help="served model name (default: the inventory's, else the router's first)"),
    concurrency: int = typer.Option(None, "--concurrency", min=1, max=64, help="requests in flight at most"),
    inventory: Path | None = typer.Option(None, "--inventory", "-i", help="inventory YAML (default: settings)"),
    save: Path | None = typer.Option(None, "--save", help="also write the bundle to this file"),
    as_json: bool = typer.Option(False, "--json", help="print the bundle's recall section as JSON"),
) -> None:
    """Needle-in-a-haystack grid (length x depth) through the router; kept as a bundle and diagnosed.

    Exit status: 0 every needle found, 1 needles lost or findings, 2 bad input.
    """
    import getpass

    from opsbot.bundle import Trigger
    from opsbot.cli.flowroot import cli_flow, save_bundle
    from opsbot.flow import InventoryUnavailable
    from opsbot.inventory import UnknownRole
    from opsbot.parse.recall import summarize
    from opsbot.settings import get_settings
    from opsbot.yamlsource import ConfigError

    s = get_settings()
    plan = _plan(s, lengths, depths, fillers, distractors, model, concurrency)
    flow = cli_flow(s, inventory)
    try:
        name = flow.cluster_name(cluster)
    except (InventoryUnavailable, ConfigError, UnknownRole) as exc:
        err.print(f"error: {exc}", style="red", markup=False)
        raise typer.Exit(2) from exc
    err.print(cost_line(plan), highlight=False)
    result = run_with_progress(flow, name, plan, Trigger(kind="cli", text="recall", user=getpass.getuser()))
    bundle = result.bundle
    kept = save_bundle(bundle, s.data_dir / "bundles" / f"{bundle.id}.json")
    if save:
        save_bundle(bundle, save)
    if as_json:
        typer.echo(json.dumps(bundle.recall.model_dump(mode="json") if bundle.recall else None, indent=2))
    else:
        show_result(result)
    err.print(f"bundle saved: {kept}" + (f" and {save}" if save else ""), highlight=False)
    lost = bundle.recall is None or summarize(bundle.recall).pattern != "full"
    raise typer.Exit(1 if lost or result.diagnosis.findings else 0)
