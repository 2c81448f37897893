"""``opsbot deploy``: check, render, diff and apply a PD deployment spec (thin over ``serving``)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from opsbot.yamlsource import ConfigError
from serving.checked import load_checked
from serving.render import render as render_spec
from serving.render import write

app = typer.Typer(help="Check, render, diff and apply a deployment spec.", no_args_is_help=True)
out = Console()
err = Console(stderr=True)

SpecArg = typer.Argument(..., exists=False, help="deployment spec YAML, e.g. serving/examples/dsv4-flash-1node.yaml")


def _refuse(exc: ConfigError) -> typer.Exit:
    err.print(f"[bold red]spec refused[/] ({len(exc.problems)} problem(s)); nothing was rendered or touched:")
    for p in exc.problems:
        err.print(f"  {p}", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(2)


@app.command()
def check(spec: Path = SpecArg) -> None:
    """Validate SPEC: schema, then every deployment rule (id, reason, fix)."""
    try:
        s = load_checked(spec)
    except ConfigError as exc:
        raise _refuse(exc) from None
    out.print(f"[green]ok[/]: {spec} ({s.name}: prefill on {s.prefill.node}, decode on {s.decode.node}, "
              f"router on {s.router.node}) passes every rule")


@app.command()
def render(spec: Path = SpecArg, directory: Path = typer.Argument(..., help="output directory")) -> None:
    """Render serve scripts, units, Prometheus, Alertmanager, Grafana and the inventory into DIRECTORY."""
    try:
        s = load_checked(spec)
    except ConfigError as exc:
        raise _refuse(exc) from None
    files = write(render_spec(s), directory)
    for f in files:
        out.print(str(f), highlight=False)
    out.print(f"[green]{len(files)} files[/] rendered from {spec}")
