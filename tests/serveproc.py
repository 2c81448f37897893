"""``opsbot serve`` as a real process on loopback, for the tests of several instances and bad input."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.databases import free_port

ALERT_TOKEN = "instances-test-alert-token"


class Serve:
    """One ``opsbot serve`` with its own data dir and port; ``extra_env`` overrides settings."""

    def __init__(self, tmp: Path, name: str, database_url: str, inventory: Path, *, prefix: list[str] | None = None,
                 **extra_env: str) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir = tmp / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = self.dir / "serve.log"
        self.env = {**os.environ, "OPSBOT_DATA_DIR": str(self.dir), "OPSBOT_DATABASE_URL": database_url,
                    "OPSBOT_INVENTORY": str(inventory), "OPSBOT_ALERT_TOKEN": ALERT_TOKEN,
                    "OPSBOT_PORT": str(self.port), "OPSBOT_METRICS_WINDOW_S": "0", **extra_env}
        self.prefix = prefix or []
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Serve:
        with self.log.open("ab") as out:
            # its own process group: a prefix such as faketime forks the server, and stop() must reach it too
            self.proc = subprocess.Popen([*self.prefix, sys.executable, "-m", "opsbot", "serve", "--log-level", "info"],
                                         env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def wait_ready(self, timeout: float = 60) -> Serve:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited {self.proc.returncode}: {self.output()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"{self.name} did not answer /healthz within {timeout} s: {self.output()[-3000:]}")

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def _signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def kill9(self) -> None:
        assert self.proc is not None
        self._signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self._signal(signal.SIGINT)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
            self.proc.wait(10)
