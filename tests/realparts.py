"""Guards for tests that need real parts: skip on a developer's machine, fail under CI=true."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI") == "true"


def need(condition: bool, why: str) -> None:
    """Skip the test when ``condition`` is false, or fail it under CI where everything must run."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"cannot run under CI=true: {why}")
    pytest.skip(why)


def need_binary(name: str) -> str:
    path = shutil.which(name)
    need(path is not None, f"{name} is not installed (make setup installs it as root)")
    return path  # type: ignore[return-value]


def need_root() -> None:
    need(os.geteuid() == 0, "needs root (systemd-nspawn, PostgreSQL server)")


def shared_file(relative: str) -> Path:
    """A file of ``../shared/`` beside the checkout (or beside a worktree's parent); skip if absent."""
    root = Path(__file__).resolve().parents[1]
    for base in (root.parent / "shared", root.parent.parent / "shared"):
        if (base / relative).exists():
            return base / relative
    need(False, f"../shared/{relative} is not beside this checkout")
    raise AssertionError  # unreachable: need() skipped or failed
