"""Did the restarted roles come back? (act): read from probes of them, taken through the flow's port.

A role passes when its unit is active, its health endpoint answers 200, (prefill, decode) its
token counters move between the probe's two /metrics samples, and the diagnosis names no critical
or high finding on it; every finding on the role is kept with the check.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, Field

from opsbot.contracts import Bundle, Diagnosis, Severity
from opsbot.inventory import Role
from opsbot.parse.errors import ParseError
from opsbot.parse.metricnames import REALTIME_TOKENS, exposed
from opsbot.parse.metrics import parse_samples, tokens_delta
from opsbot.parse.unit import parse_unit
from opsbot.settings import Settings

BLOCKING = (Severity.critical, Severity.high)
# The flow's port: probe these roles of the cluster and diagnose them (not recorded: verification loops).
Look = Callable[[str, list[str], str], Awaitable[tuple[Bundle, Diagnosis]]]


class RoleCheck(BaseModel):
    """One look at a role: is the unit active, is health answering, are tokens moving?"""

    role: str
    active_state: str | None = None
    result: str | None = None
    exec_main_status: int | None = None
    health_status: int | None = None
    tokens_delta: float | None = None
    counters_checked: bool = True
    findings: list[str] = Field(default_factory=list, description="incidents the diagnosis names on the role")
    problems: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_role(bundle: Bundle, diagnosis: Diagnosis, role: Role) -> RoleCheck:
    """The role's check from a probe of it (pure)."""
    check = RoleCheck(role=role.key, counters_checked=role.role != "router" and role.metrics_url is not None,
                      findings=[f.incident for f in diagnosis.findings if role.key in f.roles])
    ev = bundle.role(role.key)
    if ev is None:
        check.problems.append(f"the probe has no evidence of {role.key}")
        return check
    try:
        unit = parse_unit(ev.systemd.raw)
        check.active_state, check.result, check.exec_main_status = unit.active_state, unit.result, unit.exec_main_status
        if unit.active_state != "active":
            check.problems.append(f"unit {role.unit} is {unit.active_state}/{unit.sub_state} "
                                  f"(result {unit.result}, exit status {unit.exec_main_status})")
    except ParseError:
        check.problems.append(f"systemctl show {role.unit} failed: {ev.systemd.error or 'no answer'}")
    if role.health_url:
        check.health_status = ev.health.status
        if ev.health.status != 200:
            check.problems.append(f"health {role.health_url}: {ev.health.error or f'HTTP {ev.health.status}'}")
    for f in diagnosis.findings:
        if role.key in f.roles and f.severity in BLOCKING:
            check.problems.append(f"still diagnosed: {f.incident} ({f.severity}): {f.summary}")
    if check.counters_checked and not check.problems:
        if not ev.metrics.ok:
            check.problems.append(f"metrics {role.metrics_url}: {ev.metrics.error}")
        else:
            metrics = parse_samples(ev.metrics.samples)
            check.tokens_delta = tokens_delta(metrics, role.role)
            if check.tokens_delta is None:
                check.problems.append(f"no {exposed(REALTIME_TOKENS, '_total')} counter in /metrics")
            elif check.tokens_delta <= 0:
                check.problems.append(f"no tokens processed in {metrics.window_s or 0:.1f} s "
                                      f"({REALTIME_TOKENS}_total did not move)")
    return check


async def verify_roles(look: Look, cluster: str, roles: list[Role], settings: Settings) -> dict[str, Any]:
    """Probe the roles until all pass or the deadline passes; the last check of each role is kept."""
    started = time.monotonic()
    attempts = 0
    while True:
        attempts += 1
        bundle, diagnosis = await look(cluster, [r.key for r in roles], "verify restart")
        checks = [check_role(bundle, diagnosis, r) for r in roles]
        elapsed = time.monotonic() - started
        if all(c.ok for c in checks) or elapsed >= settings.verify_deadline_s:
            return {"ok": all(c.ok for c in checks), "attempts": attempts, "elapsed_s": round(elapsed, 1),
                    "deadline_s": settings.verify_deadline_s, "roles": [c.model_dump() for c in checks]}
        await asyncio.sleep(min(2.0, max(0.0, settings.verify_deadline_s - elapsed)))
