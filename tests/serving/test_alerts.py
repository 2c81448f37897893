"""Alert rules: promtool accepts them, promtool unit tests fire and stay quiet where they should."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from opsbot.lab.layout import plan_lab
from opsbot.lab.monitoring import lab_spec
from opsbot.lab.settings import LabSettings
from serving.alerts import alert_rules, alert_rules_yaml
from serving.metricnames import known_metric_names, promql_metrics
from tests.realparts import need_binary

HERE = Path(__file__).parent
# spec/incidents.md: the public incident ids
INCIDENTS = {
    "decode-wedged", "prefill-wedged", "prefill-queue-saturation", "kv-transfer-failure", "config-crashloop",
    "role-down", "cuda-oom", "kv-cache-exhausted", "scheduler-watchdog", "nccl-failure", "gpu-fault",
    "router-no-healthy-workers", "long-context-recall-regression", "dp-rank-wedged", "output-corruption", "healthy",
}


def test_promtool_check_and_unit_tests(example, tmp_path):
    promtool = need_binary("promtool")
    rules = tmp_path / "sglang-pd.rules.yml"
    rules.write_text(alert_rules_yaml(example))
    shutil.copy(HERE / "alerts" / "sglang-pd.test.yml", tmp_path)
    check = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True)
    n = len(alert_rules(example)["groups"][0]["rules"])
    assert check.returncode == 0 and f"SUCCESS: {n} rules found" in check.stdout, check.stdout + check.stderr
    test = subprocess.run([promtool, "test", "rules", str(tmp_path / "sglang-pd.test.yml")],
                          capture_output=True, text=True)
    assert test.returncode == 0, test.stdout + test.stderr


def test_every_rule_names_an_incident_and_known_metrics(example):
    rules = alert_rules(example)["groups"][0]["rules"]
    assert {r["alert"] for r in rules} >= {
        "SGLangPrefillQueueSaturated", "SGLangDecodeNoProgress", "SGLangRoleDown", "SGLangKVTransferFailuresRising",
        "SGLangKVCacheNearFull", "GPUMemoryHigh", "GPUExporterDown"}
    for r in rules:
        assert r["annotations"]["runbook"] in INCIDENTS, r["alert"]
        assert r["labels"]["incident"] == r["annotations"]["runbook"]
        unknown = promql_metrics(r["expr"]) - known_metric_names()
        assert not unknown, f"{r['alert']} reads metrics no SGLang or exporter defines: {unknown}"


def test_job_names_come_from_the_spec(example):
    spec = example.model_copy(update={"prometheus": example.prometheus.model_copy(
        update={"jobs": {"prefill": "p", "decode": "d", "router": "r", "exporter": "x"}})})
    text = alert_rules_yaml(spec)
    assert 'job="d"' in text and "sglang-decode" not in text
    assert yaml.safe_load(text)["groups"][0]["name"] == "sglang-pd-dsv4"


def test_lab_rules_fire_on_series_recorded_from_the_lab(tmp_path):
    """The rules the lab's Prometheus loads (lab spec, game-day timings) against series recorded there."""
    promtool = need_binary("promtool")
    plan = plan_lab(LabSettings(lab_service_port_base=45000, lab_ssh_port_base=23500), 2)
    spec = lab_spec(plan, 45000, "http://127.0.0.1:8080/alerts", tmp_path / "am" / "token")
    assert spec.alerts.time_scale < 1 and spec.prometheus.scrape_interval == "1s"
    (tmp_path / "sglang-pd.rules.yml").write_text(alert_rules_yaml(spec))
    shutil.copy(HERE / "alerts" / "lab-gameday.test.yml", tmp_path)
    test = subprocess.run([promtool, "test", "rules", str(tmp_path / "lab-gameday.test.yml")],
                          capture_output=True, text=True)
    assert test.returncode == 0, test.stdout + test.stderr


def test_time_scale_shortens_pending_and_windows_but_keeps_four_scrapes(example):
    spec = example.model_copy(update={
        "alerts": example.alerts.model_copy(update={"time_scale": 0.05}),
        "prometheus": example.prometheus.model_copy(update={"scrape_interval": "1s"})})
    rules = {r["alert"]: r for r in alert_rules(spec)["groups"][0]["rules"]}
    assert rules["SGLangPrefillQueueSaturated"]["for"] == "6s"  # 2m x 0.05
    assert "[6s]" in rules["SGLangDecodeNoProgress"]["expr"]
    slow = example.model_copy(update={"alerts": example.alerts.model_copy(update={"time_scale": 0.01})})
    assert "[60s]" in {r["alert"]: r for r in alert_rules(slow)["groups"][0]["rules"]}["SGLangDecodeNoProgress"]["expr"]
    assert rules["SMGWorkerWedged"]["for"] == "3s" and "[15s]" in rules["SMGOverloadShedding"]["expr"]  # router rules too


def test_smg_rules_only_for_smg(example):
    names = lambda spec: [r["alert"] for r in alert_rules(spec)["groups"][0]["rules"]]  # noqa: E731
    smg = {"SMGWorkerWedged", "SMGWorkerUnreachable", "SMGOverloadShedding", "SMGPDAdmissionShedding",
           "SMGPDTransferFailures"}
    assert smg | {"RouterWorkerUnhealthy"} <= set(names(example))
    old = example.model_copy(update={"router": example.router.model_copy(update={"kind": "sgl-router"})})
    assert "RouterWorkerUnhealthy" in names(old) and not smg & set(names(old))
