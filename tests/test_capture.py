"""The capture before a restart: real py-spy on a real lab node against the wedged emulator, and how
it fails (py-spy missing, a dump too large, the deadline) without ever raising."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opsbot.act.capture import PART_CAP_BYTES, capture_role, cut, pids_of
from opsbot.collect.transport import CommandResult, HttpResult, TransportPool
from opsbot.contracts.captures import Capture, CapturePart, PartKind
from opsbot.inventory import Role
from opsbot.settings import Settings
from opsbot.store import Store


@given(st.text(max_size=3000), st.integers(min_value=16, max_value=2000))
def test_cut_keeps_a_prefix_within_the_cap_and_says_so(text: str, cap: int) -> None:
    out, truncated = cut(text, cap)
    if len(text.encode()) <= cap:
        assert (out, truncated) == (text, False)
    else:
        kept, _, marker = out.partition("\n[... cut: ")
        assert truncated and text.startswith(kept) and len(kept.encode()) <= cap
        assert marker.startswith(f"{len(text.encode()) - cap} more bytes")


def test_pids_of_reads_cgroup_procs_once_each() -> None:
    assert pids_of("812\n813\n\n812\nnot-a-pid\n900\n") == [812, 813, 900]


class _Node:
    """A node as the capture sees it through its transport: canned answers per command (a test double of
    the remote side, not of opsbot's code)."""

    def __init__(self, answers: dict[str, CommandResult], delay_s: float = 0.0):
        self.answers, self.delay_s = answers, delay_s

    async def run(self, argv: Sequence[str], timeout: float, cap: int | None = None) -> CommandResult:
        await asyncio.sleep(self.delay_s)
        for prefix, result in self.answers.items():
            if " ".join(argv).startswith(prefix):
                return result
        return CommandResult(list(argv), 1, "", "no such thing", 1.0)

    async def http_get(self, url: str, timeout: float, cap: int | None = None, *, direct: bool = False) -> HttpResult:
        await asyncio.sleep(self.delay_s)
        return HttpResult(200, '{"version": "0.5.23"}', 1.0)


def _ok(argv: str, out: str) -> CommandResult:
    return CommandResult(argv.split(), 0, out, "", 1.0)


ROLE = Role(role="decode", node="node2", unit="sglang-dsv4-decode.service",
            health_url="http://127.0.0.1:30001/health", http_via_ssh=False)


async def test_py_spy_missing_is_said_and_the_rest_is_kept() -> None:
    node = _Node({
        "systemctl show sglang-dsv4-decode.service --no-pager --property=ControlGroup":
            _ok("x", "/system.slice/sglang-dsv4-decode.service\n"),
        "find": _ok("find", "812\n"),
        "ps": _ok("ps", "python3 -m sglang_emulator.launch_server\n"),
        "py-spy": CommandResult(["py-spy"], 127, "", "sh: 1: py-spy: not found", 1.0),
        "systemctl show sglang-dsv4-decode.service --no-pager --property=InvocationID": _ok("x", "abc123\n"),
        "journalctl": _ok("journalctl", "2026-12-03T07:00:00+0000 node2 python3[812]: Decode batch\n"),
    })
    c = await capture_role(node, ROLE, "lab", gap_s=0.0)  # type: ignore[arg-type]
    stacks = [p for p in c.parts if p.kind is PartKind.STACKS]
    assert len(stacks) == 2 and not any(p.ok for p in stacks)
    assert all("py-spy is not installed" in (p.error or "") for p in stacks)
    assert [p.ok for p in c.parts if p.kind is not PartKind.STACKS] == [True, True, True]
    assert c.ok and c.pids == [812] and "failed: stacks pid 812" in c.summary()


async def test_the_deadline_keeps_what_was_taken_and_never_raises() -> None:
    c = await capture_role(_Node({}, delay_s=5.0), ROLE, "lab", deadline_s=0.3)  # type: ignore[arg-type]
    assert c.error and "0.3 s deadline" in c.error and c.finished_at is not None


def test_a_capture_past_the_store_cap_is_kept_cut(tmp_path) -> None:
    from opsbot.store.captures import STORED_CAP_BYTES

    big = "x" * PART_CAP_BYTES
    c = Capture(cluster="lab", role="decode", unit="u.service", started_at="2026-12-03T07:00:00Z",
                parts=[CapturePart(kind=PartKind.STACKS, name=f"p{i}", ok=True, text=big) for i in range(40)])
    store = Store(Settings(data_dir=tmp_path).db_url())
    try:
        action = store.create_action(kind="restart", cluster="lab", roles=["decode"], plan={}, reason=None,
                                     requested_by="test", surface="cli", ttl=timedelta(minutes=15))
        store.save_capture(action.id, c)
        (kept,) = store.captures(action.id)
        assert len(kept.model_dump_json()) <= STORED_CAP_BYTES
        assert kept.parts[0].text == big and kept.parts[-1].truncated and "not kept" in kept.parts[-1].text
    finally:
        store.close()


@pytest.mark.lab
async def test_a_wedged_decode_is_captured_with_the_function_it_is_stuck_in(lab) -> None:
    settings = Settings(data_dir=lab.settings.data_dir, ssh_connect_timeout_s=3.0)
    _name, cl = lab.inventory.cluster(None)
    role = next(r for r in cl.roles if r.role == "decode")
    lab.inject("decode", "wedged")
    try:
        time.sleep(1.0)
        async with TransportPool(settings) as pool:
            t = await pool.get(cl.node(role.node))
            t0 = time.monotonic()
            c = await capture_role(t, role, "lab", deadline_s=20.0, gap_s=1.0)
            took = time.monotonic() - t0
        dumps = [p for p in c.parts if p.kind is PartKind.STACKS and p.ok]
        assert c.pids and len(dumps) >= 2, c.summary()
        assert all("forward_batch_generation" in p.text for p in dumps), dumps[0].text
        journal = next(p for p in c.parts if p.kind is PartKind.JOURNAL)
        assert journal.ok and "launch_server" in journal.text or "Decode" in journal.text
        loads = next(p for p in c.parts if p.kind is PartKind.REQUESTS)
        assert loads.ok, loads.error  # /v1/loads does not wait for the scheduler
        assert took < 21.0
    finally:
        lab.inject("decode", "healthy")
