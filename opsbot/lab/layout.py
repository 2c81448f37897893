"""What a lab of N nodes looks like: nodes, roles, ports, unit files and the inventory (pure).

Every port is unique across the lab because the nodes share the host's network; all of them
derive from two bases in ``LabSettings`` so two labs can run side by side on one machine.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from opsbot.lab.settings import LabSettings

MODEL_PATH = "/models/DeepSeek-V4-Flash"
SERVED_MODEL = "deepseek-ai/DeepSeek-V4-Flash"
NODE_STATE_DIR = "/var/lib/opsbot-lab"  # rw bind: control files and GPU holdings, survives restarts
NODE_CODE_DIR = "/opt/opsbot-lab"  # ro bind: the emulator package as ``sglang_emulator``
EMULATOR_PACKAGE = "sglang_emulator"
CLUSTER = "lab"
UNITS = {
    "prefill": "sglang-dsv4-prefill.service",
    "decode": "sglang-dsv4-decode.service",
    "router": "sglang-router.service",
}
EXPORTER_UNIT = "opsbot-gpu-exporter.service"
# offsets from the service port base: the lab's Prometheus, Alertmanager, and node i's GPU exporter
PROMETHEUS_OFFSET, ALERTMANAGER_OFFSET, EXPORTER_OFFSET = 28, 29, 32


@dataclass(frozen=True)
class RoleSpec:
    key: str  # unique in the lab: prefill, decode, decode-2, router
    kind: str  # prefill | decode | router
    node: str
    port: int
    gpus: tuple[int, ...] = ()
    bootstrap_port: int | None = None
    prometheus_port: int | None = None
    argv: tuple[str, ...] = ()
    dp_size: int = 1  # DP-attention ranks (--enable-dp-attention --dp-size N)

    @property
    def unit(self) -> str:
        return UNITS[self.kind]

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port or self.port}/metrics"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{'readiness' if self.kind == 'router' else 'health'}"

    @property
    def control_file(self) -> str:
        return f"{NODE_STATE_DIR}/control/{self.key}.json"


@dataclass(frozen=True)
class NodeSpec:
    name: str  # inventory name: node1, node2 ...
    machine: str  # systemd-nspawn machine name (and hostname): PREFIX-node1
    ssh_port: int
    roles: tuple[RoleSpec, ...] = field(default_factory=tuple)
    exporter_port: int | None = None  # the GPU exporter stand-in's /metrics


@dataclass(frozen=True)
class LabPlan:
    nodes: tuple[NodeSpec, ...]

    @property
    def roles(self) -> list[RoleSpec]:
        return [r for n in self.nodes for r in n.roles]

    def role(self, key: str) -> RoleSpec:
        for r in self.roles:
            if r.key == key:
                return r
        known = ", ".join(r.key for r in self.roles)
        raise KeyError(f"no role {key!r} in this lab; it has: {known}")

    def node(self, name: str) -> NodeSpec:
        for n in self.nodes:
            if name in (n.name, n.machine):
                return n
        raise KeyError(f"no node {name!r} in this lab; it has: {', '.join(n.name for n in self.nodes)}")


def server_argv(kind: str, port: int, bootstrap_port: int, tp: int, dp: int = 1) -> tuple[str, ...]:
    """``sglang.launch_server`` flags for a PD role, as a production unit would pass them; ``dp`` > 1: DP
    attention with that many ranks (``--enable-dp-attention --dp-size``, read by 0.5.12 and 0.5.23 alike)."""
    argv = [
        "--model-path", MODEL_PATH, "--served-model-name", SERVED_MODEL, "--trust-remote-code",
        "--tp", str(tp), "--host", "127.0.0.1", "--port", str(port),
        "--disaggregation-mode", kind, "--disaggregation-bootstrap-port", str(bootstrap_port),
        "--disaggregation-transfer-backend", "mooncake", "--enable-metrics",
        "--mem-fraction-static", "0.88", "--watchdog-timeout", "300", "--decode-log-interval", "40",
    ]
    if kind == "prefill":
        argv += ["--chunked-prefill-size", "4096", "--enable-hierarchical-cache", "--hicache-ratio", "2.0"]
    if dp > 1:
        argv += ["--enable-dp-attention", "--dp-size", str(dp)]
    return tuple(argv)


def router_argv(prefill: list[RoleSpec], decode: list[RoleSpec], port: int, prom_port: int) -> tuple[str, ...]:
    """``smg launch`` flags for a PD router over the lab's workers (the emulator's smg mode)."""
    argv = ["launch", "--pd-disaggregation"]
    for p in prefill:
        argv += ["--prefill", f"http://127.0.0.1:{p.port}", str(p.bootstrap_port)]
    for d in decode:
        argv += ["--decode", f"http://127.0.0.1:{d.port}"]
    argv += [
        "--policy", "cache_aware", "--host", "127.0.0.1", "--port", str(port),
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prom_port),
        "--health-check-interval-secs", "5", "--health-check-timeout-secs", "5",
    ]
    return tuple(argv)


# a lab of 4 or more nodes: more PD pairs, with routers of their own at these offsets (port, Prometheus
# port) from the service port base, and each extra prefill's bootstrap port at BOOTSTRAP_OFFSET + pair
EXTRA_ROUTER_OFFSETS = ((5, 6), (7, 8), (26, 27))
BOOTSTRAP_OFFSET = 48


def plan_lab(settings: LabSettings, nodes: int = 2) -> LabPlan:
    """Node 1 runs prefill + router, node 2 decode (1 node: all). With 3 nodes node 3 is one more
    decode; with 4 or more, nodes 3, 4 are the next PD pair (prefill-2, decode-3) and so on, the first
    three extra pairs each with a router of its own (router-2.., on the pair's prefill node), later
    pairs joining the last of them; an odd last node is one more decode of the first pair."""
    if nodes < 1:
        raise ValueError("a lab needs at least one node")
    base = settings.lab_service_port_base
    gpus = tuple(range(settings.lab_gpus_per_node))
    names = [f"node{i}" for i in range(1, nodes + 1)]
    prefill = RoleSpec("prefill", "prefill", names[0], base, gpus, bootstrap_port=base + 4)
    dp = settings.lab_decode_dp_size
    decodes = [RoleSpec("decode", "decode", names[min(1, nodes - 1)], base + 1, gpus, bootstrap_port=base + 4, dp_size=dp)]
    if nodes == 1:  # one node: decode shares the node; give it the upper half of the GPUs
        half = max(1, len(gpus) // 2)
        prefill = RoleSpec("prefill", "prefill", names[0], base, gpus[:half], bootstrap_port=base + 4)
        decodes = [RoleSpec("decode", "decode", names[0], base + 1, gpus[half:] or gpus, bootstrap_port=base + 4,
                            dp_size=dp)]
    groups: list[tuple[list[RoleSpec], list[RoleSpec]]] = [([prefill], decodes)]
    extra = list(enumerate(names[2:], start=2))
    pairs = list(zip(extra[0::2], extra[1::2])) if nodes >= 4 else []
    for j, ((ip, pnode), (id_, dnode)) in enumerate(pairs):
        boot = base + BOOTSTRAP_OFFSET + j
        group = min(j + 1, len(EXTRA_ROUTER_OFFSETS))
        if group == len(groups):
            groups.append(([], []))
        groups[group][0].append(RoleSpec(f"prefill-{ip}", "prefill", pnode, base + 10 + ip, gpus, bootstrap_port=boot))
        groups[group][1].append(RoleSpec(f"decode-{id_}", "decode", dnode, base + 10 + id_, gpus, bootstrap_port=boot))
    for i, name in extra[2 * len(pairs):]:  # 3 nodes, or the odd last node: a decode of the first pair
        decodes.append(RoleSpec(f"decode-{i}", "decode", name, base + 10 + i, gpus, bootstrap_port=base + 4))
    roles: list[RoleSpec] = []
    for g, (prefills, decs) in enumerate(groups):
        prefills = [_with_argv(p, server_argv("prefill", p.port, p.bootstrap_port or 0, len(p.gpus))) for p in prefills]
        decs = [_with_argv(d, server_argv("decode", d.port, d.bootstrap_port or 0, len(d.gpus), d.dp_size)) for d in decs]
        port, prom = (base + 2, base + 3) if g == 0 else (base + o for o in EXTRA_ROUTER_OFFSETS[g - 1])
        router = RoleSpec("router" if g == 0 else f"router-{g + 1}", "router", prefills[0].node, port,
                          prometheus_port=prom, argv=router_argv(prefills, decs, port, prom))
        roles += [*prefills, router, *decs]
    specs = []
    for i, name in enumerate(names):
        on_node = tuple(r for r in roles if r.node == name)
        specs.append(NodeSpec(name, f"{settings.lab_prefix}-{name}", settings.lab_ssh_port_base + i, on_node,
                              exporter_port=base + EXPORTER_OFFSET + i))
    return LabPlan(tuple(specs))


def _with_argv(role: RoleSpec, argv: tuple[str, ...]) -> RoleSpec:
    return RoleSpec(role.key, role.kind, role.node, role.port, role.gpus, role.bootstrap_port, role.prometheus_port, argv,
                    role.dp_size)


def unit_text(role: RoleSpec, health_check_timeout: int = 20, version: str = "0.5.23") -> str:
    """The systemd unit that runs one role's emulator, restarting it the way production does."""
    module = "launch_router" if role.kind == "router" else "launch_server"
    what = {"prefill": "prefill server", "decode": "decode server", "router": "PD router"}[role.kind]
    env = {
        "PYTHONPATH": NODE_CODE_DIR,
        "PYTHONUNBUFFERED": "1",
        "SGLANG_EMULATOR_ROLE": role.key,
        "SGLANG_EMULATOR_STATE_DIR": NODE_STATE_DIR,
        "SGLANG_HEALTH_CHECK_TIMEOUT": str(health_check_timeout),
        "SGLANG_EMULATOR_VERSION": version,
    }
    if role.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in role.gpus)
    argv = ["/usr/bin/python3", "-m", f"{EMULATOR_PACKAGE}.{module}", *role.argv]
    lines = [
        "[Unit]",
        f"Description=SGLang DeepSeek-V4 {what} (opsbot lab: SGLang emulator stand-in)",
        "After=network-online.target",
        "StartLimitIntervalSec=60",
        "StartLimitBurst=5",
        "",
        "[Service]",
        "Type=simple",
        *(f"Environment={k}={v}" for k, v in env.items()),
        "ExecStart=" + " ".join(shlex.quote(a) for a in argv),
        "Restart=on-failure",
        "RestartSec=1",
        "TimeoutStopSec=10",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(lines)


def exporter_unit_text(port: int) -> str:
    """The unit of the node's GPU exporter stand-in (the emulated GPUs, as opsbot_gpu_* families)."""
    argv = ["/usr/bin/python3", "-m", f"{EMULATOR_PACKAGE}.gpu_exporter", "--host", "127.0.0.1", "--port", str(port)]
    return "\n".join([
        "[Unit]",
        "Description=opsbot GPU exporter (opsbot lab: stand-in over the emulated GPUs)",
        "",
        "[Service]",
        "Type=simple",
        f"Environment=PYTHONPATH={NODE_CODE_DIR}",
        f"Environment=SGLANG_EMULATOR_STATE_DIR={NODE_STATE_DIR}",
        "ExecStart=" + " ".join(shlex.quote(a) for a in argv),
        "Restart=always",
        "RestartSec=1",
        "",
    ])


def sshd_conf(port: int) -> str:
    """sshd drop-in: this node's own port and host key, loopback only, keys only."""
    return "\n".join(
        [
            f"Port {port}",
            "ListenAddress 127.0.0.1",
            "HostKey /etc/ssh/opsbot/ssh_host_ed25519_key",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "UseDNS no",
            "",
        ]
    )


NVIDIA_SMI_WRAPPER = f"""#!/bin/sh
# opsbot lab: stand-in nvidia-smi (part of the SGLang emulator; no GPU here)
PYTHONPATH={NODE_CODE_DIR} exec /usr/bin/python3 -m {EMULATOR_PACKAGE}.nvidia_smi "$@"
"""


def inventory_data(plan: LabPlan, host_keys: dict[str, str], key_file: Path) -> dict:
    """The inventory for this lab, as plain data ready for YAML."""
    nodes = [
        {
            "name": n.name,
            "address": "127.0.0.1",
            "port": n.ssh_port,
            "user": "root",
            "key_file": str(key_file),
            "host_key": host_keys[n.name],
        }
        for n in plan.nodes
    ]
    roles = []
    for r in plan.roles:
        entry: dict = {"role": r.kind, "node": r.node, "unit": r.unit}
        if r.key != r.kind:
            entry["name"] = r.key
        entry |= {"metrics_url": r.metrics_url, "health_url": r.health_url, "http_via_ssh": True}
        if r.gpus:
            entry["gpus"] = list(r.gpus)
            entry["numa_node"] = 0
        if r.dp_size > 1:
            entry["dp_size"] = r.dp_size
        if r.kind == "prefill" and r.bootstrap_port:
            entry["bootstrap_port"] = r.bootstrap_port
        roles.append(entry)
    return {"clusters": {CLUSTER: {"nodes": nodes, "roles": roles}}}
