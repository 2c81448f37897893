"""Rolling a spec out to its nodes: diff (file hashes over SSH), drift per role, and a safe apply.

I/O at this edge only: everything is computed from ``serving.render`` and read or written through
PROBE's ``TransportPool`` (pinned host keys, argv lists, deadlines). ``apply`` uploads what changed
(keeping the files it replaces beside them), reloads systemd, restarts prefill, then decode, then
the router (then the GPU exporter), checks each one's health before the next, and stops at the
first failure with the unit's state and journal. With bf16 index keys it also installs the patch's
files and checks that each restarted server printed the patch line in its current run; a server
that did not (or whose start failed) gets the previous units, scripts and files back.
"""

from __future__ import annotations

import asyncio
import posixpath
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Literal

from opsbot.collect.transport import TransportPool
from opsbot.contracts import GuardRefused
from opsbot.nodecommands import invocation_journal, journal, systemctl, unit_invocation, unit_show
from serving.patch import PatchLine, last_patch_line
from serving.render import Rendering, health_url, patched, render
from serving.spec import DeploymentSpec

ROLLOUT_ORDER = ("prefill", "decode", "router", "exporter")
PREVIOUS = ".opsbot-prev"  # the file an upload replaced, kept beside it until the apply succeeds
Progress = Callable[[str], None]
RestartGuard = Callable[[str, str], AbstractAsyncContextManager[None]]  # (role, node)


@dataclass(frozen=True)
class FileState:
    node: str
    path: str
    role: str | None
    status: Literal["same", "changed", "missing", "unreadable"]
    expected: str
    found: str | None
    detail: str = ""


@dataclass
class ApplyOutcome:
    ok: bool
    uploaded: list[FileState] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)
    failed_step: str | None = None
    evidence: list[str] = field(default_factory=list)
    patch_lines: dict[str, PatchLine] = field(default_factory=dict)  # "role@node" -> what it printed
    rolled_back: list[str] = field(default_factory=list)  # what was put back after a failed patched start


def parse_sha256sum(stdout: str) -> dict[str, str]:
    """``sha256sum`` output → {path: hex}; escaped names (leading backslash) are skipped, we never write them."""
    out = {}
    for line in stdout.splitlines():
        digest, sep, path = line.partition("  ")
        if sep and len(digest) == 64 and not digest.startswith("\\"):
            out[path] = digest
    return out


async def node_file_states(pool: TransportPool, spec: DeploymentSpec, rendering: Rendering, node: str,
                           role: str | None = None, timeout: float = 20.0) -> list[FileState]:
    """Compare the rendered files of ``node`` (optionally one role's) with the node's, by SHA-256."""
    files = rendering.files_of(node, role)
    transport = await pool.get(spec.node(node))
    res = await transport.run(["sha256sum", "--", *(f.path for f in files)], timeout=timeout)
    if res.error is not None:
        return [FileState(node, f.path, f.role, "unreadable", f.sha256, None, res.error) for f in files]
    found = parse_sha256sum(res.stdout)
    return [
        FileState(node, f.path, f.role,
                  "missing" if f.path not in found else "same" if found[f.path] == f.sha256 else "changed",
                  f.sha256, found.get(f.path))
        for f in files
    ]


async def diff(spec: DeploymentSpec, pool: TransportPool) -> list[FileState]:
    """What ``apply`` would change on each node."""
    rendering = render(spec)
    out: list[FileState] = []
    for node in rendering.node_files:
        out += await node_file_states(pool, spec, rendering, node)
    return out


async def drift(spec: DeploymentSpec, pool: TransportPool, roles: list[str] | None = None) -> list[FileState]:
    """Files of each role (unit, serve script, the patch's files) whose content on the node differs from the spec.

    The function ``opsbot probe --spec`` calls; returns only the differing files (empty: no drift).
    """
    rendering = render(spec)
    wanted = roles or ["prefill", "decode", "router", "patch"]
    out: list[FileState] = []
    for node, files in rendering.node_files.items():
        for role in sorted({f.role for f in files if f.role in wanted}):
            out += [s for s in await node_file_states(pool, spec, rendering, node, role) if s.status != "same"]
    return out


def _role_node(spec: DeploymentSpec, role: str) -> list[str]:
    if role == "exporter":
        return [n.name for n in spec.nodes] if spec.exporter.enabled else []
    return [spec.router.node if role == "router" else spec.servers()[role].node]


async def _evidence(pool: TransportPool, spec: DeploymentSpec, node: str, unit: str) -> list[str]:
    t = await pool.get(spec.node(node))
    show = await t.run(unit_show(unit, "ActiveState,SubState,Result,NRestarts,ExecMainStatus"), timeout=10)
    logs = await t.run(journal(["-u", unit], 30), timeout=10)
    return [f"{node} {unit}: " + " ".join(show.stdout.split()), *logs.stdout.splitlines()[-30:]]


async def _restart(pool: TransportPool, spec: DeploymentSpec, role: str, node: str, progress: Progress) -> str | None:
    """Restart one role's unit and check its health; the error text, or None when it is up."""
    unit = spec.unit_of(role)
    t = await pool.get(spec.node(node))
    progress(f"restarting {role} ({unit}) on {node}")
    # the unit's ExecStartPost waits for /health, so restart returns once the role answers or start fails
    res = await t.run(systemctl("restart", unit), timeout=spec.start_timeout_s + 60)
    if not res.ok:
        return f"systemctl restart {unit} failed: {res.error or res.stderr.strip() or res.exit_status}"
    active = await t.run(systemctl("is-active", unit), timeout=10)
    if active.stdout.strip() != "active":
        return f"{unit} is {active.stdout.strip() or 'unknown'} after restart"
    if role == "router":
        return await _router_ready(t, spec, progress)
    if role != "exporter":
        health = await t.http_get(health_url(spec, role), timeout=30)
        if health.status != 200:
            return f"{health_url(spec, role)} answered {health.status or health.error} after restart"
    return None


async def _router_ready(t, spec: DeploymentSpec, progress: Progress) -> str | None:
    """Poll the router's /readiness: 200 once it has a healthy prefill and a healthy decode worker."""
    url = f"http://127.0.0.1:{spec.router.port}/readiness"
    progress(f"waiting for {url} (a healthy prefill and decode behind the router)")
    deadline = time.monotonic() + spec.router.ready_timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        res = await t.http_get(url, timeout=10)
        if res.status == 200:
            return None
        last = f"{res.status} {res.body.strip()[:200]}" if res.status else str(res.error)
        await asyncio.sleep(2)
    return f"router not ready after {spec.router.ready_timeout_s} s: {url} answered {last}"


class RolloutError(Exception):
    def __init__(self, step: str, evidence: list[str]):
        self.step, self.evidence = step, evidence
        super().__init__(f"{step}: {'; '.join(evidence[:1])}")


async def upload(spec: DeploymentSpec, pool: TransportPool, states: list[FileState],
                 progress: Progress = lambda _: None) -> list[FileState]:
    """Write every file not ``same`` in ``states`` to its node (SFTP, atomic), then daemon-reload there."""
    rendering = render(spec)
    by_path = {(n, f.path): f for n, fs in rendering.node_files.items() for f in fs}
    unreadable = [s for s in states if s.status == "unreadable"]
    if unreadable:
        raise RolloutError("read node files", [f"{s.node}: {s.detail}" for s in unreadable])
    changed = [s for s in states if s.status != "same"]
    for node in sorted({s.node for s in changed}):
        t = await pool.get(spec.node(node))
        dirs = sorted({posixpath.dirname(s.path) for s in changed if s.node == node})
        mk = await t.run(["mkdir", "-p", "--", *dirs], timeout=10)
        if not mk.ok:
            raise RolloutError(f"mkdir on {node}", [mk.error or mk.stderr])
        for s in (s for s in changed if s.node == node):
            f = by_path[(node, s.path)]
            if s.status == "changed":
                keep = await t.run(["cp", "-p", "--", f.path, f.path + PREVIOUS], timeout=30)
                if not keep.ok:
                    raise RolloutError(f"keep {node}:{f.path}", [keep.error or keep.stderr])
            progress(f"uploading {node}:{f.path}")
            await t.put_file(f.path, f.data, f.mode)
        reload = await t.run(systemctl("daemon-reload"), timeout=30)
        if not reload.ok:
            raise RolloutError(f"daemon-reload on {node}", [reload.error or reload.stderr])
    return changed


async def current_run_journal(t, unit: str, attempts: int = 5) -> tuple[str, str]:
    """The unit's journal since its current start (its InvocationID), retried while journald catches up.

    Returns (invocation id, text); the text is empty when the run printed nothing yet.
    """
    text, invocation = "", ""
    for attempt in range(attempts):
        show = await t.run(unit_invocation(unit), timeout=10)
        invocation = show.stdout.strip()
        if invocation:
            res = await t.run(invocation_journal(invocation), timeout=20)
            text = res.stdout
            if last_patch_line(text):
                break
        await asyncio.sleep(0.5 * (attempt + 1))
    return invocation, text


async def verify_patch(pool: TransportPool, spec: DeploymentSpec, role: str, node: str) -> tuple[PatchLine | None, str | None]:
    """The patch line the role's current run printed, and the problem (None when it attached with bf16 keys)."""
    unit = spec.unit_of(role)
    t = await pool.get(spec.node(node))
    invocation, text = await current_run_journal(t, unit)
    line = last_patch_line(text)
    if line is None:
        return None, f"{unit} (run {invocation or 'unknown'}) printed no patch line: the bf16 index-key patch is not attached"
    if not line.attached:
        return line, f"{unit}: the patch refused to attach: {line.reason}"
    if line.index_keys != "bf16":
        return line, f"{unit}: the patch attached with index_keys={line.index_keys}, not bf16"
    return line, None


async def rollback(spec: DeploymentSpec, pool: TransportPool, guard: RestartGuard, uploaded: list[FileState],
                   restarted: list[str], progress: Progress = lambda _: None) -> list[str]:
    """Put back what ``upload`` replaced (and remove what it added), reload, restart the roles touched
    (each inside ``guard``, as apply's own restarts)."""
    done: list[str] = []
    for node in sorted({s.node for s in uploaded}):
        t = await pool.get(spec.node(node))
        for s in (s for s in uploaded if s.node == node):
            argv = (["mv", "-f", "--", s.path + PREVIOUS, s.path] if s.status == "changed"
                    else ["rm", "-f", "--", s.path])
            res = await t.run(argv, timeout=30)
            done.append(f"{node}:{s.path} {'restored' if s.status == 'changed' else 'removed'}"
                        + ("" if res.ok else f" FAILED: {res.error or res.stderr.strip()}"))
        await t.run(systemctl("daemon-reload"), timeout=30)
    progress(f"rolled back {len(uploaded)} file(s)")
    touched = {s.role for s in uploaded} | {r.split("@")[0] for r in restarted}
    if "patch" in touched:
        touched |= {"prefill", "decode"}
    for role in ROLLOUT_ORDER:
        for node in _role_node(spec, role) if role in touched else []:
            unit = spec.unit_of(role)
            t = await pool.get(spec.node(node))
            progress(f"restarting {role} ({unit}) on {node} with the previous files")
            try:
                async with guard(role, node):
                    res = await t.run(systemctl("restart", unit), timeout=spec.start_timeout_s + 60)
            except GuardRefused as exc:
                done.append(f"{role}@{node} not restarted: {exc}")
                continue
            done.append(f"{role}@{node} restarted with the previous files"
                        + ("" if res.ok else f": FAILED ({res.error or res.stderr.strip() or res.exit_status})"))
    return done


async def _forget_previous(pool: TransportPool, spec: DeploymentSpec, uploaded: list[FileState]) -> None:
    for node in sorted({s.node for s in uploaded if s.status == "changed"}):
        t = await pool.get(spec.node(node))
        await t.run(["rm", "-f", "--", *(s.path + PREVIOUS for s in uploaded
                                         if s.node == node and s.status == "changed")], timeout=30)


async def _fail(outcome: ApplyOutcome, pool: TransportPool, spec: DeploymentSpec, guard: RestartGuard, role: str,
                node: str, problem: str, progress: Progress) -> ApplyOutcome:
    unit = spec.unit_of(role)
    outcome.ok, outcome.failed_step = False, f"{role} on {node}"
    outcome.evidence = [problem, *await _evidence(pool, spec, node, unit)]
    if patched(spec) and role in ("prefill", "decode") and outcome.uploaded:
        outcome.rolled_back = await rollback(spec, pool, guard, outcome.uploaded,
                                             [*outcome.restarted, f"{role}@{node}"], progress)
    return outcome


async def apply(spec: DeploymentSpec, pool: TransportPool, guard: RestartGuard, progress: Progress = lambda _: None,
                restart_all: bool = False) -> ApplyOutcome:
    """Upload changed files, daemon-reload, restart changed roles in order with health checks between.

    Each restart runs inside ``guard(role, node)`` (``opsbot.act.deploy.DeployGuard``: the role's restart
    lock and an audit entry); a guard that refuses stops the rollout there, as a failed restart does."""
    outcome = ApplyOutcome(True)
    try:
        outcome.uploaded = await upload(spec, pool, await diff(spec, pool), progress)
    except RolloutError as exc:
        return ApplyOutcome(False, failed_step=exc.step, evidence=exc.evidence)
    changed_roles = {s.role for s in outcome.uploaded}
    if "patch" in changed_roles:
        changed_roles |= {"prefill", "decode"}
    for role in ROLLOUT_ORDER:
        for node in _role_node(spec, role):
            unit = spec.unit_of(role)
            t = await pool.get(spec.node(node))
            active = (await t.run(systemctl("is-active", unit), timeout=10)).stdout.strip() == "active"
            if not (restart_all or role in changed_roles or not active):
                continue
            await t.run(systemctl("enable", unit), timeout=30)
            try:
                async with guard(role, node):
                    problem = await _restart(pool, spec, role, node, progress)
            except GuardRefused as exc:  # an incident restart holds the role's lock
                problem = str(exc)
            else:
                if patched(spec) and role in ("prefill", "decode"):
                    line, patch_problem = await verify_patch(pool, spec, role, node)
                    if line:
                        outcome.patch_lines[f"{role}@{node}"] = line
                    if problem is None or line is not None:  # a refusal line explains a failed start best
                        problem = patch_problem or problem
            if problem:
                return await _fail(outcome, pool, spec, guard, role, node, problem, progress)
            outcome.restarted.append(f"{role}@{node}")
    await _forget_previous(pool, spec, outcome.uploaded)
    return outcome
