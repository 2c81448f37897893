"""Transports against a real OpenSSH server on loopback (and the local transport)."""

from __future__ import annotations

import asyncio
import subprocess
import time

import pytest

from opsbot.collect.transport import HostKeyRefused, LocalTransport, SshTransport, TransportPool
from opsbot.inventory import Node
from opsbot.settings import Settings
from tests.httpstub import serve
from tests.sshd import free_port, start_sshd

WRONG_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDr6mGNmEXLk0ioh9kKUT1GYnDt4hO8VkqQ3M2qA3q8P"


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@pytest.fixture
def settings(tmp_path):
    return Settings(data_dir=tmp_path, ssh_connect_timeout_s=2.0, max_fanout=4)


async def test_run_quotes_every_argv_element(sshd, settings, tmp_path):
    marker = tmp_path / "pwned"
    t = SshTransport(sshd.node(), settings)
    try:
        hostile = f"x; touch {marker}; $(touch {marker}) `touch {marker}` 'q\""
        r = await t.run(["printf", "%s", hostile], timeout=5)
        assert r.ok, r
        assert r.stdout == hostile
        assert not marker.exists()
        r = await t.run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=5)
        assert (r.exit_status, r.stdout, r.stderr, r.ok) == (3, "out\n", "err\n", False)
    finally:
        await t.close()


async def test_deadline_kills_the_remote_command(sshd, settings):
    t = SshTransport(sshd.node(), settings)
    try:
        t0 = time.monotonic()
        r = await t.run(["sleep", "37.25"], timeout=1)
        assert time.monotonic() - t0 < 4
        assert r.error and "timed out after 1 s" in r.error and not r.ok
        await asyncio.sleep(1.5)
        left = subprocess.run(["pgrep", "-f", "sleep 37.25"], capture_output=True, text=True)
        assert left.stdout.strip() == "", "the remote process outlived its deadline"
    finally:
        await t.close()


async def test_output_cap_truncates(sshd, settings):
    t = SshTransport(sshd.node(), settings)
    try:
        r = await t.run(["head", "-c", "300000", "/dev/zero"], timeout=5, cap=4096)
        assert r.truncated and len(r.stdout) == 4096 and r.error is None
        r = await t.run(["head", "-c", "100", "/dev/zero"], timeout=5, cap=4096)
        assert not r.truncated and len(r.stdout) == 100 and r.ok
    finally:
        await t.close()


async def test_wrong_pinned_key_is_refused(sshd, settings):
    t = SshTransport(sshd.node(host_key=WRONG_KEY), settings)
    try:
        with pytest.raises(HostKeyRefused, match="not the one the inventory trusts"):
            await t.connect()
        r = await t.run(["true"], timeout=5)
        assert not r.ok and "not the one the inventory trusts" in r.error
    finally:
        await t.close()


async def test_missing_known_hosts_without_tofu_is_refused(sshd, settings, tmp_path):
    node = sshd.node(host_key=None, known_hosts=tmp_path / "absent")
    t = SshTransport(node, settings)
    with pytest.raises(HostKeyRefused, match="does not exist"):
        await t.connect()
    await t.close()


async def test_tofu_records_the_key_then_pins_it(sshd, settings, tmp_path):
    kh = tmp_path / "known_hosts"
    node = sshd.node(host_key=None, known_hosts=kh, trust_on_first_use=True)
    t = SshTransport(node, settings)
    try:
        assert (await t.run(["true"], timeout=5)).ok
    finally:
        await t.close()
    line = kh.read_text().strip()
    assert line == f"[127.0.0.1]:{sshd.port} {sshd.host_key}" and t.recorded_key
    # A recorded entry is never replaced: a different key is refused even with TOFU on.
    kh.write_text(f"[127.0.0.1]:{sshd.port} {WRONG_KEY}\n")
    t = SshTransport(node, settings)
    with pytest.raises(HostKeyRefused):
        await t.connect()
    await t.close()
    assert kh.read_text().strip().endswith(WRONG_KEY)


async def test_dead_node_fails_fast_and_once(settings):
    node = Node(name="dead", address="127.0.0.1", port=free_port(), host_key=WRONG_KEY)
    t = SshTransport(node, settings)
    t0 = time.monotonic()
    results = await asyncio.gather(*(t.run(["true"], timeout=5) for _ in range(5)))
    assert time.monotonic() - t0 < settings.ssh_connect_timeout_s + 1
    assert all(not r.ok and "cannot connect" in r.error and "dead" in r.error for r in results)
    await t.close()


@pytest.fixture(scope="module")
def web():
    with serve(lambda path: (b"sglang:num_running_reqs 3\n" * 1000) if path == "/metrics" else b"OK") as url:
        yield url


async def test_http_through_ssh_forward_and_direct(sshd, settings, web):
    t = SshTransport(sshd.node(), settings)
    try:
        r = await t.http_get(f"{web}/health", timeout=5)
        assert (r.status, r.body, r.ok) == (200, "OK", True)
        r = await t.http_get(f"{web}/metrics", timeout=5, cap=2048)
        assert r.truncated and len(r.body) == 2048
        r = await t.http_get(f"{web}/health", timeout=5, direct=True)
        assert r.body == "OK"
        r = await t.http_get(f"http://127.0.0.1:{free_port()}/health", timeout=3)
        assert r.status is None and "via SSH to loop" in r.error
    finally:
        await t.close()


async def test_put_file_over_sftp(sshd, settings, tmp_path):
    t = SshTransport(sshd.node(), settings)
    target = tmp_path / "deployed.env"
    try:
        await t.put_file(str(target), b"A=1\n", mode=0o600)
    finally:
        await t.close()
    assert target.read_bytes() == b"A=1\n" and (target.stat().st_mode & 0o777) == 0o600


async def test_pool_shares_one_connection_per_node(sshd, settings):
    before = sshd.accepted()
    async with TransportPool(settings) as pool:
        t = await pool.get(sshd.node())
        assert await pool.get(sshd.node()) is t
        results = await asyncio.gather(*(t.run(["echo", str(i)], timeout=5) for i in range(12)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(12)]
    await asyncio.sleep(0.2)
    assert sshd.accepted() - before == 1


async def test_local_transport(settings, tmp_path):
    t = LocalTransport(Node(name="self", address="localhost", transport="local"), settings)
    try:
        r = await t.run(["printf", "%s", "a; b"], timeout=5)
        assert r.ok and r.stdout == "a; b"
        r = await t.run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=5)
        assert (r.exit_status, r.stdout, r.stderr) == (3, "out\n", "err\n")
        r = await t.run(["sleep", "5"], timeout=0.5)
        assert r.error and "timed out" in r.error
        r = await t.run(["head", "-c", "50000", "/dev/zero"], timeout=5, cap=1024)
        assert r.truncated and len(r.stdout) == 1024
        r = await t.run(["/nonexistent/binary"], timeout=5)
        assert r.error and "cannot start" in r.error
        await t.put_file(str(tmp_path / "f"), b"x", mode=0o640)
        assert (tmp_path / "f").read_bytes() == b"x"
    finally:
        await t.close()


async def test_inventory_check_reports_keys_and_units(sshd, settings):
    from opsbot.collect.check import check_inventory
    from opsbot.inventory import Inventory

    def inv(key: str) -> Inventory:
        node = sshd.node(host_key=key).model_dump()
        role = {"role": "decode", "node": "loop", "unit": "sglang-nope.service"}
        return Inventory.model_validate({"clusters": {"c": {"nodes": [node], "roles": [role]}}})

    rows = await check_inventory(inv(WRONG_KEY), settings)
    assert [(r.subject, r.ok) for r in rows] == [("ssh", False)] and "host key refused" in rows[0].detail
    rows = await check_inventory(inv(sshd.host_key), settings)
    assert rows[0].subject == "ssh" and rows[0].ok and "host key verified" in rows[0].detail
    unit = rows[1]
    assert unit.subject == "sglang-nope.service" and not unit.ok  # not-found (or no systemd on this host)


async def test_reconnects_after_the_connection_drops(sshd, settings):
    t = SshTransport(sshd.node(), settings)
    try:
        first = await t.connect()
        first.close()
        await first.wait_closed()
        r = await t.run(["echo", "again"], timeout=5)
        assert r.ok and r.stdout == "again\n" and t._conn is not first
    finally:
        await t.close()
