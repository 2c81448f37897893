"""What a deployment of each SGLang version and router generation exposes, and the unit states
systemd shows for each kind of failure: the parts field bundles are built from (``field.py``)."""

from __future__ import annotations

from datetime import timedelta

from tests.scenarios.compose import MODEL, T0, UNITS, RoleSpec, healthy_roles

REFUSED = "connection refused"


# --- what each SGLang version exposes -------------------------------------------------------
# Metric names, labels and batch lines as written by that version's scheduler (read in the
# PyPI wheels: 0.4.3.post2 managers/scheduler.py + metrics/collector.py; 0.4.6.post5 the same
# files; 0.5.3 managers/scheduler_metrics_mixin.py + metrics/collector.py). Before late 2025
# (sglang PR #15747) there is no realtime_tokens_total: progress shows only in
# generation_tokens_total / prompt_tokens_total (on finished requests) and gen_throughput.

def _labels_043(role: str) -> dict[str, str]:
    return {"model_name": MODEL}


def _labels_046(role: str) -> dict[str, str]:
    return {"engine_type": "unified", "model_name": MODEL}  # 0.4.6.post5 scheduler.py hard-codes "unified"


def _labels_053(role: str) -> dict[str, str]:
    return {"engine_type": role, "model_name": MODEL, "pp_rank": "0", "tp_rank": "0"}


def _old_roles(version: str) -> tuple[RoleSpec, RoleSpec]:
    """Prefill and decode of an SGLang release before realtime_tokens_total, under light load."""
    if version == "0.4.3":
        labels = _labels_043
        p_line = ("Prefill batch. #new-seq: 1, #new-token: 1843, #cached-token: 0, cache hit rate: 0.00%, "
                  "token usage: 0.02, #running-req: 3, #queue-req: 0")
        d_line = "Decode batch. #running-req: 8, #token: 62531, token usage: 0.12, gen throughput (token/s): 186.64, #queue-req: 0"
        p_extra: dict[str, float] = {}
        d_extra: dict[str, float] = {}
    elif version == "0.4.6":
        labels = _labels_046
        p_line = ("Prefill batch. #new-seq: 2, #new-token: 4096, #cached-token: 0, token usage: 0.03, #running-req: 0, "
                  "#unbootstrapped-req: 0, #queue-req: 0, #transferring-req: 1 ")
        d_line = ("Decode batch. #running-req: 12, #token: 40210, token usage: 0.09, pre-allocated usage: 0.01, "
                  "cuda graph: True, gen throughput (token/s): 610.42, #queue-req: 0")
        p_extra = {"num_prefill_prealloc_queue_reqs": 0, "num_prefill_infight_queue_reqs": 1}
        d_extra = {"num_decode_prealloc_queue_reqs": 0, "num_decode_transfer_queue_reqs": 1}
    else:  # 0.5.3
        labels = _labels_053
        p_line = ("Prefill batch. #new-seq: 2, #new-token: 4096, #cached-token: 512, token usage: 0.05, #running-req: 2, "
                  "#queue-req: 1, #prealloc-req: 0, #inflight-req: 1, ")
        d_line = ("Decode batch. #running-req: 24, #token: 157952, token usage: 0.21, pre-allocated usage: 0.00, "
                  "#prealloc-req: 0, #transfer-req: 1, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 693.45, "
                  "#queue-req: 0, ")
        p_extra = {"num_prefill_prealloc_queue_reqs": 0, "num_prefill_inflight_queue_reqs": 1}
        d_extra = {"num_decode_prealloc_queue_reqs": 0, "num_decode_transfer_queue_reqs": 1, "num_retracted_reqs": 0}
    p = RoleSpec("prefill", labels=labels("prefill"), logs=[p_line],
                 gauges={"num_running_reqs": 2, "num_queue_reqs": 1, "token_usage": 0.05, "gen_throughput": 0.0,
                         "cache_hit_rate": 0.1, **p_extra},
                 counters={"prompt_tokens": (1_200_000, 12_000), "generation_tokens": (2_400, 6), "num_requests": (600, 6)})
    d = RoleSpec("decode", labels=labels("decode"), logs=[d_line],
                 gauges={"num_running_reqs": 24, "num_queue_reqs": 0, "token_usage": 0.21, "gen_throughput": 693.45, **d_extra},
                 counters={"prompt_tokens": (1_180_000, 12_000), "generation_tokens": (900_000, 2_100), "num_requests": (590, 6)})
    if version != "0.4.3":
        for r in (p, d):
            r.counters.update({"num_bootstrap_failed_reqs": (0, 0), "num_transfer_failed_reqs": (0, 0)})
    return p, d


def _router(kind: str) -> RoleSpec:
    """The router as each generation exposes it: SMG ``smg_*``; the in-tree Rust sgl-router
    (2025) ``sgl_router_*`` (sgl-router/src/metrics.rs); the Python mini_lb (no /metrics)."""
    if kind == "smg":
        return healthy_roles()[2]
    if kind == "sgl-router":
        return RoleSpec("router", proc="sglang-router",
                        gauges={"sgl_router_active_workers": 2, "sgl_router_worker_health{worker=http://10.0.0.1:30000}": 1,
                                "sgl_router_worker_health{worker=http://10.0.0.2:30001}": 1},
                        counters={"sgl_router_requests{route=/v1/chat/completions}": (5000, 30),
                                  "sgl_router_pd_errors{error_type=no_workers}": (0, 0)})
    # mini_lb serves no /metrics: a bundle assembled from such a thread has no metrics section at all
    return RoleSpec("router", proc="python3", drop=("metrics",))


def roles(version: str = "0.5.23", router: str = "smg") -> tuple[RoleSpec, RoleSpec, RoleSpec]:
    """A light-loaded PD pair of ``version`` and a router of kind ``router``."""
    if version in ("0.4.3", "0.4.6", "0.5.3"):
        p, d = _old_roles(version)
    else:
        p, d, _ = healthy_roles()
    return p, d, _router(router)


# --- unit states as systemd shows them ----------------------------------------------------------

def _exit_lines(spec: RoleSpec, code: str, status: str, result: str, restarts: int | None) -> list[str]:
    unit = UNITS[spec.role]
    out = [f"systemd: {unit}: Main process exited, code={code}, status={status}",
           f"systemd: {unit}: Failed with result '{result}'."]
    if restarts is not None:
        out.append(f"systemd: {unit}: Scheduled restart job, restart counter is at {restarts}.")
    return out


def crashloop(spec: RoleSpec, lines: list[str], restarts: int = 6, status: str = "1/FAILURE", code: str = "exited") -> RoleSpec:
    """The unit dies at start-up and systemd keeps restarting it: activating (auto-restart)."""
    _down(spec, lines, restarts, status, code)
    spec.started = T0 - timedelta(seconds=62)  # the last run began just before the window's lines
    return spec


def died(spec: RoleSpec, lines: list[str], restarts: int = 1, status: str = "1/FAILURE", code: str = "exited") -> RoleSpec:
    """The unit ran for hours, then died while serving; systemd has scheduled its restart."""
    _down(spec, lines, restarts, status, code)
    spec.started = T0 - timedelta(hours=3)
    return spec


def _down(spec: RoleSpec, lines: list[str], restarts: int, status: str, code: str) -> None:
    result = {"exited": "exit-code", "killed": "signal", "dumped": "core-dump"}[code]
    spec.active, spec.sub, spec.result, spec.restarts = "activating", "auto-restart", result, restarts
    spec.exit_status = int(status.split("/")[0])
    spec.main_code = {"exited": 1, "killed": 2, "dumped": 3}[code]
    spec.metrics_error, spec.health, spec.health_error, spec.nulls = REFUSED, None, REFUSED, True
    spec.logs = lines + _exit_lines(spec, code, status, result, restarts)


def failed(spec: RoleSpec, lines: list[str], status: str = "1/FAILURE", restarts: int = 0) -> RoleSpec:
    """The unit died and stays down (no Restart=, or the start limit was hit): failed."""
    spec.active, spec.sub, spec.result, spec.restarts = "failed", "failed", "exit-code", restarts
    spec.exit_status, spec.main_code = int(status.split("/")[0]), 1
    spec.metrics_error, spec.health, spec.health_error, spec.nulls = REFUSED, None, REFUSED, True
    spec.logs = lines + _exit_lines(spec, "exited", status, "exit-code", None)
    return spec


def raw(lines: list[str]) -> list[str]:
    """Lines printed as the thread shows them (their own stamps, C++ glog, router lines)."""
    return [f"raw:{line}" for line in lines]


def recovered(spec: RoleSpec) -> RoleSpec:
    """The same unit after the fault was fixed and it restarted five minutes ago: the failure's
    lines are still in the journal window, but they precede ExecMainStartTimestamp."""
    spec.history, spec.logs = spec.logs, []
    spec.active, spec.sub, spec.result, spec.restarts = "active", "running", "success", spec.restarts + 1
    spec.exit_status, spec.main_code = 0, None
    spec.started = T0 - timedelta(minutes=5)
    spec.metrics_error, spec.health, spec.health_error, spec.nulls = None, 200, None, False
    return spec
