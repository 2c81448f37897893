"""opsbot's own Prometheus metrics, in a registry per app so several apps can live in one process."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Telemetry:
    """The counters every surface updates; exposed at ``GET /metrics``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.probes = Counter("opsbot_probes", "Probes run, by trigger and outcome", ["trigger", "outcome"], registry=r)
        self.probe_seconds = Histogram(
            "opsbot_probe_duration_seconds",
            "Probe plus diagnosis wall time",
            ["trigger"],
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40),
            registry=r,
        )
        self.findings = Counter("opsbot_findings", "Findings reported, by incident id", ["incident"], registry=r)
        self.alerts_received = Counter("opsbot_alerts_received", "Alerts in accepted webhook calls", registry=r)
        self.alerts_deduplicated = Counter(
            "opsbot_alerts_deduplicated", "Alerts already stored with the same fingerprint and status", registry=r
        )
        self.alerts_rejected = Counter("opsbot_alerts_rejected", "Webhook calls refused, by reason", ["reason"], registry=r)
        self.alerts_waiting = Gauge("opsbot_alerts_waiting", "Accepted alerts whose probe has not finished", registry=r)
        self.clock_skew = Gauge("opsbot_clock_skew_seconds", "This host's clock minus the database server's", registry=r)
        self.actions = Counter("opsbot_actions", "Restart actions, by outcome", ["outcome"], registry=r)
        self.slack_failing = Gauge(
            "opsbot_slack_messages_failing",
            "Incident messages Slack did not take in the last hour (the status page's Slack row); set per scrape",
            registry=r)
        self.fidelity = Gauge(
            "opsbot_fidelity_result", "Last output-fidelity run: 1 every answer matched the baseline, 0 some diverged, "
            "-1 not judged (no or refused baseline, every request failed)", ["cluster"], registry=r)
        self.fidelity_diverged = Gauge(
            "opsbot_fidelity_diverged_answers", "Answers of the last output-fidelity run beyond the baseline's tolerance",
            ["cluster"], registry=r)
