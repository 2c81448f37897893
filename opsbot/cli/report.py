"""``opsbot status``, ``opsbot report weekly``, ``opsbot note`` and ``opsbot decide``: thin surfaces over opsbot.report."""

from __future__ import annotations

import base64
import getpass
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

if TYPE_CHECKING:
    from opsbot.bundle import Bundle
    from opsbot.report.model import StatusReport
    from opsbot.settings import Settings
    from opsbot.store import Store

app = typer.Typer(help="Reports: the weekly report (the status report is `opsbot status`).", no_args_is_help=True)
_EXT = {"markdown": "md", "html": "html", "blocks": "json", "json": "json"}
err = Console(stderr=True)


def _store(settings: Settings) -> Store:
    from opsbot.store import StoreError, open_store

    try:
        return open_store(settings.db_url())
    except StoreError as exc:
        err.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from exc


def _format(fmt: str) -> str:
    from opsbot.report.render import FORMATS

    if fmt not in FORMATS:
        raise typer.BadParameter(f"{fmt!r}: use md, html, blocks or json", param_hint="--format")
    return FORMATS[fmt]


def _emit(report: StatusReport, fmt: str, out: Path | None) -> None:
    """Print the report, or write it (and a weekly report's charts as PNG files) under ``out``."""
    from opsbot.report.model import WeeklyReport
    from opsbot.report.render import render

    text = render(report, fmt)
    if out is None:
        typer.echo(text, nl=False)
        return
    out.mkdir(parents=True, exist_ok=True)
    name = f"{report.kind}-{report.week}" if isinstance(report, WeeklyReport) else report.kind
    path = out / f"{name}.{_EXT[fmt]}"
    path.write_text(text, encoding="utf-8")
    if isinstance(report, WeeklyReport):
        for chart in report.charts:
            (out / f"{chart.key}.png").write_bytes(base64.b64decode(chart.png_base64))
    err.print(f"wrote {path}")


def _save(store: Store, report: StatusReport, period: str) -> None:
    from opsbot.report.render import render

    meta = {"since": report.since.isoformat() if report.since else None, "incidents": [i.incident for i in report.incidents]}
    for fmt in ("markdown", "html"):
        store.save_report(report.kind, period, fmt, render(report, fmt), meta)
    err.print(f"saved the {report.kind} report for {period}")


def _fresh_probe(settings: Settings) -> tuple[Bundle, list[str]]:
    """A probe through the flow (diagnosed once, recorded): the report starts from it."""
    from opsbot.bundle import Trigger
    from opsbot.cli.flowroot import cli_flow, load_or_exit
    from opsbot.cli.probe import run_with_progress

    load_or_exit(settings.inventory_path())
    flow = cli_flow(settings)
    result = run_with_progress(flow, settings.cluster, None, Trigger(kind="cli", user=getpass.getuser(), text="status"))
    return result.bundle, [f.incident for f in result.diagnosis.findings]


def status(
    save: bool = typer.Option(False, "--save", help="keep it in the database; the next report starts from here"),
    fmt: str = typer.Option("md", "--format", "-f", help="md, html, blocks (Slack) or json"),
    probe: bool = typer.Option(False, "--probe", help="take a fresh probe (default: the latest stored one)"),
    out: Path | None = typer.Option(None, "--out", help="write into this directory instead of printing"),
) -> None:
    """Where the deployment stands: goal, current state, incidents, actions, notes, decisions, context."""
    from opsbot.report.status import build_status
    from opsbot.settings import get_settings, with_running_monitoring

    settings = with_running_monitoring(get_settings())
    kind = _format(fmt)
    store = _store(settings)
    bundle, incidents = _fresh_probe(settings) if probe else (None, None)
    report = build_status(store, bundle, settings, incidents=incidents)
    _emit(report, kind, out)
    if save:
        _save(store, report, f"{report.generated_at:%Y-%m-%dT%H:%M}Z")


@app.command("weekly")
def weekly(
    week: str | None = typer.Option(None, "--week", "-w", help="YYYY-Www (default: last week)"),
    save: bool = typer.Option(False, "--save", help="keep it in the database"),
    fmt: str = typer.Option("md", "--format", "-f", help="md, html, blocks (Slack) or json"),
    out: Path | None = typer.Option(None, "--out", help="write the report and its charts (PNG) into this directory"),
) -> None:
    """The weekly report: figures from Prometheus and opsbot's history, charts, the week before."""
    import asyncio

    from opsbot.report.week import WeekError
    from opsbot.report.weekly import build_weekly
    from opsbot.settings import get_settings, with_running_monitoring

    settings = with_running_monitoring(get_settings())
    kind = _format(fmt)
    store = _store(settings)
    try:
        report = asyncio.run(build_weekly(store, settings.prometheus_url, week, settings=settings))
    except WeekError as exc:
        err.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from exc
    _emit(report, kind, out)
    if report.missing:
        err.print("[yellow]missing:[/] " + "; ".join(report.missing))
    if save:
        _save(store, report, report.week)


def note(
    kind: str = typer.Argument(..., help="done, doing, blocked or next"),
    text: str = typer.Argument(..., help="what, in a sentence"),
) -> None:
    """Record progress for the status report: done, doing (in progress), blocked, next (steps)."""
    from opsbot.settings import get_settings

    store = _store(get_settings())
    try:
        store.add_note(kind, text, getpass.getuser())
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    err.print(f"noted ({kind})")


def decide(
    text: str = typer.Argument(..., help="the decision"),
    why: str = typer.Option(..., "--why", help="the rationale, for whoever reads the report later"),
) -> None:
    """Record a key decision and why it was taken; it appears in status and weekly reports."""
    from opsbot.settings import get_settings

    store = _store(get_settings())
    try:
        store.add_decision(text, why, getpass.getuser())
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc
    err.print("decision recorded")
