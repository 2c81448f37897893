"""The lab's monitoring: a real Prometheus scraping every lab role and GPU exporter stand-in, loaded
with the alert rules ``opsbot deploy render`` produces for the lab's spec, and a real Alertmanager
routing to ``opsbot serve`` with a bearer token. Both are Debian's binaries on loopback; their data,
configuration, logs and pids live under the lab directory and they start and stop with the lab.

The lab's spec is ``serving/examples/lab-2node.yaml`` with the running lab's nodes and ports and
game-day timings (1 s scrapes, rules' ``for:`` and windows scaled down): timings are shortened
through the spec, never by editing rendered files.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

import serving
from opsbot.lab.layout import ALERTMANAGER_OFFSET, PROMETHEUS_OFFSET, LabPlan
from serving.alerts import alert_rules_yaml
from serving.render import alertmanager_config
from serving.spec import DeploymentSpec, load_spec

LAB_SPEC = Path(serving.__file__).parent / "examples" / "lab-2node.yaml"
SCRAPE = "1s"
TIME_SCALE = 0.05  # 2m windows and pending times become 6 s; 5m becomes 15 s
BINARIES = {"prometheus": ("prometheus", "prometheus"), "alertmanager": ("prometheus-alertmanager", "prometheus-alertmanager")}


class MonitoringError(RuntimeError):
    pass


@dataclass(frozen=True)
class MonitoringUrls:
    prometheus: str
    alertmanager: str


def urls(service_port_base: int) -> MonitoringUrls:
    """One Prometheus and one Alertmanager per lab, whatever its size."""
    return MonitoringUrls(f"http://127.0.0.1:{service_port_base + PROMETHEUS_OFFSET}",
                          f"http://127.0.0.1:{service_port_base + ALERTMANAGER_OFFSET}")


def lab_spec(plan: LabPlan, service_port_base: int, opsbot_url: str, token_file: Path,
             source: Path = LAB_SPEC) -> DeploymentSpec:
    """The lab's deployment spec: the example lab spec with this lab's nodes, ports and timings (pure)."""
    data = yaml.safe_load(source.read_text())
    data["nodes"] = [
        {**data["nodes"][0], "name": n.name, "address": "127.0.0.1", "port": n.ssh_port, "exporter_port": n.exporter_port}
        for n in plan.nodes
    ]
    for kind in ("prefill", "decode", "router"):
        role = next(r for r in plan.roles if r.kind == kind)
        data[kind] |= {"node": role.node, "port": role.port}
        if kind == "router":
            data[kind]["prometheus_port"] = role.prometheus_port
        else:
            data[kind]["bootstrap_port"] = role.bootstrap_port
    data["exporter"] = {"enabled": True}
    data["prometheus"] = {"scrape_interval": SCRAPE, "evaluation_interval": SCRAPE}
    data["alertmanager"] = {
        "opsbot_url": opsbot_url, "token_file": str(token_file),
        "address": f"127.0.0.1:{service_port_base + ALERTMANAGER_OFFSET}",
        "group_wait": "0s", "group_interval": "1s", "repeat_interval": "1h",
    }
    data["alerts"] = {**data.get("alerts", {}), "time_scale": TIME_SCALE}
    tmp = token_file.parent / "lab-spec.yaml"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_spec(tmp)


def prometheus_config(spec: DeploymentSpec, plan: LabPlan) -> str:
    """Scrape every role of the lab (all decodes, not only the spec's one) and every exporter."""
    jobs = spec.prometheus.jobs
    by_job: dict[str, list[dict[str, object]]] = {}
    for r in plan.roles:
        port = r.prometheus_port if r.kind == "router" else r.port
        by_job.setdefault(jobs[r.kind], []).append(  # type: ignore[index]  # a lab role's kind is a role kind
            {"targets": [f"127.0.0.1:{port}"], "labels": {"cluster": "lab", "role": r.key, "node": r.node}})
    by_job[jobs["exporter"]] = [
        {"targets": [f"127.0.0.1:{n.exporter_port}"], "labels": {"cluster": "lab", "role": "exporter", "node": n.name}}
        for n in plan.nodes if n.exporter_port
    ]
    config = {
        "global": {"scrape_interval": SCRAPE, "evaluation_interval": SCRAPE, "scrape_timeout": SCRAPE},
        "rule_files": ["rules/sglang-pd.rules.yml"],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [spec.alertmanager.address]}]}]},
        "scrape_configs": [{"job_name": job, "static_configs": targets} for job, targets in by_job.items()],
    }
    return yaml.safe_dump(config, sort_keys=False)


class Monitoring:
    """Start, stop and find the lab's Prometheus and Alertmanager (``dir``: LAB_DIR/monitoring)."""

    def __init__(self, lab_dir: Path, plan: LabPlan, service_port_base: int):
        self.dir = lab_dir / "monitoring"
        self.plan = plan
        self.urls = urls(service_port_base)
        self.base = service_port_base
        self._started: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def state_file(self) -> Path:
        return self.dir / "monitoring.json"

    def running(self) -> dict[str, bool]:
        return {name: self._pid(name) is not None for name in BINARIES}

    def start(self, opsbot_url: str, token: str) -> MonitoringUrls:
        """Write the configuration, start both servers (idempotent) and wait until they are ready."""
        found = {name: shutil.which(exe) for name, (exe, _) in BINARIES.items()}
        missing = [f"{name} (apt-get install {BINARIES[name][1]})" for name, path in found.items() if path is None]
        binaries = {name: path for name, path in found.items() if path is not None}
        if missing:
            raise MonitoringError(f"missing: {', '.join(missing)}; `make setup` as root installs them")
        token_file = self.dir / "alertmanager" / "opsbot-token"
        token_file.parent.mkdir(parents=True, exist_ok=True)
        token_file.touch(mode=0o600)
        token_file.write_text(token)
        spec = lab_spec(self.plan, self.base, opsbot_url, token_file)
        (self.dir / "prometheus" / "rules").mkdir(parents=True, exist_ok=True)
        (self.dir / "prometheus" / "prometheus.yml").write_text(prometheus_config(spec, self.plan))
        (self.dir / "prometheus" / "rules" / "sglang-pd.rules.yml").write_text(alert_rules_yaml(spec))
        (self.dir / "alertmanager" / "alertmanager.yml").write_text(
            alertmanager_config(spec))
        am_port, prom_port = self.base + ALERTMANAGER_OFFSET, self.base + PROMETHEUS_OFFSET
        self._spawn("alertmanager", [
            binaries["alertmanager"], f"--config.file={self.dir / 'alertmanager' / 'alertmanager.yml'}",
            f"--storage.path={self.dir / 'alertmanager' / 'data'}", f"--web.listen-address=127.0.0.1:{am_port}",
            "--cluster.listen-address=",
        ])
        self._spawn("prometheus", [
            binaries["prometheus"], f"--config.file={self.dir / 'prometheus' / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.dir / 'prometheus' / 'data'}", "--storage.tsdb.retention.time=7d",
            f"--web.listen-address=127.0.0.1:{prom_port}", "--rules.alert.resend-delay=1s", "--web.enable-lifecycle",
        ])
        for name, url in (("alertmanager", self.urls.alertmanager), ("prometheus", self.urls.prometheus)):
            self._wait_ready(name, url)
        self.state_file.write_text(json.dumps({"prometheus": self.urls.prometheus,
                                               "alertmanager": self.urls.alertmanager, "opsbot": opsbot_url}))
        return self.urls

    def stop(self, timeout: float = 10.0, only: str | None = None) -> None:
        """Stop both servers (or ``only`` one of them: game days take one down on purpose)."""
        for name in [only] if only else list(BINARIES):
            pid = self._pid(name)
            if pid is None:
                continue
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self._pid(name) is not None:
                time.sleep(0.1)
            if self._pid(name) is not None:
                os.kill(pid, signal.SIGKILL)
            (self.dir / f"{name}.pid").unlink(missing_ok=True)
        if only is None:
            self.state_file.unlink(missing_ok=True)

    def _pid(self, name: str) -> int | None:
        """The server's pid if that process is still the one we started (its command line names our dir)."""
        try:
            pid = int((self.dir / f"{name}.pid").read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return None
        return pid if str(self.dir).encode() in cmdline else None

    def _spawn(self, name: str, argv: list[str]) -> None:
        pid = self._pid(name)
        if pid is not None:
            os.kill(pid, signal.SIGHUP)  # running: reload the configuration just written
            return
        with open(self.dir / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        (self.dir / f"{name}.pid").write_text(str(proc.pid))
        self._started[name] = proc

    def _wait_ready(self, name: str, url: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._exited(name):
                raise MonitoringError(f"{name} exited: {self._log_tail(name)}")
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise MonitoringError(f"{name} not ready in {timeout:.0f} s: {self._log_tail(name)}")

    def _exited(self, name: str) -> bool:
        """A server this object started has exited (its exit status, not a look at /proc, which can
        race the new process); one it found running is judged by its pid file."""
        proc = self._started.get(name)
        return proc.poll() is not None if proc is not None else self._pid(name) is None

    def _log_tail(self, name: str) -> str:
        try:
            return (self.dir / f"{name}.log").read_text(errors="replace")[-800:]
        except OSError:
            return "(no log)"


def lab_prometheus_url(lab_dir: Path) -> str | None:
    """The running lab Prometheus's URL, for the status page and weekly report's default."""
    return _running(lab_dir).get("prometheus")


def _running(lab_dir: Path) -> dict[str, str]:
    try:
        data = json.loads((lab_dir / "monitoring" / "monitoring.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
