"""``opsbot incidents [show ID]``: incidents from first alert to resolution, with their timeline."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from opsbot.cli.history import parse_since

if TYPE_CHECKING:
    from opsbot.store import Store

app = typer.Typer(help="Incidents: first seen, class, alerts, probes, actions, resolved at, time to recovery.",
                  invoke_without_command=True)
console = Console()


def _store() -> Store:
    from opsbot.settings import get_settings
    from opsbot.store import StoreError, open_store

    try:
        return open_store(get_settings().db_url())
    except StoreError as exc:
        typer.secho(str(exc), fg="red", err=True)
        raise typer.Exit(2) from exc


@app.callback()
def incidents(
    ctx: typer.Context,
    since: str = typer.Option("7d", "--since", help="24h, 7d, or an ISO date"),
    state: str | None = typer.Option(None, "--state", help="open or resolved"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """List incidents (newest first); `opsbot incidents show ID` for one with its timeline."""
    if ctx.invoked_subcommand is not None:
        return
    from opsbot.chat.answers import zone
    from opsbot.settings import get_settings
    from opsbot.store.incidents import duration_text

    if state not in (None, "open", "resolved"):
        raise typer.BadParameter(f"{state!r}: open or resolved", param_hint="--state")
    settings = get_settings()
    now = datetime.now(timezone.utc)
    rows = _store().incidents(since=parse_since(since, now), cluster=settings.cluster, state=state, limit=500)
    if as_json:
        typer.echo(json.dumps([r.as_json() for r in rows], indent=2))
        return
    tz = zone(None, settings.report_timezone)
    table = Table(title=f"incidents since {escape(since)}")
    for col in ("id", "first seen", "class", "roles", "alerts", "probes", "actions", "state", "time to recovery"):
        table.add_column(col, overflow="fold")
    for r in rows:
        ttr = duration_text(r.time_to_recovery_s) if r.time_to_recovery_s is not None else "-"
        colour = "green" if r.state == "resolved" else "red"
        # stored text (an alert's name holding "[/]") is shown as text, never read as rich markup
        table.add_row(escape(r.id), f"{r.first_seen.astimezone(tz):%m-%d %H:%M:%S %Z}", escape(r.incident),
                      escape(",".join(r.roles)), escape(",".join(r.alertnames)), str(len(r.probes)),
                      escape(",".join(r.actions)), f"[{colour}]{escape(r.state)}[/]", ttr)
    console.print(table if rows else f"no incident since {escape(since)}")


@app.command()
def show(incident_id: str = typer.Argument(..., help="an id from `opsbot incidents`"),
         as_json: bool = typer.Option(False, "--json")) -> None:
    """One incident: what, where, confidence, alerts, probes, actions and its timeline."""
    from opsbot.chat.answers import zone
    from opsbot.settings import get_settings
    from opsbot.store.incidents import duration_text

    row = _store().incident(incident_id)
    if row is None:
        typer.secho(f"no incident {incident_id!r}; `opsbot incidents` lists them", fg="red", err=True)
        raise typer.Exit(1)
    if as_json:
        typer.echo(json.dumps(row.as_json(), indent=2))
        return
    tz = zone(None, get_settings().report_timezone)
    ttr = f", time to recovery {duration_text(row.time_to_recovery_s)}" if row.time_to_recovery_s is not None else ""
    console.print(f"[bold]{escape(row.id)}[/] {escape(row.incident)} on {escape(', '.join(row.roles))} in "
                  f"{escape(row.cluster)}: {escape(row.state)}{ttr}", markup=True)
    console.print(f"{row.title or ''}: {row.summary or ''}", markup=False)
    console.print(f"confidence {row.confidence or 0:.0%}; alerts {', '.join(row.alertnames) or '-'}; "
                  f"probes {', '.join(row.probes)}; actions {', '.join(row.actions) or '-'}", markup=False)
    if row.slack_ts or row.slack_error:
        console.print(f"Slack: {row.slack_state} {row.slack_channel or ''} {row.slack_ts or ''}"
                      + (f" (last error: {row.slack_error})" if row.slack_error else ""), markup=False)
    for e in row.timeline:
        at = datetime.fromisoformat(e["at"]).astimezone(tz)
        console.print(f"  {at:%m-%d %H:%M:%S %Z}  {e['kind']:<8} {e['what']}", markup=False)
