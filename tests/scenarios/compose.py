"""Compose probe bundles from a compact description: the raw text SGLang, systemd and
nvidia-smi would print, so the real parsers read them exactly as they read a live probe.

Used to write the corpus bundles taken from public SGLang issue threads (``written.py``) and
by unit tests that need a bundle with one fact changed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from opsbot.bundle import GPU_QUERY, SCHEMA, Bundle

T0 = datetime(2026, 11, 29, 10, 0, 0, tzinfo=timezone.utc)
MODEL = "deepseek-ai/DeepSeek-V4-Flash"
UNITS = {"prefill": "sglang-dsv4-prefill.service", "decode": "sglang-dsv4-decode.service", "router": "sglang-router.service"}
NODES = {"prefill": "node1", "router": "node1", "decode": "node2"}


def iso(t: datetime) -> str:
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class RoleSpec:
    """One role as the probe would see it. Counters are given as (first value, delta)."""

    role: str
    active: str = "active"
    sub: str = "running"
    result: str = "success"
    restarts: int = 0
    exit_status: int = 0
    gauges: dict[str, float] = field(default_factory=dict)
    counters: dict[str, tuple[float, float]] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)
    health: int | None = 200
    health_error: str | None = None
    metrics_error: str | None = None
    systemd_error: str | None = None
    logs_error: str | None = None
    gpus: tuple[int, ...] | None = None  # default: 0-3 for prefill/decode, none for the router
    started: datetime = T0 - timedelta(minutes=20)  # ExecMainStartTimestamp; journal lines are T0-60s on
    # What older versions, other tools and refused requests give (see probe-bundle-v1.md):
    labels: dict[str, str] | None = None  # the version's scheduler labels (None: 0.5.12+ labels)
    prefix: str = "sglang:"  # "sglang_" for scrapes through the router's /engine_metrics
    nulls: bool = False  # values that could not be collected are null, not empty strings
    drop: tuple[str, ...] = ()  # evidence sections absent from the bundle (e.g. "metrics", "logs")
    main_code: int | None = None  # systemd ExecMainCode: 1 exited, 2 killed, 3 dumped
    health_body: str | None = None  # the /health body when it is not the default one
    proc: str = "python3"  # the journal's process name
    history: list[str] = field(default_factory=list)  # lines from T0-14min: before a recent restart, in the window


def _labels(role: str, extra: dict[str, str] | None = None, version: dict[str, str] | None = None) -> str:
    if role == "router":
        base: dict[str, str] = {}
    elif version is not None:
        base = dict(version)
    else:
        base = {"engine_type": role, "model_name": MODEL, "moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"}
    base.update(extra or {})
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(base.items())) + "}" if base else ""


def _metric_name(spec: RoleSpec, name: str) -> str:
    return name if name.startswith(("smg_", "sgl_router_")) else f"{spec.prefix}{name}"


def _split(key: str) -> tuple[str, dict[str, str] | None]:
    """``name{a=1,b=2}`` → ("name", {"a": "1", "b": "2"}); label values hold no comma."""
    name, _, label = key.partition("{")
    return name, dict(pair.split("=", 1) for pair in label.rstrip("}").split(",")) if label else None


def exposition(spec: RoleSpec, second: bool) -> str:
    """The /metrics body; metric names may carry labels as ``name{label=value,other=value}``."""
    lines: list[str] = []
    typed: set[str] = set()
    for key, value in spec.gauges.items():
        name, extra = _split(key)
        full = _metric_name(spec, name)
        if full not in typed:
            lines.append(f"# TYPE {full} gauge")
            typed.add(full)
        lines.append(f"{full}{_labels(spec.role, extra, spec.labels)} {float(value)}")
    for key, (first, delta) in spec.counters.items():
        name, extra = _split(key)
        full = _metric_name(spec, name)
        if full not in typed:
            lines.append(f"# TYPE {full} counter")
            typed.add(full)
        lines.append(f"{full}_total{_labels(spec.role, extra, spec.labels)} {float(first + (delta if second else 0))}")
    return "\n".join(lines) + "\n"


def systemd_raw(spec: RoleSpec) -> str:
    running = spec.active == "active"
    return "\n".join(
        [
            f"Id={UNITS[spec.role]}",
            "LoadState=loaded",
            f"ActiveState={spec.active}",
            f"SubState={spec.sub}",
            f"Result={spec.result}",
            f"NRestarts={spec.restarts}",
            f"ExecMainStatus={spec.exit_status}",
            f"ExecMainCode={spec.main_code if spec.main_code is not None else (1 if running else 2)}",
            f"ExecMainStartTimestamp={spec.started.strftime('%a %Y-%m-%d %H:%M:%S')} UTC",
            f"ActiveEnterTimestamp={(spec.started + timedelta(seconds=1)).strftime('%a %Y-%m-%d %H:%M:%S')} UTC",
            f"StateChangeTimestamp={(spec.started + timedelta(seconds=1)).strftime('%a %Y-%m-%d %H:%M:%S')} UTC",
            f"MainPID={4242 if running else 0}",
            f"MemoryCurrent={8_000_000_000 if running else '[not set]'}",
        ]
    ) + "\n"


def journal(spec: RoleSpec) -> str:
    """The journal window: ``systemd:`` lines come from systemd, ``raw:`` lines are printed as the
    process wrote them (C++ glog lines, the router's lines, a thread's own stamps), the rest get
    SGLang's ``[time TP0]`` prefix. ``history`` lines are one second apart from T0-14min, ``logs``
    lines one second apart from T0-60s (closer when many)."""
    out = []
    step = min(1.0, 58.0 / max(len(spec.logs), 1))
    stamped = [(T0 - timedelta(minutes=14, seconds=-i), 4100, line) for i, line in enumerate(spec.history)]  # the run before
    stamped += [(T0 - timedelta(seconds=60 - i * step), 4242, line) for i, line in enumerate(spec.logs)]
    for t, pid, line in stamped:
        if line.startswith("systemd:"):
            out.append(f"{t.strftime('%Y-%m-%dT%H:%M:%S')}+0000 {NODES[spec.role]} systemd[1]: {line[8:].strip()}")
        elif line.startswith("raw:"):
            out.append(f"{t.strftime('%Y-%m-%dT%H:%M:%S')}+0000 {NODES[spec.role]} {spec.proc}[{pid}]: {line[4:]}")
        else:
            stamp = t.strftime("%Y-%m-%d %H:%M:%S")
            out.append(f"{t.strftime('%Y-%m-%dT%H:%M:%S')}+0000 {NODES[spec.role]} {spec.proc}[{pid}]: [{stamp} TP0] {line}")
    return "\n".join(out) + ("\n" if out else "")


def env(ok_error: str | None, **fields: Any) -> dict[str, Any]:
    return {"ok": ok_error is None, "error": ok_error, "elapsed_ms": 12.0, **fields}


def role_evidence(spec: RoleSpec, window_s: float = 3.0) -> dict[str, Any]:
    none = None if spec.nulls else ""  # what an uncollected text is written as
    samples = ([] if not spec.nulls else None) if spec.metrics_error else [
        {"at": iso(T0), "raw": exposition(spec, second=False)},
        {"at": iso(T0 + timedelta(seconds=window_s)), "raw": exposition(spec, second=True)},
    ]
    body = spec.health_body if spec.health_body is not None else (
        none if spec.health is None else ("OK" if spec.health == 200 else "Service Unavailable"))
    health = env(spec.health_error, endpoint="/health", status=spec.health, body=body)
    evidence = {
        "role": spec.role,
        "node": NODES[spec.role],
        "unit": UNITS[spec.role],
        "gpus": list(spec.gpus if spec.gpus is not None else (() if spec.role == "router" else (0, 1, 2, 3))),
        "systemd": env(spec.systemd_error, raw=none if spec.systemd_error else systemd_raw(spec)),
        "metrics": env(spec.metrics_error, samples=samples),
        "health": health,
        "logs": env(spec.logs_error, since=iso(T0 - timedelta(minutes=15)), raw=none if spec.logs_error else journal(spec),
                    truncated=None if spec.nulls and spec.logs_error else False),
    }
    if spec.nulls:
        for key in ("systemd", "metrics", "health", "logs"):
            if evidence[key]["error"] is not None:
                evidence[key]["elapsed_ms"] = None
    for key in spec.drop:
        evidence.pop(key, None)
    return evidence


def gpu_csv(n: int, used_mib: float = 120000.0, lost: tuple[int, ...] = ()) -> str:
    rows = []
    for i in range(n):
        if i in lost:
            rows.append(f"{i}, GPU-0000{i}, NVIDIA H200, [GPU is lost], [GPU is lost], [GPU is lost], [GPU is lost], [GPU is lost]")
        else:
            rows.append(f"{i}, GPU-0000{i}-aaaa, NVIDIA H200, {used_mib:.0f}, 143771, 87, 54, 412.5")
    return "\n".join(rows) + "\n"


def compose(
    roles: list[RoleSpec],
    *,
    gpus: dict[str, str] | None = None,
    kernel: dict[str, str] | None = None,
    gpu_error: dict[str, str] | None = None,
    bundle_id: str = "composed",
    text: str | None = None,
    window_s: float = 3.0,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A bundle (as JSON data) holding ``roles`` and one node entry per node they run on."""
    nodes = []
    for node in dict.fromkeys(NODES[r.role] for r in roles):
        err = (gpu_error or {}).get(node)
        raw = (gpus or {}).get(node, gpu_csv(4))
        k = (kernel or {}).get(node, "")
        nodes.append({"node": node, "gpu": env(err, query=GPU_QUERY, raw="" if err else raw),
                      "kernel_log": env(None, raw=k)})
    data = {
        "schema": SCHEMA,
        "id": bundle_id,
        "cluster": "lab",
        "trigger": {"kind": "cli", "text": text, "user": None, "alerts": []},
        "started_at": iso(T0),
        "finished_at": iso(T0 + timedelta(seconds=window_s + 1)),
        "roles": [role_evidence(r, window_s) for r in roles],
        "nodes": nodes,
        "recall": None,
    }
    data.update(extra or {})
    return data


def bundle(roles: list[RoleSpec], **kw: Any) -> Bundle:
    return Bundle.model_validate(compose(roles, **kw))


def healthy_roles() -> list[RoleSpec]:
    """A PD pair and router under light load: counters moving, nothing in the logs but batches."""
    prefill = RoleSpec(
        "prefill",
        gauges={"num_running_reqs": 2, "num_queue_reqs": 1, "token_usage": 0.21, "num_prefill_bootstrap_queue_reqs": 0},
        counters={"realtime_tokens{mode=prefill_compute}": (1_200_000, 36_000), "realtime_tokens{mode=prefill_cache}": (300_000, 9_000),
                  "num_aborted_requests": (2, 0), "num_transfer_failed_reqs": (0, 0), "num_bootstrap_failed_reqs": (0, 0)},
        logs=["Prefill batch, #new-seq: 2, #new-token: 8192, #cached-token: 512, full token usage: 0.21, swa token usage: 0.10, "
              "#running-req: 2, #queue-req: 1, #pending-token: 4096, #bootstrap-req: 0, #inflight-req: 1, cuda graph: False, "
              "input throughput (token/s): 12000.00"],
    )
    decode = RoleSpec(
        "decode",
        gauges={"num_running_reqs": 24, "num_queue_reqs": 0, "token_usage": 0.34, "num_decode_transfer_queue_reqs": 1},
        counters={"realtime_tokens{mode=decode}": (5_000_000, 2_400), "num_retracted_requests": (0, 0),
                  "num_transfer_failed_reqs": (0, 0), "num_bootstrap_failed_reqs": (0, 0), "num_aborted_requests": (1, 0)},
        logs=["Decode batch, #running-req: 24, #full token: 41000, full token usage: 0.34, #swa token: 3000, swa token usage: 0.12, "
              "pre-allocated usage: 0.01, #prealloc-req: 0, #transfer-req: 1, #retracted-req: 0, cuda graph: True, "
              "gen throughput (token/s): 800.00, #queue-req: 0"],
    )
    router = RoleSpec(
        "router",
        gauges={"smg_worker_health": 1, "smg_worker_pool_size": 2},
        counters={"smg_router_requests": (5000, 30), "smg_router_request_errors{error_type=no_workers}": (0, 0)},
    )
    return [prefill, decode, router]


Writer = Callable[[], tuple[list[RoleSpec], dict]]


def register(scenarios: dict[str, Callable[[], dict]], writer: str, name: str,
             label: dict) -> Callable[[Writer], Callable[[], dict]]:
    """What every corpus writer's ``@scenario(...)`` returns: the decorated function gives the roles and
    ``compose``'s keywords (a ``post`` keyword edits the composed bundle), the bundle gets ``label`` and the id
    ``{writer}-{name}``, and is kept in ``scenarios`` under ``name`` (a second one of that name is refused)."""
    def wrap(fn: Writer) -> Callable[[], dict]:
        def build() -> dict:
            specs, kw = fn()
            post = kw.pop("post", None)
            data = compose(specs, bundle_id=f"{writer}-{name}", **kw)
            if post is not None:
                post(data)
            data["label"] = dict(label)
            return data

        if name in scenarios:
            raise ValueError(f"two {writer} scenarios named {name}")
        scenarios[name] = build
        return build

    return wrap
