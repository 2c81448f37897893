"""The canary: one short real completion through the router on every probe.

Neither SGLang's ``/health`` nor the router's ``/health_generate`` moves KV from prefill to decode
(both use a fake bootstrap; with DP attention ``/health`` reaches only DP rank 0), so a real request
is the only end-to-end PD check (reference/sglang.md §2.1, §8). It streams, so the first event
gives the time to first token.
"""

from __future__ import annotations

import time

from opsbot.bundle import Canary
from opsbot.collect.openai import BODY_CAP, Router, served_models, sse_text
from opsbot.collect.transport import Transport
from opsbot.inventory import Cluster, Role

CANARY_PROMPT = "Reply with the single word OK."


async def send_canary(cluster: Cluster, role: Role, transport: Transport, deadline_s: float) -> Canary:
    """One short streamed completion through the router ``role``: TTFT, total time, tokens, the answer."""
    router = Router(transport, role, deadline_s)
    t0 = time.monotonic()
    model = cluster.model or next(iter(await served_models(router)), "default")
    body = {"model": model, "prompt": CANARY_PROMPT, "max_tokens": 8, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    r = await router.post("/v1/completions", body, max(0.1, deadline_s - (time.monotonic() - t0)))
    endpoint = router.base + "/v1/completions"
    total = round((time.monotonic() - t0) * 1000, 1)
    if r.error:
        return Canary(ok=False, error=r.error, elapsed_ms=total, endpoint=endpoint, model=model, status=None)
    text, tokens = sse_text(r.body)
    error = None
    if r.status != 200:
        error = f"HTTP {r.status}: {r.body.strip()[:200]}"
    elif not text:
        error = f"no completion in the answer: {r.body.strip()[:120]!r}"
    ttft = None if r.first_byte_ms is None else round(r.first_byte_ms + (total - r.elapsed_ms), 1)
    return Canary(ok=error is None, error=error, elapsed_ms=total, endpoint=endpoint, model=model, status=r.status,
                  ttft_ms=ttft if text else None, total_ms=total, tokens=tokens, body=r.body[:BODY_CAP])
