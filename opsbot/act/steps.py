"""Running a plan's steps on the nodes (act, I/O): stop, wait for the GPUs to be released, start."""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel

from opsbot.contracts.plans import Step
from opsbot.collect.transport import CommandResult, Transport
from opsbot.nodecommands import gpu_query
from opsbot.parse.errors import ParseError
from opsbot.parse.gpu import parse_gpu_csv
from opsbot.settings import Settings


class StepResult(BaseModel):
    kind: str
    role: str
    argv: list[str]
    ok: bool
    exit_status: int | None = None
    detail: str = ""
    elapsed_ms: float = 0.0


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
