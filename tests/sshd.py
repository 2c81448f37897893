"""A real OpenSSH server on loopback for transport tests: own host key, own authorized key."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from opsbot.inventory import Node
from tests.realparts import need_binary, need_root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Sshd:
    port: int
    host_key: str  # "ssh-ed25519 AAAA..."
    client_key: Path
    log: Path
    proc: subprocess.Popen

    def node(self, **overrides) -> Node:
        fields = dict(
            name="loop", address="127.0.0.1", port=self.port, user="root", key_file=self.client_key,
            host_key=self.host_key,
        )
        fields.update(overrides)
        return Node(**fields)

    def accepted(self) -> int:
        return self.log.read_text(errors="replace").count("Accepted publickey")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=5)

    def crash(self) -> None:
        """The node goes away: the listener and its per-connection processes (its children) die."""
        children = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _ppid(p) == self.proc.pid]
        self.stop()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _ppid(proc_dir: Path) -> int | None:
    try:
        return int((proc_dir / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def start_sshd(tmp: Path, port: int | None = None) -> Sshd:
    need_root()
    sshd = "/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else need_binary("sshd")
    need_binary("ssh-keygen")
    tmp.mkdir(parents=True, exist_ok=True)
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / name)], check=True)
    (tmp / "authorized_keys").write_text((tmp / "client.pub").read_text())
    port = port or free_port()
    cfg = tmp / "sshd_config"
    cfg.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp / 'host'}\nAuthorizedKeysFile {tmp / 'authorized_keys'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        f"UsePAM no\nStrictModes no\nPidFile {tmp / 'sshd.pid'}\nSubsystem sftp internal-sftp\nLogLevel INFO\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    log = tmp / "sshd.log"
    proc = subprocess.Popen([sshd, "-D", "-e", "-f", str(cfg)], stderr=log.open("w"), stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {log.read_text()}") from None
            time.sleep(0.05)
    host_key = " ".join((tmp / "host.pub").read_text().split()[:2])
    return Sshd(port, host_key, tmp / "client", log, proc)
