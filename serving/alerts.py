"""Prometheus alert rules for a PD deployment, built from the spec; each names its incident id.

Built as data and dumped as YAML (Prometheus' own ``{{ $labels }}`` templates would fight jinja2).
``promtool check rules`` and ``promtool test rules`` run over the output in the tests.
"""

from __future__ import annotations

from typing import Any

import yaml

from serving.spec import DeploymentSpec


def _rule(name: str, expr: str, for_: str, incident: str, severity: str, summary: str, description: str) -> dict:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity, "incident": incident},
        "annotations": {"runbook": incident, "summary": summary, "description": description},
    }


def router_rules(spec: DeploymentSpec) -> list[dict]:
    """Router rules: worker health (sglang-router 0.3.2 and smg), and smg 1.13's liveness veto, overload
    shedding and PD failures (names from smg-project/smg model_gateway/src/observability/metrics.rs)."""
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
            f"sum by (instance) (increase(smg_worker_overload_shed_total{{{r}}}[5m])) > 0",
            "0s", "prefill-queue-saturation", "warning",
            "smg on {{ $labels.instance }} sheds requests: every worker is overloaded",
            "503 worker_overload_protection_shed is load shedding, not a crash: every worker is over the overload "
            "thresholds (waiting requests or KV usage). Add capacity or lower the admission limits.",
        ),
        _rule(
            "SMGPDAdmissionShedding",
            f"sum by (instance) (increase(smg_pd_admission_sheds_total{{{r}}}[5m])) > 0",
            "0s", "kv-cache-exhausted", "warning",
            "smg on {{ $labels.instance }} sheds PD dispatches waiting for a decode slot",
            "No decode admission slot freed within --pd-admission-wait-secs: decode is full (KV or running "
            "requests). Check decode token usage and retractions.",
        ),
        _rule(
            "SMGPDTransferFailures",
            f"sum by (instance) (increase(smg_pd_bootstrap_failures_total{{{r}}}[5m]) + "
            f"increase(smg_pd_kv_transfer_failures_total{{{r}}}[5m])) > {failures}",
            "0s", "kv-transfer-failure", "warning",
            "smg on {{ $labels.instance }}: PD bootstrap or KV-transfer failures above %d in 5 minutes" % failures,
            "Bootstrap injection or KV handoff failed at the router: check bootstrap ports and the transfer backend.",
        ),
    ]


def alert_rules(spec: DeploymentSpec) -> dict[str, Any]:
    """The rule groups (``groups: [...]``) for ``spec``."""
    j = spec.prometheus.jobs
    a = spec.alerts
    p, d, r, x = (f'job="{j[k]}"' for k in ("prefill", "decode", "router", "exporter"))
    roles_re = "|".join(j[k] for k in ("prefill", "decode", "router"))
    rules = [
        _rule(
            "SGLangPrefillQueueSaturated",
            f"max by (instance) (sglang:num_queue_reqs{{{p}}}) + max by (instance) "
            f"(sglang:num_prefill_bootstrap_queue_reqs{{{p}}}) > {a.prefill_queue_max}",
            "2m", "prefill-queue-saturation", "warning",
            "Prefill queue saturated on {{ $labels.instance }}",
            "{{ $value }} requests wait on prefill. SGLang ignores --max-queued-requests in PD mode: "
            "bound the queue at the router (--max-concurrent-requests, --queue-size, --queue-timeout-secs).",
        ),
        _rule(
            "SGLangDecodeNoProgress",
            f"max by (instance) (sglang:num_running_reqs{{{d}}}) > 0 unless on (instance) "
            f'sum by (instance) (increase(sglang:realtime_tokens_total{{{d},mode="decode"}}[2m])) > 0',
            "0s", "decode-wedged", "critical",
            "Decode on {{ $labels.instance }} holds requests but decoded no token for 2 minutes",
            "{{ $value }} running requests and no increase of sglang:realtime_tokens_total{mode=\"decode\"} "
            "(generation_tokens_total only moves when a request finishes).",
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
            f"(sum by (instance) (increase(sglang:num_transfer_failed_reqs_total{{{d}}}[5m])) - "
            f"(sum by (instance) (increase(sglang:num_aborted_requests_total{{{d}}}[5m])) or "
            f"sum by (instance) (increase(sglang:num_transfer_failed_reqs_total{{{d}}}[5m])) * 0)) "
            f"> {a.transfer_failures_per_5m}",
            "2m", "kv-transfer-failure", "warning",
            "KV transfers failing on decode {{ $labels.instance }}",
            "{{ $value }} transfer failures in 5 minutes beyond client aborts (client aborts also count as "
            "transfer failures, so aborted requests are subtracted).",
        ),
        _rule(
            "SGLangKVCacheNearFull",
            f'max by (instance, job) (sglang:token_usage{{job=~"{j["prefill"]}|{j["decode"]}"}}) > {a.kv_usage_max}',
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
            f"increase(opsbot_gpu_xid_events_total{{{x}}}[10m]) > 0",
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
    return {"groups": [{"name": f"sglang-pd-{spec.name}", "rules": rules + router_rules(spec)}]}


def alert_rules_yaml(spec: DeploymentSpec) -> str:
    return yaml.safe_dump(alert_rules(spec), sort_keys=False, width=120)
