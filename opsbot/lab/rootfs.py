"""The lab nodes' root file system: a minimal Debian bookworm, debootstrapped once and cached.

Built into a temporary directory and renamed into place, under a lock, so two labs starting
at once never see (or build) a half-made tree.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("systemd", "systemd-sysv", "dbus", "openssh-server", "python3")
NAME = f"rootfs-{SUITE}"


class RootfsError(RuntimeError):
    """The root file system could not be built; the message says what to do."""


def rootfs_path(cache_dir: Path) -> Path:
    return cache_dir / NAME


def is_complete(root: Path) -> bool:
    return (root / "usr/bin/python3").exists() and (root / "usr/sbin/sshd").exists() and (
        root / "lib/systemd/systemd"
    ).exists()


def ensure_rootfs(cache_dir: Path, log: Callable[[str], None] = lambda _: None) -> Path:
    """Return the cached root file system, building it with debootstrap the first time."""
    root = rootfs_path(cache_dir)
    if is_complete(root) and (root / "etc/ssh/opsbot").is_dir():
        return root
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / f"{NAME}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent builder finishes first; then we reuse its tree
        if is_complete(root):
            _prepare(root)  # idempotent; upgrades a tree cached by an older opsbot
            return root
        if shutil.which("debootstrap") is None:
            raise RootfsError("debootstrap is not installed: run `make setup` as root (apt-get install debootstrap)")
        tmp = Path(tempfile.mkdtemp(prefix=f".{NAME}-", dir=cache_dir))
        log(f"debootstrap {SUITE} (minbase + {', '.join(PACKAGES)}) into {tmp}; takes about 90 s")
        argv = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(tmp), MIRROR]
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0 or not is_complete(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
            tail = "\n".join(proc.stdout.splitlines()[-15:])
            raise RootfsError(f"debootstrap failed (exit {proc.returncode}); last lines:\n{tail}")
        _prepare(tmp)
        if root.exists():  # an incomplete leftover from an interrupted build
            shutil.rmtree(root)
        tmp.rename(root)
        log(f"root file system cached at {root}")
        return root


def _prepare(root: Path) -> None:
    """Make the tree boot well as many nodes at once: no shared machine id, mount points ready."""
    (root / "etc/machine-id").write_text("")
    (root / "etc/hostname").unlink(missing_ok=True)  # each node's hostname is its machine name
    (root / "root/.ssh").mkdir(mode=0o700, exist_ok=True)
    (root / "opt/opsbot-lab/sglang_emulator").mkdir(parents=True, exist_ok=True)
    (root / "var/lib/opsbot-lab").mkdir(parents=True, exist_ok=True)
    for name in ("root/.ssh/authorized_keys", "etc/ssh/sshd_config.d/opsbot-lab.conf", "usr/bin/nvidia-smi"):
        (root / name).touch()
    (root / "etc/ssh/opsbot").mkdir(exist_ok=True)  # made last: marks a prepared tree
