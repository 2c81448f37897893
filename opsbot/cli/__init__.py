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

from opsbot.cli import db as _db  # noqa: E402
from opsbot.cli import history as _history  # noqa: E402
from opsbot.cli import restart as _restart  # noqa: E402

app.add_typer(_db.app, name="db")
app.command("history")(_history.history)
app.command("restart")(_restart.restart)
app.add_typer(_restart.actions_app, name="actions")

from opsbot.cli import diagnose as _diagnose  # noqa: E402

app.command("diagnose")(_diagnose.diagnose_cmd)
app.command()(_diagnose.ask)
app.add_typer(_diagnose.runbooks_app, name="runbooks")

from opsbot.cli import report as _report  # noqa: E402

app.command("status")(_report.status)
app.add_typer(_report.app, name="report")
app.command("note")(_report.note)
app.command("decide")(_report.decide)
