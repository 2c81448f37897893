"""Realistic opsbot history for report tests and the benchmark: bundles, findings, alerts, actions.

Bundles carry real-format evidence (systemctl show output, two SGLang /metrics bodies, nvidia-smi
CSV) so the report's current-state figures go through the real parsers. Everything is written
through the Store's public methods.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone


from opsbot.bundle import Bundle
from opsbot.diagnose import Finding
from opsbot.store import AlertIn, Store
from tests.findings import diagnosis, finding

CLUSTER = "dsv4"
MODEL = "deepseek-ai/DeepSeek-V4-Flash"



def _iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _metrics(engine: str, running: int, queued: int, usage: float, tokens: float) -> str:
    labels = f'model_name="{MODEL}",engine_type="{engine}",tp_rank="0",pp_rank="0",moe_ep_rank="0"'
    mode = "decode" if engine == "decode" else "prefill_compute"
    return (f"# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{{{labels}}} {running}\n"
            f"# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{{{labels}}} {queued}\n"
            f"# TYPE sglang:token_usage gauge\nsglang:token_usage{{{labels}}} {usage}\n"
            f"# TYPE sglang:realtime_tokens_total counter\n"
            f'sglang:realtime_tokens_total{{{labels},mode="{mode}"}} {tokens}\n')


def _systemd(unit: str, active: bool, restarts: int) -> str:
    state = "ActiveState=active\nSubState=running" if active else "ActiveState=activating\nSubState=auto-restart"
    return (f"Id={unit}\nLoadState=loaded\n{state}\nResult=success\nNRestarts={restarts}\nExecMainStatus=0\n"
            "MainPID=4242\nMemoryCurrent=8589934592\n")


GPU_CSV = "\n".join(
    f"{i}, GPU-{i:08d}-0000-0000-0000-000000000000, NVIDIA H200, {120000 + i} MiB, 143771 MiB, 87 %, 55, 480.5 W"
    for i in range(8))


@dataclass
class RoleLoad:
    running: int = 12
    queued: int = 1
    usage: float = 0.42
    tokens_per_s: float = 900.0
    active: bool = True
    restarts: int = 0


def bundle_at(t: datetime, *, prefill: RoleLoad | None = None, decode: RoleLoad | None = None,
              window_s: float = 3.0, trigger: str = "cli") -> Bundle:
    """A three-role PD bundle (prefill and router on node1, decode on node2) taken at ``t``."""
    prefill, decode = prefill or RoleLoad(tokens_per_s=5200.0), decode or RoleLoad()
    roles = []
    for name, node, _port, load in (("prefill", "node1", 30000, prefill), ("decode", "node2", 30001, decode)):
        unit = f"sglang-dsv4-{name}.service"
        samples = [{"at": _iso(t + timedelta(seconds=k * window_s)),
                    "raw": _metrics(name, load.running, load.queued, load.usage, 1e6 + k * window_s * load.tokens_per_s)}
                   for k in (0, 1)]
        ok = load.active
        roles.append({"role": name, "node": node, "unit": unit,
                      "systemd": {"ok": True, "raw": _systemd(unit, load.active, load.restarts)},
                      "metrics": {"ok": ok, "error": None if ok else "connection refused", "samples": samples if ok else []},
                      "health": {"ok": ok, "status": 200 if ok else None, "error": None if ok else "connection refused"},
                      "logs": {"ok": True, "raw": ""}})
    roles.append({"role": "router", "node": "node1", "unit": "sglang-router.service",
                  "systemd": {"ok": True, "raw": _systemd("sglang-router.service", True, 0)},
                  "metrics": {"ok": True, "samples": []}, "health": {"ok": True, "status": 200},
                  "logs": {"ok": True, "raw": ""}})
    nodes = [{"node": n, "gpu": {"ok": True, "raw": GPU_CSV}} for n in ("node1", "node2")]
    return Bundle.model_validate({"cluster": CLUSTER, "trigger": {"kind": trigger}, "started_at": _iso(t),
                                  "finished_at": _iso(t + timedelta(seconds=window_s + 2)),
                                  "roles": roles, "nodes": nodes})


QUEUE = finding(
    "prefill-queue-saturation", "critical", ["prefill"], title="Prefill queue saturated",
    evidence=["prefill queue: 48 requests, 512,000 pending tokens", "decode: 31 KVTransferError ... Aborted by AbortReq"],
    summary="A burst filled the prefill queue; clients time out and abort.")
WEDGED = finding(
    "decode-wedged", "critical", ["decode"], title="Decode is alive but produces no tokens",
    evidence=["running requests: 17, token usage 0.31", "tokens decoded in 3.0 s: 0"],
    summary="The decode scheduler holds requests but has not advanced them.")


@dataclass
class SeededWeek:
    """What ``seed_week`` put in, for tests to check the report against."""

    probes: int = 0
    by_class: dict[str, int] = field(default_factory=dict)
    diagnosis_s: list[float] = field(default_factory=list)
    recovery_s: list[float] = field(default_factory=list)
    restarts: int = 0


def save(store: Store, t: datetime, findings: list[Finding] = (), **kw) -> str:  # type: ignore[assignment]
    b = bundle_at(t, **kw)
    return store.save_probe(b, diagnosis(b.id, list(findings)))


def seed_week(store: Store, start: datetime, *, every: timedelta = timedelta(hours=6)) -> SeededWeek:
    """Healthy probes every ``every``; a prefill-queue saturation on Wednesday (alert-triggered, recovers
    in 30 min) and a decode wedge on Thursday night (restarted by opsbot, recovers in 20 min)."""
    out = SeededWeek()
    t = start
    while t < start + timedelta(days=7):
        save(store, t)
        out.probes += 1
        t += every
    wed = start + timedelta(days=2, hours=14, minutes=7)
    alert_start = wed - timedelta(minutes=2)
    pid = save(store, wed, [QUEUE], prefill=RoleLoad(queued=48, tokens_per_s=5400.0), trigger="alert")
    alert_id, _ = store.save_alert(AlertIn(fingerprint="f00d", status="firing", starts_at=alert_start, cluster=CLUSTER,
                                           role="prefill", labels={"alertname": "PrefillQueueSaturated"}))
    store.link_alert_probe([alert_id], pid)
    save(store, wed + timedelta(minutes=10), [QUEUE], prefill=RoleLoad(queued=40, tokens_per_s=5400.0))
    save(store, wed + timedelta(minutes=30))
    out.probes += 3
    out.diagnosis_s.append((wed + timedelta(seconds=5) - alert_start).total_seconds())
    out.recovery_s.append(30 * 60)
    thu = start + timedelta(days=3, hours=3, minutes=11)
    save(store, thu, [WEDGED], decode=RoleLoad(running=17, usage=0.31, tokens_per_s=0.0))
    action = store.create_action(kind="restart", cluster=CLUSTER, roles=["decode"], plan={"units": ["sglang-dsv4-decode.service"]},
                                 reason="decode wedged", requested_by="alice", surface="slack", ttl=timedelta(minutes=15))
    store.transition(action.id, ("planned",), "succeeded", actor="opsbot", surface="slack", what="restart succeeded",
                     created_at=thu + timedelta(minutes=2), approved_by="bob", approved_surface="slack",
                     started_at=thu + timedelta(minutes=3), finished_at=thu + timedelta(minutes=6),
                     outcome="decode active, tokens moving")
    save(store, thu + timedelta(minutes=20), decode=RoleLoad(restarts=1))
    out.probes += 2
    out.recovery_s.append(20 * 60)
    out.restarts = 1
    out.by_class = {"prefill-queue-saturation": 1, "decode-wedged": 1}
    return out
