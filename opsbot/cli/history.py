"""``opsbot history``: probes, findings, actions and the audit log, newest first."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

KIND_STYLE = {"probe": "cyan", "finding": "red", "action": "yellow", "alert": "magenta", "audit": "dim"}
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, at: datetime) -> datetime:
    """'24h', '30m', '7d', '2w' back from ``at``, or an ISO date/time (UTC)."""
    m = re.fullmatch(r"\s*(\d+)\s*([smhdw])\s*", text)
    if m:
        return at - timedelta(**{UNITS[m.group(2)]: int(m.group(1))})
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise typer.BadParameter(f"{text!r}: write a duration such as 24h, 30m, 7d, or a date 2026-11-30T09:00") from exc
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt


def history(
    role: str | None = typer.Option(None, "--role", "-r", help="only this role"),
    since: str = typer.Option("24h", "--since", help="24h, 30m, 7d, or an ISO date"),
    cluster: str | None = typer.Option(None, "--cluster", "-c"),
    limit: int = typer.Option(200, "--limit"),
) -> None:
    """What opsbot saw and did: probes, findings, actions, audit."""
    from opsbot.settings import get_settings
    from opsbot.store import StoreError, open_store

    settings = get_settings()
    start = parse_since(since, datetime.now(timezone.utc))
    try:
        store = open_store(settings.db_url())
    except StoreError as exc:
        typer.secho(str(exc), fg="red", err=True)
        raise typer.Exit(2) from exc
    items = store.history(role=role, since=start, cluster=cluster, limit=limit)
    table = Table(title=f"history since {start:%Y-%m-%d %H:%M} UTC" + (f", role {role}" if role else ""))
    for col in ("when (UTC)", "kind", "cluster", "roles", "what", "detail", "ref"):
        table.add_column(col, overflow="fold")
    for i in items:  # stored text is shown as text: a reason holding "[/]" is not rich markup
        table.add_row(f"{i.at:%m-%d %H:%M:%S}", Text(i.kind, style=KIND_STYLE.get(i.kind, "")),
                      *(Text(cell) for cell in (i.cluster or "", ",".join(i.roles), i.what, i.detail, i.ref)))
    Console().print(table if items else f"nothing recorded since {start:%Y-%m-%d %H:%M} UTC")
