"""The per-rank canary: one short request pinned to each DP-attention rank through the role's own server.

With DP attention one role is N scheduler ranks behind one HTTP server, and ``/health`` reaches DP rank 0
only (reference/sglang.md §8). SGLang's own start-up warmup reaches every rank the same way this does: one
``/generate`` per rank with ``routed_dp_rank`` and a fake bootstrap host, so a PD role answers it without a
peer (sglang 0.5.23 entrypoints/http_server.py:2330-2341 ``_send_disaggregation_warmup_requests``;
``FAKE_BOOTSTRAP_HOST`` disaggregation/utils.py:53; ``routed_dp_rank`` managers/io_struct.py:298, checked
against the rank count in tokenizer_manager.py:915-924). A rank that does not answer within the deadline
while its siblings do is stuck.
"""

from __future__ import annotations

import asyncio
import json
import random
import time

from opsbot.bundle import Canary, RankEvidence
from opsbot.collect.openai import BODY_CAP
from opsbot.collect.transport import Transport
from opsbot.inventory import Role

FAKE_BOOTSTRAP_HOST = "2.2.2.2"  # sglang 0.5.23 srt/disaggregation/utils.py:53
ROOM_SPACE = 1 << 62


def canary_body(role: Role, dp_rank: int) -> dict:
    """The warmup's request, pinned to ``dp_rank``; its bootstrap room is random but of the rank's residue."""
    body: dict = {"input_ids": [10, 11, 12, 13], "routed_dp_rank": dp_rank,
                  "sampling_params": {"temperature": 0.0, "max_new_tokens": 8, "ignore_eos": True}}
    if role.role in ("prefill", "decode"):
        room = random.randrange(ROOM_SPACE) // role.dp_size * role.dp_size + dp_rank
        body |= {"bootstrap_host": FAKE_BOOTSTRAP_HOST, "bootstrap_room": room}
    return body


def refusal(status: int | None, body: str) -> str | None:
    """Why the server refuses the pin itself (an SGLang without ``routed_dp_rank``: FastAPI's 422 naming the
    field, or a 400 saying so), else None. An out-of-range rank is refused the same way: the inventory's
    dp_size is then more than the server runs."""
    if status not in (400, 422) or "routed_dp_rank" not in body:
        return None
    return f"the server refuses routed_dp_rank (HTTP {status}: {body.strip()[:160]})"


async def send_rank_canary(role: Role, transport: Transport, dp_rank: int, deadline_s: float) -> Canary:
    """One pinned ``/generate``: its status, time and tokens; a refusal of the pin is ``skipped``."""
    endpoint = f"{role.api_base}/generate"
    t0 = time.monotonic()
    r = await transport.http_post(endpoint, json.dumps(canary_body(role, dp_rank)).encode(), deadline_s,
                                  BODY_CAP * 4, direct=not role.http_via_ssh)
    total = round((time.monotonic() - t0) * 1000, 1)
    if r.error:
        return Canary(ok=False, error=r.error, elapsed_ms=total, endpoint=endpoint, status=None, total_ms=total)
    skipped = refusal(r.status, r.body)
    tokens = None
    try:
        ids = json.loads(r.body).get("output_ids")
        tokens = len(ids) if isinstance(ids, list) else None
    except (ValueError, AttributeError):
        pass
    error = skipped or (None if r.status == 200 else f"HTTP {r.status}: {r.body.strip()[:200]}")
    return Canary(ok=error is None, error=error, elapsed_ms=total, endpoint=endpoint, status=r.status, total_ms=total,
                  tokens=tokens, body=r.body[:BODY_CAP], skipped=skipped)


async def rank_canaries(role: Role, transport: Transport, deadline_s: float) -> list[RankEvidence]:
    """Every rank's canary at once; when the server refuses the pin, every rank's is skipped with that reason
    (the router's canary is sent anyway)."""
    async def one(rank: int) -> Canary:
        try:
            return await asyncio.wait_for(send_rank_canary(role, transport, rank, deadline_s), deadline_s + 1)
        except TimeoutError:
            return Canary(ok=False, error=f"no answer within the rank canary deadline of {deadline_s:g} s",
                          elapsed_ms=round(deadline_s * 1000, 1), status=None)
        except Exception as exc:  # one rank's odd failure must not sink the others
            return Canary(ok=False, error=f"{type(exc).__name__}: {exc}", status=None)

    canaries = await asyncio.gather(*(one(rank) for rank in range(role.dp_size)))
    reason = next((c.skipped for c in canaries if c.skipped), None)
    if reason:
        canaries = [Canary(ok=False, error=reason, skipped=reason, endpoint=c.endpoint) for c in canaries]
    return [RankEvidence(dp_rank=rank, canary=c) for rank, c in enumerate(canaries)]
