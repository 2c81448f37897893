"""Rolling a spec out to its nodes: diff (file hashes over SSH), drift per role, and a safe apply.

I/O at this edge only: everything is computed from ``serving.render`` and read or written through
PROBE's ``TransportPool`` (pinned host keys, argv lists, deadlines). ``apply`` uploads what changed,
reloads systemd, restarts prefill, then decode, then the router (then the GPU exporter), checks each
one's health before the next, and stops at the first failure with the unit's state and journal.
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
from opsbot.nodecommands import journal, systemctl, unit_show
from serving.render import Rendering, health_url, render
from serving.spec import DeploymentSpec

ROLLOUT_ORDER = ("prefill", "decode", "router", "exporter")
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
    """Files of each role (unit, serve script) whose content on the node differs from what the spec renders.

    The function ``opsbot probe --spec`` calls; returns only the differing files (empty: no drift).
    """
    rendering = render(spec)
    wanted = roles or ["prefill", "decode", "router"]
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
            progress(f"uploading {node}:{f.path}")
            await t.put_file(f.path, f.data, f.mode)
        reload = await t.run(systemctl("daemon-reload"), timeout=30)
        if not reload.ok:
            raise RolloutError(f"daemon-reload on {node}", [reload.error or reload.stderr])
    return changed


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
            if problem:
                outcome.ok, outcome.failed_step = False, f"{role} on {node}"
                outcome.evidence = [problem, *await _evidence(pool, spec, node, unit)]
                return outcome
            outcome.restarted.append(f"{role}@{node}")
    return outcome
