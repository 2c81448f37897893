"""The service's kept transports (``opsbot.collect.pool.KeptPool``) against real OpenSSH servers on
loopback: one connection per node across probes, closed when idle, reopened after a failure with the
host key verified again."""

from __future__ import annotations

import asyncio

import pytest

from opsbot.collect.pool import KeptPool
from opsbot.settings import Settings
from tests.sshd import start_sshd


@pytest.fixture
def settings(tmp_path):
    return Settings(data_dir=tmp_path, ssh_connect_timeout_s=2.0, max_fanout=4)


async def test_one_connection_across_probes_then_idle_close(tmp_path, settings):
    sshd = start_sshd(tmp_path)
    pool = KeptPool(settings, idle_s=0.6)
    try:
        for _ in range(3):  # three probes, as the service runs them one after another
            view = pool.view()
            t = await view.get(sshd.node())
            assert (await t.run(["echo", "ok"], timeout=5)).stdout == "ok\n"
            await view.close()
        assert pool.open_connections == 1 and sshd.accepted() == 1
        await asyncio.sleep(1.2)  # unused for longer than idle_s: closed
        assert pool.open_connections == 0
        t = await pool.view().get(sshd.node())
        assert (await t.run(["true"], timeout=5)).ok and sshd.accepted() == 2
    finally:
        await pool.close()
        sshd.stop()


async def test_failed_node_is_retried_by_the_next_probe_and_its_key_checked_again(tmp_path, settings):
    first = start_sshd(tmp_path / "a")
    pool = KeptPool(settings, idle_s=60)
    node = first.node(name="n1")
    try:
        t = await pool.view().get(node)
        assert (await t.run(["true"], timeout=5)).ok
        port = first.port
        first.crash()  # the node goes away: its connection drops
        view = pool.view()
        t = await view.get(node)
        failed = await t.run(["true"], timeout=3)
        assert not failed.ok
        assert not (await t.run(["true"], timeout=3)).ok, "within one probe the failure is remembered"

        # back on the same port with a new host key (rebuilt, or an impostor): the pinned key refuses it
        impostor = start_sshd(tmp_path / "b", port=port)
        t = await pool.view().get(node)
        refused = await t.run(["true"], timeout=3)
        assert not refused.ok and "host key" in (refused.error or "")
        # with the key the inventory now pins, the next probe connects: the inventory change is seen
        t = await pool.view().get(impostor.node(name="n1"))
        assert (await t.run(["true"], timeout=5)).ok and pool.open_connections == 1
        impostor.stop()
    finally:
        await pool.close()
