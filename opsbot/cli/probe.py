"""``opsbot probe``: collect every axis of the selected roles and show what an operator looks at first."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

if TYPE_CHECKING:
    from opsbot.bundle import Bundle, Trigger
    from opsbot.flow import Flow, ProbeResult
    from opsbot.inventory import Inventory
    from opsbot.settings import Settings

err = Console(stderr=True, soft_wrap=True)


def load_or_exit(path: Path) -> Inventory:
    from opsbot.inventory import load_inventory
    from opsbot.yamlsource import ConfigError

    try:
        return load_inventory(path)
    except ConfigError as exc:
        for problem in exc.problems:
            err.print(str(problem), style="red", markup=False)
        raise typer.Exit(2) from exc


def save_bundle(bundle: Bundle, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(bundle.to_json(), encoding="utf-8")
    return path


def cli_flow(settings: Settings, inventory: Path | None = None) -> Flow:
    """The CLI's composition root: one Flow over the configured store (``--inventory`` overrides the file)."""
    from opsbot.flow import Flow
    from opsbot.store import StoreError, open_store

    if inventory is not None:
        settings = settings.model_copy(update={"inventory": inventory})
    try:
        return Flow(settings=settings, store=open_store(settings.db_url()))
    except StoreError as exc:
        err.print(str(exc), style="red", markup=False)
        raise typer.Exit(2) from exc


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


def keep_bundle(flow: Flow, result: ProbeResult, save: Path | None) -> None:
    """The bundle as a JSON file too (DATA_DIR/bundles and ``--save``); say where, and which probe row holds it."""
    bundle = result.bundle
    kept = save_bundle(bundle, flow.settings.data_dir / "bundles" / f"{bundle.id}.json")
    if save:
        save_bundle(bundle, save)
    err.print(f"probe {result.probe_id} recorded; bundle saved: {kept}" + (f" and {save}" if save else ""),
              highlight=False, markup=False)
    for role, action_id in result.plans.items():
        err.print(f"restart of {role} planned: `opsbot actions approve {action_id}`", highlight=False, markup=False)


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
    from opsbot.cli.probe_view import canary_line, failures_table, nodes_table, roles_table
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
    out.print(nodes_table(bundle))
    if bundle.canary is not None:
        out.print(canary_line(bundle.canary), markup=False, highlight=False)
    failed = failures_table(bundle)
    if failed is not None:
        out.print(failed)
    if spec is not None:
        from opsbot.cli.deploy import show_drift

        show_drift(spec, s)
