"""The Grafana dashboard, built with grafana-foundation-sdk (Grafana's maintained builder).

Rows: node health (roles up, prefill queue with thresholds, decode KV usage, retracted and paused
requests, GPU utilization and memory), KV cache, HiCache, router (worker health; with smg 1.13 also
stalled workers, overload shedding and PD failures). Every query's metric is checked by a test
against ``serving/metric_names.txt`` (from reference/sglang.md) and the exporter's own names.
The dashboard is provisioned into ``spec.grafana.folder_uid``: folder permissions decide who sees it.
"""

from __future__ import annotations

from typing import Any

import json

from grafana_foundation_sdk.builders import common, dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import GraphTresholdsStyleMode
from grafana_foundation_sdk.models.dashboard import Threshold, ThresholdsMode

from serving.spec import DeploymentSpec


def _q(expr: str, legend: str) -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend)


def _thresholds(*steps: tuple[float | None, str]) -> dashboard.ThresholdsConfig:
    return dashboard.ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps(
        [Threshold(value=v, color=c) for v, c in steps]
    )


def _ts(title: str, unit: str, *queries: prometheus.Dataquery, height: int = 8, span: int = 8) -> timeseries.Panel:
    panel = timeseries.Panel().title(title).unit(unit).height(height).span(span)
    for q in queries:
        panel = panel.with_target(q)
    return panel


def _router_row(board: dashboard.Dashboard, spec: DeploymentSpec) -> dashboard.Dashboard:
    """Router panels: smg_worker_health for both routers, smg 1.13's liveness, shedding and PD families."""
    r = f'job="{spec.prometheus.jobs["router"]}"'
    board = board.with_row(dashboard.Row("Router")).with_panel(
        _ts("Worker health (1 healthy)", "short", _q(f"smg_worker_health{{{r}}}", "{{worker}}"), span=12)
        .max(1).min(0))
    if spec.router.kind != "smg":
        return board
    return (
        board.with_panel(_ts("Stalled workers (liveness veto)", "short",
                             _q(f"smg_worker_stalled{{{r}}} == 1", "{{worker}} {{reason}}"),
                             _q(f"sum by (reason) (increase(smg_worker_stall_transitions_total{{{r}}}[1h]))",
                                "vetoes per hour: {{reason}}"), span=12))
        .with_panel(_ts("Overload shedding (per 5 min)", "short",
                        _q(f"sum by (stage) (increase(smg_worker_overload_shed_total{{{r}}}[5m]))", "shed {{stage}}"),
                        _q(f"sum (increase(smg_pd_admission_sheds_total{{{r}}}[5m]))", "PD admission shed"),
                        _q(f"max by (model) (smg_workers_overloaded{{{r}}})", "overloaded workers {{model}}"),
                        span=12))
        .with_panel(_ts("PD failures at the router (per 5 min)", "short",
                        _q(f"sum (increase(smg_pd_bootstrap_failures_total{{{r}}}[5m]))", "bootstrap"),
                        _q(f"sum (increase(smg_pd_kv_transfer_failures_total{{{r}}}[5m]))", "KV transfer"),
                        span=12))
    )


def build(spec: DeploymentSpec) -> dashboard.Dashboard:
    from serving.watch import watch_row

    return watch_row(_router_row(_servers(spec), spec))


def _servers(spec: DeploymentSpec) -> dashboard.Dashboard:
    j = spec.prometheus.jobs
    p, d, x = (f'job="{j[k]}"' for k in ("prefill", "decode", "exporter"))
    servers = f'job=~"{j["prefill"]}|{j["decode"]}"'
    roles = f'job=~"{j["prefill"]}|{j["decode"]}|{j["router"]}"'
    qmax = spec.alerts.prefill_queue_max
    return (
        dashboard.Dashboard(f"SGLang PD: {spec.name}")
        .uid(spec.grafana.dashboard_uid)
        .tags(["sglang", "pd", spec.name])
        .refresh("30s")
        .time("now-3h", "now")
        .with_row(dashboard.Row("Node health"))
        .with_panel(
            stat.Panel().title("Roles up").span(4).height(6)
            .with_target(_q(f"up{{{roles}}}", "{{role}} {{node}}"))
            .thresholds(_thresholds((None, "red"), (1, "green")))
        )
        .with_panel(
            _ts("Prefill queue depth", "short",
                _q(f"max by (instance) (sglang:num_queue_reqs{{{p}}})", "waiting {{instance}}"),
                _q(f"max by (instance) (sglang:num_prefill_bootstrap_queue_reqs{{{p}}})", "bootstrap {{instance}}"),
                _q(f"max by (instance) (sglang:num_prefill_inflight_queue_reqs{{{p}}})", "inflight {{instance}}"),
                span=10)
            .thresholds(_thresholds((None, "green"), (qmax / 2, "orange"), (qmax, "red")))
            .thresholds_style(common.GraphThresholdsStyleConfig().mode(GraphTresholdsStyleMode.LINE_AND_AREA))
        )
        .with_panel(
            _ts("Decode KV usage", "percentunit",
                _q(f"max by (instance) (sglang:token_usage{{{d}}})", "token usage {{instance}}"),
                _q(f"max by (instance) (sglang:swa_token_usage{{{d}}})", "swa {{instance}}"),
                span=10)
            .max(1).min(0)
            .thresholds(_thresholds((None, "green"), (0.85, "orange"), (spec.alerts.kv_usage_max, "red")))
        )
        .with_panel(
            _ts("Retracted and paused requests", "short",
                _q(f"max without (pid) (sglang:num_retracted_reqs{{{servers}}})", "retracted {{job}}"),
                _q(f"max without (pid) (sglang:num_paused_reqs{{{servers}}})", "paused {{job}}"),
                _q(f"sum by (job) (rate(sglang:num_retracted_requests_total{{{servers}}}[5m]))", "retractions/s {{job}}"))
        )
        .with_panel(_ts("GPU utilization", "percent", _q(f"opsbot_gpu_utilization_percent{{{x}}}", "{{node}} GPU {{gpu}}")))
        .with_panel(
            _ts("GPU memory used", "percentunit",
                _q(f"opsbot_gpu_memory_used_bytes{{{x}}} / opsbot_gpu_memory_total_bytes{{{x}}}", "{{node}} GPU {{gpu}}"))
            .max(1).min(0)
        )
        .with_row(dashboard.Row("KV cache"))
        .with_panel(_ts("KV pool tokens", "short",
                        _q(f"max by (job) (sglang:kv_used_tokens{{{servers}}})", "used {{job}}"),
                        _q(f"max by (job) (sglang:kv_available_tokens{{{servers}}})", "available {{job}}"),
                        _q(f"max by (job) (sglang:kv_evictable_tokens{{{servers}}})", "evictable {{job}}")))
        .with_panel(_ts("Decode progress (tokens/s)", "short",
                        _q(f'sum by (instance) (rate(sglang:realtime_tokens_total{{{d},mode="decode"}}[2m]))', "decode {{instance}}"),
                        _q(f'sum by (instance) (rate(sglang:realtime_tokens_total{{{p},mode="prefill_compute"}}[2m]))', "prefill {{instance}}")))
        .with_panel(_ts("KV transfer failures (per 5 min)", "short",
                        _q(f"sum by (job) (increase(sglang:num_transfer_failed_reqs_total{{{servers}}}[5m]))", "transfer {{job}}"),
                        _q(f"sum by (job) (increase(sglang:num_bootstrap_failed_reqs_total{{{servers}}}[5m]))", "bootstrap {{job}}"),
                        _q(f"sum by (job) (increase(sglang:num_aborted_requests_total{{{servers}}}[5m]))", "client aborts {{job}}")))
        .with_panel(_ts("Decode pre-allocation and transfer queues", "short",
                        _q(f"max by (instance) (sglang:num_decode_prealloc_queue_reqs{{{d}}})", "prealloc {{instance}}"),
                        _q(f"max by (instance) (sglang:num_decode_transfer_queue_reqs{{{d}}})", "transfer {{instance}}")))
        .with_row(dashboard.Row("HiCache"))
        .with_panel(_ts("HiCache host pool usage", "percentunit",
                        _q(f"max by (job) (sglang:hicache_host_used_tokens{{{servers}}}) / "
                           f"max by (job) (sglang:hicache_host_total_tokens{{{servers}}})", "{{job}}")).max(1).min(0))
        .with_panel(_ts("Cached prompt tokens by source (per s)", "short",
                        _q(f"sum by (cache_source) (rate(sglang:cached_tokens_total{{{p}}}[5m]))", "{{cache_source}}")))
        .with_panel(_ts("HiCache load-back and backup (tokens/s)", "short",
                        _q(f"sum by (job) (rate(sglang:load_back_tokens_total{{{servers}}}[5m]))", "load back {{job}}"),
                        _q(f"sum by (job) (rate(sglang:evicted_tokens_total{{{servers}}}[5m]))", "evicted {{job}}")))
    )


def dashboard_json(spec: DeploymentSpec) -> dict[str, Any]:
    """The dashboard model as Grafana's JSON: panel ids numbered, queries lettered, one datasource."""
    model = json.loads(JSONEncoder(sort_keys=True).encode(build(spec).build()))
    source = {"type": "prometheus", "uid": spec.grafana.datasource_uid}
    for n, panel in enumerate(model.get("panels", []), start=1):
        panel["id"] = n
        if panel.get("type") != "row":
            panel["datasource"] = source
            for letter, target in zip("ABCDEFGHIJ", panel.get("targets", [])):
                target["refId"], target["datasource"] = letter, source
    return model
