"""``opsbot diagnose``, ``opsbot ask`` and ``opsbot runbooks lint``: thin surfaces over diagnose."""

from __future__ import annotations

import asyncio
import getpass
import json
from pathlib import Path

import typer
from rich.console import Console

from opsbot.bundle import Bundle, BundleError, Trigger, read_bundle
from opsbot.diagnose import Diagnosis, diagnose, interpret, load_runbooks
from opsbot.diagnose.evaluate import RUNBOOKS_DIR
from opsbot.diagnose.lint import lint
from opsbot.diagnose.terminal import render
from opsbot.settings import get_settings
from opsbot.yamlsource import ConfigError

runbooks_app = typer.Typer(help="Check the runbooks.", no_args_is_help=True)
RUNBOOKS_OPT = typer.Option(RUNBOOKS_DIR, "--runbooks", help="runbook directory")


def _emit(d: Diagnosis, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(d.public(), indent=2))
    else:
        Console().print(render(d))
    raise typer.Exit(1 if d.findings else 0)


def diagnose_cmd(
    bundle: Path = typer.Argument(..., help="a saved probe bundle (opsbot probe --save FILE)"),
    as_json: bool = typer.Option(False, "--json", help="print the public JSON: {bundle, findings}"),
    runbooks: Path = RUNBOOKS_OPT,
) -> None:
    """Diagnose a saved bundle. Exit status: 0 healthy, 1 findings, 2 unreadable input."""
    try:
        b = read_bundle(bundle)
    except BundleError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    _emit(diagnose(b, load_runbooks(runbooks)), as_json)


def save_bundle(bundle: Bundle, directory: Path) -> Path:
    """Write the bundle as ``DIR/<id>.json`` so it can be diagnosed again."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{bundle.id}.json"
    path.write_text(bundle.to_json(), encoding="utf-8")
    return path


def ask(
    text: str = typer.Argument(..., help='what you see, e.g. "decode is stuck"'),
    cluster: str | None = typer.Option(None, "--cluster", help="cluster in the inventory"),
    as_json: bool = typer.Option(False, "--json", help="print the public JSON: {bundle, findings}"),
    save: Path | None = typer.Option(None, "--save", help="also write the bundle here"),
    runbooks: Path = RUNBOOKS_OPT,
) -> None:
    """Probe the roles your words name (all when none), diagnose, and say what to do."""
    from opsbot.collect.probe import probe
    from opsbot.inventory import UnknownRole, load_inventory

    settings = get_settings()
    try:
        inventory = load_inventory(settings.inventory_path())
        name, c = inventory.cluster(cluster or settings.cluster)
        roles = interpret(text, [r.key for r in c.roles])
        c.select(roles)
    except (ConfigError, UnknownRole) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    console = Console(stderr=True)
    trigger = Trigger(kind="cli", text=text, user=getpass.getuser())
    with console.status(f"probing {', '.join(roles) or 'all roles'} of {name} ...") as status:
        def progress(role: str, axis: str) -> None:
            status.update(f"probing {role}: {axis} ...")

        b = asyncio.run(probe(inventory, cluster=name, roles=roles or None, trigger=trigger, settings=settings, progress=progress))
    path = save_bundle(b, settings.data_dir / "bundles")
    if save is not None:
        save.write_text(b.to_json(), encoding="utf-8")
    console.print(f"bundle {b.id} saved to {path}", style="dim")
    _emit(diagnose(b, load_runbooks(runbooks)), as_json)


@runbooks_app.command("lint")
def lint_cmd(directory: Path = typer.Argument(RUNBOOKS_DIR, help="runbook directory")) -> None:
    """Schema, CEL, fact names, incident ids and log patterns; exit 1 on any problem."""
    problems = lint(directory)
    for p in problems:
        typer.echo(str(p))
    n = len(load_runbooks(directory).runbooks)
    typer.echo(f"{n} runbooks loaded, {len(problems)} problem(s)", err=True)
    raise typer.Exit(1 if problems else 0)
