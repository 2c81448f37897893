"""Bundles added by issue 24's fourth round of rules (2026-12-03): failures of no known class on a serving role whose
logs show no error line, read from the request side (the roles' request counters and gauges). Written looking at
``dev/`` only; each bundle's part is its thread's (``split.py``): a thread whose hash says ``test/`` was neither
written nor read for a rule.

Thread lines are kept verbatim where a thread quotes them; the rest (units, metrics, batch lines, access lines,
/health) is what that SGLang and router version print, as ``deployments.py`` writes them. Run
``python -m tests.scenarios.rules4`` to rewrite them.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.scenarios.compose import RoleSpec, Writer, register
from tests.scenarios.deployments import roles
from tests.scenarios.split import write

SCENARIOS: dict[str, Callable[[], dict]] = {}


def scenario(name: str, expected: str, source: str, note: str, opened: str | None = None,
             also: tuple[str, ...] = (), must_not: tuple[str, ...] = ()) -> Callable[[Writer], Callable[[], dict]]:
    label = {"expected": expected, "also": list(also), "must_not": list(must_not), "source": source, "note": note}
    return register(SCENARIOS, "rules4", name, label | ({"opened": opened} if opened is not None else {}))


_RESTART_CLASSES = ("kv-transfer-failure", "decode-wedged", "prefill-wedged", "config-crashloop", "scheduler-watchdog",
                    "role-down", "kv-cache-exhausted", "prefill-queue-saturation")
PREFILL, DECODE = "http://10.0.0.1:30000", "http://10.0.0.2:30000"


def _idle(spec: RoleSpec, **held: float) -> RoleSpec:
    """The role after the benchmark's last batch (its journal's batch line is the last, a minute old): nothing running
    or queued, its token counters flat, ``held`` requests in its PD queues (SGLang republishes them from the real queues
    every 30 s while idle, 0.5.23 managers/scheduler_components/metrics_reporter.py _maybe_log_idle_metrics)."""
    spec.gauges.update(num_running_reqs=0, num_queue_reqs=0, token_usage=0.0)
    spec.gauges.update({k: 0 for k in spec.gauges if k.endswith("_queue_reqs")} | held)
    spec.counters = {k: (v[0], 0) for k, v in spec.counters.items()}
    return spec


def _router(in_flight: dict[str, float], routed: float) -> RoleSpec:
    """SMG as the sgl-model-gateway of 2026 exposes it: its live per-worker in-flight gauge (c7f9bf9f5 src/core/
    worker.rs:670-673, smg_worker_requests_active{worker}) and its routed-request counter."""
    r = roles()[2]
    r.gauges.update({f"smg_worker_requests_active{{worker={url}}}": n for url, n in in_flight.items()})
    r.counters["smg_router_requests"] = (40_959, routed)
    return r


# --- (a) the PD router waits on a decode leg whose prefill leg failed (sglang PR #24159) -------------------------
# The router sends both legs with tokio::join! (sgl-model-gateway pd_router.rs execute_dual_dispatch_internal; smg
# c7f9bf9f5 src/routers/http/pd_router.rs:577-578): the prefill answers 400 at once, the decode waits for a KV cache
# that never comes, and join! waits on the decode. No role writes an error line.
_PR24159 = "https://github.com/sgl-project/sglang/pull/24159"
_CONTEXT_400 = 'raw:INFO:     10.0.0.3:51234 - "POST /generate HTTP/1.1" 400 Bad Request'


@scenario("pd-router-hangs-prefill-400", "any-finding", _PR24159,
          "PD benchmark of 40960 prompts hangs at 40959/40960: one request hits the context length boundary, the "
          "prefill answers it 400, and the router's join! of both legs waits forever on the decode leg, which waits "
          "for a KV cache that never comes; no role logs an error, the decode holds the request in its prealloc queue "
          "while nothing moves, the router holds it in flight and routes nothing; a failure of no class, no restart",
          opened="2026-04-30", must_not=_RESTART_CLASSES + ("router-no-healthy-workers",))
def _prefill_400_hang():
    p, d, _ = roles()
    p.logs = p.logs + [_CONTEXT_400]
    return [_idle(p), _idle(d, num_decode_prealloc_queue_reqs=1), _router({PREFILL: 1, DECODE: 1}, 0)], {}


@scenario("pd-router-hangs-prefill-400-no-router-metrics", "any-finding", _PR24159,
          "the same hang with the router's /metrics not collected: only the pair shows it, the decode holding a request "
          "in its prealloc queue while it moves nothing, its prefill having refused a request (400) and holding none",
          opened="2026-04-30", must_not=_RESTART_CLASSES + ("router-no-healthy-workers",))
def _prefill_400_hang_pair_only():
    p, d, _ = roles()
    p.logs = p.logs + [_CONTEXT_400]
    r = roles()[2]
    r.metrics_error, r.nulls = "connection refused", True
    return [_idle(p), _idle(d, num_decode_prealloc_queue_reqs=1), r], {}


@scenario("pd-router-prefill-400-after-fix", "healthy", _PR24159,
          "with the fix (select! on both legs) the router answers the prefill's 400 to the client and cancels the "
          "decode leg: the client's too-long prompt is refused (a note), the decode holds nothing, the router has "
          "nothing in flight; idle and healthy",
          opened="2026-04-30", must_not=("unexplained", "kv-transfer-failure", "decode-wedged"))
def _prefill_400_after_fix():
    p, d, _ = roles()
    p.logs = p.logs + [_CONTEXT_400]
    return [_idle(p), _idle(d), _router({PREFILL: 0, DECODE: 0}, 0)], {}


@scenario("pd-router-benchmark-streams-in-flight", "healthy", _PR24159,
          "the same benchmark while it runs: the router holds two dozen long generations in flight and routes no new "
          "request in the three seconds between the probe's samples (the benchmark's concurrency is full), while the "
          "decode moves tokens for them; in flight is not held",
          opened="2026-04-30", must_not=("unexplained", "router-no-healthy-workers", "decode-wedged"))
def _streams_in_flight():
    p, d, _ = roles()
    return [p, d, _router({PREFILL: 0, DECODE: 24}, 0)], {}


@scenario("pd-router-hangs-prefill-400-0.5.3", "any-finding", _PR24159,
          "the same hang as SGLang 0.5.3 and the in-tree sgl-router of 2025 show it (its PD router joined both legs "
          "the same way, smg-project/smg bda5d7095 src/routers/http/pd_router.rs:419, and exports no in-flight gauge "
          "for PD): the prefill's 400, the decode's prealloc queue holding the request while no request finishes",
          opened="2026-04-30", must_not=_RESTART_CLASSES + ("router-no-healthy-workers",))
def _prefill_400_hang_053():
    p, d, r = roles("0.5.3", "sgl-router")
    p.logs = p.logs + [_CONTEXT_400]
    r.counters = {k: (v[0], 0) for k, v in r.counters.items()}
    return [_idle(p), _idle(d, num_decode_prealloc_queue_reqs=1), r], {}


# --- a decode leg that failed with a 5xx while the prefill waits on its bootstrap (smg-project/smg#831) ------------
_SMG831 = "https://github.com/smg-project/smg/issues/831"


@scenario("smg-pd-decode-5xx-prefill-waits-bootstrap", "any-finding", _SMG831,
          "SMG for PD with SGLang: a worker answers 5xx to /generate and the router's tokio::join! waits forever on "
          "the other leg, which hangs on bootstrapping as its peer is not there (until SGLang's bootstrap timeout); "
          "probed before that timeout: the decode answered 500 and holds nothing, the prefill holds the request in "
          "its bootstrap queue while it moves nothing, the router holds it in flight; no restart",
          opened="2026-03-20", must_not=_RESTART_CLASSES + ("router-no-healthy-workers",))
def _decode_5xx_prefill_waits():
    p, d, _ = roles()
    d.logs = d.logs + ['raw:INFO:     10.0.0.3:40312 - "POST /generate HTTP/1.1" 500 Internal Server Error']
    return [_idle(p, num_prefill_bootstrap_queue_reqs=1), _idle(d), _router({PREFILL: 1, DECODE: 1}, 0)], {}


if __name__ == "__main__":
    for path in write(SCENARIOS):
        print(path)
