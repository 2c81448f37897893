"""Running a plan's steps on the nodes, and checking that a role came back (the I/O half of act)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pydantic import BaseModel, Field

from opsbot.act.plan import Step, gpu_query, unit_show
from opsbot.bundle import MetricSample, utcnow
from opsbot.collect.transport import CommandResult, Transport
from opsbot.inventory import Role
from opsbot.parse.errors import ParseError
from opsbot.parse.gpu import parse_gpu_csv
from opsbot.parse.metrics import parse_samples
from opsbot.parse.unit import parse_unit
from opsbot.settings import Settings


class StepResult(BaseModel):
    kind: str
    role: str
    argv: list[str]
    ok: bool
    exit_status: int | None = None
    detail: str = ""
    elapsed_ms: float = 0.0


class RoleCheck(BaseModel):
    """One look at a role: is the unit active, is health answering, are tokens moving?"""

    role: str
    active_state: str | None = None
    result: str | None = None
    exec_main_status: int | None = None
    health_status: int | None = None
    tokens_delta: float | None = None
    counters_checked: bool = True
    problems: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _tail(text: str, n: int = 400) -> str:
    text = text.strip()
    return text if len(text) <= n else "..." + text[-n:]


def _result(step: Step, res: CommandResult, detail: str = "") -> StepResult:
    why = detail or res.error or _tail(res.stderr) or _tail(res.stdout)
    return StepResult(kind=step.kind, role=step.role, argv=list(res.argv), ok=res.ok, exit_status=res.exit_status,
                      detail=why, elapsed_ms=res.elapsed_ms)


async def run_command(transport: Transport, step: Step, settings: Settings) -> StepResult:
    return _result(step, await transport.run(step.argv, timeout=settings.command_timeout_s))


async def wait_gpu_release(transport: Transport, step: Step, gpus: list[int], settings: Settings) -> StepResult:
    """Poll ``nvidia-smi`` on the role's GPUs until each uses at most ``gpu_release_mib``, or time out."""
    started = time.monotonic()
    last = "no answer"
    while True:
        res = await transport.run(gpu_query(gpus), timeout=settings.command_timeout_s)
        if res.ok:
            try:
                rows = [r for r in parse_gpu_csv(res.stdout) if r.index in gpus]
            except ParseError as exc:
                rows, last = [], str(exc)
            busy = {r.index: r.memory_used_mib for r in rows
                    if r.memory_used_mib is None or r.memory_used_mib > settings.gpu_release_mib}
            if rows and not busy:
                used = ", ".join(f"GPU{r.index} {r.memory_used_mib:g} MiB" for r in rows)
                return StepResult(kind=step.kind, role=step.role, argv=res.argv, ok=True, exit_status=0,
                                  detail=f"released: {used}", elapsed_ms=(time.monotonic() - started) * 1000)
            if rows:
                last = "still held: " + ", ".join(f"GPU{i} {m if m is not None else '?'} MiB" for i, m in busy.items())
            elif not last.startswith("nvidia-smi"):
                last = f"nvidia-smi listed none of GPUs {gpus}"
        else:
            last = res.error or _tail(res.stderr) or f"nvidia-smi exited {res.exit_status}"
        if time.monotonic() - started >= settings.gpu_release_timeout_s:
            return StepResult(kind=step.kind, role=step.role, argv=res.argv, ok=False, exit_status=res.exit_status,
                              detail=f"GPU memory not released within {settings.gpu_release_timeout_s:g} s ({last}); "
                                     "the unit was left stopped: find the process still holding the GPU",
                              elapsed_ms=(time.monotonic() - started) * 1000)
        await asyncio.sleep(1.0)


async def check_role(transport: Transport, role: Role, settings: Settings) -> RoleCheck:
    """Unit active, health 200, and realtime token counters moving between two /metrics samples."""
    check = RoleCheck(role=role.key, counters_checked=role.role != "router" and role.metrics_url is not None)
    res = await transport.run(unit_show(role.unit), timeout=settings.command_timeout_s)
    try:
        unit = parse_unit(res.stdout)
        check.active_state, check.result, check.exec_main_status = unit.active_state, unit.result, unit.exec_main_status
        if unit.active_state != "active":
            check.problems.append(f"unit {role.unit} is {unit.active_state}/{unit.sub_state} "
                                  f"(result {unit.result}, exit status {unit.exec_main_status})")
    except ParseError:
        check.problems.append(f"systemctl show {role.unit} failed: {res.error or _tail(res.stderr) or res.exit_status}")
    if role.health_url:
        h = await transport.http_get(role.health_url, timeout=settings.http_timeout_s)
        check.health_status = h.status
        if not h.ok:
            check.problems.append(f"health {role.health_url}: {h.error or f'HTTP {h.status}'}")
    if check.counters_checked and not check.problems:
        await _check_counters(transport, role, settings, check)
    return check


async def _check_counters(transport: Transport, role: Role, settings: Settings, check: RoleCheck) -> None:
    assert role.metrics_url is not None
    samples: list[MetricSample] = []
    for i in range(2):
        if i:
            await asyncio.sleep(max(settings.metrics_window_s, 0.5))
        m = await transport.http_get(role.metrics_url, timeout=settings.http_timeout_s)
        if not m.ok:
            check.problems.append(f"metrics {role.metrics_url}: {m.error or f'HTTP {m.status}'}")
            return
        samples.append(MetricSample(at=utcnow(), raw=m.body))
    metrics = parse_samples(samples)
    check.tokens_delta = metrics.deltas.get("realtime_tokens")
    if check.tokens_delta is None:
        check.problems.append("no sglang:realtime_tokens_total counter in /metrics")
    elif check.tokens_delta <= 0:
        check.problems.append(f"no tokens processed in {metrics.window_s or settings.metrics_window_s:.1f} s "
                              "(realtime_tokens_total did not move)")


async def verify_roles(transports: dict[str, Transport], roles: list[Role], settings: Settings) -> dict[str, Any]:
    """Check every role until all pass or the deadline passes; the last check of each role is kept."""
    started = time.monotonic()
    attempts = 0
    while True:
        attempts += 1
        checks = await asyncio.gather(*(check_role(transports[r.node], r, settings) for r in roles))
        elapsed = time.monotonic() - started
        if all(c.ok for c in checks) or elapsed >= settings.verify_deadline_s:
            return {"ok": all(c.ok for c in checks), "attempts": attempts, "elapsed_s": round(elapsed, 1),
                    "deadline_s": settings.verify_deadline_s, "roles": [c.model_dump() for c in checks]}
        await asyncio.sleep(min(2.0, max(0.0, settings.verify_deadline_s - elapsed)))
