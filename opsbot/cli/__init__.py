"""The ``opsbot`` command line (stages: trigger and render): one sub-module per command group, each a thin surface."""

from __future__ import annotations

import typer

from opsbot import __version__
from opsbot.cli import db, deploy, diagnose, evaluate, fidelity, history, incidents, inventory, lab, report, restart, serve, tokens
from opsbot.cli import config as config_cli
from opsbot.cli import slack as slack_cli
from opsbot.cli import service as service_cli
from opsbot.cli.init import init as init_command
from opsbot.cli.probe import probe_command
from opsbot.cli.recall import recall_command

app = typer.Typer(
    name="opsbot",
    help="Incident response for SGLang prefill/decode deployments.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,  # plain click help: rendering it with rich costs more than importing typer and rich
)

app.command("probe")(probe_command)
app.command("ask")(diagnose.ask)
app.command("recall")(recall_command)
app.command("diagnose")(diagnose.diagnose_cmd)
app.command("eval")(evaluate.eval_cmd)
app.command("restart")(restart.restart)
app.command("history")(history.history)
app.command("serve")(serve.serve)
app.command("status")(report.status)
app.command("note")(report.note)
app.command("decide")(report.decide)
app.add_typer(report.app, name="report")
app.add_typer(incidents.app, name="incidents")
app.add_typer(restart.actions_app, name="actions")
app.add_typer(diagnose.runbooks_app, name="runbooks")
app.add_typer(inventory.app, name="inventory")
app.add_typer(lab.app, name="lab")
app.add_typer(deploy.app, name="deploy")
app.add_typer(db.app, name="db")
app.add_typer(tokens.app, name="tokens")
app.add_typer(fidelity.app, name="fidelity")
app.add_typer(config_cli.app, name="config")
app.add_typer(slack_cli.app, name="slack")
app.add_typer(service_cli.app, name="service")
app.command("init")(init_command)


@app.callback()
def _refuse_bad_settings() -> None:
    """Refuse to start on a config file (or environment) opsbot cannot read: one line naming file, line and key."""
    from pydantic import ValidationError

    from opsbot.settings import ConfigFileError, Settings

    try:
        Settings()  # not get_settings(): nothing is cached before the command builds its own
    except ConfigFileError as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from None
    except ValidationError as exc:
        problems = "; ".join(f"OPSBOT_{str(e['loc'][0]).upper()}: {e['msg']}" for e in exc.errors(include_url=False))
        typer.secho(f"error: {problems}", fg="red", err=True)
        raise typer.Exit(2) from None


@app.command()
def version() -> None:
    """Print opsbot's version."""
    typer.echo(__version__)
