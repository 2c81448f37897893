"""A real Prometheus (Debian's 2.42) for tests: TSDB backfill with promtool, then the server on loopback."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from tests.databases import free_port


class PrometheusServer:
    """``backfill(openmetrics_text)`` into a fresh data dir, ``start()`` on 127.0.0.1, ``stop()``."""

    def __init__(self, prometheus: str, promtool: str) -> None:
        self.prometheus, self.promtool = prometheus, promtool
        self.dir = Path(tempfile.mkdtemp(prefix="opsbot-prom-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def copy_data_from(self, other: PrometheusServer) -> None:
        """The other server's backfilled blocks (immutable directories), for a second server."""
        shutil.copytree(other.data, self.data, ignore=shutil.ignore_patterns("lock", "wal", "chunks_head"))

    def backfill(self, openmetrics: str) -> None:
        source = self.dir / "samples.om"
        source.write_text(openmetrics)
        done = subprocess.run([self.promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(source),
                               str(self.data)], capture_output=True, text=True, timeout=300, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"promtool backfill failed: {done.stderr[-1000:]}")
        source.unlink()

    def start(self, *flags: str) -> None:
        config = self.dir / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1m\n")
        log = (self.dir / "prometheus.log").open("wb")
        self.proc = subprocess.Popen(
            [self.prometheus, f"--config.file={config}", f"--storage.tsdb.path={self.data}",
             "--storage.tsdb.retention.time=10y", f"--web.listen-address=127.0.0.1:{self.port}",
             *flags], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {(self.dir / 'prometheus.log').read_text()[-1000:]}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("prometheus did not become ready in 30 s")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
