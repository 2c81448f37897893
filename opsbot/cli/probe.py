"""``opsbot probe``: collect every axis of the selected roles and show what an operator looks at first."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from opsbot.cli.flowroot import cli_flow, err, keep_bundle, load_or_exit

if TYPE_CHECKING:
    from opsbot.bundle import Trigger
    from opsbot.flow import Flow, ProbeResult


def run_with_progress(flow: Flow, cluster: str | None, roles: list[str] | None, trigger: Trigger) -> ProbeResult:
    """The flow's probe (recorded, diagnosed, remedies planned) with a progress bar on stderr."""
    import asyncio

    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from opsbot.collect.probe import canary_planned, planned_axes, scope

    name, selected, nodes = scope(flow.inventory(), cluster, roles)
    names = planned_axes(selected, nodes) + (["canary"] if canary_planned(flow.inventory(), name) else [])
    columns = (SpinnerColumn(), TextColumn("probing {task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task(", ".join(r.key for r in selected), total=len(names))

        def report(name: str, status: str) -> None:
            if status != "running":
                bar.advance(task)
                if status != "ok":
                    err.print(f"[yellow]{escape(name)}[/] {escape(status)}", markup=True, highlight=False)

        return asyncio.run(flow.run_probe(cluster, roles, trigger, progress=report))


def probe_command(
    roles: list[str] = typer.Argument(None, help="role names or kinds (prefill, decode, router); default: all"),
    cluster: str | None = typer.Option(None, "--cluster", "-c", help="cluster in the inventory"),
    inventory: Path | None = typer.Option(None, "--inventory", "-i", help="inventory YAML (default: settings)"),
    save: Path | None = typer.Option(None, "--save", help="also write the bundle to this file"),
    as_json: bool = typer.Option(False, "--json", help="print the bundle as JSON instead of tables"),
    spec: Path | None = typer.Option(None, "--spec", help="deployment spec: also report roles drifted from it"),
) -> None:
    """Probe roles on four axes (systemd, metrics, GPU, logs); the probe is diagnosed and recorded."""
    import getpass

    from opsbot.bundle import Trigger
    from opsbot.cli.probe_view import canary_line, failures_table, nodes_table, ranks_table, roles_table
    from opsbot.collect.probe import scope
    from opsbot.inventory import UnknownRole
    from opsbot.settings import get_settings
    from opsbot.yamlsource import ConfigError

    s = get_settings()
    inv = load_or_exit(inventory or s.inventory_path())
    try:
        scope(inv, cluster or s.cluster, roles or None)
    except (UnknownRole, ConfigError) as exc:
        err.print(str(exc), style="red", markup=False)
        raise typer.Exit(2) from exc
    flow = cli_flow(s, inventory)
    result = run_with_progress(flow, cluster or s.cluster, roles or None, Trigger(kind="cli", user=getpass.getuser()))
    keep_bundle(flow, result, save)
    bundle = result.bundle
    if as_json:
        typer.echo(bundle.to_json())
        return
    out = Console()
    out.print(roles_table(bundle))
    if (ranks := ranks_table(bundle)) is not None:
        out.print(ranks)
    out.print(nodes_table(bundle))
    if bundle.canary is not None:
        out.print(canary_line(bundle.canary), markup=False, highlight=False)
    failed = failures_table(bundle)
    if failed is not None:
        out.print(failed)
    if spec is not None:
        from opsbot.cli.deploy import show_drift

        show_drift(spec, s)
