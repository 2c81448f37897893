"""``opsbot inventory check``: validate the file, then reach every node and find every unit."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from opsbot.collect.check import CheckRow

app = typer.Typer(help="Check the inventory file and the nodes it names.", no_args_is_help=True)


def rows_table(path: Path, rows: list[CheckRow]) -> Table:
    t = Table(title=f"inventory {path}", title_justify="left")
    for col in ("cluster", "node", "check", "result", "detail"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(r.cluster, r.node, r.subject, "[green]ok[/]" if r.ok else "[red]FAIL[/]", r.detail)
    return t


@app.command("check")
def check(file: Path | None = typer.Argument(None, help="inventory YAML (default: settings)")) -> None:
    """Validate FILE, connect to every node (host keys verified) and check every unit exists."""
    import asyncio

    from opsbot.cli.flowroot import load_or_exit
    from opsbot.collect.check import check_inventory
    from opsbot.settings import get_settings

    s = get_settings()
    path = file or s.inventory_path()
    inv = load_or_exit(path)
    Console(stderr=True).print(f"{path}: valid; connecting to {sum(len(c.nodes) for c in inv.clusters.values())} node(s)")
    rows = asyncio.run(check_inventory(inv, s))
    Console().print(rows_table(path, rows))
    bad = [r for r in rows if not r.ok]
    if bad:
        Console(stderr=True).print(f"{len(bad)} problem(s)", style="red")
        raise typer.Exit(1)
