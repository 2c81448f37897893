"""Watching the watcher: alert rules and dashboard panels for opsbot's own ``/metrics``.

opsbot down, alerts waiting too long for a probe, probes failing, Slack not taking incident messages.
These alerts are about opsbot, so they must not be routed to opsbot: they carry ``component: opsbot``
and the rendered Alertmanager config sends them to the ``opsbot-watchers`` receiver
(``alertmanager.watch_webhook_url``). The metric names are opsbot's (opsbot/telemetry.py); a test reads
them from a real ``Telemetry`` registry.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import yaml
from grafana_foundation_sdk.builders import dashboard, prometheus, timeseries

from serving.alerts import scaled, seconds
from serving.spec import DeploymentSpec

JOB = "opsbot"
RULES_FILE = "opsbot.rules.yml"


def opsbot_target(spec: DeploymentSpec) -> str:
    """host:port of opsbot's /metrics: the service Alertmanager posts to (``alertmanager.opsbot_url``)."""
    parts = urlsplit(spec.alertmanager.opsbot_url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def _rule(name: str, expr: str, for_: str, severity: str, summary: str, description: str) -> dict[str, Any]:
    return {"alert": name, "expr": expr, "for": for_,
            "labels": {"severity": severity, "component": "opsbot"},
            "annotations": {"summary": summary, "description": description}}


def watch_rules(spec: DeploymentSpec) -> dict[str, Any]:
    """The rule group for opsbot's own metrics; ``for:`` and windows follow ``alerts.time_scale`` like the SGLang rules."""
    a = spec.alerts
    j = f'job="{JOB}"'

    def w(duration: str) -> str:
        return scaled(duration, a.time_scale, floor_s=4 * seconds(spec.prometheus.scrape_interval))

    rules = [
        _rule("OpsbotDown", f"up{{{j}}} == 0", "1m", "critical",
              "opsbot on {{ $labels.instance }} is down",
              "Prometheus cannot scrape opsbot: no alert is probed, no incident message posted. "
              "systemctl status opsbot; journalctl -u opsbot."),
        _rule("OpsbotAlertsWaiting", f"opsbot_alerts_waiting{{{j}}} > 0", "10m", "warning",
              "Alerts have waited for a probe on {{ $labels.instance }} for 10 minutes",
              "{{ $value }} accepted alerts still wait, and the queue has not emptied for 10 minutes: probes do not "
              "finish (nodes unreachable, SSH hanging) or the intake is flooded. The status page lists them."),
        _rule("OpsbotProbesFailing",
              f'sum by (instance) (increase(opsbot_probes_total{{{j},outcome="error"}}[{w("15m")}])) / '
              f"sum by (instance) (increase(opsbot_probes_total{{{j}}}[{w('15m')}])) > 0.5",
              "5m", "warning",
              "Most probes by opsbot on {{ $labels.instance }} fail",
              "{{ $value | humanizePercentage }} of the last 15 minutes' probes ended in an error: check the "
              "inventory, SSH keys and host keys (opsbot inventory check)."),
        _rule("OpsbotSlackFailing", f"opsbot_slack_messages_failing{{{j}}} > 0", "5m", "warning",
              "Slack does not take opsbot's incident messages",
              "{{ $value }} incident messages could not be posted or brought up to date in the last hour: "
              "the on-call channel is behind. The status page's Integrations table has the error."),
    ]
    for rule in rules:
        rule["for"] = scaled(rule["for"], a.time_scale)
    return {"groups": [{"name": f"opsbot-watch-{spec.name}", "rules": rules}]}


def watch_rules_yaml(spec: DeploymentSpec) -> str:
    return yaml.safe_dump(watch_rules(spec), sort_keys=False, width=120)


def _q(expr: str, legend: str) -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend)


def _ts(title: str, unit: str, *queries: prometheus.Dataquery) -> timeseries.Panel:
    panel = timeseries.Panel().title(title).unit(unit).height(8).span(6)
    for q in queries:
        panel = panel.with_target(q)
    return panel


def watch_row(board: dashboard.Dashboard) -> dashboard.Dashboard:
    """The dashboard's last row: opsbot itself."""
    j = f'job="{JOB}"'
    return (
        board.with_row(dashboard.Row("opsbot"))
        .with_panel(_ts("opsbot up", "short", _q(f"up{{{j}}}", "{{instance}}")).min(0).max(1))
        .with_panel(_ts("Alerts waiting for a probe", "short", _q(f"opsbot_alerts_waiting{{{j}}}", "{{instance}}")))
        .with_panel(_ts("Probes by outcome (per 5 min)", "short",
                        _q(f"sum by (outcome) (increase(opsbot_probes_total{{{j}}}[5m]))", "{{outcome}}")))
        .with_panel(_ts("Slack messages failing", "short",
                        _q(f"opsbot_slack_messages_failing{{{j}}}", "{{instance}}")))
    )
