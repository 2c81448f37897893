"""Restart plans (pure): which units, in what order, the exact commands, and the pre-checks.

A restart is never a blind ``systemctl restart``: the plan stops the role, waits until its GPUs'
memory is released (``nvidia-smi`` on the role's GPUs), then starts it and verifies it.
"""

from __future__ import annotations

from collections.abc import Sequence

from opsbot.contracts.captures import ALL_PARTS, PartKind
from opsbot.contracts.plans import RestartPlan, Step, StepKind
from opsbot.inventory import Inventory, Role
from opsbot.nodecommands import gpu_query, systemctl, unit_show
from opsbot.parse.metricnames import REALTIME_TOKENS
from opsbot.settings import Settings


class PlanRefused(ValueError):
    """The request cannot become a plan; the message says what to ask for instead."""


def plan_restart(inventory: Inventory, roles: list[str], *, cluster: str | None = None, pair: bool = False,
                 reason: str | None = None, settings: Settings,
                 capture: Sequence[PartKind] = ALL_PARTS) -> RestartPlan:
    """A plan for restarting ``roles``; ``UnknownRole``/``ConfigError`` for bad scope, ``PlanRefused`` for unsafe."""
    name, cl = inventory.cluster(cluster)
    if not roles:
        raise PlanRefused("name the role to restart, e.g. `opsbot restart decode`")
    selected = cl.select(roles)
    kinds = {r.role for r in selected}
    both_sides = {"prefill", "decode"} <= kinds
    if both_sides and not pair:
        raise PlanRefused(
            "this would take down both sides of the prefill/decode pair at once; restart one side, or pass "
            "--pair when that is the intent (a PD pair desync, incident pd-desync, needs both)"
        )
    if pair and not both_sides:
        raise PlanRefused("--pair restarts a prefill and a decode together; name one of each")
    # stop decode before prefill (no new transfers into a dying decode); start prefill first (decode bootstraps to it)
    stop_order = sorted(selected, key=lambda r: {"router": 0, "decode": 1, "prefill": 2}[r.role])
    start_order = list(reversed(stop_order))
    steps: list[Step] = [_step("stop", r, systemctl("stop", r.unit), "stop the unit") for r in stop_order]
    for r in stop_order:
        if r.gpus:
            steps.append(_step("wait-gpu-release", r, gpu_query(r.gpus),
                               f"repeat until GPUs {r.gpus} each use <= {settings.gpu_release_mib:g} MiB "
                               f"(at most {settings.gpu_release_timeout_s:g} s); the unit is not started otherwise"))
    steps += [_step("reset-failed", r, systemctl("reset-failed", r.unit),
                    "clear a failed state and the start-rate count (a unit that crash-looped past its "
                    "StartLimitBurst refuses a plain start)") for r in start_order]
    steps += [_step("start", r, systemctl("start", r.unit), "start the unit") for r in start_order]
    steps += [_step("verify", r, unit_show(r.unit), _verify_note(r)) for r in start_order]
    checks = [
        "action approved and approval not expired",
        f"lock on each role taken (no other restart of {', '.join(r.key for r in selected)} in flight)",
        f"cooldown: no restart of the role in the last {settings.restart_cooldown_s / 60:g} min",
        f"budget: fewer than {settings.restart_budget} restarts in cluster {name} in the last "
        f"{settings.restart_budget_window_s / 60:g} min",
        "prefill/decode pair: " + ("both sides on purpose (--pair)" if pair
                                   else "the other side of the pair is not being restarted"),
        "evidence: a probe of the role is taken and stored before the first step",
        *([f"capture: {', '.join(capture)} of the role, kept with the action (at most "
           f"{settings.capture_deadline_s:g} s; a failed capture is recorded and does not stop the restart)"]
          if capture else []),
    ]
    verify = [f"unit active, health answering, token counters moving, within {settings.verify_deadline_s:g} s"]
    return RestartPlan(cluster=name, roles=[r.key for r in selected], kinds=sorted(kinds), pair_on_purpose=pair,
                       reason=reason, steps=steps, checks=checks, verify=verify, capture=list(capture))


def _step(kind: StepKind, role: Role, argv: list[str], note: str) -> Step:
    return Step(kind=kind, role=role.key, node=role.node, unit=role.unit, argv=argv, note=note)


def _verify_note(role: Role) -> str:
    parts = ["ActiveState=active"]
    if role.health_url:
        parts.append(f"GET {role.health_url} answers 200")
    if role.metrics_url and role.role != "router":
        parts.append(f"{REALTIME_TOKENS} counter moves between two samples of {role.metrics_url}")
    return "; ".join(parts)
