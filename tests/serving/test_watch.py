"""Watching the watcher: opsbot's own rules pass promtool's unit tests, read only metrics opsbot exposes, are
rendered with the deployment's, and their alerts are routed to people, not to opsbot."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

from serving.metricnames import opsbot_metric_names, promql_metrics
from serving.render import render
from serving.watch import watch_rules, watch_rules_yaml
from tests.realparts import need_binary

HERE = Path(__file__).parent


def test_promtool_check_and_unit_tests(example, tmp_path):
    promtool = need_binary("promtool")
    (tmp_path / "opsbot.rules.yml").write_text(watch_rules_yaml(example))
    shutil.copy(HERE / "alerts" / "opsbot-watch.test.yml", tmp_path)
    check = subprocess.run([promtool, "check", "rules", str(tmp_path / "opsbot.rules.yml")], capture_output=True, text=True)
    assert check.returncode == 0 and "SUCCESS: 4 rules found" in check.stdout, check.stdout + check.stderr
    test = subprocess.run([promtool, "test", "rules", str(tmp_path / "opsbot-watch.test.yml")],
                          capture_output=True, text=True)
    assert test.returncode == 0, test.stdout + test.stderr


def test_rules_read_only_metrics_opsbot_exposes(example):
    rules = watch_rules(example)["groups"][0]["rules"]
    assert {r["alert"] for r in rules} == {"OpsbotDown", "OpsbotAlertsWaiting", "OpsbotProbesFailing", "OpsbotSlackFailing"}
    for r in rules:
        unknown = promql_metrics(r["expr"]) - opsbot_metric_names() - {"up"}
        assert not unknown, f"{r['alert']} reads metrics opsbot does not expose: {unknown}"
        assert r["labels"]["component"] == "opsbot" and "runbook" not in r["annotations"]


def test_rendered_with_the_deployment_and_routed_to_people(example, tmp_path):
    files = render(example.model_copy(update={"alertmanager": example.alertmanager.model_copy(
        update={"watch_webhook_url": "https://pager.example.com/hook"})})).cluster_files
    prometheus = yaml.safe_load(files["prometheus/prometheus.yml"])
    assert "rules/opsbot.rules.yml" in prometheus["rule_files"]
    job = next(j for j in prometheus["scrape_configs"] if j["job_name"] == "opsbot")
    assert job["static_configs"][0]["targets"] == ["127.0.0.1:8080"]  # alertmanager.opsbot_url's host and port
    assert yaml.safe_load(files["prometheus/rules/opsbot.rules.yml"]) == watch_rules(example)
    am = yaml.safe_load(files["alertmanager/alertmanager.yml"])
    first = am["route"]["routes"][0]
    assert (first["receiver"], first["matchers"]) == ("opsbot-watchers", ['component="opsbot"'])
    watchers = next(r for r in am["receivers"] if r["name"] == "opsbot-watchers")
    assert watchers["webhook_configs"][0]["url"] == "https://pager.example.com/hook"
    amtool = shutil.which("amtool")
    if amtool:
        (tmp_path / "am.yml").write_bytes(files["alertmanager/alertmanager.yml"])
        routed = subprocess.run([amtool, "config", "routes", "test", "--config.file", str(tmp_path / "am.yml"),
                                 "component=opsbot", "alertname=OpsbotDown"], capture_output=True, text=True)
        assert routed.stdout.strip() == "opsbot-watchers", routed.stdout + routed.stderr
