"""The ``ranks.*`` facts of a role under DP attention: which ranks serve and which stopped.

One role is N scheduler ranks behind one HTTP server (``--enable-dp-attention --dp-size N``). A rank that
stops while its siblings serve keeps ``/health`` green (it reaches DP rank 0 only) and the role's summed
token counter moving; only the rank's own series (label ``dp_rank``) and a request pinned to it
(``routed_dp_rank``) show it. Pure: reads a role's evidence, returns plain maps for the runbooks.
"""

from __future__ import annotations

from typing import Any

from opsbot.bundle import Canary, RoleEvidence
from opsbot.parse.metricnames import REALTIME_TOKENS
from opsbot.parse.metrics import RankMetrics, parse_samples

RANK_FACTS = frozenset(
    ["count", "stalled", "progressing", "wedged", "serving", "healthy", "canary_timed_out", "canary_answered", "canary_failed", "canary_skipped", "full", "running", "usage"]
)
# the metric facts the per-rank figures come from (parsing only their families)
RANK_METRICS = frozenset({"num_running_reqs", "num_queue_reqs", "token_usage", REALTIME_TOKENS})
# the mode of realtime_tokens_total that is a role's progress (sglang 0.5.23 scheduler metrics)
PROGRESS_MODE = {"decode": "decode", "prefill": "prefill_compute"}
MIN_WINDOW_S = 2.0  # the counter moves every 40 decode steps: a shorter window proves nothing
KV_FULL = 0.95


def canary_timed_out(canary: Canary) -> bool:
    """No answer within the deadline (as opposed to an answer that was an error)."""
    err = (canary.error or "").lower()
    return canary.status is None and any(w in err for w in ("no answer within", "timed out", "timeout", "deadline"))


def _metric_ranks(ev: RoleEvidence) -> tuple[list[RankMetrics], float | None]:
    if not ev.metrics.ok or not ev.metrics.samples or 'dp_rank="1"' not in ev.metrics.samples[-1].raw:
        return [], None
    try:
        m = parse_samples(ev.metrics.samples, RANK_METRICS)
    except ValueError:
        return [], None
    return m.ranks, m.window_s


def _stalled(rank: RankMetrics, mode: str, window: float | None) -> bool:
    return (window is not None and window >= MIN_WINDOW_S and (rank.running or 0) > 0
            and rank.tokens.get(mode) == 0)


def rank_facts(ev: RoleEvidence) -> dict[str, Any]:
    """``ranks.*`` for one role; empty when it shows one rank or none (no DP attention)."""
    metric_ranks, window = _metric_ranks(ev)
    canaries = {r.dp_rank: r.canary for r in ev.ranks or [] if r.canary is not None}
    ids = sorted({r.dp_rank for r in metric_ranks} | set(canaries) | {r.dp_rank for r in ev.ranks or []})
    if len(ids) < 2:
        return {}
    mode = PROGRESS_MODE.get(ev.role, "decode")
    stalled = [r.dp_rank for r in metric_ranks if _stalled(r, mode, window)]
    progressing = [r.dp_rank for r in metric_ranks if (r.tokens.get(mode) or 0) > 0]
    skipped = [c.skipped for c in canaries.values() if c.skipped]
    sent = {rank: c for rank, c in canaries.items() if not c.skipped and not c.not_awaited}
    timed_out = sorted(rank for rank, c in sent.items() if canary_timed_out(c))
    answered = sorted(rank for rank, c in sent.items() if c.ok)
    failed = sorted(rank for rank, c in sent.items() if not c.ok)
    wedged = sorted(set(stalled) | set(timed_out))
    serving = sorted((set(progressing) | set(answered)) - set(wedged))
    facts: dict[str, Any] = {
        "count": len(ids),
        "stalled": stalled,
        "progressing": progressing,
        "canary_timed_out": timed_out,
        "canary_answered": answered,
        "canary_failed": failed,
        "wedged": wedged,
        "serving": serving,
        "healthy": len(serving),
        "full": [r.dp_rank for r in metric_ranks if (r.token_usage or 0) >= KV_FULL],
        "running": {str(r.dp_rank): r.running for r in metric_ranks if r.running is not None},
        "usage": {str(r.dp_rank): r.token_usage for r in metric_ranks if r.token_usage is not None},
    }
    if skipped:
        facts["canary_skipped"] = skipped[0]
    return facts
