"""Capture before a restart: the stuck role's Python stacks, state and last lines (act stage, I/O).

SGLang's maintainers ask for the scheduler's stacks in every hang report, and a restart destroys
them. So before a role that is alive is restarted, opsbot takes, within one deadline:

- ``stacks``: ``py-spy dump`` of every process in the unit's control group (found from systemd, not
  by matching names: the scheduler, tokenizer and detokenizer are all there), twice a few seconds
  apart, so a frame that stays put is told from one passing through;
- ``server_info`` and ``requests``: ``GET /server_info`` and the non-blocking in-flight summary
  ``GET /v1/loads?include=all`` (reference/sglang.md §1.5), each with a client timeout;
- ``journal``: the current run's last journal lines.

Nothing here raises: a part that fails says why, a capture past its deadline keeps what it had, and
the restart goes on either way. Every text is capped, with a marker where it was cut.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

from opsbot import nodecommands as cmd
from opsbot.collect.transport import CommandResult, HttpResult, Transport
from opsbot.contracts.captures import ALL_PARTS, Capture, CapturePart, PartKind
from opsbot.contracts.plans import RestartPlan
from opsbot.inventory import Inventory, Node, Role

PART_CAP_BYTES = 256 * 1024  # one part's text; a dump of a hundred threads is about 20 KiB
JOURNAL_LINES = 300
DUMP_ROUNDS = 2
DUMP_GAP_S = 3.0


def cut(text: str, cap: int = PART_CAP_BYTES) -> tuple[str, bool]:
    """``text`` within ``cap`` bytes of UTF-8, with a marker saying how much was cut."""
    data = text.encode()
    if len(data) <= cap:
        return text, False
    kept = data[:cap].decode(errors="ignore")
    return f"{kept}\n[... cut: {len(data) - cap} more bytes not kept (cap {cap} bytes) ...]\n", True


def _command_part(kind: PartKind, name: str, result: CommandResult) -> CapturePart:
    if result.ok:
        text, truncated = cut(result.stdout)
        return CapturePart(kind=kind, name=name, ok=True, text=text, truncated=truncated or result.truncated,
                           elapsed_ms=result.elapsed_ms)
    why = result.error or (result.stderr.strip().splitlines() or [f"exit {result.exit_status}"])[-1]
    if result.exit_status == 127 or "not found" in why:
        why = f"{result.argv[0]} is not installed on the node ({why})"
    return CapturePart(kind=kind, name=name, ok=False, error=why[:500], elapsed_ms=result.elapsed_ms)


def _http_part(kind: PartKind, name: str, result: HttpResult) -> CapturePart:
    if result.ok:
        text, truncated = cut(result.body)
        return CapturePart(kind=kind, name=name, ok=True, text=text, truncated=truncated or result.truncated,
                           elapsed_ms=result.elapsed_ms)
    why = result.error or f"HTTP {result.status}"
    return CapturePart(kind=kind, name=name, ok=False, error=why[:500], elapsed_ms=result.elapsed_ms)


def _endpoint(role: Role, path: str) -> str | None:
    """``path`` on the role's own server, from its health (or metrics) URL; None when it has neither."""
    base = role.health_url or role.metrics_url
    if not base:
        return None
    parts = urlsplit(base)
    target = urlsplit(path)
    return urlunsplit((parts.scheme, parts.netloc, target.path, target.query, ""))


def pids_of(text: str) -> list[int]:
    """The pids ``cgroup.procs`` files list, once each, in order."""
    seen: dict[int, None] = {}
    for line in text.split():
        if line.isdigit():
            seen.setdefault(int(line), None)
    return list(seen)


class _Capturer:
    """One capture of one role through one transport; the parts land in ``capture`` as they come."""

    def __init__(self, t: Transport, role: Role, cluster: str, timeout_s: float, direct: bool):
        self.t, self.role, self.timeout_s, self.direct = t, role, timeout_s, direct
        self.capture = Capture(cluster=cluster, role=role.key, unit=role.unit, started_at=datetime.now(UTC))

    async def run(self, argv: Sequence[str]) -> CommandResult:
        return await self.t.run(list(argv), self.timeout_s, PART_CAP_BYTES * 2)

    async def stacks(self, gap_s: float) -> None:
        cgroup = (await self.run(cmd.unit_cgroup(self.role.unit)))
        where = cgroup.stdout.strip()
        if not cgroup.ok or not where.startswith("/") or ".." in where:
            self.capture.parts.append(CapturePart(
                kind=PartKind.STACKS, name="control group", ok=False,
                error=cgroup.error or f"no control group for {self.role.unit} (is it running?)"))
            return
        procs = await self.run(cmd.cgroup_procs(where))
        self.capture.pids = pids_of(procs.stdout)
        if not self.capture.pids:
            self.capture.parts.append(CapturePart(kind=PartKind.STACKS, name=f"processes of {where}", ok=False,
                                                  error=procs.error or "the control group holds no process"))
            return
        titles = await asyncio.gather(*(self.run(cmd.process_line(pid)) for pid in self.capture.pids))
        names = {pid: (r.stdout.strip()[:80] or "?") for pid, r in zip(self.capture.pids, titles)}
        for round_ in range(1, DUMP_ROUNDS + 1):
            if round_ > 1:
                await asyncio.sleep(gap_s)
            dumps = await asyncio.gather(*(self.run(cmd.stack_dump(pid)) for pid in self.capture.pids))
            for pid, result in zip(self.capture.pids, dumps):
                label = f"stacks pid {pid} ({names[pid]}), round {round_}"
                self.capture.parts.append(_command_part(PartKind.STACKS, label, result))

    async def http(self, kind: PartKind, path: str) -> None:
        url = _endpoint(self.role, path)
        if url is None:
            self.capture.parts.append(CapturePart(kind=kind, name=path, ok=False, error="the role has no URL"))
            return
        result = await self.t.http_get(url, self.timeout_s, PART_CAP_BYTES, direct=self.direct)
        self.capture.parts.append(_http_part(kind, f"GET {path}", result))

    async def journal(self) -> None:
        invocation = await self.run(cmd.unit_invocation(self.role.unit))
        run_id = invocation.stdout.strip()
        if not invocation.ok or not run_id.isalnum():
            self.capture.parts.append(CapturePart(kind=PartKind.JOURNAL, name="journal", ok=False,
                                                  error=invocation.error or "the unit has no current run"))
            return
        result = await self.run(cmd.run_journal(run_id, JOURNAL_LINES))
        self.capture.parts.append(_command_part(PartKind.JOURNAL, f"journal of run {run_id[:12]}", result))


def _jobs(c: _Capturer, parts: Sequence[PartKind], gap_s: float) -> list[Callable[[], Awaitable[None]]]:
    jobs: dict[PartKind, Callable[[], Awaitable[None]]] = {
        PartKind.STACKS: lambda: c.stacks(gap_s),
        PartKind.SERVER_INFO: lambda: c.http(PartKind.SERVER_INFO, "/server_info"),
        PartKind.REQUESTS: lambda: c.http(PartKind.REQUESTS, "/v1/loads?include=all"),
        PartKind.JOURNAL: c.journal,
    }
    return [jobs[p] for p in parts if p in jobs]


async def capture_role(t: Transport, role: Role, cluster: str, *, deadline_s: float = 20.0,
                       parts: Sequence[PartKind] = ALL_PARTS, gap_s: float = DUMP_GAP_S,
                       command_timeout_s: float = 8.0) -> Capture:
    """Take ``parts`` of ``role``'s evidence within ``deadline_s``; never raises, keeps what it had."""
    c = _Capturer(t, role, cluster, min(command_timeout_s, deadline_s), direct=not role.http_via_ssh)
    tasks = [asyncio.ensure_future(job()) for job in _jobs(c, parts, gap_s)]
    done, pending = await asyncio.wait(tasks, timeout=deadline_s) if tasks else (set(), set())
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    errors = [f"{type(e).__name__}: {e}" for task in done if (e := task.exception()) is not None]
    if pending:
        errors.append(f"stopped at the {deadline_s:g} s deadline ({len(pending)} part(s) unfinished)")
    c.capture.error = "; ".join(errors)[:500] or None
    c.capture.finished_at = datetime.now(UTC)
    c.capture.parts.sort(key=lambda p: ALL_PARTS.index(p.kind))
    return c.capture


class Transports(Protocol):
    """Where a node's transport comes from: the CLI's own pool, or a view of the service's kept one."""

    async def get(self, node: Node) -> Transport: ...


async def capture_plan(inventory: Inventory, plan: RestartPlan, transports: Transports,
                       deadline_s: float, command_timeout_s: float) -> list[Capture]:
    """The evidence the plan asks for (``plan.capture``) of each role it restarts, in parallel; one
    ``Capture`` per role, a role whose node cannot be reached saying so."""
    name, cl = inventory.cluster(plan.cluster)

    async def one(role: Role) -> Capture:
        try:
            t = await transports.get(cl.node(role.node))
        except Exception as exc:  # noqa: BLE001 - an unreachable node is this capture's answer, not an error
            return Capture(cluster=name, role=role.key, unit=role.unit, started_at=datetime.now(UTC),
                           finished_at=datetime.now(UTC), error=f"cannot reach {role.node}: {exc}"[:500])
        return await capture_role(t, role, name, deadline_s=deadline_s, parts=plan.capture,
                                  command_timeout_s=command_timeout_s)

    return list(await asyncio.gather(*(one(r) for r in cl.select(plan.roles))))
