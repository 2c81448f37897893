"""A real OpenSSH server on loopback for transport tests: own host key, own authorized key."""

from __future__ import annotations

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


def start_sshd(tmp: Path) -> Sshd:
    need_root()
    sshd = "/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else need_binary("sshd")
    need_binary("ssh-keygen")
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / name)], check=True)
    (tmp / "authorized_keys").write_text((tmp / "client.pub").read_text())
    port = free_port()
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
                raise RuntimeError(f"sshd exited: {log.read_text()}")
            time.sleep(0.05)
    host_key = " ".join((tmp / "host.pub").read_text().split()[:2])
    return Sshd(port, host_key, tmp / "client", log, proc)
