"""The incident classes of ../shared/spec/incidents.md: a public contract, never renamed.

The table lives outside the repository, so the ids are kept here; ``tests/test_incidents.py``
checks this copy against the spec whenever the spec is at hand.
"""

from __future__ import annotations

INCIDENTS: dict[str, str] = {
    "decode-wedged": "Decode is alive but produces no tokens",
    "prefill-wedged": "Prefill is alive but computes no tokens",
    "prefill-queue-saturation": "Prefill queue saturated: TTFT of minutes, clients abort",
    "kv-transfer-failure": "KV transfer between prefill and decode fails",
    "config-crashloop": "A role crash-loops on a configuration error",
    "role-down": "A role is not running and not restarting",
    "cuda-oom": "CUDA out of memory",
    "kv-cache-exhausted": "KV cache exhausted: requests retracted",
    "scheduler-watchdog": "Scheduler watchdog killed a hung role",
    "nccl-failure": "NCCL collective failed or timed out",
    "gpu-fault": "A GPU misbehaves (Xid, ECC, missing)",
    "router-no-healthy-workers": "The router has no healthy workers",
    "long-context-recall-regression": "Answers lose facts from long prompts",
    "dp-rank-wedged": "One DP-attention rank is stuck while its siblings serve",
    "output-corruption": "Answers are wrong: greedy outputs diverge from the baseline",
    "unexplained": "Something is wrong that no runbook knows",
    "healthy": "Nothing abnormal",
}

# Classes no runbook in runbooks/ diagnoses: "healthy" is the empty finding list.
NOT_BY_RUNBOOK = frozenset({"healthy"})

INCIDENT_IDS: frozenset[str] = frozenset(INCIDENTS)
