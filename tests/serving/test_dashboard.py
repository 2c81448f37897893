"""The Grafana dashboard: rows as asked, every query reads a metric SGLang or the exporter defines."""

from __future__ import annotations

import pytest

from serving.dashboard import dashboard_json
from serving.metricnames import known_metric_names, promql_metrics


def queries(model):
    return [(p["title"], t["expr"]) for p in model["panels"] if p["type"] != "row" for t in p["targets"]]


def test_rows_and_panels(example):
    model = dashboard_json(example)
    rows = [p["title"] for p in model["panels"] if p["type"] == "row"]
    assert rows == ["Node health", "KV cache", "HiCache", "Router", "opsbot"]
    titles = {p["title"] for p in model["panels"]}
    assert {"Roles up", "Prefill queue depth", "Decode KV usage", "Retracted and paused requests",
            "GPU utilization", "GPU memory used"} <= titles
    queue = next(p for p in model["panels"] if p["title"] == "Prefill queue depth")
    steps = queue["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert [s["value"] for s in steps] == [None, example.alerts.prefill_queue_max / 2, example.alerts.prefill_queue_max]
    assert model["uid"] == example.grafana.dashboard_uid
    ids = [p["id"] for p in model["panels"]]
    assert len(ids) == len(set(ids))


def test_every_query_reads_known_metrics(example):
    qs = queries(dashboard_json(example))
    assert len(qs) >= 20
    for title, expr in qs:
        names = promql_metrics(expr)
        assert names, f"{title}: no metric in {expr!r}"
        assert names <= known_metric_names(), f"{title}: unknown metrics {names - known_metric_names()}"


def test_unknown_metric_would_be_caught():
    assert promql_metrics('max by (instance) (sglang:num_queue_requests{job="x"})') - known_metric_names() == {
        "sglang:num_queue_requests"}


@pytest.mark.parametrize("name", ["sglang:num_retracted_reqs", "sglang:realtime_tokens_total", "smg_worker_health",
                                  "opsbot_gpu_memory_used_bytes"])
def test_known_names_include_reference_and_exporter(name):
    assert name in known_metric_names()


def test_router_panels_follow_the_router_kind(example):
    """smg: stalled workers, shedding and PD failures; sglang-router 0.3.2 has only the worker health."""
    titles = lambda spec: {p["title"] for p in dashboard_json(spec)["panels"]}  # noqa: E731
    smg = {"Stalled workers (liveness veto)", "Overload shedding (per 5 min)", "PD failures at the router (per 5 min)"}
    assert smg | {"Worker health (1 healthy)"} <= titles(example)
    old = example.model_copy(update={"router": example.router.model_copy(update={"kind": "sgl-router"})})
    assert "Worker health (1 healthy)" in titles(old) and not smg & titles(old)
