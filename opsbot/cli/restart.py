"""``opsbot restart`` and ``opsbot actions``: the CLI surface of the guarded restart (opsbot/act)."""

from __future__ import annotations

import getpass
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from opsbot.act import ActionOutcome, RestartPlan
    from opsbot.inventory import Inventory
    from opsbot.settings import Settings
    from opsbot.store import Store

console = Console()
actions_app = typer.Typer(help="Guarded actions: list them, approve a pending one.", no_args_is_help=True)


@contextmanager
def _store_errors() -> Iterator[None]:
    """A database that stays busy or goes away mid-command: one clear line, exit 2."""
    from opsbot.store import StoreError

    try:
        yield
    except StoreError as exc:
        raise _fail(str(exc)) from exc


def _fail(msg: str, code: int = 2) -> typer.Exit:
    console.print(f"[red]{msg}[/red]")
    return typer.Exit(code)


def _inventory(settings: Settings) -> Inventory:
    from opsbot.inventory import load_inventory
    from opsbot.yamlsource import ConfigError

    try:
        return load_inventory(Path(settings.inventory_path()))
    except ConfigError as exc:
        raise _fail(f"inventory refused:\n{exc}") from exc


def _store(settings: Settings, inventory: Inventory) -> Store:
    """Open (and upgrade) the store, then settle any action a crashed opsbot left executing."""
    import asyncio

    from opsbot.act import reconcile
    from opsbot.store import StoreError, open_store

    try:
        store = open_store(settings.db_url())
    except StoreError as exc:
        raise _fail(str(exc)) from exc
    for o in asyncio.run(reconcile(store, inventory, settings)):
        console.print(f"[yellow]reconciled interrupted action {o.action_id}: {o.state}: {o.message}[/yellow]")
    return store


def show_plan(plan: RestartPlan) -> None:
    table = Table(title=f"restart plan: {', '.join(plan.roles)} in cluster {plan.cluster}", show_lines=False)
    for col in ("#", "step", "role", "node", "command", "note"):
        table.add_column(col, overflow="fold")
    for i, s in enumerate(plan.steps, 1):
        table.add_row(str(i), s.kind, s.role, s.node, shlex.join(s.argv), s.note)
    console.print(table)
    console.print("pre-checks:\n" + "\n".join(f"  - {c}" for c in plan.checks))
    console.print("verify: " + "; ".join(plan.verify))


def _report(outcome: ActionOutcome) -> None:
    colour = {"succeeded": "green", "refused": "yellow", "planned": "yellow"}.get(outcome.state, "red")
    console.print(f"[{colour}]action {outcome.action_id}: {outcome.state}[/{colour}]: {outcome.message}")
    if outcome.evidence_probe_id:
        console.print(f"evidence probe: {outcome.evidence_probe_id}")


def _execute(store: Store, inventory: Inventory, action_id: str, actor: str, settings: Settings) -> ActionOutcome:
    import asyncio

    from opsbot.act import execute

    with console.status(f"restarting (action {action_id}): probe, stop, wait for GPU release, start, verify ..."):
        return asyncio.run(execute(store, inventory, action_id, actor=actor, surface="cli", settings=settings))


def restart(
    roles: list[str] = typer.Argument(..., help="role(s) to restart, e.g. decode"),
    cluster: str | None = typer.Option(None, "--cluster", "-c"),
    dry_run: bool = typer.Option(False, "--dry-run", help="show the plan and exact commands; change nothing"),
    approve_now: bool = typer.Option(False, "--approve", help="approve it yourself and run it now"),
    reason: str | None = typer.Option(None, "--reason", help="why (kept in the audit log)"),
    pair: bool = typer.Option(False, "--pair", help="restart a prefill and a decode together on purpose (pd-desync)"),
) -> None:
    """Restart a role behind approval, cooldown, budget and lock; verify it came back."""
    from opsbot.act import PlanRefused, approve, plan_restart, request_restart
    from opsbot.inventory import UnknownRole
    from opsbot.settings import get_settings
    from opsbot.yamlsource import ConfigError

    settings = get_settings()
    inventory = _inventory(settings)
    cluster = cluster or settings.cluster
    try:
        plan = plan_restart(inventory, roles, cluster=cluster, pair=pair, reason=reason, settings=settings)
    except (UnknownRole, PlanRefused, ConfigError) as exc:
        raise _fail(f"refused: {exc}") from exc
    show_plan(plan)
    if dry_run:
        console.print("[cyan]dry run: nothing was changed[/cyan]")
        return
    actor = getpass.getuser()
    with _store_errors():
        store = _store(settings, inventory)
        action, _ = request_restart(store, inventory, roles, actor=actor, surface="cli", cluster=cluster, pair=pair,
                                    reason=reason, settings=settings)
        if action.state == "planned" and not approve_now:
            console.print(f"[yellow]approval required[/yellow]: `opsbot actions approve {action.id}` "
                          f"before {action.expires_at:%H:%M:%S} UTC (or re-run with --approve)")
            return
        if action.state == "planned":
            approve(store, action.id, actor, "cli", settings)
        outcome = _execute(store, inventory, action.id, actor, settings)
    _report(outcome)
    if not outcome.ok:
        raise typer.Exit(1)


@actions_app.command("list")
def list_actions(state: str | None = typer.Option(None, "--state"), limit: int = typer.Option(30, "--limit")) -> None:
    """Recent actions and their state (`opsbot actions show ID` for one in full)."""
    from opsbot.settings import get_settings

    settings = get_settings()
    store = _store(settings, _inventory(settings))
    table = Table(title="actions")
    for col in ("id", "created (UTC)", "cluster", "role", "state", "by", "approved by", "outcome"):
        table.add_column(col, overflow="fold")
    for a in store.actions(state=state, limit=limit):
        table.add_row(a.id, f"{a.created_at:%Y-%m-%d %H:%M:%S}", a.cluster, a.role, a.state,
                      f"{a.requested_by} ({a.surface})", f"{a.approved_by} ({a.approved_surface})" if a.approved_by else "",
                      a.outcome or "")
    console.print(table)


@actions_app.command("approve")
def approve_action(
    action_id: str,
    run: bool = typer.Option(True, "--run/--no-run", help="run the restart right after approving"),
) -> None:
    """Approve a planned action (recorded with your name and the CLI surface), then run it."""
    from opsbot.act import ApprovalRefused, approve
    from opsbot.settings import get_settings

    settings = get_settings()
    inventory = _inventory(settings)
    store = _store(settings, inventory)
    actor = getpass.getuser()
    try:
        action = approve(store, action_id, actor, "cli", settings)
    except ApprovalRefused as exc:
        raise _fail(f"refused: {exc}") from exc
    console.print(f"approved {action.id} ({action.role}); approval valid until {action.expires_at:%H:%M:%S} UTC")
    if run:
        with _store_errors():
            outcome = _execute(store, inventory, action.id, actor, settings)
        _report(outcome)
        if not outcome.ok:
            raise typer.Exit(1)


@actions_app.command("show")
def show_action(action_id: str) -> None:
    """One action in full: plan, approvals, each step's result, verification, outcome, evidence."""
    from opsbot.act import RestartPlan
    from opsbot.settings import get_settings
    from opsbot.store import open_store

    settings = get_settings()
    with _store_errors():
        store = open_store(settings.db_url())
        try:
            a = store.action(action_id)
        except KeyError as exc:
            raise _fail(str(exc.args[0])) from exc
        approvals = store.approvals(action_id)
    show_plan(RestartPlan.model_validate(a.plan))
    console.print(f"state: [bold]{a.state}[/bold]; requested by {a.requested_by} via {a.surface} at "
                  f"{a.created_at:%Y-%m-%d %H:%M:%S} UTC" + (f"; reason: {a.reason}" if a.reason else ""))
    for ap in approvals:
        console.print(f"approved by {ap.approver} via {ap.surface} at {ap.at:%H:%M:%S} UTC "
                      f"(valid until {ap.expires_at:%H:%M:%S})")
    steps = Table(title="execution")
    for col in ("step", "role", "ok", "exit", "ms", "detail"):
        steps.add_column(col, overflow="fold")
    for s in a.execution or []:
        steps.add_row(s["kind"], s["role"], "yes" if s["ok"] else "[red]no[/red]", str(s["exit_status"]),
                      f"{s['elapsed_ms']:.0f}", s["detail"])
    if a.execution:
        console.print(steps)
    for r in (a.verification or {}).get("roles", []):
        console.print(f"verify {r['role']}: unit {r['active_state']}, health {r['health_status']}, "
                      f"tokens moved {r['tokens_delta']}" + (f"; problems: {'; '.join(r['problems'])}" if r["problems"] else ""))
    if a.evidence_probe_id:
        console.print(f"evidence probe (before): {a.evidence_probe_id}")
    if (a.verification or {}).get("after_probe"):
        console.print(f"evidence probe (after): {a.verification['after_probe']}")
    console.print(f"outcome: {a.outcome or '(none yet)'}")
