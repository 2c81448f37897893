"""Shared fixtures. ``lab``: one two-node lab of real systemd + sshd nodes for the whole session;
``database_url`` / ``postgres_server``: real databases (tests/databases.py); ``loop_watchdog``: fails
the test if anything holds its event loop over 100 ms (tests/loopwatch.py)."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Iterator

import pytest
from hypothesis import settings as hypothesis_settings

from opsbot.lab.nodes import Lab, isolated_settings
from opsbot.lab.rootfs import is_complete, rootfs_path
from tests.databases import database_url, postgres_server  # noqa: F401
from tests.loopwatch import ARMED, LoopWatchdog
from tests.realparts import need, need_binary, need_root

# CI replays the same examples every run (a red run then says something about the change, not the draw) and
# has no per-example deadline on its loaded 2 cores; local runs keep exploring new examples.
hypothesis_settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Compiled runbook sets (opsbot/diagnose/runbook_cache.py) go to a folder of this session, not ~/.cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
        yield


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A booted lab (own ports and machine names), torn down at the end of the session.

    Yields ``opsbot.lab.nodes.Lab``: ``.inventory_path``, ``.inventory``, ``.node_names``,
    ``.inject(role, state, message=None)``, ``.reset()``, ``.ssh(node, argv)``, ``.url(role, path)``,
    ``.stop_sshd(node)`` / ``.start_sshd(node)``.
    """
    need_root()
    need_binary("systemd-nspawn")
    need_binary("ssh")
    settings = isolated_settings(tmp_path_factory.mktemp("lab"))
    need(
        is_complete(rootfs_path(settings.lab_cache_dir)) or shutil.which("debootstrap") is not None,
        "no cached lab root file system and no debootstrap to build one",
    )
    lab = Lab(settings)
    try:
        lab.up(2)
        yield lab
    finally:
        lab.down()


@pytest.fixture
async def loop_watchdog() -> AsyncIterator[LoopWatchdog]:
    """Watches the service's event loop while it runs (``tests.servicekit.served``, or
    ``async with loop_watchdog.watching()``); at the end, fails the test with the stack of every
    stretch over 100 ms that the loop was held (a blocking store call, a synchronous wait)."""
    watchdog = LoopWatchdog()
    ARMED.append(watchdog)
    try:
        yield watchdog
    finally:
        ARMED.remove(watchdog)
        await watchdog.stop()
    if watchdog.stalls:
        pytest.fail(f"{len(watchdog.stalls)} stall(s) of the event loop over {watchdog.limit_s * 1000:.0f} ms:\n\n"
                    + watchdog.problems(), pytrace=False)
