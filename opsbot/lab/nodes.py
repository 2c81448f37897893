"""The lab: Debian nodes booted with systemd-nspawn, each with its own sshd and host key.

``Lab(settings).up()`` builds (once) the root file system, writes each node's files (sshd
drop-in, host key, units, stand-in nvidia-smi, control files), boots the nodes as background
processes, waits for sshd and the emulator, and writes an inventory with pinned host keys.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from opsbot.inventory import Inventory, load_inventory
from opsbot.lab import emulator
from opsbot.lab.emulator.control import CASCADES, STATES, Control, write_control
from opsbot.lab.layout import (
    EXPORTER_UNIT,
    NODE_CODE_DIR,
    NODE_STATE_DIR,
    NVIDIA_SMI_WRAPPER,
    LabPlan,
    NodeSpec,
    RoleSpec,
    exporter_unit_text,
    inventory_data,
    plan_lab,
    sshd_conf,
    unit_text,
)
from opsbot.lab.breaks import STOPPED, Break, breaking
from opsbot.lab.monitoring import Monitoring
from opsbot.lab.rootfs import ensure_rootfs
from opsbot.lab.settings import LabSettings

Step = Callable[[str], None]
EMULATOR_DIR = Path(emulator.__file__).parent


class LabError(RuntimeError):
    """The lab could not do what was asked; the message says why and what to do."""


@dataclass
class UnitStatus:
    unit: str
    role: str
    active_state: str
    sub_state: str
    n_restarts: int | None


@dataclass
class NodeStatus:
    name: str
    machine: str
    ssh_port: int
    pid: int | None
    running: bool
    sshd: bool
    units: list[UnitStatus] = field(default_factory=list)


class Lab:
    """One lab on this machine, identified by its directory (``LabSettings.lab_path()``)."""

    def __init__(self, settings: LabSettings):
        self.settings = settings
        self.dir = settings.lab_path()
        self.key_file = self.dir / "id_ed25519"
        self.known_hosts = self.dir / "known_hosts"

    # ---- state on disk -------------------------------------------------------------------

    @property
    def inventory_path(self) -> Path:
        return self.settings.inventory_path().resolve()

    @property
    def inventory(self) -> Inventory:
        return load_inventory(self.inventory_path)

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.plan().nodes]

    def url(self, role: str, path: str = "/") -> str:
        """A role's HTTP endpoint as seen from this machine (the nodes share its network)."""
        spec = self.plan().role(role)
        port = spec.prometheus_port if path == "/metrics" and spec.prometheus_port else spec.port
        return f"http://127.0.0.1:{port}{path}"

    def plan(self) -> LabPlan:
        """The running lab's plan (from lab.json), or the default two-node plan."""
        meta = self.dir / "lab.json"
        nodes = json.loads(meta.read_text())["nodes"] if meta.exists() else 2
        return plan_lab(self.settings, nodes)

    def node_dir(self, node: NodeSpec) -> Path:
        return self.dir / node.name

    def _pid(self, node: NodeSpec) -> int | None:
        """The node's systemd-nspawn pid, if that process is still the one we started."""
        try:
            pid = int((self.node_dir(node) / "nspawn.pid").read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            return None
        if b"systemd-nspawn" in cmdline[0] and node.machine.encode() in cmdline:
            return pid
        return None

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    # ---- up / down -------------------------------------------------------------------------

    def up(self, nodes: int = 2, step: Step = lambda _: None, timeout: float = 180.0) -> Inventory:
        """Boot the lab (idempotent when it is already up with the same size)."""
        if os.geteuid() != 0:
            raise LabError("the lab boots systemd-nspawn containers: run it as root")
        for binary, package in (("systemd-nspawn", "systemd-container"), ("ssh", "openssh-client"),
                                ("ssh-keygen", "openssh-client"), ("nsenter", "util-linux")):
            if shutil.which(binary) is None:
                raise LabError(f"{binary} is missing: `make setup` as root installs it (apt-get install {package})")
        with self._locked():
            running = [n for n in self.plan().nodes if self._pid(n)]
            if running:
                if len(self.plan().nodes) == nodes and len(running) == nodes:
                    step("lab already up")
                    return load_inventory(self.inventory_path)
                raise LabError(f"a lab of another size is running in {self.dir}: run `opsbot lab down` first")
            plan = plan_lab(self.settings, nodes)
            busy = [p for p in _ports(plan) if not _port_free(p)]
            if busy:
                raise LabError(
                    f"port(s) {', '.join(map(str, busy))} on 127.0.0.1 are in use (another lab?): choose other "
                    "bases with OPSBOT_LAB_SSH_PORT_BASE / OPSBOT_LAB_SERVICE_PORT_BASE (and OPSBOT_LAB_PREFIX)"
                )
            _room_for_inotify(nodes, step)
            step(f"root file system ({self.settings.lab_cache_dir})")
            rootfs = ensure_rootfs(self.settings.lab_cache_dir, step)
            step("keys: one client key, one host key per node")
            host_keys = self._write_keys(plan)
            for node in plan.nodes:
                self._write_node_files(node)
            (self.dir / "lab.json").write_text(json.dumps({"nodes": nodes}))
            try:
                self._boot_and_wait(plan, rootfs, step, timeout)
            except BaseException:
                step("start-up failed: halting the nodes already started")
                self._halt(plan, step, 30.0)
                raise
            self._write_inventory(plan, host_keys)
            step(f"inventory written to {self.inventory_path}")
            return load_inventory(self.inventory_path)

    def down(self, step: Step = lambda _: None, timeout: float = 30.0) -> None:
        """Shut every node down cleanly (SIGTERM → orderly halt), then make sure nothing is left."""
        with self._locked():
            if any(self.monitoring.running().values()):
                step("stop Prometheus and Alertmanager")
                self.monitoring.stop()
            self._halt(self.plan(), step, timeout)
            step("lab is down")

    def _boot_and_wait(self, plan: LabPlan, rootfs: Path, step: Step, timeout: float) -> None:
        for node in plan.nodes:
            step(f"boot {node.machine} (sshd on 127.0.0.1:{node.ssh_port})")
            self._boot(node, rootfs)
        deadline = time.monotonic() + timeout
        for node in plan.nodes:
            step(f"wait for sshd on {node.name}")
            self._wait(lambda: self.ssh(node.name, ["true"], timeout=5).returncode == 0, deadline, node)
        for role in plan.roles:
            step(f"wait for {role.unit} ({role.key}) on {role.node}")
            self._wait(lambda: _http_ok(role.health_url, 3), deadline, role)

    def _halt(self, plan: LabPlan, step: Step, timeout: float) -> None:
        pids = {n.name: p for n in plan.nodes if (p := self._pid(n))}
        for node in plan.nodes:
            if node.name in pids:
                step(f"halt {node.machine}")
                os.kill(pids[node.name], signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for node in plan.nodes:
            pid = pids.get(node.name)
            while pid and _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if pid and _alive(pid):
                step(f"{node.machine} did not halt in {timeout:.0f} s: killing it")
                os.killpg(pid, signal.SIGKILL)
            (self.node_dir(node) / "nspawn.pid").unlink(missing_ok=True)

    def status(self) -> list[NodeStatus]:
        plan = self.plan()
        out = []
        for node in plan.nodes:
            pid = self._pid(node)
            st = NodeStatus(node.name, node.machine, node.ssh_port, pid, pid is not None, False)
            if pid:
                units = [r.unit for r in node.roles]
                res = self.ssh(node.name, ["systemctl", "show", "-p", "Id,ActiveState,SubState,NRestarts", *units], 8)
                st.sshd = res.returncode == 0
                if st.sshd:
                    st.units = _parse_show(res.stdout, node.roles)
            out.append(st)
        return out

    # ---- acting on nodes ---------------------------------------------------------------------

    def inject(self, role: str, state: str, message: str | None = None, load: bool = True,
               until_restart: bool = False, beyond: int | None = None) -> list[str]:
        """Put ``role`` (and the peer its state cascades to) into ``state``; returns the roles changed.

        ``until_restart``: the state clears at the role's next start (as a restart fixes a wedge in
        production) instead of surviving restarts; for the servers (prefill, decode), not the router.
        """
        plan = self.plan()
        spec = plan.role(role) if role in {r.key for r in plan.roles} else _by_kind(plan, role)
        if state not in STATES:
            raise LabError(f"unknown state {state!r}; states: {', '.join(STATES)}")
        kinds = STATES[state][0]
        if spec.kind not in kinds:
            raise LabError(f"state {state!r} applies to {', '.join(kinds)}, not to {spec.kind}")
        if until_restart and spec.kind == "router":
            raise LabError("--until-restart applies to prefill and decode; a router state lasts until changed")
        targets = [spec]
        if state in CASCADES:
            targets += [r for r in plan.roles if r.kind == CASCADES[state] and r is not spec]
        for target in targets:
            node = plan.node(target.node)
            write_control(self.node_dir(node) / "state/control" / f"{target.key}.json",
                          Control(state, message, load, until_restart, beyond=beyond))
        if state == "crash" or not self._active(spec):  # start-up states need a start; so does a failed unit
            self.ssh(spec.node, ["systemctl", "reset-failed", spec.unit], 10)
            self.ssh(spec.node, ["systemctl", "restart", "--no-block", spec.unit], 10)
        return [t.key for t in targets]

    def break_class(self, incident: str) -> Break:
        """Put the lab into ``incident`` (opsbot/lab/breaks.py says how); ``reset`` heals it."""
        how = breaking(incident)
        if how.state == STOPPED:
            role = _by_kind(self.plan(), how.role)
            self.ssh(role.node, ["systemctl", "stop", role.unit], 20)
        else:
            self.inject(how.role, how.state, until_restart=how.until_restart)
        return how

    @property
    def monitoring(self) -> Monitoring:
        return Monitoring(self.dir, self.plan(), self.settings.lab_service_port_base)

    def reset(self, timeout: float = 60.0) -> None:
        """Every role back to healthy with load, failed units restarted and the journals emptied (so no
        log line of an earlier state is read as evidence of the next); returns when all answer."""
        plan = self.plan()
        for node in plan.nodes:
            self.ssh(node.name, ["journalctl", "--rotate"], 10)
            self.ssh(node.name, ["journalctl", "--vacuum-time=1s"], 10)
        for role in plan.roles:
            write_control(self.node_dir(plan.node(role.node)) / "state/control" / f"{role.key}.json", Control())
        for role in plan.roles:
            if not self._active(role):
                self.ssh(role.node, ["systemctl", "reset-failed", role.unit], 10)
                self.ssh(role.node, ["systemctl", "restart", role.unit], 20)
        deadline = time.monotonic() + timeout
        for role in plan.roles:
            self._wait(lambda: _http_ok(role.health_url, 3), deadline, role)

    def ssh(self, node: str, argv: list[str], timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on a node over real SSH (pinned host key); never raises for a failed command."""
        spec = self.plan().node(node)
        cmd = [
            "ssh", "-i", str(self.key_file), "-p", str(spec.ssh_port),
            "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(timeout))}", "-o", "LogLevel=ERROR",
            "root@127.0.0.1", " ".join(shlex.quote(a) for a in argv),
        ]
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            return subprocess.CompletedProcess(cmd, 124, _text(e.stdout), _text(e.stderr) + "timed out")

    def node_exec(self, node: str, argv: list[str], timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside a node without SSH (nsenter into its namespaces); for sshd itself."""
        spec = self.plan().node(node)
        pid = self._pid(spec)
        leader = _container_init(pid) if pid else None
        if leader is None:
            raise LabError(f"node {node} is not running")
        cmd = ["nsenter", "-t", str(leader), "-m", "-u", "-i", "-p", "--", *argv]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def stop_sshd(self, node: str) -> None:
        self.node_exec(node, ["systemctl", "stop", "ssh.service"])

    def start_sshd(self, node: str) -> None:
        self.node_exec(node, ["systemctl", "start", "ssh.service"])

    # ---- internals ---------------------------------------------------------------------------

    def _active(self, role: RoleSpec) -> bool:
        res = self.ssh(role.node, ["systemctl", "is-active", role.unit], 8)
        return res.stdout.strip() == "active"

    def _write_keys(self, plan: LabPlan) -> dict[str, str]:
        if not self.key_file.exists():
            _keygen(self.key_file, "opsbot-lab-client")
        (self.dir / "authorized_keys").write_text(self.key_file.with_suffix(".pub").read_text())
        host_keys: dict[str, str] = {}
        for node in plan.nodes:
            key = self.node_dir(node) / "ssh" / "ssh_host_ed25519_key"
            key.parent.mkdir(parents=True, exist_ok=True)
            if not key.exists():
                _keygen(key, f"root@{node.machine}")
            kind, blob = key.with_suffix(".pub").read_text().split()[:2]
            host_keys[node.name] = f"{kind} {blob}"
        self.known_hosts.write_text(
            "".join(f"[127.0.0.1]:{n.ssh_port} {host_keys[n.name]}\n" for n in plan.nodes)
        )
        return host_keys

    def _write_node_files(self, node: NodeSpec) -> None:
        d = self.node_dir(node)
        (d / "units").mkdir(parents=True, exist_ok=True)
        (d / "sshd.conf").write_text(sshd_conf(node.ssh_port))
        smi = d / "nvidia-smi"
        smi.write_text(NVIDIA_SMI_WRAPPER)
        smi.chmod(0o755)
        for sub in ("control", "gpu"):
            (d / "state" / sub).mkdir(parents=True, exist_ok=True)
        (d / "state/node.json").write_text(json.dumps({"machine": node.machine, "gpus": self.settings.lab_gpus_per_node}))
        for held in (d / "state/gpu").glob("*.json"):
            held.unlink()
        for role in node.roles:
            (d / "units" / role.unit).write_text(unit_text(
                role, self.settings.lab_health_check_timeout_s, self.settings.lab_sglang_version))
            write_control(d / "state/control" / f"{role.key}.json", Control())
        if node.exporter_port:
            (d / "units" / EXPORTER_UNIT).write_text(exporter_unit_text(node.exporter_port))
        (d / "console.log").unlink(missing_ok=True)

    def _boot(self, node: NodeSpec, rootfs: Path) -> None:
        d = self.node_dir(node)
        binds = [
            f"--bind-ro={d / 'sshd.conf'}:/etc/ssh/sshd_config.d/opsbot-lab.conf",
            f"--bind-ro={d / 'ssh'}:/etc/ssh/opsbot",
            f"--bind-ro={self.dir / 'authorized_keys'}:/root/.ssh/authorized_keys",
            f"--bind-ro={EMULATOR_DIR}:{NODE_CODE_DIR}/sglang_emulator",
            f"--bind-ro={d / 'nvidia-smi'}:/usr/bin/nvidia-smi",
            f"--bind={d / 'state'}:{NODE_STATE_DIR}",
            *(f"--bind-ro={d / 'units' / r.unit}:/etc/systemd/system/{r.unit}" for r in node.roles),
            *([f"--bind-ro={d / 'units' / EXPORTER_UNIT}:/etc/systemd/system/{EXPORTER_UNIT}"] if node.exporter_port else []),
            *_py_spy_binds(),
        ]
        argv = [
            "systemd-nspawn", "-D", str(rootfs), "-b", "--register=no", "--keep-unit", "--volatile=overlay",
            "-M", node.machine, *binds,
            # init arguments: systemd reads them like a kernel command line and starts the units
            *(f"systemd.wants={r.unit}" for r in node.roles),
            *([f"systemd.wants={EXPORTER_UNIT}"] if node.exporter_port else []),
        ]
        log = open(d / "console.log", "wb")
        env = dict(os.environ, SYSTEMD_NSPAWN_LOCK="0")  # many nodes boot from one read-only tree
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, env=env)
        log.close()
        (d / "nspawn.pid").write_text(str(proc.pid))

    def _wait(self, ready: Callable[[], bool], deadline: float, what: object) -> None:
        while time.monotonic() < deadline:
            if ready():
                return
            for node in self.plan().nodes:
                pid_file = self.node_dir(node) / "nspawn.pid"
                if pid_file.exists() and not self._pid(node):
                    tail = (self.node_dir(node) / "console.log").read_text(errors="replace")[-1500:]
                    raise LabError(f"node {node.machine} exited while booting; console:\n{tail}")
            time.sleep(0.5)
        name = getattr(what, "name", None) or getattr(what, "key", "?")
        raise LabError(f"timed out waiting for {name}; see {self.dir}/*/console.log and `opsbot lab status`")

    def _write_inventory(self, plan: LabPlan, host_keys: dict[str, str]) -> None:
        path = self.inventory_path
        path.parent.mkdir(parents=True, exist_ok=True)
        header = "# written by `opsbot lab up`: the lab's nodes with their pinned host keys\n"
        path.write_text(header + yaml.safe_dump(inventory_data(plan, host_keys, self.key_file), sort_keys=False))


_SLOT_LOCKS: dict[int, object] = {}  # held for the life of the process: our slot stays ours


def isolated_settings(data_dir: Path, base: LabSettings | None = None) -> LabSettings:
    """Settings for a lab of its own (tests): a machine prefix and ports no other lab here is using."""
    base = base or LabSettings()
    start = os.getpid() % 50
    for slot in (n % 50 for n in range(start, start + 50)):
        ssh_base, svc_base = 22000 + slot * 20, 40000 + slot * 60
        lock = open(f"/tmp/.opsbot-lab-slot-{slot}.lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        if all(_port_free(p) for p in [*range(ssh_base, ssh_base + 16), *range(svc_base, svc_base + 50)]):
            _SLOT_LOCKS[slot] = lock
            return base.model_copy(update={
                "data_dir": data_dir, "lab_dir": None, "inventory": None, "lab_prefix": f"opsbot-t{slot}",
                "lab_ssh_port_base": ssh_base, "lab_service_port_base": svc_base,
                "lab_health_check_timeout_s": 3,  # a wedged role's /health 503s inside a probe's deadline
            })
        lock.close()
    raise LabError("no free port range for another lab on this machine")


def _ports(plan: LabPlan) -> list[int]:
    """Every port the lab will listen on (sshd, servers, bootstrap, router, its Prometheus)."""
    ports = {n.ssh_port for n in plan.nodes} | {n.exporter_port for n in plan.nodes if n.exporter_port}
    for r in plan.roles:
        ports |= {p for p in (r.port, r.bootstrap_port if r.kind == "prefill" else None, r.prometheus_port) if p}
    return sorted(ports)


INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_PER_NODE = 64  # a booted node's systemd, journald, logind and udev each hold several


def _room_for_inotify(nodes: int, step: Step) -> None:
    """Every node's systemd needs inotify instances of root's shared allowance (default 128): a large
    lab raises the limit, else its later nodes boot without sshd ("Too many open files")."""
    try:
        limit = int(INOTIFY_INSTANCES.read_text())
    except (OSError, ValueError):
        return
    want = 256 + nodes * INOTIFY_PER_NODE
    if limit < want:
        step(f"raise fs.inotify.max_user_instances {limit} → {want} (each node's systemd holds its own)")
        INOTIFY_INSTANCES.write_text(f"{want}\n")


def _port_free(port: int) -> bool:
    """Nothing listens on ``port``. Connections of others in TIME-WAIT do not count (the lab's servers bind
    with SO_REUSEADDR, as sshd, Prometheus and http.server do): a burst of short connections left
    thousands in the ephemeral range, where the lab's ports are, and no lab could find a slot."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _by_kind(plan: LabPlan, kind: str) -> RoleSpec:
    hits = [r for r in plan.roles if r.kind == kind]
    if not hits:
        raise LabError(f"no role {kind!r} in this lab; roles: {', '.join(r.key for r in plan.roles)}")
    return hits[0]


def _keygen(path: Path, comment: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True, stdin=subprocess.DEVNULL,
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of ours counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def _py_spy_binds() -> list[str]:
    """py-spy (a static binary from its PyPI wheel, beside this Python) on the node, allowed to read
    the emulator's memory: what a capture before a restart runs (``opsbot.act.capture``). Without it
    the capture says py-spy is missing, as it would on a node of the field."""
    found = Path(sys.executable).parent / "py-spy"
    binary = found if found.exists() else Path(shutil.which("py-spy") or "/nonexistent")
    if not binary.exists():
        return []
    return [f"--bind-ro={binary}:/usr/local/bin/py-spy", "--capability=CAP_SYS_PTRACE"]


def _container_init(nspawn_pid: int) -> int | None:
    """The container's PID 1 (systemd), a descendant of the systemd-nspawn process."""
    todo = [nspawn_pid]
    while todo:
        pid = todo.pop(0)
        try:
            if pid != nspawn_pid and Path(f"/proc/{pid}/comm").read_text().strip() == "systemd":
                return pid
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        todo.extend(int(c) for c in children)
    return None


def _http_ok(url: str, timeout: float) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status == 200
    except OSError:
        return False


def _parse_show(out: str, roles: tuple[RoleSpec, ...]) -> list[UnitStatus]:
    """``systemctl show`` blocks (one per unit, blank-line separated) → unit rows."""
    by_unit = {r.unit: r.key for r in roles}
    rows = []
    for block in out.strip().split("\n\n"):
        kv = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        unit = kv.get("Id", "?")
        restarts = kv.get("NRestarts", "")
        rows.append(
            UnitStatus(
                unit, by_unit.get(unit, "?"), kv.get("ActiveState", "?"), kv.get("SubState", "?"),
                int(restarts) if restarts.isdigit() else None,
            )
        )
    return rows


def _text(b: bytes | str | None) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
