"""Output fidelity, judged: greedy answers to fixed prompts against the baseline of the last good deploy.

Pure functions of a baseline and the answers of one run (spec/probe-bundle-v1.md, ``fidelity``).

The tolerance is the server's own, measured when the baseline is recorded: every prompt is asked
``repeats`` times of every decode instance and rank, and the baseline keeps, per prompt, how many leading
tokens every one of those answers agreed on (``stable``: batched inference may flip a near-tie argmax, after
which greedy continuations differ legitimately) and the largest logprob distance between them over that
prefix (``spread``: the batch-to-batch wobble of the kernels). A later answer diverges when its tokens differ
within the stable prefix, or its logprobs there are further from the baseline's than
``max(LOGPROB_FLOOR, SPREAD_FACTOR * spread)``. A corrupted KV cache changes tokens a few positions in and
drops their logprobs by nats; the wobble is thousandths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from opsbot.bundle import Fidelity, FidelityCase

# The fixed prompts: short, factual, with one natural greedy continuation each.
PROMPTS: tuple[tuple[str, str], ...] = (
    ("capital", "The capital of France is"),
    ("count", "Count from one to ten in words: one, two,"),
    ("code", "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
    ("json", 'Write a JSON object with keys "name" and "age" for Ada Lovelace:'),
    ("translate", "Translate to German: The weather is nice today."),
    ("arith", "Q: What is 17 times 23? A:"),
    ("list", "Three primary colours are"),
    ("define", "In one sentence, a hash table is"),
)
MAX_NEW_TOKENS = 24
SEED = 20261203
LOGPROB_FLOOR = 0.05  # nats: below it nothing counts, whatever the recorded spread
SPREAD_FACTOR = 5.0


class BaselinePrompt(BaseModel):
    tokens: list[int]
    logprobs: list[float] | None = None
    stable: int = Field(description="leading tokens every recorded answer agreed on")
    spread: float = Field(0.0, description="largest logprob distance between recorded answers over the stable prefix")

    @property
    def tolerance(self) -> float:
        return max(LOGPROB_FLOOR, SPREAD_FACTOR * self.spread)


class Baseline(BaseModel):
    """Greedy answers recorded after a deploy that passed its checks, for one model and tokenizer."""

    id: str
    recorded_at: str
    model: str
    tokenizer: str
    cluster: str = ""
    answers: int = Field(0, description="answers recorded per prompt (repeats x instances x ranks)")
    prompts: dict[str, BaselinePrompt]


@dataclass(frozen=True)
class Answer:
    """One greedy answer: ``tokens`` (and ``logprobs``) or the ``error`` that stopped it."""

    prompt_id: str
    instance: str
    dp_rank: int | None
    tokens: tuple[int, ...] = ()
    logprobs: tuple[float, ...] | None = None
    error: str | None = None


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first position where the two differ (a shorter one differs where it ends); None: identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def logprob_distance(a: Sequence[float] | None, b: Sequence[float] | None, upto: int) -> float | None:
    """The largest absolute logprob difference over the first ``upto`` positions (None: no logprobs)."""
    if a is None or b is None:
        return None
    pairs = list(zip(a[:upto], b[:upto]))
    return max((abs(x - y) for x, y in pairs), default=0.0)


def build_baseline(answers: Sequence[Answer], *, id: str, recorded_at: str, model: str, tokenizer: str,
                   cluster: str = "") -> Baseline:
    """The baseline from repeated answers; raises ValueError when a prompt has no answer at all."""
    prompts: dict[str, BaselinePrompt] = {}
    per_prompt = 0
    for prompt_id, _text in PROMPTS:
        got = [a for a in answers if a.prompt_id == prompt_id and a.error is None and a.tokens]
        if not got:
            errors = sorted({a.error or "empty answer" for a in answers if a.prompt_id == prompt_id})
            raise ValueError(f"prompt {prompt_id!r} got no answer to record: {'; '.join(errors) or 'not asked'}")
        ref = got[0]
        stable = len(ref.tokens)
        for a in got[1:]:
            d = first_divergence(ref.tokens, a.tokens)
            stable = min(stable, len(ref.tokens) if d is None else d)
        spreads = [logprob_distance(ref.logprobs, a.logprobs, stable) for a in got[1:]]
        spread = max((s for s in spreads if s is not None), default=0.0)
        prompts[prompt_id] = BaselinePrompt(tokens=list(ref.tokens), logprobs=list(ref.logprobs) if ref.logprobs else None,
                                            stable=stable, spread=spread)
        per_prompt = max(per_prompt, len(got))
    return Baseline(id=id, recorded_at=recorded_at, model=model, tokenizer=tokenizer, cluster=cluster,
                    answers=per_prompt, prompts=prompts)


def refusal(baseline: Baseline, model: str, tokenizer: str) -> str | None:
    """Why this baseline must not be compared with a server running ``model``/``tokenizer``, or None."""
    if baseline.model != model:
        return f"the baseline {baseline.id} was recorded on model {baseline.model!r}; the server runs {model!r}"
    if baseline.tokenizer != tokenizer:
        return (f"the baseline {baseline.id} was recorded with tokenizer {baseline.tokenizer!r}; the server uses "
                f"{tokenizer!r}: token ids are not comparable")
    return None


def compare(baseline: Baseline, answers: Sequence[Answer]) -> list[FidelityCase]:
    """Each answer against its prompt's baseline: first divergence, logprob distance, and whether it diverged."""
    cases = []
    for a in answers:
        base = baseline.prompts.get(a.prompt_id)
        case = FidelityCase(prompt_id=a.prompt_id, instance=a.instance, dp_rank=a.dp_rank, tokens=list(a.tokens),
                            logprobs=list(a.logprobs) if a.logprobs is not None else None, error=a.error)
        if base is None:
            case.error = case.error or f"prompt {a.prompt_id!r} is not in the baseline"
        elif a.error is None:
            case.first_divergence = first_divergence(base.tokens, a.tokens)
            upto = base.stable if case.first_divergence is None else min(base.stable, case.first_divergence)
            case.logprob_distance = logprob_distance(base.logprobs, a.logprobs, upto)
            tokens_off = case.first_divergence is not None and case.first_divergence < base.stable
            logprobs_off = case.logprob_distance is not None and case.logprob_distance > base.tolerance
            case.diverged = tokens_off or logprobs_off
        cases.append(case)
    return cases


def unjudged(answers: Sequence[Answer]) -> list[FidelityCase]:
    """The answers kept as evidence without a judgement (no baseline they may be compared with)."""
    return [FidelityCase(prompt_id=a.prompt_id, instance=a.instance, dp_rank=a.dp_rank, tokens=list(a.tokens),
                         error=a.error) for a in answers]


FIDELITY_FACTS = frozenset(
    ["ran", "refused", "compared", "diverged", "errors", "instances", "diverged_instances", "diverged_cases", "first_divergence", "max_logprob_distance", "baseline", "baseline_model", "after_deploy"]
)


def _where(c: FidelityCase) -> str:
    return c.instance + (f" rank {c.dp_rank}" if c.dp_rank is not None else "")


def fidelity_facts(f: Fidelity | None) -> dict[str, Any]:
    """``fidelity.*``: what the run compared and where it diverged; empty without a run."""
    if f is None:
        return {}
    judged = [c for c in f.cases if c.diverged is not None]
    bad = [c for c in judged if c.diverged]
    facts: dict[str, Any] = {
        "ran": True,
        "compared": len(judged),
        "diverged": len(bad),
        "errors": sum(1 for c in f.cases if c.error),
        "instances": sorted({c.instance for c in f.cases}),
        "diverged_instances": sorted({c.instance for c in bad}),
        "diverged_cases": [f"{_where(c)}: prompt {c.prompt_id} from token {c.first_divergence}"
                           + (f" (logprob distance {c.logprob_distance:.2f})" if c.logprob_distance is not None else "")
                           for c in bad][:8],
    }
    firsts = [c.first_divergence for c in bad if c.first_divergence is not None]
    if firsts:
        facts["first_divergence"] = min(firsts)
    distances = [c.logprob_distance for c in judged if c.logprob_distance is not None]
    if distances:
        facts["max_logprob_distance"] = max(distances)
    if f.refused:
        facts["refused"] = f.refused
    if f.baseline is not None:
        facts["baseline"] = f.baseline.id
        facts["baseline_model"] = f.baseline.model or ""
    deploy = getattr(f, "after_deploy", None)
    if isinstance(deploy, str) and deploy:
        facts["after_deploy"] = deploy
    return facts


def fidelity_record(f: Fidelity) -> dict[str, Any]:
    """What the store keeps of a run for trends (the weekly report's chart): verdict and counts."""
    facts = fidelity_facts(f)
    return {"result": verdict(f), "compared": facts.get("compared", 0), "diverged": facts.get("diverged", 0),
            "errors": facts.get("errors", 0), "refused": bool(f.refused)}


def verdict(f: Fidelity | None) -> float:
    """The exported result: 1 every compared answer matched, 0 some diverged, -1 nothing could be judged
    (refused, every request failed): never read as a pass."""
    facts = fidelity_facts(f)
    if not facts or facts.get("refused") or not facts["compared"]:
        return -1.0
    return 0.0 if facts["diverged"] else 1.0
