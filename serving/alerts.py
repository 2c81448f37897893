"""Prometheus alert rules for a PD deployment, built from the spec; each names its incident id.

Built as data and dumped as YAML (Prometheus' own ``{{ $labels }}`` templates would fight jinja2).
``promtool check rules`` and ``promtool test rules`` run over the output in the tests.
"""

from __future__ import annotations

from typing import Any

import yaml

from serving.spec import DeploymentSpec


_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(duration: str) -> float:
    """A Prometheus duration with one unit (``15s``, ``2m``) in seconds."""
    unit = "ms" if duration.endswith("ms") else duration[-1]
    return float(duration[: -len(unit)]) * _UNITS[unit]


def scaled(duration: str, scale: float, floor_s: float = 1) -> str:
    """``duration`` times ``scale`` in whole seconds, at least ``floor_s``; ``0s`` stays 0s, scale 1 keeps it."""
    s = seconds(duration)
    if s == 0 or (scale == 1 and s >= floor_s):
        return duration
    return f"{max(round(floor_s), round(s * scale))}s"


def _rule(name: str, expr: str, for_: str, incident: str, severity: str, summary: str, description: str) -> dict:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, "incident": incident},
        "annotations": {"runbook": incident, "summary": summary, "description": description},
    }


def router_rules(spec: DeploymentSpec, w5: str = "5m") -> list[dict]:
    """Router rules: worker health (sglang-router 0.3.2 and smg), and smg 1.13's liveness veto, overload
    shedding and PD failures (names from smg-project/smg model_gateway/src/observability/metrics.rs).
    ``w5``: the 5-minute rate window, scaled with the spec's ``alerts.time_scale``."""
    r = f'job="{spec.prometheus.jobs["router"]}"'
    rules = [_rule(
        "RouterWorkerUnhealthy",
        f"min by (instance) (smg_worker_health{{{r}}}) == 0",
        "1m", "router-no-healthy-workers", "warning",
        "A worker behind the router on {{ $labels.instance }} fails its health checks",
        "smg_worker_health is 0 for at least one worker: the router stopped sending it requests. With no healthy "
        "prefill or no healthy decode left, clients get 503.",
    )]
    if spec.router.kind != "smg":
        return rules
    failures = spec.alerts.transfer_failures_per_5m
    return rules + [
        _rule(
            "SMGWorkerWedged",
            f'max by (instance, worker) (smg_worker_stalled{{{r},reason="wedged"}}) == 1',
            "1m", "decode-wedged", "critical",
            "smg stopped routing to {{ $labels.worker }}: requests in flight and no token",
            "smg's liveness veto (--worker-wedge-secs) holds the worker out of routing. Probe the worker's role: "
            "a wedged scheduler needs a restart; a long prefill stretches the window.",
        ),
        _rule(
            "SMGWorkerUnreachable",
            f'max by (instance, worker) (smg_worker_stalled{{{r},reason="unreachable"}}) == 1',
            "1m", "role-down", "critical",
            "smg cannot reach {{ $labels.worker }}",
            "No contact plus a transport failure (--worker-stall-secs): the worker's process or node is down.",
        ),
        _rule(
            "SMGOverloadShedding",
            f"sum by (instance) (increase(smg_worker_overload_shed_total{{{r}}}[{w5}])) > 0",
            "0s", "prefill-queue-saturation", "warning",
            "smg on {{ $labels.instance }} sheds requests: every worker is overloaded",
            "503 worker_overload_protection_shed is load shedding, not a crash: every worker is over the overload "
            "thresholds (waiting requests or KV usage). Add capacity or lower the admission limits.",
        ),
        _rule(
            "SMGPDAdmissionShedding",
            f"sum by (instance) (increase(smg_pd_admission_sheds_total{{{r}}}[{w5}])) > 0",
            "0s", "kv-cache-exhausted", "warning",
            "smg on {{ $labels.instance }} sheds PD dispatches waiting for a decode slot",
            "No decode admission slot freed within --pd-admission-wait-secs: decode is full (KV or running "
            "requests). Check decode token usage and retractions.",
        ),
        _rule(
            "SMGPDTransferFailures",
            f"sum by (instance) (increase(smg_pd_bootstrap_failures_total{{{r}}}[{w5}]) + "
            f"increase(smg_pd_kv_transfer_failures_total{{{r}}}[{w5}])) > {failures}",
            "0s", "kv-transfer-failure", "warning",
            "smg on {{ $labels.instance }}: PD bootstrap or KV-transfer failures above %d in 5 minutes" % failures,
            "Bootstrap injection or KV handoff failed at the router: check bootstrap ports and the transfer backend.",
        ),
    ]


def alert_rules(spec: DeploymentSpec) -> dict[str, Any]:
    """The rule groups (``groups: [...]``) for ``spec``."""
    j = spec.prometheus.jobs
    a = spec.alerts

    def w(duration: str) -> str:  # a rate window: at least four scrapes, so increase() has samples
        return scaled(duration, a.time_scale, floor_s=4 * seconds(spec.prometheus.scrape_interval))

    w2, w5, w10 = w("2m"), w("5m"), w("10m")

    p, d, r, x = (f'job="{j[k]}"' for k in ("prefill", "decode", "router", "exporter"))
    roles_re = "|".join(j[k] for k in ("prefill", "decode", "router"))
    rules = [
        _rule(
            "SGLangPrefillQueueSaturated",
            f"max by (cluster, role, node, instance) (sglang:num_queue_reqs{{{p}}}) + max by (cluster, role, node, instance) "
            f"(sglang:num_prefill_bootstrap_queue_reqs{{{p}}}) > {a.prefill_queue_max}",
            "2m", "prefill-queue-saturation", "warning",
            "Prefill queue saturated on {{ $labels.instance }}",
            "{{ $value }} requests wait on prefill. SGLang ignores --max-queued-requests in PD mode: "
            "bound the queue at the router (--max-concurrent-requests, --queue-size, --queue-timeout-secs).",
        ),
        _rule(
            "SGLangDecodeNoProgress",
            f"max by (cluster, role, node, instance) (sglang:num_running_reqs{{{d}}}) > 0 unless on (instance) "
            f'sum by (instance) (increase(sglang:realtime_tokens_total{{{d},mode="decode"}}[{w2}])) > 0',
            "1m", "decode-wedged", "critical",
            "Decode on {{ $labels.instance }} holds requests but decoded no token for 2 minutes",
            "{{ $value }} running requests and no increase of sglang:realtime_tokens_total{mode=\"decode\"} "
            "(generation_tokens_total only moves when a request finishes).",
        ),
        _rule(
            "SGLangDecodeNoProgressLegacy",
            f"(max by (cluster, role, node, instance) (sglang:num_running_reqs{{{d}}}) > 0 unless on (instance) "
            f"sum by (instance) (increase(sglang:generation_tokens_total{{{d}}}[{w10}])) > 0) "
            f"unless on (instance) count by (instance) (sglang:realtime_tokens_total{{{d}}})",
            "1m", "decode-wedged", "critical",
            "Decode on {{ $labels.instance }} holds requests and finished none for 10 minutes",
            "SGLang before realtime_tokens_total (0.4.x to mid 0.5): no request finished "
            "(generation_tokens_total flat) while {{ $value }} run. gen_throughput is not used: it keeps "
            "its last value when the scheduler stops logging.",
        ),
        _rule(
            "SGLangDPRankNoProgress",
            # under DP attention each rank's scheduler writes its own series, label dp_rank (sglang 0.5.23
            # observability/metrics_collector.py:1391-1392): one rank stuck while its siblings move the role's sum
            f'max by (cluster, role, node, instance, dp_rank) (sglang:num_running_reqs{{{d},dp_rank!=""}}) > 0 '
            f"unless on (instance, dp_rank) sum by (instance, dp_rank) "
            f'(increase(sglang:realtime_tokens_total{{{d},mode="decode",dp_rank!=""}}[{w2}])) > 0',
            "1m", "dp-rank-wedged", "critical",
            "DP rank {{ $labels.dp_rank }} of decode {{ $labels.instance }} holds requests but decoded no token "
            "for 2 minutes",
            "{{ $value }} running requests on that rank and no increase of its own "
            "sglang:realtime_tokens_total{mode=\"decode\"}; /health (DP rank 0 only) and the role's summed "
            "counter can look fine. SGLang cannot restart one rank: restart the role.",
        ),
        _rule(
            "OpsbotOutputFidelityDiverged",
            "min by (cluster) (opsbot_fidelity_result) == 0",
            "0s", "output-corruption", "critical",
            "Greedy answers of {{ $labels.cluster }} diverge from the fidelity baseline",
            "opsbot's last fidelity run (opsbot fidelity check, or its schedule) found answers beyond the "
            "baseline's tolerance: wrong output with nothing crashed. Roll back the last deploy, else restart the pair.",
        ),
        _rule(
            "SGLangPrefillNoProgress",
            f"max by (cluster, role, node, instance) (sglang:num_running_reqs{{{p}}}) > 0 unless on (instance) "
            f'sum by (instance) (increase(sglang:realtime_tokens_total{{{p},mode="prefill_compute"}}[{w2}])) > 0',
            "1m", "prefill-wedged", "critical",
            "Prefill on {{ $labels.instance }} holds requests but computed no prompt token for 2 minutes",
            "{{ $value }} running requests and no increase of sglang:realtime_tokens_total{mode=\"prefill_compute\"}.",
        ),
        _rule(
            "RouterNoHealthyWorkers",
            f"sum by (cluster, role, node, instance, worker_type) (smg_worker_health{{{r}}}) == 0",
            "1m", "router-no-healthy-workers", "critical",
            "Router {{ $labels.instance }} has no healthy {{ $labels.worker_type }} worker",
            "Every {{ $labels.worker_type }} worker failed the router's health checks (smg_worker_health 0); "
            "clients get 5xx. Bring the workers back or check their registration.",
        ),
        _rule(
            "SGLangRoleDown",
            f'up{{job=~"{roles_re}"}} == 0',
            "1m", "role-down", "critical",
            "{{ $labels.role }} on {{ $labels.node }} is not answering /metrics",
            "Prometheus cannot scrape {{ $labels.instance }} (job {{ $labels.job }}).",
        ),
        _rule(
            "SGLangKVTransferFailuresRising",
            f"(sum by (cluster, role, node, instance) (increase(sglang:num_transfer_failed_reqs_total{{{d}}}[{w5}])) - "
            f"(sum by (cluster, role, node, instance) (increase(sglang:num_aborted_requests_total{{{d}}}[{w5}])) or "
            f"sum by (cluster, role, node, instance) (increase(sglang:num_transfer_failed_reqs_total{{{d}}}[{w5}])) * 0)) "
            f"> {a.transfer_failures_per_5m}",
            "2m", "kv-transfer-failure", "warning",
            "KV transfers failing on decode {{ $labels.instance }}",
            "{{ $value }} transfer failures in 5 minutes beyond client aborts (client aborts also count as "
            "transfer failures, so aborted requests are subtracted).",
        ),
        _rule(
            "SGLangKVCacheNearFull",
            f'max by (cluster, role, node, instance, job) (sglang:token_usage{{job=~"{j["prefill"]}|{j["decode"]}"}}) > {a.kv_usage_max}',
            "5m", "kv-cache-exhausted", "warning",
            "KV cache of {{ $labels.job }} on {{ $labels.instance }} is {{ $value | humanizePercentage }} full",
            "Requests will be retracted; watch sglang:num_retracted_requests_total.",
        ),
        _rule(
            "GPUMemoryHigh",
            f"opsbot_gpu_memory_used_bytes{{{x}}} / opsbot_gpu_memory_total_bytes{{{x}}} > {a.gpu_memory_max}",
            "10m", "cuda-oom", "warning",
            "GPU {{ $labels.gpu }} on {{ $labels.node }} memory {{ $value | humanizePercentage }} used",
            "Above what SGLang preallocates (mem_fraction_static): another tenant or a leak.",
        ),
        _rule(
            "GPUXidErrors",
            f"increase(opsbot_gpu_xid_events_total{{{x}}}[{w10}]) > 0",
            "0s", "gpu-fault", "critical",
            "Xid {{ $labels.xid }} on GPU {{ $labels.gpu }} of {{ $labels.node }}",
            "NVML reported Xid events; drain the node if they repeat.",
        ),
        _rule(
            "GPUExporterDown",
            f"up{{{x}}} == 0",
            "2m", "role-down", "warning",
            "GPU exporter on {{ $labels.node }} is down",
            "No GPU readings from {{ $labels.instance }}: the node or opsbot-gpu-exporter.service is down.",
        ),
    ]
    rules += router_rules(spec, w5)
    for rule in rules:
        rule["for"] = scaled(rule["for"], a.time_scale)
    return {"groups": [{"name": f"sglang-pd-{spec.name}", "rules": rules}]}


def alert_rules_yaml(spec: DeploymentSpec) -> str:
    return yaml.safe_dump(alert_rules(spec), sort_keys=False, width=120)
