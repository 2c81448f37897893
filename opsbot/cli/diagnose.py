"""``opsbot diagnose``, ``opsbot ask`` and ``opsbot runbooks lint``: thin surfaces over diagnose."""

from __future__ import annotations

import getpass
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from opsbot.datafiles import data_dir

if TYPE_CHECKING:
    from opsbot.chat.intents import Intent
    from opsbot.diagnose import Diagnosis, RunbookSet

runbooks_app = typer.Typer(help="Check the runbooks.", no_args_is_help=True)
RUNBOOKS_OPT = typer.Option(None, "--runbooks", help="runbook directory (default: the runbooks opsbot ships)")


def _runbooks(directory: Path | None) -> RunbookSet:
    """The runbooks in ``directory``, else the shipped ones (compiled once, then kept: ``runbook_cache``)."""
    from opsbot.diagnose import default_runbooks, load_runbooks

    return load_runbooks(directory) if directory else default_runbooks()


def _emit(d: Diagnosis, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(d.public(), indent=2))
    else:
        from rich.console import Console

        from opsbot.cli.diagnosis_view import render

        Console().print(render(d))
    raise typer.Exit(1 if d.findings else 0 if d.healthy else 3)


def diagnose_cmd(
    bundle: Path = typer.Argument(..., help="a saved probe bundle (opsbot probe --save FILE)"),
    as_json: bool = typer.Option(False, "--json", help="print the public JSON: {bundle, findings}"),
    runbooks: Path | None = RUNBOOKS_OPT,
) -> None:
    """Diagnose a saved bundle. Exit status: 0 healthy (every role on positive evidence), 1 findings, 2 unreadable
    input, 3 no finding but a role unknown (its evidence could not be read: not an all-clear)."""
    from opsbot.bundle import BundleError, read_bundle
    from opsbot.diagnose import diagnose

    try:
        b = read_bundle(bundle)
    except BundleError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    _emit(diagnose(b, _runbooks(runbooks)), as_json)


def ask(
    text: str = typer.Argument(..., help='what you see, e.g. "decode is stuck"'),
    cluster: str | None = typer.Option(None, "--cluster", "-c", help="cluster in the inventory"),
    inventory: Path | None = typer.Option(None, "--inventory", "-i", help="inventory YAML (default: settings)"),
    as_json: bool = typer.Option(False, "--json", help="print the public JSON: {bundle, findings}"),
    save: Path | None = typer.Option(None, "--save", help="also write the bundle to this file"),
    runbooks: Path | None = RUNBOOKS_OPT,
    second_look: int | None = typer.Option(
        None, "--second-look", min=1, max=600, metavar="SECONDS",
        help="when a finding says a second probe would decide, probe again after SECONDS and diagnose "
             "that (NRestarts moving, counters moving); without it you are asked on a terminal",
    ),
) -> None:
    """Answer a question about what happened, or probe the roles your words name, diagnose, record.

    Questions with an answer in the store: "what happened last night / since 02:00 / this week",
    "why did decode restart", "is it safe to restart prefill" (the guards' dry run), "incidents",
    "history decode 24h", "help" (times in OPSBOT_REPORT_TIMEZONE). Anything else probes:

    Naming prefill or decode also probes the other PD role and the router: "decode is stuck"
    probes decode, prefill and router, so a saturated prefill or a router without workers behind
    a stuck decode is found. Naming only the router probes only the router. When two classes may
    both hold and a second probe would tell them apart, the finding says so; with --second-look
    (or your yes on a terminal) opsbot takes that second look itself.
    """
    from opsbot.bundle import Trigger
    from opsbot.chat.intents import parse_intent
    from opsbot.cli.flowroot import cli_flow, keep_bundle, load_or_exit
    from opsbot.cli.probe import run_with_progress
    from opsbot.collect.probe import scope
    from opsbot.diagnose import diagnose
    from opsbot.inventory import UnknownRole
    from opsbot.scope import roles_for_words
    from opsbot.settings import get_settings
    from opsbot.yamlsource import ConfigError

    s = get_settings()
    intent = parse_intent(text)
    if intent.kind != "probe":
        _answer(intent, inventory, as_json)
        return
    typer.echo(f"({intent.understood()})", err=True)
    inv = load_or_exit(inventory or s.inventory_path())
    try:
        _name, c = inv.cluster(cluster or s.cluster)
        roles = roles_for_words(text, c)
        scope(inv, cluster or s.cluster, roles)
    except (UnknownRole, ConfigError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    flow = cli_flow(s, inventory)
    chosen = _runbooks(runbooks) if runbooks is not None else None
    if chosen is not None:
        flow.diagnose = lambda bundle, history=None: diagnose(bundle, chosen, history=history)
    trigger = Trigger(kind="cli", text=text, user=getpass.getuser())
    result = run_with_progress(flow, cluster or s.cluster, roles, trigger)
    keep_bundle(flow, result, save)
    wait = _second_look_wait(result.diagnosis, second_look, as_json)
    if wait:
        if not as_json:
            from rich.console import Console

            from opsbot.cli.diagnosis_view import render

            Console().print(render(result.diagnosis))
        typer.echo(f"second look: probing again in {wait} s (the first diagnosis is above)", err=True)
        time.sleep(wait)
        first = result.bundle
        flow.diagnose = (  # NRestarts moving since the first
            lambda bundle, history=None: diagnose(bundle, chosen, previous=first, history=history))
        result = run_with_progress(flow, cluster or s.cluster, roles, trigger)
        keep_bundle(flow, result, None)
    _emit(result.diagnosis, as_json)


SECOND_LOOK_DEFAULT_S = 60


def _second_look_wait(d: Diagnosis, asked: int | None, as_json: bool) -> int | None:
    """Seconds to wait before a second probe, or None: only when a finding says one would decide,
    and the operator asked for it (--second-look) or agrees at a terminal prompt."""
    if not any(f.second_look for f in d.findings):
        return None
    if asked:
        return asked
    if as_json or not sys.stdin.isatty():
        return None
    why = next(t for f in d.findings if f.second_look for t in f.decide)
    return SECOND_LOOK_DEFAULT_S if typer.confirm(f"{why}\nProbe again in {SECOND_LOOK_DEFAULT_S} s?", err=True) else None


def _answer(intent: Intent, inventory: Path | None, as_json: bool) -> None:
    from datetime import datetime, timezone

    from opsbot.chat.answers import answer, zone
    from opsbot.inventory import load_inventory
    from opsbot.settings import get_settings
    from opsbot.store import StoreError, open_store
    from opsbot.yamlsource import ConfigError

    s = get_settings()
    try:
        inv = load_inventory(inventory or s.inventory_path())
    except (ConfigError, OSError):
        inv = None  # only the dry run needs it, and says so
    try:
        store = open_store(s.db_url())
    except StoreError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    result = answer(intent, store, inv, s, zone(None, s.report_timezone), datetime.now(timezone.utc))
    assert result is not None
    if as_json:
        typer.echo(json.dumps({"understood": result.understood, "title": result.title, "lines": result.lines}, indent=2))
    else:
        typer.echo(result.text())


@runbooks_app.command("lint")
def lint_cmd(directory: Path | None = typer.Argument(None, help="runbook directory (default: the shipped runbooks)")) -> None:
    """Schema, CEL, fact names, incident ids and log patterns; exit 1 on any problem."""
    from opsbot.diagnose.lint import lint

    directory = directory or data_dir("runbooks")
    problems = lint(directory)
    for p in problems:
        typer.echo(str(p))
    n = len(_runbooks(directory).runbooks)
    typer.echo(f"{n} runbooks loaded, {len(problems)} problem(s)", err=True)
    raise typer.Exit(1 if problems else 0)
