"""The ``opsbot`` command line: one sub-module per command group, each a thin surface."""

from __future__ import annotations

import typer

from opsbot import __version__

app = typer.Typer(
    name="opsbot",
    help="Incident response for SGLang prefill/decode deployments.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


@app.command()
def version() -> None:
    """Print opsbot's version."""
    typer.echo(__version__)


from opsbot.cli import diagnose as _diagnose  # noqa: E402

app.command("diagnose")(_diagnose.diagnose_cmd)
app.command()(_diagnose.ask)
app.add_typer(_diagnose.runbooks_app, name="runbooks")
