"""The PD deployment as code: spec, rules, rendering, GPU exporter, alerts, dashboard, rollout."""
