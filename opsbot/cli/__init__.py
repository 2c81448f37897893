"""The ``opsbot`` command line: one sub-module per command group, each a thin surface."""

from __future__ import annotations

import typer

from opsbot import __version__
from opsbot.cli import inventory, lab
from opsbot.cli.probe import probe_command

app = typer.Typer(
    name="opsbot",
    help="Incident response for SGLang prefill/decode deployments.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)

app.add_typer(lab.app, name="lab")
app.add_typer(inventory.app, name="inventory")
app.command("probe")(probe_command)


from opsbot.cli import deploy as _deploy  # noqa: E402

app.add_typer(_deploy.app, name="deploy")


@app.command()
def version() -> None:
    """Print opsbot's version."""
    typer.echo(__version__)
