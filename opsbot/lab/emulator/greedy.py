"""Greedy decoding as the emulator fakes it: the same prompt gives the same token ids, every time.

A real greedy decode (temperature 0) of one prompt repeats its tokens, while its logprobs wobble in
the last digits with the batch it ran in (batched inference is not bit-for-bit deterministic). The
emulator does the same: ids are a function of the prompt and the seed, logprobs that function plus a
little noise. ``output-corruption`` makes a request decode from a corrupted KV cache: for prompts the
corruption hits (about one in three, fixed by the prompt), the tokens change a few positions in and
their logprobs fall, as a model reading garbage context does.
"""

from __future__ import annotations

import hashlib
import random

VOCAB = 129_280  # DeepSeek-V4's vocabulary size
LOGPROB_NOISE = 2e-3  # batch-to-batch wobble of a greedy token's logprob
CORRUPT_FROM = 3  # the first corrupted position: the first tokens come from prefill's own logits


def _digest(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:8], "big")


def greedy(prompt: str, max_new: int, seed: int = 0) -> tuple[list[int], list[float]]:
    """The token ids and logprobs a healthy server decodes for ``prompt`` (temperature 0)."""
    ids = [_digest(prompt, seed, i) % VOCAB for i in range(max_new)]
    noise = random.Random()
    logprobs = [-(_digest(prompt, "lp", i) % 1000) / 2000 - noise.uniform(0, LOGPROB_NOISE) for i in range(max_new)]
    return ids, logprobs


def hit_by_corruption(prompt: str) -> bool:
    """Whether a corrupted KV transfer reaches this prompt's request (about one prompt in three)."""
    return _digest(prompt, "kv") % 3 == 0


def corrupted(ids: list[int], logprobs: list[float]) -> tuple[list[int], list[float]]:
    """What a decode reading a corrupted KV cache makes of the same request."""
    out_ids = ids[:CORRUPT_FROM] + [(t * 7 + 11) % VOCAB for t in ids[CORRUPT_FROM:]]
    out_lp = logprobs[:CORRUPT_FROM] + [lp - 2.5 for lp in logprobs[CORRUPT_FROM:]]
    return out_ids, out_lp
