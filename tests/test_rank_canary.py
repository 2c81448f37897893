"""The per-rank canary against the emulator's real HTTP server (in-process, DP attention with two ranks):
every rank answers when healthy; a wedged rank times out while its sibling answers; a server that refuses
``routed_dp_rank`` gets the rank canaries skipped with that reason."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from opsbot.bundle import RoleEvidence
from opsbot.collect.rankcanary import rank_canaries
from opsbot.collect.transport import LocalTransport
from opsbot.inventory import Node, Role
from opsbot.lab.emulator import launch_server
from opsbot.lab.emulator.control import Control, write_control
from opsbot.lab.emulator.flags import parse_server
from opsbot.lab.emulator.launch_server import App, QuietHTTPServer, make_handler
from opsbot.lab.emulator.scheduler import Scheduler
from opsbot.parse.ranks import rank_facts
from opsbot.settings import Settings


class Emulator:
    def __init__(self, tmp: Path):
        self.control = tmp / "decode.json"
        write_control(self.control, Control(load=False))
        args = parse_server(["--model-path", "/m", "--tp", "4", "--disaggregation-mode", "decode", "--enable-metrics",
                             "--enable-dp-attention", "--dp-size", "2"])
        self.ranks: list[Scheduler] = []
        for r in range(2):
            self.ranks.append(Scheduler("decode", "m", str(self.control), 4, dp_rank=r, dp_size=2,
                                        registry=self.ranks[0].reg if self.ranks else None))
        self.app = App(args, self.ranks[0], self.ranks)
        self.app.status = "Up"
        self.httpd = QuietHTTPServer(("127.0.0.1", 0), make_handler(self.app))
        self.stop = threading.Event()
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        threading.Thread(target=self._tick, daemon=True).start()

    def _tick(self) -> None:
        while not self.stop.is_set():
            time.sleep(0.05)
            for r in self.ranks:
                r.tick(0.05)

    def role(self) -> Role:
        return Role(role="decode", node="n", unit="sglang-decode.service", dp_size=2, http_via_ssh=False,
                    health_url=f"http://127.0.0.1:{self.httpd.server_address[1]}/health")

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()


@pytest.fixture
def emulator(tmp_path) -> Iterator[Emulator]:
    e = Emulator(tmp_path)
    yield e
    e.close()


async def _canaries(role: Role, deadline: float = 1.5):
    t = LocalTransport(Node(name="n", address="127.0.0.1", transport="local"), Settings())
    try:
        return await rank_canaries(role, t, deadline)
    finally:
        await t.close()


def test_every_rank_answers_its_pinned_canary(emulator) -> None:
    ranks = asyncio.run(_canaries(emulator.role()))
    assert [(r.dp_rank, r.canary.ok, r.canary.status, r.canary.tokens) for r in ranks] == [(0, True, 200, 8), (1, True, 200, 8)]


def test_a_wedged_rank_times_out_while_its_sibling_answers_and_that_alone_is_named(emulator) -> None:
    write_control(emulator.control, Control("rank-wedged", load=False))
    for r in emulator.ranks:
        r.poll_control()
    ranks = asyncio.run(_canaries(emulator.role()))
    assert ranks[0].canary.ok and not ranks[1].canary.ok and ranks[1].canary.status is None
    facts = rank_facts(RoleEvidence(role="decode", ranks=ranks))
    assert facts["canary_timed_out"] == [1] and facts["wedged"] == [1] and facts["serving"] == [0]


def test_a_server_that_refuses_routed_dp_rank_gets_the_rank_canaries_skipped(emulator, monkeypatch) -> None:
    monkeypatch.setattr(launch_server, "ROUTED_DP_RANK", False)
    ranks = asyncio.run(_canaries(emulator.role()))
    assert all(r.canary.skipped and "refuses routed_dp_rank (HTTP 422" in r.canary.skipped for r in ranks)
    facts = rank_facts(RoleEvidence(role="decode", ranks=ranks))
    assert facts["wedged"] == [] and "refuses routed_dp_rank" in facts["canary_skipped"]
