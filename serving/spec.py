"""DeploymentSpec: one YAML file describing a PD deployment, from which everything is rendered.

Loaded with ``opsbot.yamlsource.load_model`` so a malformed file is refused with file and line;
the deployment rules that need the whole spec (GPU overlap, NUMA budgets, flags) live in
``serving.rules``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from opsbot.inventory import NAME_RE, UNIT_RE, Node
from opsbot.yamlsource import load_model

GIB = 1024**3
ArgValue = str | int | float | bool | list[str] | None


DURATION = r"^[0-9]+(ms|s|m|h|d)$"  # one Prometheus duration unit, e.g. 15s, 2m
DIR = r"^/[A-Za-z0-9._/-]+$"  # an absolute directory; "." and ".." segments are refused by _directory
NUMBER_MAX = 10**15  # no count, size, port or ratio of a deployment comes near it; 10**400 is refused


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _unit_name(v: str | None) -> str | None:
    """A systemd service name, whole: "x.service/../../y" or a trailing newline is refused."""
    if v is not None and not UNIT_RE.fullmatch(v):
        raise ValueError(f"{v[:80]!r} is not a systemd service name (letters, digits, '@._:-', ending .service)")
    return v


def _directory(v: str) -> str:
    if any(part in (".", "..") for part in v.split("/")):
        raise ValueError("'.' and '..' are refused: the directory must be written as it is")
    return v


def _hostile_value(value: Any, where: str) -> str | None:
    """Where ``value`` (walked through lists and maps) holds a control character or a number that is not
    finite and bounded; None when it holds none. Every string may reach a unit file or a script."""
    if isinstance(value, str):
        bad = next((c for c in value if ord(c) < 32 or 127 <= ord(c) < 160 or c in "\u2028\u2029"), None)
        return f"{where}: control character {bad!r} refused (it would start a new line in a unit file or script)" \
            if bad is not None else None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            return f"{where}: {value} is not a finite number"
        shown = str(value) if len(str(value)) <= 20 else f"{str(value)[:12]}... ({len(str(value))} digits)"
        return f"{where}: {shown} is out of range (at most 1e15)" if abs(value) > NUMBER_MAX else None
    if isinstance(value, dict):
        items = list(value.items())
        return next((p for k, v in items for p in (_hostile_value(k, f"{where} key"),
                                                   _hostile_value(v, f"{where}.{k}")) if p), None)
    if isinstance(value, list | tuple):
        return next((p for i, v in enumerate(value) if (p := _hostile_value(v, f"{where}[{i}]"))), None)
    return None


class ModelSpec(_Strict):
    path: str = Field(description="model path on the node (--model-path)")
    served_name: str = Field(description="--served-model-name; the model_name metric label")
    family: Literal["deepseek-v4", "other"] = "deepseek-v4"
    config: str | None = Field(
        None, description="the model's entry in serving/models.yaml: the KV bytes per token are computed from it")
    index_keys: Literal["fp8", "bf16"] = Field(
        "fp8", description="DSA index-key dtype: fp8 (upstream) or bf16 (the kernels/sglang_patch launcher)")
    kv_bytes_per_token: int | None = Field(
        None, gt=0,
        description="device KV bytes per token per TP rank, all layers, for a model not in serving/models.yaml "
        "(measured: sglang:kv_cache_memory_usage_gb / sglang:max_total_num_tokens)",
    )
    weights_gib: float = Field(gt=0, description="weights of the whole model in GiB (split over TP ranks)")

    @model_validator(mode="after")
    def _kv_source(self) -> ModelSpec:
        if (self.config is None) == (self.kv_bytes_per_token is None):
            raise ValueError("set model.config (a name in serving/models.yaml) or, for a model not listed "
                             "there, model.kv_bytes_per_token: one of the two")
        return self


class NodeSpec(Node):
    """An inventory node plus the hardware figures the rules need."""

    gpu_count: int = Field(8, ge=1)
    gpu_memory_gib: float = Field(140.0, gt=0, description="usable memory of one GPU")
    exporter_port: int | None = Field(None, ge=1, le=65535, description="GPU exporter port here; default exporter.port")
    numa_memory_gib: dict[int, float] = Field(description="memory per NUMA node in GiB, e.g. {0: 1024, 1: 1024}")


class ServerSpec(_Strict):
    """One SGLang server (prefill or decode) of the PD pair."""

    node: str
    gpus: list[int] = Field(min_length=1)
    tp: int = Field(ge=1)
    numa_node: int = Field(ge=0)
    host: str = "0.0.0.0"
    port: int = Field(30000, ge=1, le=65535)
    mem_fraction_static: float = Field(gt=0, lt=1)
    context_length: int | None = Field(None, gt=0)
    hicache_ratio: float | None = Field(None, gt=0, description="enables HiCache; host pool = device pool x ratio")
    kv_pool_tokens: int | None = Field(
        None, gt=0, description="device KV pool per rank in tokens (sglang:max_total_num_tokens); estimated if unset"
    )
    transfer_backend: Literal["mooncake", "nixl"] = "mooncake"
    bootstrap_port: int = Field(8998, ge=1, le=65535, description="--disaggregation-bootstrap-port")
    environment: dict[str, str] = Field(default_factory=dict)
    args: dict[str, ArgValue] = Field(default_factory=dict, description="further flags, e.g. {'--page-size': 256}")
    unit: str | None = None
    _unit = field_validator("unit")(_unit_name)

    @field_validator("environment")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for k in v:
            if not k.replace("_", "a").isalnum() or k[0].isdigit():
                raise ValueError(f"environment name {k!r}: use letters, digits and '_'")
        return v


ROUTER_LAUNCHERS = {
    "smg": ["smg", "launch"],  # smg 1.13 console script smg=smg.cli:main; `launch` starts the router
    "sgl-router": ["python3", "-m", "sglang_router.launch_router"],
}


class RouterSpec(_Strict):
    node: str
    kind: Literal["smg", "sgl-router"] = Field(
        "smg", description="smg 1.13 (SGLang's router now) or sglang-router 0.3.2 for deployments still on it")
    launcher: list[str] | None = Field(None, min_length=1, description="default: `smg launch` or "
                                       "`python3 -m sglang_router.launch_router`, by kind")
    host: str = "0.0.0.0"
    port: int = Field(30000, ge=1, le=65535, description="sglang-router's default is 30000, like the server's")
    policy: Literal["cache_aware", "round_robin", "random", "power_of_two"] = "cache_aware"
    prometheus_port: int = Field(29000, ge=1, le=65535)
    prometheus_host: str | None = Field(
        None, description="--prometheus-host; default: smg binds the unspecified address of --host's family "
        "(:: for an IPv6 host), sglang-router 0.0.0.0")
    prefill_bootstrap_port: int | None = Field(
        None, description="bootstrap port given after --prefill URL; default: the prefill server's bootstrap_port"
    )
    max_concurrent_requests: int = Field(-1, description="router admission control; -1 = off")
    queue_size: int = Field(100, ge=0)
    queue_timeout_secs: int = Field(60, ge=1)
    environment: dict[str, str] = Field(default_factory=dict)
    args: dict[str, ArgValue] = Field(default_factory=dict)
    unit: str = "sglang-router.service"
    _unit = field_validator("unit")(_unit_name)
    ready_timeout_s: int = Field(
        180, ge=5, description="apply waits this long for /readiness (workers are checked every "
        "--health-check-interval-secs, 60 by default)")

    def argv(self) -> list[str]:
        return self.launcher or ROUTER_LAUNCHERS[self.kind]

    def metrics_host(self) -> str:
        """The address the router's Prometheus listener binds (smg/router_args.py 1.13, --prometheus-host)."""
        if self.prometheus_host:
            return self.prometheus_host
        return "::" if self.kind == "smg" and ":" in self.host else "0.0.0.0"


class ExporterSpec(_Strict):
    enabled: bool = Field(True, description="install the GPU exporter on every node (needs NVML there)")
    port: int = Field(9101, ge=1, le=65535)
    python: str = "python3"
    unit: str = "opsbot-gpu-exporter.service"
    _unit = field_validator("unit")(_unit_name)


JobKind = Literal["prefill", "decode", "router", "exporter"]


def _default_jobs() -> dict[JobKind, str]:
    return {"prefill": "sglang-prefill", "decode": "sglang-decode", "router": "sglang-router",
            "exporter": "gpu-exporter"}


class PrometheusSpec(_Strict):
    jobs: dict[JobKind, str] = Field(default_factory=_default_jobs)
    scrape_interval: str = Field("15s", pattern=DURATION)
    evaluation_interval: str | None = Field(None, pattern=DURATION, description="default: scrape_interval")


class GrafanaSpec(_Strict):
    folder_uid: str = Field("sglang-pd", pattern=r"^[A-Za-z0-9_-]{1,40}$")
    dashboard_uid: str = Field("sglang-pd-overview", pattern=r"^[A-Za-z0-9_-]{1,40}$")
    datasource_uid: str = "prometheus"


class AlertmanagerSpec(_Strict):
    opsbot_url: str = Field("http://127.0.0.1:8080/alerts", description="opsbot's POST /alerts")
    token_file: str = Field("/etc/alertmanager/opsbot-token", description="bearer token file (credentials_file)")
    address: str = Field("127.0.0.1:9093", description="where Prometheus sends alerts (host:port)")
    watch_webhook_url: str | None = Field(
        None, description="where alerts about opsbot itself go (a pager's webhook); unset: shown in Alertmanager only")
    group_wait: str = Field("10s", pattern=DURATION)
    group_interval: str = Field("1m", pattern=DURATION)
    repeat_interval: str = Field("4h", pattern=DURATION)


class AlertSpec(_Strict):
    prefill_queue_max: int = Field(32, ge=1, description="prefill queue (waiting + bootstrap) that counts as saturated")
    kv_usage_max: float = Field(0.95, gt=0, le=1)
    gpu_memory_max: float = Field(0.98, gt=0, le=1, description="SGLang preallocates mem_fraction_static; alert above it")
    transfer_failures_per_5m: int = Field(5, ge=1)
    time_scale: float = Field(
        1.0, gt=0, le=1,
        description="multiplies every rule's `for:` and rate window (a lab game day runs at 0.05: 2m becomes 6s)",
    )


class DeploymentSpec(_Strict):
    name: str = Field(description="deployment name: cluster name in the inventory and part of unit names")
    model: ModelSpec
    launcher: list[str] = Field(
        default_factory=lambda: ["python3", "-m", "sglang.launch_server"],
        min_length=1,
        description="argv that starts a server; the lab puts the SGLang emulator here",
    )
    sglang_version: str = Field("0.5.23", description="the SGLang release installed on the nodes")
    patch_launcher: list[str] = Field(
        default_factory=lambda: ["python3", "-m", "kernels.sglang_patch.launch"], min_length=1,
        description="with model.index_keys bf16 a server starts as PATCH_LAUNCHER MODULE ARGS, where MODULE is "
        "the module `launcher` runs with -m; the lab puts the emulator's stand-in here")
    install_dir: str = Field("/opt/sglang", pattern=DIR)
    unit_dir: str = Field("/etc/systemd/system", pattern=DIR)
    numa_pinning: bool = Field(True, description="wrap servers in numactl --cpunodebind/--membind")
    hicache_numa_margin: float = Field(0.8, gt=0, le=1, description="share of a NUMA node HiCache may take")
    start_timeout_s: int = Field(1800, ge=60, description="TimeoutStartSec: model load plus warm-up")
    nodes: list[NodeSpec] = Field(min_length=1)
    prefill: ServerSpec
    decode: ServerSpec
    router: RouterSpec
    exporter: ExporterSpec = ExporterSpec()
    prometheus: PrometheusSpec = PrometheusSpec()
    grafana: GrafanaSpec = GrafanaSpec()
    alertmanager: AlertmanagerSpec = AlertmanagerSpec()
    alerts: AlertSpec = AlertSpec()

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.fullmatch(v):
            raise ValueError("use lower-case letters, digits and '-', e.g. 'dsv4'")
        return v

    _dirs = field_validator("install_dir", "unit_dir")(_directory)

    @model_validator(mode="after")
    def _no_hostile_values(self) -> DeploymentSpec:
        problem = _hostile_value(self.model_dump(mode="python"), "spec")
        if problem:
            raise ValueError(problem.removeprefix("spec."))
        return self

    def node(self, name: str) -> NodeSpec:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def servers(self) -> dict[str, ServerSpec]:
        return {"prefill": self.prefill, "decode": self.decode}

    def unit_of(self, role: str) -> str:
        """The systemd unit of ``role`` (prefill, decode, router, exporter)."""
        if role == "router":
            unit = self.router.unit
        elif role == "exporter":
            unit = self.exporter.unit
        else:
            unit = self.servers()[role].unit or f"sglang-{self.name}-{role}.service"
        if not UNIT_RE.fullmatch(unit):
            raise ValueError(f"unit {unit!r} is not a systemd service name")
        return unit


def load_spec(path: Path) -> DeploymentSpec:
    """Load a deployment spec, or raise ``ConfigError`` naming file and line."""
    return load_model(path, DeploymentSpec)
