"""The output-fidelity probe: fixed greedy prompts asked of every decode instance and DP rank.

Each prompt goes the way the router sends a PD request: the same ``/generate`` body, with one bootstrap room,
to a prefill and to the decode under test at once (the decode pulls the prompt's KV cache from that prefill),
so the answer passes through a real KV transfer. Greedy (temperature 0, a seed), ``return_logprob``; the
answer's ``output_ids`` and ``meta_info.output_token_logprobs`` (``[logprob, token_id, text]`` items, sglang
0.5.23 managers/tokenizer_manager.py:2647-2668, 3098-3110) are the evidence. The model and tokenizer come from
the decode's ``/model_info`` (entrypoints/http_server.py:812-822), so a baseline is never compared across them.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from pathlib import Path

from opsbot.bundle import Bundle, Fidelity, FidelityBaseline, Trigger, utcnow
from opsbot.collect.probe import probe
from opsbot.collect.transport import Transport, TransportPool
from opsbot.inventory import Cluster, Inventory, Role
from opsbot.parse.fidelity import (
    MAX_NEW_TOKENS,
    PROMPTS,
    SEED,
    Answer,
    Baseline,
    build_baseline,
    compare,
    refusal,
    unjudged,
)
from opsbot.settings import Settings

CONCURRENCY = 8


class FidelityError(RuntimeError):
    """The run cannot start: no decode, no prefill to pair it with, a server that does not say its model."""


def pairs(cl: Cluster) -> list[tuple[Role, Role, int | None]]:
    """(decode, prefill, dp_rank) for every decode instance and rank; the prefill is the cluster's first that
    the inventory gives a bootstrap port."""
    prefill = next((r for r in cl.roles if r.role == "prefill" and r.bootstrap_port and r.api_base), None)
    decodes = [r for r in cl.roles if r.role == "decode" and r.api_base]
    if not decodes:
        raise FidelityError("the cluster has no decode role with a health_url or api_url to ask")
    if prefill is None:
        raise FidelityError("no prefill role with bootstrap_port: in the inventory; the fidelity probe pairs each "
                            "decode with a prefill as the router does")
    return [(d, prefill, rank if d.dp_size > 1 else None) for d in decodes for rank in range(d.dp_size)]


def _body(prompt: str, bootstrap: tuple[str, int], room: int) -> dict:
    return {"text": prompt, "sampling_params": {"temperature": 0.0, "max_new_tokens": MAX_NEW_TOKENS,
                                               "sampling_seed": SEED},
            "bootstrap_host": bootstrap[0], "bootstrap_port": bootstrap[1], "bootstrap_room": room}


def read_answer(text: str) -> tuple[tuple[int, ...], tuple[float, ...] | None]:
    """``output_ids`` and the logprobs of a ``/generate`` answer; ValueError when it holds no token ids."""
    data = json.loads(text)
    ids = data.get("output_ids") if isinstance(data, dict) else None
    if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
        raise ValueError(f"no output_ids in the answer: {text.strip()[:120]!r}")
    items = (data.get("meta_info") or {}).get("output_token_logprobs")
    logprobs = None
    if isinstance(items, list) and len(items) == len(ids) and all(isinstance(i, list) and i for i in items):
        logprobs = tuple(float(i[0]) for i in items)
    return tuple(ids), logprobs


async def ask(decode: Role, prefill: Role, rank: int | None, prompt_id: str, prompt: str,
              transports: dict[str, Transport], bootstrap: tuple[str, int], timeout_s: float) -> Answer:
    """One prompt through ``prefill`` -> ``decode`` (pinned to ``rank``); an ``Answer`` with its error, never raises."""
    room = random.randrange(1 << 62)
    body = _body(prompt, bootstrap, room)
    decode_body = body | {"return_logprob": True} | ({"routed_dp_rank": rank} if rank is not None else {})
    pd, dd = transports[prefill.node], transports[decode.node]
    p, d = await asyncio.gather(
        pd.http_post(f"{prefill.api_base}/generate", json.dumps(body).encode(), timeout_s, 1 << 16,
                     direct=not prefill.http_via_ssh),
        dd.http_post(f"{decode.api_base}/generate", json.dumps(decode_body).encode(), timeout_s, 1 << 18,
                     direct=not decode.http_via_ssh))
    if d.error or d.status != 200:
        return Answer(prompt_id, decode.key, rank, error=d.error or f"HTTP {d.status}: {d.body.strip()[:160]}")
    if p.error or p.status != 200:
        why = p.error or f"HTTP {p.status}: {p.body.strip()[:120]}"
        return Answer(prompt_id, decode.key, rank, error=f"prefill {prefill.key}: {why}")
    try:
        tokens, logprobs = read_answer(d.body)
    except ValueError as exc:
        return Answer(prompt_id, decode.key, rank, error=str(exc))
    return Answer(prompt_id, decode.key, rank, tokens=tokens, logprobs=logprobs)


async def served_model(decode: Role, transport: Transport, timeout_s: float) -> tuple[str, str]:
    """(model, tokenizer) from the decode's ``/model_info``; FidelityError when it does not say."""
    r = await transport.http_get(f"{decode.api_base}/model_info", timeout_s, 1 << 16, direct=not decode.http_via_ssh)
    try:
        info = json.loads(r.body) if r.status == 200 else {}
    except ValueError:
        info = {}
    model = info.get("model_path") if isinstance(info, dict) else None
    if not isinstance(model, str):
        raise FidelityError(f"{decode.key}: /model_info did not name the model ({r.error or f'HTTP {r.status}'})")
    tokenizer = info.get("tokenizer_path")
    return model, tokenizer if isinstance(tokenizer, str) else model


async def ask_all(cl: Cluster, pool: TransportPool, settings: Settings, repeats: int = 1) -> tuple[list[Answer], str, str]:
    """Every prompt of every decode instance and rank, ``repeats`` times; and the served model and tokenizer."""
    targets = pairs(cl)
    transports: dict[str, Transport] = {n: await pool.get(cl.node(n)) for n in {r.node for d, p, _ in targets for r in (d, p)}}
    first = targets[0][0]
    model, tokenizer = await served_model(first, transports[first.node], settings.http_timeout_s)
    prefill = targets[0][1]
    bootstrap = (cl.node(prefill.node).address, prefill.bootstrap_port or 0)
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(d: Role, p: Role, rank: int | None, pid: str, text: str) -> Answer:
        async with gate:
            return await ask(d, p, rank, pid, text, transports, bootstrap, settings.canary_deadline_s)

    jobs = [one(d, p, rank, pid, text) for _ in range(repeats) for d, p, rank in targets for pid, text in PROMPTS]
    return list(await asyncio.gather(*jobs)), model, tokenizer


async def record(inventory: Inventory, *, cluster: str | None, settings: Settings, repeats: int = 3) -> Baseline:
    """Ask every prompt ``repeats`` times of every instance and rank and build the baseline from the answers."""
    name, cl = inventory.cluster(cluster)
    async with TransportPool(settings) as pool:
        answers, model, tokenizer = await ask_all(cl, pool, settings, repeats)
    return build_baseline(answers, id=uuid.uuid4().hex[:12], recorded_at=utcnow(), model=model, tokenizer=tokenizer,
                          cluster=name)


async def judge(inventory: Inventory, *, cluster: str | None, settings: Settings, baseline: Baseline | None,
                after_deploy: str | None = None, pool: TransportPool | None = None) -> Fidelity:
    """One fidelity run compared with ``baseline``; refused (never compared) when it is of another model."""
    _name, cl = inventory.cluster(cluster)
    own = pool is None
    pool = pool or TransportPool(settings)
    try:
        answers, model, tokenizer = await ask_all(cl, pool, settings)
    finally:
        if own:
            await pool.close()
    head = FidelityBaseline(id=baseline.id, recorded_at=baseline.recorded_at, model=baseline.model,
                            tokenizer=baseline.tokenizer) if baseline else None
    if baseline is None:
        return Fidelity(baseline=None, cases=unjudged(answers), after_deploy=after_deploy,
                        refused="no baseline recorded: run `opsbot fidelity record` after a deploy that passed its checks")
    why = refusal(baseline, model, tokenizer)
    if why:
        return Fidelity(baseline=head, cases=unjudged(answers), refused=why, after_deploy=after_deploy)
    return Fidelity(baseline=head, cases=compare(baseline, answers), refused=None, after_deploy=after_deploy)


async def fidelity_bundle(inventory: Inventory, *, cluster: str | None, settings: Settings, trigger: Trigger,
                          baseline: Baseline | None, after_deploy: str | None = None) -> Bundle:
    """A fidelity run and a probe of every role: one bundle with a ``fidelity`` section (diagnosed as any)."""
    name, _cl = inventory.cluster(cluster)
    async with TransportPool(settings) as pool:
        started = utcnow()
        fidelity = await judge(inventory, cluster=name, settings=settings, baseline=baseline,
                               after_deploy=after_deploy, pool=pool)
        bundle = await probe(inventory, cluster=name, trigger=trigger, settings=settings, pool=pool)
    bundle.fidelity = fidelity
    bundle.started_at = started
    return bundle


def baseline_path(settings: Settings, cluster: str) -> Path:
    return settings.data_dir / "fidelity" / f"{cluster}.json"


def load_baseline(path: Path) -> Baseline | None:
    """The baseline in ``path``; None when none was recorded; ValueError when the file is not one."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        return Baseline.model_validate_json(text)
    except ValueError as exc:
        raise ValueError(f"{path}: not a fidelity baseline: {str(exc).splitlines()[0]}") from exc


def save_baseline(path: Path, baseline: Baseline) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(baseline.model_dump_json(indent=1), encoding="utf-8")
    tmp.replace(path)
