"""Bundles added by issue 24's fifth round of rules (2026-12-03): a PD leg refused or failed elsewhere, read from the
request side, where the decode also wrote a transfer failure (kv-transfer-failure's restart would be unsafe advice) or
where the router wrote one transport failure (a keep-alive reset's note would be a false all-clear). Written looking at
``dev/`` only; each bundle's part is its thread's (``split.py``). Variants of threads ``dev/`` already cites (sglang PR
#24159, smg-project/smg#831), with the lines no thread quotes written from SGLang's and the router's source, and
labelled so in their note.

Run ``python -m tests.scenarios.rules5`` to rewrite them.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.scenarios.compose import Writer, register
from tests.scenarios.deployments import roles
from tests.scenarios.rules4 import _RESTART_CLASSES, DECODE, PREFILL, _idle, _router
from tests.scenarios.split import write

SCENARIOS: dict[str, Callable[[], dict]] = {}


def scenario(name: str, expected: str, source: str, note: str, opened: str | None = None,
             also: tuple[str, ...] = (), must_not: tuple[str, ...] = ()) -> Callable[[Writer], Callable[[], dict]]:
    label = {"expected": expected, "also": list(also), "must_not": list(must_not), "source": source, "note": note}
    return register(SCENARIOS, "rules5", name, label | ({"opened": opened} if opened is not None else {}))


_PR24159 = "https://github.com/sgl-project/sglang/pull/24159"
_SMG831 = "https://github.com/smg-project/smg/issues/831"
_CONTEXT_400 = 'raw:INFO:     10.0.0.3:51234 - "POST /generate HTTP/1.1" 400 Bad Request'
_DECODE_500 = 'raw:INFO:     10.0.0.3:40312 - "POST /generate HTTP/1.1" 500 Internal Server Error'
_ROOM = 7305529129410893621
_NOT_TRANSFER = _RESTART_CLASSES + ("router-no-healthy-workers",)

# SGLang 0.5.23 (reference/sglang.md §4.1): the decode's receiver gives up after SGLANG_DISAGGREGATION_WAITING_TIMEOUT
# (300 s) in KVPoll.WaitingForInput (disaggregation/common/conn.py:2894 warning_once, then the failure reason), and the
# transfer queue aborts the request with 500 (decode.py:2863-2884 "Decode transfer failed for request ...").
_WAITING_WARNING = ("Some requests fail to receive KV Cache transfer done signal after bootstrapping. If a greater mean "
                    "TTFT is acceptable, you can 'export SGLANG_DISAGGREGATION_WAITING_TIMEOUT=600' (10 minutes) to "
                    "relax the timeout condition. ")


def _decode_transfer_failed(reason: str, room: int = _ROOM) -> str:
    return (f"Decode transfer failed for request rank=0 decode_req.req.rid='5b0e3c9d2a7f4e61a0c4d1f2b3e4a5c6' "
            f"decode_req.req.bootstrap_room={room} with exception KVTransferError(bootstrap_room={room}): {reason}")


# --- (1) the prefill refused the request; the decode, holding its KV slot, times out on the transfer --------------
@scenario("pd-router-prefill-400-decode-waiting-timeout", "any-finding", _PR24159,
          "the PR's hang probed after SGLang's waiting timeout: the prefill refused the request at the context length "
          "boundary (400) and holds nothing, the decode had pre-allocated its KV slot and, 300 s later, logs the "
          "transfer timed out in KVPoll.WaitingForInput and answers 500; the prefill's transfer engine wrote nothing. "
          "The transfer never started because the prefill leg was refused: the router's join of the two legs, not the "
          "transfer path, and a restart fixes nothing (the decode's lines written from SGLang 0.5.23's source, "
          "common/conn.py:2894 and decode.py:2863-2884: the thread quotes none)",
          opened="2026-04-30", must_not=_NOT_TRANSFER)
def _prefill_400_decode_timeout():
    p, d, _ = roles()
    p.logs = p.logs + [_CONTEXT_400]
    d.logs = d.logs + [_WAITING_WARNING,
                       _decode_transfer_failed(f"Request {_ROOM} timed out after 300.0s in KVPoll.WaitingForInput"),
                       _DECODE_500]
    d = _idle(d)
    d.counters["num_transfer_failed_reqs"] = (0, 1)
    return [_idle(p), d, _router({PREFILL: 0, DECODE: 0}, 0)], {}


@scenario("pd-router-prefill-400-decode-timeout-under-load", "any-finding", _PR24159,
          "the same while the benchmark still runs: both roles serve other requests and move tokens, the prefill "
          "answered one request 400 at the context length boundary, and the decode's receiver for that request times "
          "out in KVPoll.WaitingForInput (its once-warning and one KVTransferError); no transfer line on the prefill. "
          "Not a transfer path that fails: the refused leg (lines written from SGLang 0.5.23's source)",
          opened="2026-04-30", must_not=_NOT_TRANSFER)
def _prefill_400_decode_timeout_serving():
    p, d, _ = roles()
    p.logs = p.logs + [_CONTEXT_400]
    d.logs = d.logs + [_WAITING_WARNING,
                       _decode_transfer_failed(f"Request {_ROOM} timed out after 300.0s in KVPoll.WaitingForInput"),
                       _DECODE_500]
    d.counters["num_transfer_failed_reqs"] = (0, 1)
    return [p, d, _router({PREFILL: 2, DECODE: 24}, 30)], {}


@scenario("pd-router-prefill-400-decode-failed-to-get-kvcache-0.5.3", "any-finding", _PR24159,
          "the same as SGLang 0.5.3 and the in-tree sgl-router show it: the prefill aborts the request from its "
          "bootstrap queue with 400 (it exceeds the maximum number of tokens) and reports the room failed without a "
          "reason, so the decode's receiver records its default reason, 'Failed to get kvcache from prefill instance, "
          "it might be dead' (common/conn.py:313 DEFAULT_PREFILL_FAILURE_REASON), though the prefill serves; no "
          "transfer line on the prefill (lines written from SGLang's source: prefill.py:470, common/conn.py:313)",
          opened="2026-04-30", must_not=_NOT_TRANSFER)
def _prefill_400_decode_failed_get_kvcache():
    p, d, r = roles("0.5.3", "sgl-router")
    p.logs = p.logs + ["Request 5b0e3c9d2a7f4e61a0c4d1f2b3e4a5c6 exceeds the maximum number of tokens: 40961 > 40960",
                       _CONTEXT_400]
    d.logs = d.logs + [_decode_transfer_failed("Failed to get kvcache from prefill instance, it might be dead"),
                       _DECODE_500]
    r.counters = {k: (v[0], 0) for k, v in r.counters.items()}
    return [_idle(p), _idle(d), r], {}


# near misses: a transfer path that does fail, with a client's 400 on the prefill in the same run
@scenario("near-kv-transfer-session-dead-with-client-400", "kv-transfer-failure", _PR24159,
          "a client's too-long prompt refused by the prefill (400, a note) in a run where the transfer path fails for "
          "itself: the prefill's sender writes 'Prefill transfer failed ... remote mooncake session ... is not alive' "
          "and the decode 'Failed to get kvcache from prefill instance'; the prefill's own transfer failure says the "
          "transfer path, not the refused leg (written from SGLang 0.5.23's source, prefill.py:1287, "
          "mooncake/conn.py:2601)",
          opened="2026-04-30", must_not=("healthy", "unexplained"))
def _session_dead_with_400():
    p, d, _ = roles()
    p.logs = p.logs + [_CONTEXT_400,
                       f"Prefill transfer failed for request rank=0 req.rid='8c1d' req.bootstrap_room={_ROOM} with "
                       f"exception KVTransferError(bootstrap_room={_ROOM}): Decode instance could be dead, remote "
                       "mooncake session 10.0.0.2:16708 is not alive"]
    d.logs = d.logs + [_decode_transfer_failed("Failed to get kvcache from prefill instance, it might be dead")]
    d.counters["num_transfer_failed_reqs"] = (0, 1)
    return [p, d, _router({PREFILL: 2, DECODE: 24}, 30)], {}


@scenario("near-kv-transfer-lost-prefill-with-client-400", "kv-transfer-failure", _PR24159,
          "a client's 400 on the prefill, and the decode's heartbeat to the prefill's bootstrap server fails: 'Lost "
          "connection with prefill instance' fails its requests. The decode's failure names a cause of its own (the "
          "path to the prefill), so the refused request does not explain it (written from SGLang 0.5.23's source, "
          "common/conn.py:2103)",
          opened="2026-04-30", must_not=("healthy", "unexplained"))
def _lost_prefill_with_400():
    p, d, _ = roles()
    p.logs = p.logs + [_CONTEXT_400]
    d.logs = d.logs + ["Lost connection with prefill instance (bootstrap_addr: 10.0.0.1:8998), 3 requests affected",
                       _decode_transfer_failed("Lost connection with prefill instance (bootstrap_addr: 10.0.0.1:8998)")]
    d.counters["num_transfer_failed_reqs"] = (0, 3)
    return [p, d, _router({PREFILL: 2, DECODE: 24}, 30)], {}


# --- (2) the router's decode leg failed in transport; the prefill holds the request in its bootstrap queue --------
# SMG before 0b055fe03 (2026-03-20, "abort both PD requests when one side hits a transport error", #844, for #831)
# sent both legs with tokio::join! (0b055fe03^ model_gateway/src/routers/http/pd_router.rs:583) and logged a failed
# decode leg as error!(decode_url, error, "Decode request failed") (:688-693); the fix's comment (f8daa8835
# pd_router.rs:846-849): "otherwise the surviving request hangs waiting for a PD bootstrap that will never come".
def _decode_leg_failed(t: str, url: str = DECODE) -> str:
    return (f"raw:{t} ERROR smg::routers::http::pd_router: src/routers/http/pd_router.rs:689: Decode request failed "
            f"decode_url={url} error=error sending request for url ({url}/generate)")


@scenario("smg-pd-decode-transport-error-prefill-waits-bootstrap", "any-finding", _SMG831,
          "the issue's other case: the router's decode leg fails in transport (one 'Decode request failed ... error "
          "sending request'), the decode never saw the request and holds nothing, and the prefill holds it in its "
          "bootstrap queue while nothing moves, waiting for a decode that will never bootstrap; the router's join! "
          "waits on the prefill leg. One transport line, but not a keep-alive reset: a request nothing can finish "
          "(the router's line written from SMG's source before 0b055fe03, pd_router.rs:688-693), no restart",
          opened="2026-03-20", must_not=_NOT_TRANSFER)
def _decode_transport_prefill_waits():
    p, d, _ = roles()
    r = _router({PREFILL: 1, DECODE: 0}, 0)
    r.logs = [_decode_leg_failed("2026-01-20 09:59:30")]
    return [_idle(p, num_prefill_bootstrap_queue_reqs=1), _idle(d), r], {}


@scenario("smg-pd-decode-transport-error-prefill-waits-bootstrap-no-router-metrics", "any-finding", _SMG831,
          "the same with the router's /metrics not collected: the router's one transport failure to the decode and "
          "the prefill's bootstrap queue holding a request while it moves nothing and the decode holds none",
          opened="2026-03-20", must_not=_NOT_TRANSFER)
def _decode_transport_prefill_waits_no_metrics():
    p, d, r = roles()
    r.metrics_error, r.nulls = "connection refused", True
    r.logs = [_decode_leg_failed("2026-01-20 09:59:30")]
    return [_idle(p, num_prefill_bootstrap_queue_reqs=1), _idle(d), r], {}


@scenario("near-router-single-reset-prefill-bootstrap-serving", "healthy", _SMG831,
          "one pooled keep-alive connection to the decode reset (one 'Decode request failed ... error sending "
          "request') while both roles serve: the prefill's bootstrap queue holds a request for a moment as it always "
          "does under load, and tokens move; a reset's note, healthy (router line written from SMG's source)",
          opened="2026-03-20", must_not=("unexplained", "router-no-healthy-workers", "kv-transfer-failure"))
def _single_reset_serving():
    p, d, _ = roles()
    p.gauges["num_prefill_bootstrap_queue_reqs"] = 1
    r = _router({PREFILL: 2, DECODE: 24}, 30)
    r.logs = [_decode_leg_failed("2026-01-20 09:59:30")]
    return [p, d, r], {}


if __name__ == "__main__":
    for path in write(SCENARIOS):
        print(path)
