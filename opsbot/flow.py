"""The one path every trigger takes (core): probe → diagnose → record → plan remedies, and the action steps.

CLI commands, REST routes, Slack handlers, the alert intake and the report scheduler all call a
``Flow``; they only translate their input into these calls and the results into their output.
The store is synchronous (SQLAlchemy), so its calls run in a worker thread to keep the event loop
answering. Settings are built once, by whoever builds the ``Flow`` (a composition root), and
passed down from here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, get_args

from anyio import to_thread

from opsbot.bundle import TriggerKind
from opsbot.contracts import Bundle, Diagnosis, RestartCost, Trigger
from opsbot.contracts.captures import PartKind
from opsbot.incidents import Incidents
from opsbot.inventory import Inventory, load_inventory
from opsbot.settings import Settings
from opsbot.telemetry import Telemetry
from opsbot.yamlsource import ConfigError

if TYPE_CHECKING:
    from opsbot.act import ActionOutcome, RestartPlan, RunContext
    from opsbot.parse.fidelity import Baseline
    from opsbot.parse.templates import RoleHistory
    from opsbot.store.models import Action

R = TypeVar("R")
log = logging.getLogger(__name__)
ProbeFn = Callable[..., Awaitable[Bundle]]


class DiagnoseFn(Protocol):
    """``opsbot.diagnose.diagnose`` as the flow calls it: ``history`` (the roles' log templates while healthy, read
    from the store) for a probe it records."""

    def __call__(self, bundle: Bundle, *, history: Mapping[str, RoleHistory] | None = None) -> Diagnosis: ...


Progress = Callable[[str, str], None]
TRIGGER_KINDS: tuple[str, ...] = get_args(TriggerKind)


def _default_probe() -> ProbeFn:
    from opsbot.collect.probe import probe

    return probe


def _instance_id() -> str:
    """This opsbot process, as it signs its claims on shared rows: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _default_diagnose() -> DiagnoseFn:
    from opsbot.diagnose import diagnose

    return diagnose


class InventoryUnavailable(RuntimeError):
    """The inventory cannot be read: nothing can be probed until it is fixed (503, retry later)."""


@dataclass
class ProbeResult:
    """One probe as recorded: its row, the evidence, the diagnosis, and the restarts planned for it."""

    probe_id: str
    bundle: Bundle
    diagnosis: Diagnosis
    plans: dict[str, str] = field(default_factory=dict)  # role -> planned action id, waiting for approval
    refused: list[str] = field(default_factory=list)  # remedies the guardrails would not plan, and why
    costs: dict[str, RestartCost] = field(default_factory=dict)  # role -> what its plan costs (ladder)
    kinds: dict[str, str] = field(default_factory=dict)  # role -> its planned action's kind: restart, reregister

    def as_json(self) -> dict[str, Any]:
        """The public diagnosis JSON contract, plus which probe row holds the evidence."""
        return {"probe_id": self.probe_id, "cluster": self.bundle.cluster, **self.diagnosis.public(),
                "planned_actions": self.plans}


@dataclass
class RecallResult:
    """One recall run as recorded; ``worse_than``: the last good run (a ``RecallRun``) when this one recalls less."""

    probe_id: str
    bundle: Bundle
    diagnosis: Diagnosis
    worse_than: Any | None = None


@dataclass
class Flow:
    settings: Settings
    store: Any  # opsbot.store.Store; typed loosely so this module loads without SQLAlchemy
    probe: ProbeFn = field(default_factory=_default_probe)
    diagnose: DiagnoseFn = field(default_factory=_default_diagnose)
    telemetry: Telemetry = field(default_factory=Telemetry)
    instance: str = field(default_factory=_instance_id)
    pool: Any = None  # opsbot.collect.pool.KeptPool: connections kept across probes (set by the service)
    _inventory: tuple[float, Inventory] | None = None
    _inventory_checked: float = 0.0
    incidents: Incidents = field(init=False)  # an incident's life: opened by alerts' probes, its actions, resolved
    _captures: dict[str, asyncio.Task[None]] = field(default_factory=dict, init=False, repr=False)
    _stale_swept: float = 0.0
    _swept: float = 0.0

    def __post_init__(self) -> None:
        self.incidents = Incidents(self.store, self.db, reopen_s=self.settings.incident_reopen_s,
                                   stale_s=self.settings.incident_stale_s)

    def inventory(self) -> Inventory:
        """The inventory file, reloaded when it changes (the lab rewrites it on ``lab up``); its time stamp is
        looked at once a second at most (every alert call asks for it: a stat each was 7 % of the intake)."""
        checked = time.monotonic()
        if self._inventory is not None and checked - self._inventory_checked < 1.0:
            return self._inventory[1]
        path: Path = self.settings.inventory_path()
        try:
            mtime = path.stat().st_mtime
            self._inventory_checked = checked
            if self._inventory is None or self._inventory[0] != mtime:
                self._inventory = (mtime, load_inventory(path))
        except FileNotFoundError as exc:
            raise InventoryUnavailable(f"no inventory at {path}: run `opsbot lab up` or set OPSBOT_INVENTORY") from exc
        except ConfigError as exc:
            raise InventoryUnavailable(f"the inventory is refused: {exc}") from exc
        return self._inventory[1]

    def cluster_name(self, name: str | None = None) -> str:
        return self.inventory().cluster(name or self.settings.cluster)[0]

    def roles_for_words(self, text: str, cluster: str | None = None) -> list[str] | None:
        """The roles an operator's words name, with their PD peer and the router (None: all)."""
        from opsbot.scope import roles_for_words

        return roles_for_words(text, self.inventory().cluster(cluster or self.settings.cluster)[1])

    def alert_roles(self, role: str, cluster: str | None = None) -> list[str] | None:
        """The roles an alert on ``role`` probes (None: all): the router's alerts bring its workers."""
        from opsbot.scope import alert_probe_roles

        return alert_probe_roles(role, self.inventory().cluster(cluster or self.settings.cluster)[1])

    def _kept(self) -> dict[str, Any]:
        """The service's kept connections for one probe (none for the CLI: its probe opens and closes its own)."""
        return {"pool": self.pool.view()} if self.pool is not None else {}

    async def db(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """Run a store call off the event loop."""
        return await to_thread.run_sync(lambda: fn(*args, **kwargs))

    async def prepare(self) -> None:
        """Load, in a worker thread, what the first probe would otherwise load on the event loop: the probe,
        diagnose and act modules and the compiled runbooks (about half a second that stalled every call
        in flight, the alert intake's p99)."""
        def _load() -> None:
            import opsbot.act  # noqa: F401
            import opsbot.collect.probe  # noqa: F401
            from opsbot.diagnose import default_runbooks

            default_runbooks().metric_facts  # noqa: B018 - a cached property, computed now

        await to_thread.run_sync(_load)

    async def _recorded(self, trigger: Trigger, collect: Callable[[], Awaitable[Bundle]],
                        alert_ids: list[int] | None = None) -> ProbeResult:
        """Collect, diagnose (in a worker thread: the loop keeps answering meanwhile), record both; counted in
        the probe telemetry whatever happens."""
        started = time.perf_counter()
        outcome = "error"
        try:
            bundle = await collect()
            diagnosis = await self._with_history(bundle)
            probe_id = await self.db(self.store.save_probe, bundle, diagnosis, alert_ids)
            outcome = "finding" if diagnosis.findings else "no-finding"
        finally:
            self.telemetry.probes.labels(trigger.kind, outcome).inc()
            self.telemetry.probe_seconds.labels(trigger.kind).observe(time.perf_counter() - started)
        for finding in diagnosis.findings:
            self.telemetry.findings.labels(finding.incident).inc()
        return ProbeResult(probe_id, bundle, diagnosis)

    async def _with_history(self, bundle: Bundle) -> Diagnosis:
        """The diagnosis of a probe to be recorded: with each role's log templates while healthy (the store's), so
        a role that is not healthy names its lines new since healthy and a healthy one brings its templates to
        learn (opsbot/parse/templates.py); the diagnosis itself stays pure, the history is data passed in."""
        history = await self.db(self.store.role_history, bundle.cluster, [r.key for r in bundle.roles])
        return await to_thread.run_sync(lambda: self.diagnose(bundle, history=history))

    async def run_probe(self, cluster: str | None, roles: list[str] | None, trigger: Trigger, *,
                        progress: Progress | None = None, alert_ids: list[int] | None = None) -> ProbeResult:
        """Probe the scope, diagnose, record both (linked to the stored ``alert_ids`` it answers, in the same
        write), plan the remedies; bad scope raises before any connection."""
        inventory = self.inventory()
        result = await self._recorded(trigger, lambda: self.probe(
            inventory, cluster=cluster, roles=roles, trigger=trigger, settings=self.settings, decided=self._named,
            **({"progress": progress} if progress else {}), **self._kept()), alert_ids)
        await self._supersede_unnamed(result)
        await self._plan_remedies(result, actor=_actor(trigger))
        return result

    async def _supersede_unnamed(self, result: ProbeResult) -> None:
        """The restart plans waiting for approval that this probe of their roles no longer backs are superseded."""
        from opsbot.act import supersede_unnamed

        moved = await self.db(supersede_unnamed, self.store, result.bundle.cluster, result.probe_id,
                              result.diagnosis, {r.key for r in result.bundle.roles})
        for action_id in moved:  # its incident's message drops the button now, not at its next change
            action = await self.db(self.store.action, action_id)
            await self.incidents.action_moved(action_id, f"restart plan {action_id} {action.outcome}")

    async def _named(self, bundle: Bundle) -> str | None:
        """The classes the evidence names without the canary, if any: then the probe need not wait for the canary.

        The canary decides only where nothing else does (a transfer that never completes while every role looks
        fine, a router that answers it has no worker); a class already named outranks or explains those."""
        diagnosis = await to_thread.run_sync(self.diagnose, bundle)
        named = list(dict.fromkeys(f.incident for f in diagnosis.findings))
        return f"the other axes already name {', '.join(named)}" if named else None

    async def _plan_remedies(self, result: ProbeResult, *, actor: str) -> None:
        from opsbot.act import plan_remedies

        planned = await self.db(plan_remedies, self.store, self.inventory(), result.diagnosis, result.probe_id,
                                cluster=result.bundle.cluster, actor=actor, surface=_surface(actor),
                                settings=self.settings)
        result.plans, result.refused = planned.plans, planned.refused
        result.costs, result.kinds = planned.costs, planned.kinds  # ladder
        if self.pool is not None:  # a service: capture while the approval is awaited (the CLI captures at execute)
            for action_id in result.plans.values():
                self._capture_ahead(action_id)

    # -- the capture before a restart: a wedged role's stacks, state and last lines (opsbot.act.capture) ----
    def _capture_ahead(self, action_id: str) -> None:
        if action_id not in self._captures:
            self._captures[action_id] = asyncio.create_task(self._capture(action_id))

    async def capture_first(self, action_id: str) -> None:
        """Before a restart runs: the capture its plan asks for, awaited if it is under way, taken now if it
        was not taken; bounded by ``capture_deadline_s`` and never raising (the restart goes on)."""
        task = self._captures.get(action_id)
        await (task if task is not None else self._capture(action_id))

    async def _capture(self, action_id: str) -> None:
        from opsbot.act.capture import capture_plan
        from opsbot.contracts import RestartPlan

        try:
            action = await self.db(self.store.action, action_id)
            plan = RestartPlan.model_validate(action.plan)
            if not plan.capture or await self.db(self.store.captures, action_id):
                return
            deadline, per_command = self.settings.capture_deadline_s, self.settings.command_timeout_s
            if self.pool is not None:
                view = self.pool.view()
                try:
                    captures = await capture_plan(self.inventory(), plan, view, deadline, per_command)
                finally:
                    await view.close()
            else:
                from opsbot.collect.transport import TransportPool

                async with TransportPool(self.settings) as pool:
                    captures = await capture_plan(self.inventory(), plan, pool, deadline, per_command)
            for c in captures:
                await self.db(self.store.save_capture, action_id, c)
            said = "; ".join(f"{c.role}: {c.summary()}" for c in captures)
            await self.incidents.action_moved(
                action_id, f"evidence captured before the restart ({said}); `opsbot actions capture {action_id}`")
        except Exception as exc:  # noqa: BLE001 - a capture never stops the restart; why it failed is recorded
            log.warning("capture before restart %s failed: %s", action_id, exc)
            await self.incidents.action_moved(action_id, f"capture before the restart failed: {exc}"[:300])
        finally:
            self._captures.pop(action_id, None)

    # -- guarded restarts: request → approve → execute, or dismiss; all of it in opsbot.act ----------
    async def request_restart(self, roles: list[str], cluster: str | None, *, actor: str, surface: str,
                              reason: str | None = None, pair: bool = False,
                              capture: Sequence[PartKind] | None = None) -> tuple[Action, RestartPlan]:
        """Plan and record a restart (``planned``, waiting for approval); bad scope raises. ``capture``: the
        evidence taken before it runs (default: every part)."""
        from opsbot.act import request_restart
        from opsbot.contracts.captures import ALL_PARTS

        return await self.db(request_restart, self.store, self.inventory(), roles, actor=actor, surface=surface,
                             cluster=cluster or self.settings.cluster, reason=reason, pair=pair,
                             settings=self.settings, capture=ALL_PARTS if capture is None else capture)

    async def approve(self, action_id: str, *, approver: str, surface: str) -> Action:
        """Record an approval (the incident it belongs to hears it); ``ApprovalRefused`` (audited) when it is not
        waiting for approval: expired, superseded, its incident resolved."""
        from opsbot.act import approve

        action = await self.db(approve, self.store, action_id, approver, surface, self.settings)
        await self.incidents.action_moved(action_id, f"restart approved by {approver} via {surface}")
        return action

    async def approve_and_execute(self, action_id: str, *, approver: str, surface: str) -> ActionOutcome:
        """Approve, then run it behind its guards: what a click or ``POST /actions/ID/approve`` does; a ladder
        step that failed offers the next one."""
        from opsbot.act.ladder import said
        from opsbot.contracts import ActionState

        await self.approve(action_id, approver=approver, surface=surface)
        outcome = await self.execute(action_id, actor=approver, surface=surface)
        if outcome.state == ActionState.failed and outcome.after_probe_id:
            if (await self.db(self.store.action, action_id)).kind != "restart":  # ladder: the next step
                await self._next_step(action_id, outcome.after_probe_id, said)
        return outcome

    async def _next_step(self, action_id: str, probe_id: str, said: Callable[[str, str], str]) -> None:
        """After a ladder step failed: plan the remedies of its after-probe (the failed step is passed over),
        and put the step now offered on the incident's timeline."""
        bundle = await self.db(self.store.load_bundle, probe_id)
        result = ProbeResult(probe_id, bundle, await to_thread.run_sync(self.diagnose, bundle))
        await self._plan_remedies(result, actor="ladder")
        for role, planned in result.plans.items():
            kind = (await self.db(self.store.action, planned)).kind
            await self.incidents.next_step(action_id, planned, f"ladder: next step offered: {said(kind, role)} "
                                                              f"(plan {planned})")

    async def execute(self, action_id: str, *, actor: str, surface: str) -> ActionOutcome:
        """Run an approved action behind its guards (``opsbot.act.execute``; a re-registration,
        ``opsbot.act.reregister``), count its outcome, and tell the incidents: whichever surface ran it, a
        verified restart ends the incidents that waited for it."""
        from opsbot.act import execute
        from opsbot.act.reregister import KIND, execute_reregister
        from opsbot.contracts import ActionState

        ctx = self.run_context(actor, surface)
        action = await self.db(self.store.action, action_id)
        outcome = await (execute_reregister(ctx, action_id) if action.kind == KIND else execute(ctx, action_id))
        self.telemetry.actions.labels(outcome.state).inc()
        if outcome.state != ActionState.planned:
            action = await self.db(self.store.action, action_id)
            await self.incidents.restart_ended(action, f"{action.kind} {outcome.state}: {outcome.message}",
                                               outcome.after_probe_id)
        return outcome

    async def reconcile(self) -> list[ActionOutcome]:
        """Settle restarts a dead opsbot left ``executing``, by probing their roles; never re-run."""
        from opsbot.act import reconcile

        return await reconcile(self.run_context("opsbot", "reconcile"))

    def run_context(self, actor: str, surface: str) -> RunContext:
        """What act runs an action with: this flow's store, inventory and settings, and its two ports."""
        from opsbot.act import RunContext

        trigger = Trigger(kind=surface if surface in TRIGGER_KINDS else "cli", user=actor)

        async def evidence(cluster: str, roles: list[str], why: str) -> tuple[str, Diagnosis]:
            bundle = await self.probe(self.inventory(), cluster=cluster, roles=roles, settings=self.settings,
                                      trigger=trigger.model_copy(update={"text": why}), **self._kept())
            diagnosis = await self._with_history(bundle)
            return await self.db(self.store.save_probe, bundle, diagnosis), diagnosis

        async def look(cluster: str, roles: list[str], why: str) -> tuple[Bundle, Diagnosis]:
            bundle = await self.probe(self.inventory(), cluster=cluster, roles=roles, settings=self.settings,
                                      trigger=trigger.model_copy(update={"text": why}), **self._kept())
            return bundle, await to_thread.run_sync(self.diagnose, bundle)

        return RunContext(store=self.store, inventory=self.inventory(), settings=self.settings, actor=actor,
                          surface=surface, evidence=evidence, look=look, capture=self.capture_first)

    # -- the long-context recall probe: by hand, after a deploy, on a schedule ------------------------
    async def run_recall(self, cluster: str | None, trigger: Trigger, *, plan: Any | None = None,
                         progress: Callable[..., None] | None = None,
                         probe_progress: Progress | None = None) -> RecallResult:
        """The recall grid and a probe of every role, diagnosed and recorded, compared with the last good run.

        The deploy recorded since the last good run (act's ``deploy restart`` audit entries) goes into
        the bundle, so the finding names the deploy that preceded the first failing run."""
        from opsbot.collect.recall import plan_from, recall_bundle
        from opsbot.parse.recall import run_record, worse

        inventory = self.inventory()
        name = self.cluster_name(cluster)
        runs = await self.db(self.store.recall_runs, cluster=name)
        good = next((r for r in reversed(runs) if r.record.get("pattern") == "full"), None)
        deploy = await self.db(self._deploy_since, name, good.at if good else None)
        done = await self._recorded(trigger, lambda: recall_bundle(
            inventory, cluster=name, plan=plan or plan_from(self.settings), settings=self.settings, trigger=trigger,
            progress=progress, probe_progress=probe_progress, after_deploy=deploy))
        record = run_record(done.bundle.recall) if done.bundle.recall is not None else {}
        return RecallResult(done.probe_id, done.bundle, done.diagnosis,
                            good if good is not None and worse(record, good.record) else None)

    # -- the output-fidelity probe: by hand, after a deploy, on a schedule -----------------------------
    async def run_fidelity(self, cluster: str | None, trigger: Trigger, *, baseline: Path | None = None,
                           alert_ids: list[int] | None = None) -> ProbeResult:
        """Fixed greedy prompts of every decode instance and rank, compared with the cluster's baseline (or
        ``baseline``), with a probe of every role: diagnosed, recorded, remedies planned, the result exported."""
        from opsbot.collect.fidelity import baseline_path, fidelity_bundle, load_baseline
        from opsbot.parse.fidelity import fidelity_facts, verdict

        inventory = self.inventory()
        name = self.cluster_name(cluster)
        base = await to_thread.run_sync(load_baseline, baseline or baseline_path(self.settings, name))
        since = datetime.fromisoformat(base.recorded_at.replace("Z", "+00:00")) if base is not None else None
        deploy = await self.db(self._deploy_since, name, since) if since is not None else None
        result = await self._recorded(trigger, lambda: fidelity_bundle(
            inventory, cluster=name, settings=self.settings, trigger=trigger, baseline=base, after_deploy=deploy),
            alert_ids)
        self.telemetry.fidelity.labels(name).set(verdict(result.bundle.fidelity))
        self.telemetry.fidelity_diverged.labels(name).set(fidelity_facts(result.bundle.fidelity).get("diverged", 0))
        await self._plan_remedies(result, actor=_actor(trigger))
        return result

    async def record_fidelity(self, cluster: str | None, *, repeats: int = 3,
                              path: Path | None = None) -> tuple[Baseline, Path]:
        """Record the cluster's fidelity baseline (after a deploy that passed its checks): the baseline and its file."""
        from opsbot.collect.fidelity import baseline_path, record, save_baseline

        name = self.cluster_name(cluster)
        baseline = await record(self.inventory(), cluster=name, settings=self.settings, repeats=repeats)
        target = path or baseline_path(self.settings, name)
        await to_thread.run_sync(save_baseline, target, baseline)
        return baseline, target

    def _deploy_since(self, cluster: str, since: datetime | None) -> str | None:
        """The latest deploy of ``cluster`` recorded after ``since``, in a line; None when there was none."""
        restarts = [e for e in self.store.audit_log(since=since, limit=200)
                    if e.cluster == cluster and e.what == "deploy restart"]
        if not restarts:
            return None
        last = restarts[0]
        deploy = (last.detail or {}).get("deploy")
        roles = sorted({e.role for e in restarts if e.role and (e.detail or {}).get("deploy") == deploy})
        return (f"{deploy or 'a deploy'} by {last.actor} at {last.at:%Y-%m-%d %H:%M} UTC"
                + (f" (restarted {', '.join(roles)})" if roles else ""))

    async def sweep_incidents(self) -> int:
        """The lease's sweep, every few seconds: the notifier catches up with incidents another process moved (the
        CLI's restart ended one); once a minute, open incidents gone stale close themselves."""
        if time.monotonic() - self._swept < 5.0:
            return 0
        self._swept = time.monotonic()
        await self.incidents.catch_up()
        if time.monotonic() - self._stale_swept >= 60.0:
            self._stale_swept = time.monotonic()
            await self.incidents.close_stale()
        return 0  # not a take-over: nothing a dead instance left

    async def dismiss(self, action_id: str, *, actor: str, surface: str) -> Action | None:
        """A planned restart nobody will approve: closed as refused, with who dismissed it."""
        from opsbot.act import dismiss

        row = await self.db(dismiss, self.store, action_id, actor=actor, surface=surface)
        if row is not None:
            self.telemetry.actions.labels("dismissed").inc()
            await self.incidents.action_moved(action_id, f"restart dismissed by {actor} via {surface}")
        return row


def _actor(trigger: Trigger) -> str:
    return f"{trigger.kind}:{trigger.user}" if trigger.user else trigger.kind


def _surface(actor: str) -> str:
    return actor.split(":", 1)[0]
