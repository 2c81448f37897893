"""The guards' dry run: would a restart of a role pass every guard now? Nothing is planned or recorded.

The same checks ``execute`` makes (plan, cooldown, budget, lock, prefill/decode pair), each with its
own verdict, so "is it safe to restart prefill" is answered check by check.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from opsbot.act.guards import budget_until, cooldown_until, when
from opsbot.act.plan import PlanRefused, plan_restart
from opsbot.inventory import Inventory, UnknownRole
from opsbot.settings import Settings
from opsbot.store import Store
from opsbot.store.models import now as utcnow
from opsbot.yamlsource import ConfigError

PAIR = {"prefill": "decode", "decode": "prefill"}


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class DryRun:
    role: str
    checks: list[Check]

    @property
    def safe(self) -> bool:
        return all(c.ok for c in self.checks)


def dry_run(store: Store, inventory: Inventory, role: str, settings: Settings, *, cluster: str | None = None,
            at: datetime | None = None) -> DryRun:
    at = at or utcnow()
    try:
        plan = plan_restart(inventory, [role], cluster=cluster or settings.cluster, settings=settings)
    except (UnknownRole, ConfigError, PlanRefused) as exc:
        return DryRun(role, [Check("plan", False, str(exc))])
    checks = [Check("plan", True, " → ".join(f"{s.kind} {s.role}" for s in plan.steps if s.kind != "verify"))]
    cooldown = timedelta(seconds=settings.restart_cooldown_s)
    past = store.restarts_since(plan.cluster, at - cooldown)
    for key in plan.roles:
        starts = [a.started_at for a in past if a.started_at and key in a.roles]
        until = cooldown_until(starts, cooldown, at)
        checks.append(Check("cooldown", until is None,
                            f"{key} was restarted at {max(starts):%H:%M:%S} UTC; allowed {when(until, at)}" if until
                            else f"no restart of {key} in the last {cooldown.total_seconds() / 60:g} min"))
    window = timedelta(seconds=settings.restart_budget_window_s)
    recent = [a.started_at for a in store.restarts_since(plan.cluster, at - window) if a.started_at]
    until = budget_until(recent, settings.restart_budget, window, at)
    used = f"{len(recent)} of {settings.restart_budget} restarts used in the last {window.total_seconds() / 60:g} min"
    checks.append(Check("budget", until is None, used + (f"; allowed {when(until, at)}" if until else "")))
    locks = {lock.role: lock for lock in store.locks(plan.cluster) if lock.expires_at > at}
    held = [f"{k} by action {locks[k].action_id}" for k in plan.roles if k in locks]
    checks.append(Check("lock", not held, "held: " + ", ".join(held) if held else "no restart of it in flight"))
    kinds = {r.key: r.role for r in inventory.cluster(plan.cluster)[1].roles}
    other = {PAIR[k] for k in plan.kinds if k in PAIR}
    busy = [f"{k} (action {lock.action_id})" for k, lock in locks.items() if kinds.get(k) in other]
    checks.append(Check("pair", not busy, "the other side is being restarted: " + ", ".join(busy) if busy
                        else "the other side of the prefill/decode pair is not being restarted"))
    return DryRun(role, checks)
