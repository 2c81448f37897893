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
from rich.markup import escape
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from opsbot.act import ActionOutcome, RestartPlan
    from opsbot.flow import Flow
    from opsbot.inventory import Inventory
    from opsbot.settings import Settings

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


def _flow(settings: Settings) -> Flow:
    """The CLI's flow over the store (opened and upgraded), after settling any action a crashed opsbot left executing."""
    import asyncio

    from opsbot.flow import Flow
    from opsbot.store import StoreError, open_store

    try:
        flow = Flow(settings=settings, store=open_store(settings.db_url()))
    except StoreError as exc:
        raise _fail(str(exc)) from exc
    for o in asyncio.run(flow.reconcile()):
        console.print(f"[yellow]reconciled interrupted action {o.action_id}: {o.state}: {escape(o.message)}[/yellow]")
    return flow


def show_plan(plan: RestartPlan) -> None:
    table = Table(title=f"restart plan: {', '.join(plan.roles)} in cluster {plan.cluster}", show_lines=False)
    for col in ("#", "step", "role", "node", "command", "note"):
        table.add_column(col, overflow="fold")
    for i, s in enumerate(plan.steps, 1):
        table.add_row(str(i), *(Text(cell) for cell in (s.kind, s.role, s.node, shlex.join(s.argv), s.note)))
    console.print(table)
    console.print("pre-checks:\n" + "\n".join(f"  - {c}" for c in plan.checks), markup=False)
    console.print("verify: " + "; ".join(plan.verify), markup=False)
    if plan.cost is not None:  # ladder: what it costs, the same lines Slack and REST show
        console.print("cost:\n" + "\n".join(f"  - {c}" for c in plan.cost.said()), markup=False)


def _costed(settings: Settings, inventory: Inventory, plan: RestartPlan) -> RestartPlan:
    """The plan with its cost (ladder), read from the store; a store that cannot be opened is said, and a dry
    run never creates one."""
    from sqlalchemy.engine import make_url

    from opsbot.act.cost import with_cost
    from opsbot.contracts import RestartCost
    from opsbot.store import StoreError, open_store

    url = make_url(settings.db_url())
    if url.get_backend_name() == "sqlite" and url.database and not Path(url.database).exists():
        return plan.model_copy(update={"cost": RestartCost(lines=[f"cost unknown: no store at {url.database} yet "
                                                                  "(no probe or restart on record)"])})
    try:
        store = open_store(settings.db_url())
    except StoreError as exc:
        return plan.model_copy(update={"cost": RestartCost(lines=[f"cost unknown: {exc}"])})
    try:
        return with_cost(store, inventory, plan)
    finally:
        store.close()


def _report(outcome: ActionOutcome) -> None:
    from opsbot.contracts import ActionState

    colour = {ActionState.succeeded: "green", ActionState.refused: "yellow", ActionState.planned: "yellow",
              ActionState.superseded: "yellow"}.get(outcome.state, "red")
    console.print(f"[{colour}]action {outcome.action_id}: {outcome.state}[/{colour}]: {escape(outcome.message)}")
    if outcome.evidence_probe_id:
        console.print(f"evidence probe: {outcome.evidence_probe_id}")


def _execute(flow: Flow, action_id: str, actor: str, *, approve: bool = False) -> ActionOutcome:
    """Run it through the flow (approving it first with ``approve``), as a Slack click or a REST approve does:
    the incidents that wait for this restart hear how it ended. A refused approval exits 2, saying why."""
    import asyncio

    from opsbot.act import ApprovalRefused

    run = flow.approve_and_execute(action_id, approver=actor, surface="cli") if approve else flow.execute(
        action_id, actor=actor, surface="cli")
    try:
        with console.status(f"restarting (action {action_id}): probe, stop, wait for GPU release, start, verify ..."):
            return asyncio.run(run)
    except ApprovalRefused as exc:
        raise _fail(f"refused: {exc}") from exc


def restart(
    roles: list[str] = typer.Argument(..., help="role(s) to restart, e.g. decode"),
    cluster: str | None = typer.Option(None, "--cluster", "-c"),
    dry_run: bool = typer.Option(False, "--dry-run", help="show the plan and exact commands; change nothing"),
    approve_now: bool = typer.Option(False, "--approve", help="approve it yourself and run it now"),
    reason: str | None = typer.Option(None, "--reason", help="why (kept in the audit log)"),
    pair: bool = typer.Option(False, "--pair", help="restart a prefill and a decode together on purpose (pd-desync)"),
    no_capture: bool = typer.Option(False, "--no-capture", help="skip the capture of stacks, server state and last "
                                    "lines taken before the restart (up to OPSBOT_CAPTURE_DEADLINE_S)"),
) -> None:
    """Restart a role behind approval, cooldown, budget and lock; verify it came back.

    Before the first step the role's evidence is captured and kept with the action: py-spy stacks of
    every process of the unit (twice), /server_info, the in-flight requests and the run's last lines
    (`opsbot actions capture ID`)."""
    import asyncio

    from opsbot.act import PlanRefused, plan_restart
    from opsbot.contracts import ActionState
    from opsbot.contracts.captures import ALL_PARTS
    from opsbot.inventory import UnknownRole
    from opsbot.settings import get_settings
    from opsbot.yamlsource import ConfigError

    settings = get_settings()
    inventory = _inventory(settings)
    cluster = cluster or settings.cluster
    try:
        capture = () if no_capture else ALL_PARTS
        plan = plan_restart(inventory, roles, cluster=cluster, pair=pair, reason=reason, settings=settings,
                            capture=capture)
    except (UnknownRole, PlanRefused, ConfigError) as exc:
        raise _fail(f"refused: {exc}") from exc
    show_plan(_costed(settings, inventory, plan))
    if dry_run:
        console.print("[cyan]dry run: nothing was changed[/cyan]")
        return
    actor = getpass.getuser()
    with _store_errors():
        flow = _flow(settings)
        action, _ = asyncio.run(flow.request_restart(roles, cluster, actor=actor, surface="cli", reason=reason,
                                                     pair=pair, capture=capture))
        if action.state == ActionState.planned and not approve_now:
            console.print(f"[yellow]approval required[/yellow]: `opsbot actions approve {action.id}` "
                          f"before {action.expires_at:%H:%M:%S} UTC (or re-run with --approve)")
            return
        outcome = _execute(flow, action.id, actor, approve=action.state == ActionState.planned)
    _report(outcome)
    if not outcome.ok:
        raise typer.Exit(1)


@actions_app.command("list")
def list_actions(state: str | None = typer.Option(None, "--state"), limit: int = typer.Option(30, "--limit")) -> None:
    """Recent actions and their state (`opsbot actions show ID` for one in full)."""
    from opsbot.settings import get_settings

    settings = get_settings()
    _inventory(settings)
    store = _flow(settings).store
    table = Table(title="actions")
    for col in ("id", "created (UTC)", "cluster", "role", "state", "by", "approved by", "outcome"):
        table.add_column(col, overflow="fold")
    for a in store.actions(state=state, limit=limit):
        table.add_row(*(Text(cell) for cell in (
            a.id, f"{a.created_at:%Y-%m-%d %H:%M:%S}", a.cluster, a.role, a.state, f"{a.requested_by} ({a.surface})",
            f"{a.approved_by} ({a.approved_surface})" if a.approved_by else "", a.outcome or "")))
    console.print(table)


@actions_app.command("approve")
def approve_action(
    action_id: str,
    run: bool = typer.Option(True, "--run/--no-run", help="run the restart right after approving"),
) -> None:
    """Approve a planned action (recorded with your name and the CLI surface), then run it."""
    import asyncio

    from opsbot.act import ApprovalRefused
    from opsbot.settings import get_settings

    settings = get_settings()
    _inventory(settings)
    flow = _flow(settings)
    actor = getpass.getuser()
    try:
        action = asyncio.run(flow.approve(action_id, approver=actor, surface="cli"))
    except ApprovalRefused as exc:
        raise _fail(f"refused: {exc}") from exc
    console.print(f"approved {action.id} ({action.role}); approval valid until {action.expires_at:%H:%M:%S} UTC")
    if run:
        with _store_errors():
            outcome = _execute(flow, action.id, actor)
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
        captures = store.captures(action_id)
    show_plan(RestartPlan.model_validate(a.plan))
    e = escape  # every stored string is shown as text, never read as rich markup
    console.print(f"state: [bold]{e(a.state)}[/bold]; requested by {e(a.requested_by)} via {e(a.surface)} at "
                  f"{a.created_at:%Y-%m-%d %H:%M:%S} UTC" + (f"; reason: {e(a.reason)}" if a.reason else ""))
    for ap in approvals:
        console.print(f"approved by {e(ap.approver)} via {e(ap.surface)} at {ap.at:%H:%M:%S} UTC "
                      f"(valid until {ap.expires_at:%H:%M:%S})")
    steps = Table(title="execution")
    for col in ("step", "role", "ok", "exit", "ms", "detail"):
        steps.add_column(col, overflow="fold")
    for s in a.execution or []:
        steps.add_row(*(Text(str(s.get(k, ""))) for k in ("kind", "role")),
                      "yes" if s.get("ok") else "[red]no[/red]", str(s.get("exit_status")),
                      f"{s.get('elapsed_ms') or 0:.0f}", Text(str(s.get("detail", ""))))
    if a.execution:
        console.print(steps)
    for r in (a.verification or {}).get("roles", []):
        problems = "; ".join(r.get("problems") or [])
        console.print(f"verify {e(str(r.get('role')))}: unit {e(str(r.get('active_state')))}, health "
                      f"{r.get('health_status')}, tokens moved {r.get('tokens_delta')}"
                      + (f"; problems: {e(problems)}" if problems else ""))
    if a.evidence_probe_id:
        console.print(f"evidence probe (before): {e(a.evidence_probe_id)}")
    after = (a.verification or {}).get("after_probe")
    if after:
        console.print(f"evidence probe (after): {e(str(after))}")
    for c in captures:
        console.print(f"captured before the restart, {e(c.role)}: {e(c.summary())} "
                      f"(`opsbot actions capture {e(action_id)}`)")
    console.print(f"outcome: {e(a.outcome or '(none yet)')}")


@actions_app.command("capture")
def show_capture(action_id: str) -> None:
    """What was captured before the action's restart: every process's stacks, /server_info, the in-flight
    requests, the run's last journal lines (as captured, cut where they passed the cap)."""
    from opsbot.settings import get_settings
    from opsbot.store import open_store

    with _store_errors():
        store = open_store(get_settings().db_url())
        try:
            store.action(action_id)
            captures = store.captures(action_id)
        except KeyError as exc:
            raise _fail(str(exc.args[0])) from exc
        finally:
            store.close()
    if not captures:
        raise _fail(f"nothing was captured for action {action_id} (no restart of a live role, or --no-capture)", 1)
    for c in captures:
        console.rule(f"{c.role} ({c.unit}) captured {c.started_at:%Y-%m-%d %H:%M:%S} UTC", characters="=")
        console.print(Text(c.summary()))
        for p in c.parts:
            console.rule(p.name)
            console.print(Text(p.text if p.ok else f"(failed: {p.error})"), soft_wrap=True)
