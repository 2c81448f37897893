"""``opsbot deploy``: check, render, diff and apply a PD deployment spec (thin over ``serving``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from opsbot.settings import Settings
    from opsbot.store import Store
    from opsbot.yamlsource import ConfigError
    from serving.spec import DeploymentSpec

app = typer.Typer(help="Check, render, diff and apply a deployment spec.", no_args_is_help=True)
out = Console()
err = Console(stderr=True)

SpecArg = typer.Argument(..., exists=False, help="deployment spec YAML, e.g. serving/examples/dsv4-flash-1node.yaml")


def _store(settings: Settings) -> Store:
    from opsbot.store import StoreError, open_store

    try:
        return open_store(settings.db_url())
    except StoreError as exc:
        err.print(str(exc), style="red", markup=False)
        raise typer.Exit(2) from exc


def _refuse(exc: ConfigError) -> typer.Exit:
    err.print(f"[bold red]spec refused[/] ({len(exc.problems)} problem(s)); nothing was rendered or touched:")
    for p in exc.problems:
        err.print(f"  {p}", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(2)


def memory_report(spec: DeploymentSpec) -> None:
    """The KV arithmetic: bytes per token term by term, then each server's pool against its context."""
    from serving.rules import model_kv_bytes, role_fit

    say = lambda text: out.print(text, markup=False, highlight=False, soft_wrap=True)  # noqa: E731
    for role, server in spec.servers().items():
        kv = model_kv_bytes(spec, server)
        if kv is None:
            say(f"{role}: KV {spec.model.kv_bytes_per_token} B per token (model.kv_bytes_per_token, measured)")
        else:
            say(f"{role}: KV bytes per token of {kv.model}, index keys {kv.index_keys}:")
            for t in kv.terms:
                say(f"  {t.what}: {t.formula} = {t.bytes:,.2f} B")
            say(f"  total, rounded up: {kv.per_token:,} B per token")
        if server.node in {n.name for n in spec.nodes}:
            for line in role_fit(spec, role).lines():
                say(line)


@app.command()
def check(spec: Path = SpecArg) -> None:
    """Validate SPEC: schema, then every deployment rule (id, reason, fix); print the KV memory arithmetic."""
    from opsbot.yamlsource import ConfigError
    from serving.checked import SpecRefused, load_checked
    from serving.spec import load_spec

    try:
        s = load_checked(spec)
    except SpecRefused as exc:
        memory_report(load_spec(spec))
        raise _refuse(exc) from None
    except ConfigError as exc:
        raise _refuse(exc) from None
    memory_report(s)
    out.print(f"[green]ok[/]: {spec} ({s.name}: prefill on {s.prefill.node}, decode on {s.decode.node}, "
              f"router on {s.router.node}) passes every rule")


@app.command()
def render(spec: Path = SpecArg, directory: Path = typer.Argument(..., help="output directory")) -> None:
    """Render serve scripts, units, Prometheus, Alertmanager, Grafana and the inventory into DIRECTORY."""
    from opsbot.yamlsource import ConfigError
    from serving.checked import load_checked
    from serving.render import OutsideOutput, write
    from serving.render import render as render_spec

    try:
        s = load_checked(spec)
    except ConfigError as exc:
        raise _refuse(exc) from None
    try:
        files = write(render_spec(s), directory)
    except OutsideOutput as exc:
        err.print(f"[bold red]spec refused[/]: {exc}", highlight=False)
        raise typer.Exit(2) from None
    for f in files:
        out.print(str(f), highlight=False)
    out.print(f"[green]{len(files)} files[/] rendered from {spec}")


def _status_style(status: str) -> str:
    return {"same": "green", "changed": "yellow", "missing": "cyan"}.get(status, "red")


def file_states_table(states, title: str) -> Table:
    table = Table(title=title)
    for col in ("node", "role", "file", "status", "on node", "spec"):
        table.add_column(col)
    for s in states:
        table.add_row(s.node, s.role or "-", s.path, f"[{_status_style(s.status)}]{s.status}[/]",
                      (s.found or s.detail or "-")[:12], s.expected[:12])
    return table


def show_drift(spec_path: Path, settings: Settings) -> int:
    """Print roles whose unit or serve script differs from what SPEC renders; the number of such files."""
    import asyncio

    from opsbot.collect.transport import TransportPool
    from opsbot.yamlsource import ConfigError
    from serving.checked import load_checked
    from serving.rollout import drift

    try:
        spec = load_checked(spec_path)
    except ConfigError as exc:
        raise _refuse(exc) from None

    async def go():
        async with TransportPool(settings) as pool:
            return await drift(spec, pool)

    states = asyncio.run(go())
    if states:
        out.print(file_states_table(states, f"drift from {spec_path}"))
    else:
        out.print(f"[green]no drift[/]: every role's unit and serve script match {spec_path}")
    return len(states)


@app.command("diff")
def diff_command(spec: Path = SpecArg) -> None:
    """Show what `apply` would change on each node (SHA-256 of each rendered file, read over SSH)."""
    import asyncio

    from opsbot.collect.transport import TransportPool
    from opsbot.settings import get_settings
    from opsbot.yamlsource import ConfigError
    from serving.checked import load_checked
    from serving.rollout import diff

    try:
        s = load_checked(spec)
    except ConfigError as exc:
        raise _refuse(exc) from None

    async def go():
        async with TransportPool(get_settings()) as pool:
            return await diff(s, pool)

    states = asyncio.run(go())
    out.print(file_states_table(states, f"{spec} against its nodes"))
    pending = [x for x in states if x.status != "same"]
    out.print(f"{len(pending)} of {len(states)} files would change" if pending else "[green]nothing to change[/]")


@app.command("apply")
def apply_command(
    spec: Path = SpecArg,
    restart_all: bool = typer.Option(False, "--restart-all", help="restart every role, changed or not"),
    recall: bool = typer.Option(True, "--recall/--no-recall",
                                help="run the long-context recall probe after a successful apply (default: on)"),
) -> None:
    """Upload changed files, daemon-reload, restart prefill, decode, router in order with health checks.

    Then the recall probe (the default grid) checks that the deployment still finds facts in long
    prompts; a run worse than the last good one is said so and, with Slack configured, posted."""
    import asyncio
    import getpass

    from opsbot.act.deploy import DeployGuard
    from opsbot.collect.transport import TransportPool
    from opsbot.settings import get_settings
    from opsbot.yamlsource import ConfigError
    from serving.checked import load_checked
    from serving.rollout import apply

    try:
        s = load_checked(spec)
    except ConfigError as exc:
        raise _refuse(exc) from None

    settings = get_settings()
    guard = DeployGuard(_store(settings), s.name, actor=getpass.getuser(), settings=settings)

    async def go():
        async with TransportPool(settings) as pool:
            with err.status("applying") as status:
                return await apply(s, pool, guard,
                                   progress=lambda msg: (status.update(msg), err.print(msg, highlight=False)),
                                   restart_all=restart_all)

    outcome = asyncio.run(go())
    out.print(f"uploaded {len(outcome.uploaded)} file(s); restarted: {', '.join(outcome.restarted) or 'nothing'}")
    for where, line in outcome.patch_lines.items():
        seen = (f"attached: patch {line.version}, index_keys={line.index_keys}, sglang {line.sglang}" if line.attached
                else f"refused: {line.reason}")
        out.print(f"{where}: bf16 index-key patch {seen} (current run's journal)", markup=False, highlight=False)
    if not outcome.ok:
        err.print(f"[bold red]apply stopped at {outcome.failed_step}[/]; later steps were not run. Evidence:")
        for line in outcome.evidence:
            err.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
        if outcome.rolled_back:
            err.print("[bold yellow]the previous units, scripts and patch files were put back:[/]")
            for line in outcome.rolled_back:
                err.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    out.print("[green]applied[/]")
    if recall:
        recall_after_deploy(settings, s.name)


def recall_after_deploy(settings: Settings, cluster: str) -> None:
    """The recall probe after a deploy (the flow's run, compared with the last good one); posted when worse."""
    import asyncio
    import getpass

    from opsbot.bundle import Trigger
    from opsbot.cli.flowroot import cli_flow
    from opsbot.cli.recall import cost_line, run_with_progress, show_result
    from opsbot.collect.recall import plan_from
    from opsbot.flow import InventoryUnavailable
    from opsbot.service.recall_schedule import report_worse, slack_poster
    from opsbot.yamlsource import ConfigError

    flow = cli_flow(settings)
    try:
        name = flow.cluster_name(cluster)
    except (InventoryUnavailable, ConfigError) as exc:
        err.print(f"recall probe not run: {exc}", markup=False, highlight=False)
        return
    plan = plan_from(settings)
    err.print(cost_line(plan), highlight=False)
    result = run_with_progress(flow, name, plan, Trigger(kind="cli", text="recall after deploy apply",
                                                         user=getpass.getuser()))
    show_result(result)
    asyncio.run(report_worse(result, slack_poster(settings), "after a deploy"))
