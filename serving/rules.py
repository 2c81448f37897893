"""Deployment rules: configurations that broke real PD deployments, refused with a reason and a fix.

Pure functions of a ``DeploymentSpec``. Every rule has a stable id (``opsbot deploy check`` prints
it) and points at the place in the spec it is about, so the CLI can name the line.
"""

from __future__ import annotations

import difflib
import math
from collections import defaultdict
from dataclasses import dataclass

from serving.flags import known_flags
from serving.memory import PAGE_SIZE, SWA_FULL_TOKENS_RATIO, KVBytes, RoleFit, kv_bytes, model_configs
from serving.patch import KNOWN_SGLANG
from serving.spec import GIB, DeploymentSpec, ServerSpec

# Flags the renderer derives from spec fields; setting them in ``args`` too would fight the field.
MANAGED_SERVER_FLAGS = {
    "--model-path": "model.path",
    "--model": "model.path",
    "--served-model-name": "model.served_name",
    "--host": "host",
    "--port": "port",
    "--tp-size": "tp",
    "--tensor-parallel-size": "tp",
    "--tp": "tp",
    "--mem-fraction-static": "mem_fraction_static",
    "--context-length": "context_length",
    "--disaggregation-mode": "(the role: prefill or decode)",
    "--disaggregation-transfer-backend": "transfer_backend",
    "--disaggregation-bootstrap-port": "bootstrap_port",
    "--enable-hierarchical-cache": "hicache_ratio",
    "--enable-hicache": "hicache_ratio",
    "--hicache-ratio": "hicache_ratio",
    "--enable-metrics": "(always on)",
}
MANAGED_ROUTER_FLAGS = {
    "--pd-disaggregation": "(always on)",
    "--prefill": "prefill",
    "--decode": "decode",
    "--host": "router.host",
    "--port": "router.port",
    "--policy": "router.policy",
    "--prometheus-port": "router.prometheus_port",
    "--prometheus-host": "router.prometheus_host",
    "--max-concurrent-requests": "router.max_concurrent_requests",
    "--queue-size": "router.queue_size",
    "--queue-timeout-secs": "router.queue_timeout_secs",
}


@dataclass(frozen=True)
class Violation:
    rule: str
    where: tuple[str | int, ...]
    reason: str
    fix: str

    def __str__(self) -> str:
        return f"[{self.rule}] {'.'.join(map(str, self.where))}: {self.reason}. Fix: {self.fix}"


ROUTER_PINS = {"smg": "smg 1.13.0", "sgl-router": "sglang-router 0.3.2"}
ROUTER_FLAG_LISTS = {"smg": "smg", "sgl-router": "router"}


def model_kv_bytes(spec: DeploymentSpec, server: ServerSpec | None = None) -> KVBytes | None:
    """The computed KV bytes per token (None when the spec gives a measured figure instead)."""
    m = spec.model
    if m.config is None or m.config not in model_configs():
        return None
    args = server.args if server else {}
    page = int(args.get("--page-size") or PAGE_SIZE)  # type: ignore[arg-type]
    swa = float(args.get("--swa-full-tokens-ratio") or SWA_FULL_TOKENS_RATIO)  # type: ignore[arg-type]
    return kv_bytes(m.config, m.index_keys, page, swa)


def bytes_per_token(spec: DeploymentSpec, server: ServerSpec | None = None) -> int:
    computed = model_kv_bytes(spec, server)
    return computed.per_token if computed else int(spec.model.kv_bytes_per_token or 1)


def role_fit(spec: DeploymentSpec, role: str) -> RoleFit:
    s = spec.servers()[role]
    node = spec.node(s.node)
    context = s.context_length
    if context is None:
        cfg = model_configs().get(spec.model.config or "")
        context = cfg.max_position_embeddings if cfg else 0
    return RoleFit(role, node.gpu_memory_gib * GIB, s.mem_fraction_static, spec.model.weights_gib * GIB / s.tp,
                   bytes_per_token(spec, s), context, s.kv_pool_tokens)


def hicache_host_bytes(spec: DeploymentSpec, server: ServerSpec) -> int:
    """Host memory HiCache allocates for one server: device KV pool bytes x ratio, over all TP ranks."""
    if server.hicache_ratio is None:
        return 0
    bpt = bytes_per_token(spec, server)
    if server.kv_pool_tokens is not None:
        pool = server.kv_pool_tokens * bpt
    else:
        node = spec.node(server.node)
        free = node.gpu_memory_gib * server.mem_fraction_static - spec.model.weights_gib / server.tp
        pool = max(0, int(free * GIB) // bpt) * bpt
    return int(pool * server.hicache_ratio) * server.tp


def _near(flag: str, which: str) -> str:
    close = difflib.get_close_matches(flag, known_flags(which), n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def _server_rules(spec: DeploymentSpec, role: str, s: ServerSpec) -> list[Violation]:
    out: list[Violation] = []
    nodes = {n.name: n for n in spec.nodes}
    if s.node not in nodes:
        out.append(Violation("node-unknown", (role, "node"), f"node {s.node!r} is not in nodes",
                             f"use one of: {', '.join(nodes)}"))
    for flag in s.args:
        at = (role, "args", flag)
        if flag == "--max-queued-requests":
            out.append(Violation(
                "pd-max-queued-requests", at,
                "SGLang ignores --max-queued-requests in disaggregation mode, so it bounds nothing",
                "remove it and bound the queue at the router: router.max_concurrent_requests, "
                "router.queue_size, router.queue_timeout_secs"))
        elif flag == "--hicache-size" and spec.model.family == "deepseek-v4":
            out.append(Violation(
                "dsv4-hicache-size", at,
                "DeepSeek V4 HiCache raises 'does not support --hicache-size' at start-up (a crash loop)",
                f"remove --hicache-size and set {role}.hicache_ratio (host pool = device pool x ratio)"))
        elif flag in MANAGED_SERVER_FLAGS:
            out.append(Violation("managed-flag", at, f"{flag} is rendered from the spec",
                                 f"set {MANAGED_SERVER_FLAGS[flag]} instead of args[{flag!r}]"))
        elif flag not in known_flags("sglang"):
            out.append(Violation("unknown-flag", at, f"{flag} is not a flag of sglang 0.5.23{_near(flag, 'sglang')}",
                                 "remove it or spell it as sglang serve --help does"))
    if len(s.gpus) % s.tp:
        out.append(Violation("tp-divides-gpus", (role, "tp"), f"tp {s.tp} does not divide {len(s.gpus)} GPUs",
                             "give the role a multiple of tp GPUs, or change tp"))
    if len(set(s.gpus)) != len(s.gpus):
        out.append(Violation("gpu-overlap", (role, "gpus"), "a GPU is listed twice", "list each GPU once"))
    node = nodes.get(s.node)
    if node is None:
        return out
    bad = [g for g in s.gpus if not 0 <= g < node.gpu_count]
    if bad:
        out.append(Violation("gpu-range", (role, "gpus"), f"GPUs {bad} do not exist on {node.name}",
                             f"use GPU ids 0..{node.gpu_count - 1}"))
    if s.numa_node not in node.numa_memory_gib:
        out.append(Violation("numa-unknown", (role, "numa_node"), f"{node.name} has no NUMA node {s.numa_node}",
                             f"use one of {sorted(node.numa_memory_gib)}"))
    elif s.hicache_ratio is not None:
        need = hicache_host_bytes(spec, s)
        have = node.numa_memory_gib[s.numa_node] * GIB
        budget = have * spec.hicache_numa_margin
        if need > budget:
            out.append(Violation(
                "hicache-numa-budget", (role, "hicache_ratio"),
                f"HiCache needs {need / GIB:.0f} GiB of host memory (device KV pool x {s.hicache_ratio} x tp {s.tp}) "
                f"but NUMA node {s.numa_node} of {node.name} has {have / GIB:.0f} GiB "
                f"({spec.hicache_numa_margin:.0%} usable = {budget / GIB:.0f} GiB)",
                f"lower {role}.hicache_ratio to at most {s.hicache_ratio * budget / need:.2f}"))
    return out


def _router_rules(spec: DeploymentSpec) -> list[Violation]:
    out: list[Violation] = []
    r = spec.router
    if r.node not in {n.name for n in spec.nodes}:
        out.append(Violation("node-unknown", ("router", "node"), f"node {r.node!r} is not in nodes",
                             f"use one of: {', '.join(n.name for n in spec.nodes)}"))
    for flag in r.args:
        at = ("router", "args", flag)
        if flag in MANAGED_ROUTER_FLAGS:
            out.append(Violation("managed-flag", at, f"{flag} is rendered from the spec",
                                 f"set {MANAGED_ROUTER_FLAGS[flag]} instead of router.args[{flag!r}]"))
        elif flag not in known_flags(ROUTER_FLAG_LISTS[r.kind]):
            out.append(Violation("unknown-flag", at,
                                 f"{flag} is not a flag of {ROUTER_PINS[r.kind]}{_near(flag, ROUTER_FLAG_LISTS[r.kind])}",
                                 "remove it or spell it as `smg launch --help` does" if r.kind == "smg"
                                 else "remove it or spell it as launch_router --help does"))
    if r.prefill_bootstrap_port is not None and r.prefill_bootstrap_port != spec.prefill.bootstrap_port:
        out.append(Violation(
            "bootstrap-port-mismatch", ("router", "prefill_bootstrap_port"),
            f"the router tells decode to fetch KV from bootstrap port {r.prefill_bootstrap_port} but the prefill "
            f"server listens on {spec.prefill.bootstrap_port}: every transfer fails at bootstrap",
            f"set router.prefill_bootstrap_port to {spec.prefill.bootstrap_port} or leave it out"))
    if r.max_concurrent_requests < 0:
        out.append(Violation(
            "pd-admission-control", ("router", "max_concurrent_requests"),
            "no admission control: in PD mode the router is the only place a burst can be bounded",
            "set router.max_concurrent_requests (and queue_size, queue_timeout_secs)"))
    return out


def _pair_rules(spec: DeploymentSpec) -> list[Violation]:
    out: list[Violation] = []
    p, d = spec.prefill, spec.decode
    if p.node == d.node:
        shared = sorted(set(p.gpus) & set(d.gpus))
        if shared:
            out.append(Violation("gpu-overlap", ("decode", "gpus"), f"GPUs {shared} are given to prefill and decode",
                                 "give each role its own GPUs"))
    if p.transfer_backend != d.transfer_backend:
        out.append(Violation("transfer-backend-mismatch", ("decode", "transfer_backend"),
                             f"prefill uses {p.transfer_backend}, decode {d.transfer_backend}",
                             "use the same transfer backend on both roles"))
    ports: dict[str, list[tuple[int, tuple[str | int, ...], str]]] = defaultdict(list)
    for role, s in spec.servers().items():
        ports[s.node].append((s.port, (role, "port"), f"{role} HTTP"))
    ports[p.node].append((p.bootstrap_port, ("prefill", "bootstrap_port"), "prefill bootstrap"))
    r = spec.router
    ports[r.node].append((r.port, ("router", "port"), "router HTTP"))
    ports[r.node].append((r.prometheus_port, ("router", "prometheus_port"), "router metrics"))
    for n in spec.nodes if spec.exporter.enabled else []:
        ports[n.name].append((n.exporter_port or spec.exporter.port, ("exporter", "port"), "GPU exporter"))
    for node, used in ports.items():
        seen: dict[int, str] = {}
        for port, where, what in used:
            if port in seen:
                out.append(Violation("port-conflict", where, f"{what} and {seen[port]} both use port {port} on {node}",
                                     "give each listener on a node its own port (router and server both "
                                     "default to 30000)"))
            else:
                seen[port] = what
    return out


def _model_rules(spec: DeploymentSpec) -> list[Violation]:
    """The model's config is known; bf16 index keys only where the patch can attach."""
    m = spec.model
    if m.config is not None and m.config not in model_configs():
        return [Violation("model-config-unknown", ("model", "config"), f"{m.config!r} is not in serving/models.yaml",
                          f"use one of: {', '.join(model_configs())}, or add the model's config.json facts there")]
    if m.index_keys != "bf16":
        return []
    out: list[Violation] = []
    cfg = model_configs().get(m.config or "")
    if cfg is None or cfg.index_layers == 0:
        what = (f"{m.config} has no DSA indexer layer (attention {cfg.attention}, 0 of {cfg.num_hidden_layers} "
                f"layers with a C4 indexer, index_topk {cfg.index_topk})" if cfg else
                "the model has no config in serving/models.yaml, so no indexer is known")
        out.append(Violation("index-keys-no-indexer", ("model", "index_keys"),
                             f"bf16 index keys need a DeepSeek-V4 C4 indexer to patch: {what}",
                             "set model.index_keys: fp8, or name a DeepSeek-V4 model in model.config"))
    if spec.sglang_version not in KNOWN_SGLANG:
        out.append(Violation("patch-sglang-unknown", ("sglang_version",),
                             f"the bf16 index-key patch knows SGLang {', '.join(KNOWN_SGLANG)} (the functions it "
                             f"replaces are hashed per release), not {spec.sglang_version}: it would refuse to attach "
                             "and every server would fail at start",
                             f"run SGLang {KNOWN_SGLANG[-1]}, or set model.index_keys: fp8"))
    return out


def _memory_rules(spec: DeploymentSpec) -> list[Violation]:
    """Each server's KV pool holds one request of its context length."""
    out: list[Violation] = []
    for role, s in spec.servers().items():
        if s.node not in {n.name for n in spec.nodes}:
            continue
        fit = role_fit(spec, role)
        if fit.short_bytes <= 0:
            continue
        frac = fit.fraction_needed()
        raise_it = (f"raise {role}.mem_fraction_static to at least {math.ceil(frac * 1000) / 1000:g}"
                    if frac < 0.95 else "use more GPUs per role (tp) so the weights per rank shrink")
        if fit.measured_tokens is not None:
            raise_it = f"give the server more KV memory (the measured pool holds {fit.measured_tokens:,} tokens)"
        out.append(Violation(
            "kv-budget", (role, "mem_fraction_static"),
            f"{'; '.join(fit.lines())} (KV {fit.kv_bytes_per_token} B per token, index keys "
            f"{spec.model.index_keys})",
            f"{raise_it}, or lower {role}.context_length to at most {fit.pool_tokens:,}"))
    return out


def check(spec: DeploymentSpec) -> list[Violation]:
    """Every rule the spec breaks; an empty list means it may be rendered and applied."""
    out: list[Violation] = _model_rules(spec)
    if not any(v.rule == "model-config-unknown" for v in out):
        out += _memory_rules(spec)
    for role, s in spec.servers().items():
        out += _server_rules(spec, role, s)
    return out + _router_rules(spec) + _pair_rules(spec)
