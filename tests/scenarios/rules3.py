"""Bundles added by issue 24's third round of rules (2026-12-03): a router whose connections to its workers reset,
and a PD decode whose grammar rejects the tokens it is handed. Written looking at ``dev/`` only; each bundle's part
is its thread's (``split.py``): a thread whose hash says ``test/`` was neither written nor read for a rule.

Thread lines are kept verbatim (``raw:`` keeps the thread's own prefix); the rest (units, metrics, batch lines,
/health) is what that SGLang and router version print, as ``deployments.py`` writes them. Bundles whose source is
a router's own code, not a thread, say so in their label: no public thread opened before the cut-off with the
router's reset lines verbatim was found in the index. Run ``python -m tests.scenarios.rules3`` to rewrite them.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.scenarios.compose import Writer, register
from tests.scenarios.deployments import recovered, roles
from tests.scenarios.split import write

SCENARIOS: dict[str, Callable[[], dict]] = {}


def scenario(name: str, expected: str, source: str, note: str, opened: str | None = None,
             also: tuple[str, ...] = (), must_not: tuple[str, ...] = ()) -> Callable[[Writer], Callable[[], dict]]:
    label = {"expected": expected, "also": list(also), "must_not": list(must_not), "source": source, "note": note}
    return register(SCENARIOS, "rules3", name, label | ({"opened": opened} if opened is not None else {}))


_RESTART_CLASSES = ("kv-transfer-failure", "decode-wedged", "prefill-wedged", "config-crashloop", "scheduler-watchdog")


# --- (2) a grammar that rejects the server's own tokens; a client's schema that does not compile ---------------

@scenario("pd-decode-spec-grammar-abort-json-object", "any-finding",
          "https://github.com/sgl-project/sglang/issues/25388",
          "GLM 5.1, PD + MTP (NEXTN, Spec V2 overlap), xgrammar JSON mode: a speculative token accepted by the decode "
          "path is rejected by the request's grammar matcher; the decode logs 'Grammar accept_token failed ... Tokens "
          "not accepted' and the request ends with finish_reason abort (HTTP 200), while the decode keeps serving "
          "everyone else; a request the server failed, no class of its own, never healthy; no restart",
          opened="2026-05-15", must_not=_RESTART_CLASSES)
def _spec_grammar_abort():
    p, d, r = roles()
    d.logs = d.logs + [
        "Grammar accept_token failed ... with token [73022]: Tokens not accepted: 73022",
        "raw:Accepted tokens: []",
        'raw:Key string: {"type": "object"}',
    ] + d.logs
    return [p, d, r], {}


@scenario("near-client-schema-format-unsupported-0.4.3", "healthy",
          "https://github.com/sgl-project/sglang/pull/1776",
          "a client's json_schema uses a format the grammar backend does not implement (outlines: 'Format email is "
          "not supported'); since the PR the scheduler logs 'skip invalid json schema' and goes on instead of "
          "crashing; a client's own schema at compile time, every other request served: a note, healthy "
          "(SGLang of late 2024, written with the oldest era the corpus models, 0.4.3)",
          opened="2024-10-24", must_not=("unexplained", "config-crashloop", "role-down"))
def _schema_format_unsupported():
    p, d, r = roles("0.4.3", "sgl-router")
    d.logs = [
        'skip invalid json schema: json_schema={"type":"object","properties":{"id":{"type":"string","format":"uuid"},'
        '"name":{"type":"string","minLength":2,"maxLength":50},"age":{"type":"integer","minimum":0,"maximum":120},'
        '"email":{"type":"string","format":"email"},"tags":{"type":"array","items":{"type":"string"},"minItems":1,'
        '"maxItems":5},"role":{"type":"string","enum":["admin","user","guest"]},"settings":{"type":"object",'
        '"properties":{"theme":{"type":"string","enum":["light","dark"]},"notifications":{"type":"boolean"}},'
        '"required":["theme","notifications"],"additionalProperties":false},"joinedAt":{"type":"string","format":'
        '"date"}},"required":["id","name","age","email","tags","role","joinedAt"],"additionalProperties":false,'
        '"$schema":"http://json-schema.org/draft-07/schema#"}, e=NotImplementedError(\'Format email is not supported '
        "by Outlines')",
    ] + d.logs
    return [p, d, r], {}


# --- (1) the router's keep-alive connections to its workers reset -----------------------------------------------
# sglang-router 0.3.2 (smg-project/smg c7f9bf9f5) src/routers/http/pd_router.rs:684 logs a failed decode leg as
# error!(decode_url, error, "Decode request failed"); reqwest 0.12 prints 'error sending request for url (URL)'.
# It has no retry of a stale pooled connection (SMG added send_with_stale_conn_retry in 2026-08, routers/http/
# router.rs:1557-1579, "the dominant producer is a pooled connection the backend closed while idle").
_SRC_032 = ("sglang-router 0.3.2 source (smg-project/smg c7f9bf9f5 src/routers/http/pd_router.rs:684 'Decode request "
            "failed', reqwest 0.12's 'error sending request for url'); model_gateway/src/routers/http/router.rs:1557 "
            "on pooled connections a worker closed")


def _decode_failed(t: str, url: str = "http://10.0.0.2:30000") -> str:
    return (f"raw:{t} ERROR smg::routers::http::pd_router: src/routers/http/pd_router.rs:684: Decode request failed "
            f"decode_url={url} error=error sending request for url ({url}/generate)")


def _answered_502(t: str, rid: str) -> str:
    """The router's response logger on the 502 it answers (src/middleware.rs:349, in its request span)."""
    return (f'raw:{t} ERROR http_request{{method=POST uri=/generate version=HTTP/1.1 request_id="{rid}" status_code=502 '
            f'latency=2114 module="smg"}}: smg::response: src/middleware.rs:349: request failed with server error')


@scenario("near-router-single-keepalive-reset-0.3.2", "healthy", _SRC_032,
          "one request's pooled keep-alive connection to the decode was closed by the worker while idle: the router "
          "logs one 'Decode request failed ... error sending request' and every other request is served, the workers "
          "healthy and moving tokens, the router's gauges say every worker is healthy: a note, healthy",
          must_not=("router-no-healthy-workers", "unexplained"))
def _single_reset():
    p, d, r = roles()
    r.logs = [_decode_failed("2026-01-20 09:59:30"), _answered_502("2026-01-20 09:59:30", "6f1c0a")]
    return [p, d, r], {}


@scenario("router-keepalive-resets-decode-restarted-0.3.2", "router-no-healthy-workers", _SRC_032,
          "the decode worker restarted a few minutes ago (its crash is in the journal before its current run, it serves "
          "again); the router's pooled connections to it kept resetting while it was down and coming back: 'Decode "
          "request failed ... error sending request' again and again, every such request failed with 502 while the "
          "router's health gauge had not yet caught up; repeated transport failures to a worker, never healthy "
          "(written from the router's source: no thread with these lines before the cut-off was found)",
          must_not=("healthy", "kv-transfer-failure", "config-crashloop"))
def _resets_while_decode_restarted():
    p, d, r = roles()
    d.logs = ["systemd: sglang-dsv4-decode.service: Main process exited, code=killed, status=9/KILL",
              "systemd: sglang-dsv4-decode.service: Failed with result 'signal'.",
              "systemd: sglang-dsv4-decode.service: Scheduled restart job, restart counter is at 1."]
    d.restarts = 0
    d = recovered(d)
    d.logs = list(roles()[1].logs)
    r.logs = [line for s in (1, 4, 9, 15) for line in (_decode_failed(f"2026-01-20 09:59:{s:02d}"),
                                                       _answered_502(f"2026-01-20 09:59:{s:02d}", f"9a{s:02d}"))]
    return [p, d, r], {}


if __name__ == "__main__":
    for path in write(SCENARIOS):
        print(path)
