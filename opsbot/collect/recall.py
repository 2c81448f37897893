"""The long-context recall probe: needle-in-a-haystack requests through the router's OpenAI API.

``run_recall`` fits every prompt to an exact length in the server's own tokens (``/v1/tokenize``
through the router, else the model's tokenizer when one is installed here), plants a random needle
at each depth among near-miss distractors, and asks at temperature 0 with a bounded answer. At most
``concurrency`` requests are in flight, and the prefill queue is watched beside them (a reading at
most a second old before each request): while it is above ``queue_limit`` nothing is sent, so the
probe never adds to a saturated prefill. Whatever goes wrong with one case (a timeout, garbage, an
unknown model) is that case's ``error``; the run completes. ``recall_bundle`` adds a probe of every
role (with the canary), so the bundle shows whether everything else was healthy.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol

from opsbot.bundle import Bundle, Recall, RecallCase, Trigger, utcnow
from opsbot.collect import haystack
from opsbot.collect.openai import BODY_CAP, Router, served_models
from opsbot.collect.probe import probe
from opsbot.collect.transport import HttpResult, Transport, TransportPool
from opsbot.inventory import Cluster, Inventory, Role
from opsbot.parse.recall import judge, parse_depths, parse_fillers, parse_lengths, short_length
from opsbot.settings import Settings

MAX_FIT_ROUNDS = 8
CHARS_PER_TOKEN = 4.0  # a first guess only; the server's counts decide
SPREAD_UP_TO = 4096  # prompts this short are counted with several pad lengths in one request
DEFAULT_LENGTHS = (1024, 2048, 4096, 8192, 16384)
DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
_QUEUE = re.compile(r"^sglang[:_]num_queue_reqs(?:\{[^}]*\})?\s+(\S+)", re.M)

RecallProgress = Callable[[str, RecallCase | None], None]  # ("case", case) | ("waiting", None) | ("note", None)


@dataclass(frozen=True)
class RecallPlan:
    """What to ask: the grid (length × depth × filler) and how gently to ask it."""

    lengths: tuple[int, ...] = DEFAULT_LENGTHS
    depths: tuple[float, ...] = DEFAULT_DEPTHS
    fillers: tuple[str, ...] = ("prose",)
    distractors: int = 3
    max_tokens: int = 16
    concurrency: int = 4
    queue_limit: float = 8
    queue_wait_s: float = 300.0
    request_timeout_s: float = 600.0
    model: str | None = None

    def cases(self) -> int:
        return len(self.lengths) * len(self.depths) * len(self.fillers)

    def cost_tokens(self) -> int:
        """Prompt tokens the grid sends: what it costs the prefill."""
        return sum(self.lengths) * len(self.depths) * len(self.fillers)


class RecallUnavailable(RuntimeError):
    """Nothing can be sent: no router, no tokenizer, or a model the router does not serve."""


class Tokenizer(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def max_model_len(self) -> int | None: ...

    async def count(self, texts: list[str]) -> list[int]: ...


@dataclass
class ServerTokenizer:
    """SGLang's ``POST /v1/tokenize`` (TokenizeRequest: model, prompt str|list, add_special_tokens) through the router."""

    transport: Transport
    url: str
    model: str | None  # None: the server's default (the name is not known yet)
    direct: bool
    timeout_s: float
    name: str = ""
    max_model_len: int | None = None

    def __post_init__(self) -> None:
        self.name = f"server: POST {self.url}"

    async def count(self, texts: list[str]) -> list[int]:
        named = {"model": self.model} if self.model else {}
        body = json.dumps({**named, "prompt": texts, "add_special_tokens": True}).encode()
        r = await self.transport.http_post(self.url, body, self.timeout_s, 64 * 1024 * 1024, direct=self.direct)
        if r.error or r.status != 200:
            raise RecallUnavailable(f"tokenizer: {r.error or f'HTTP {r.status}: {r.body[:200]}'}")
        try:
            data = json.loads(r.body)
            counts = data["count"]
        except (ValueError, KeyError, TypeError) as exc:
            raise RecallUnavailable(f"tokenizer: not a tokenize answer: {r.body[:120]!r}") from exc
        if isinstance(data.get("max_model_len"), int) and data["max_model_len"] > 0:
            self.max_model_len = data["max_model_len"]
        if not isinstance(counts, list) or len(counts) != len(texts) or not all(isinstance(c, int) for c in counts):
            raise RecallUnavailable(f"tokenizer: counts do not match the prompts: {str(counts)[:120]}")
        return counts


@dataclass
class LocalTokenizer:
    """The model's own tokenizer from the Hugging Face cache, when ``transformers`` and the files are here."""

    model: str | None
    name: str = ""
    max_model_len: int | None = None
    _tok: object = None

    def __post_init__(self) -> None:
        if not self.model:
            raise RecallUnavailable("no model name to load a local tokenizer for")
        try:
            from transformers import AutoTokenizer  # optional: not a dependency of opsbot
        except ImportError as exc:
            raise RecallUnavailable("no tokenize endpoint and no local tokenizer (transformers is not installed)") from exc
        try:
            self._tok = AutoTokenizer.from_pretrained(self.model, local_files_only=True)
        except Exception as exc:  # any loader failure means: not installed here
            raise RecallUnavailable(f"no tokenize endpoint and no local tokenizer for {self.model}: {exc}") from exc
        self.name = f"local: transformers AutoTokenizer {self.model}"
        length = getattr(self._tok, "model_max_length", None)
        self.max_model_len = length if isinstance(length, int) and length < 1 << 40 else None

    async def count(self, texts: list[str]) -> list[int]:
        return [len(ids) for ids in self._tok(texts, add_special_tokens=True)["input_ids"]]  # type: ignore[operator]


@dataclass
class Fitted:
    """One prompt fitted to its length, with what judging its answer needs."""

    tokens: int
    depth: float
    filler: str
    needle: haystack.Needle
    distractors: int
    prompt: str
    error: str | None = None


async def choose_model(router: Router, wanted: str | None) -> str:
    """The model to ask: ``wanted`` when the router serves it, else the router's first; raises when unserved."""
    models = await served_models(router)
    if wanted is None:
        if not models:
            raise RecallUnavailable(f"GET {router.base}/v1/models lists no model; name one (--model or model: in the inventory)")
        return models[0]
    if models and wanted not in models:
        raise RecallUnavailable(f"the router does not serve model {wanted!r} (it serves: {', '.join(models)})")
    return wanted


@dataclass
class FirstThatAnswers:
    """The server's tokenize endpoint; when its first answer fails, the model's local tokenizer instead.

    Decided on the first real count, so a working endpoint costs no extra round trip."""

    server: ServerTokenizer
    chosen: Tokenizer | None = None

    @property
    def name(self) -> str:
        return self.chosen.name if self.chosen else self.server.name

    @property
    def max_model_len(self) -> int | None:
        return self.chosen.max_model_len if self.chosen else None

    async def count(self, texts: list[str]) -> list[int]:
        if self.chosen is not None:
            return await self.chosen.count(texts)
        try:
            counts = await self.server.count(texts)
            self.chosen = self.server
            return counts
        except RecallUnavailable as unreachable:
            try:
                self.chosen = LocalTokenizer(self.server.model)
            except RecallUnavailable as exc:
                raise RecallUnavailable(f"{unreachable}; {exc}") from exc
            return await self.chosen.count(texts)


def tokenizer_for(router: Router, model: str | None) -> FirstThatAnswers:
    """The server's tokenize endpoint when it answers, else the model's local tokenizer."""
    return FirstThatAnswers(ServerTokenizer(router.transport, router.base + "/v1/tokenize", model,
                                            not router.role.http_via_ssh, router.timeout_s * 6))


async def _fit(tok: Tokenizer, target: int, make: Callable[[int, int], str], per_line: float,
               lines: int, pad: int = 0) -> tuple[int, int, int]:
    """Adjust whole lines, then pad words, until the prompt counts exactly ``target`` tokens.

    Returns (lines, pad words, the count reached); the count differs from ``target`` only when
    ``MAX_FIT_ROUNDS`` were not enough."""
    n = 0
    for _ in range(MAX_FIT_ROUNDS):
        # a short prompt is counted with a few pad lengths around the guess at once: one round trip fewer
        pads = [pad, *(p for p in range(pad - 3, pad + 5) if p >= 0 and p != pad)] if target <= SPREAD_UP_TO else [pad]
        counts = await tok.count([make(lines, p) for p in pads])
        hit = next((p for p, c in zip(pads, counts) if c == target), None)
        if hit is not None:
            return lines, hit, target
        n = counts[0]
        diff = target - n
        if diff == 0:
            break
        if abs(diff) > 2 * per_line + 4 or pad + diff < 0:
            step = math.ceil(abs(diff) / per_line) if diff < 0 else max(1, int(diff / per_line) - 1)
            lines = max(1, lines + (step if diff > 0 else -step))
            pad = 0
        else:
            pad += diff
    return lines, pad, n


async def fit_group(tok: Tokenizer, tokens: int, filler: str, depths: tuple[float, ...], distractors: int,
                    rng: random.Random) -> list[Fitted]:
    """Every depth's prompt for one (length, filler), as a list."""
    return [case async for case in fit_prompts(tok, tokens, filler, depths, distractors, rng)]


async def fit_prompts(tok: Tokenizer, tokens: int, filler: str, depths: tuple[float, ...], distractors: int,
                      rng: random.Random) -> AsyncIterator[Fitted]:
    """Every depth's prompt for one (length, filler): one needle, its near misses, exactly ``tokens`` long.

    The lines and pad are fitted once (needle at the first depth, which is yielded at once); moving
    the needle changes the count only where tokens merge across lines, and such a prompt is fitted
    again on its own."""
    target = haystack.needle(rng)
    near = [(rng.uniform(0.05, 0.95), d) for d in haystack.near_misses(target, distractors, rng)]
    pool = haystack.filler(filler, 64, rng)
    fixed_text = haystack.compose([], 0.5, target, near)
    guess = max(1, int((tokens - len(fixed_text) / CHARS_PER_TOKEN) * len(pool) * CHARS_PER_TOKEN
                       / max(1, len("\n".join(pool)))))
    while len(pool) < guess * 2 + 64:
        pool += haystack.filler(filler, len(pool), rng)
    pad_source = haystack.pad_words(4096, rng).split()

    def make(depth: float) -> Callable[[int, int], str]:
        return lambda n, pad: haystack.compose(pool[:n], depth, target, near, " ".join(pad_source[:pad]))

    # one round trip for the line size and a first guess from the characters; lines, then pad words
    sample, guessed = await tok.count(["\n".join(pool[:64]), make(depths[0])(guess, 0)])
    per_line = max(1.0, sample / 64)
    more = math.floor((tokens - guessed) / per_line)
    lines = max(1, guess + more)
    pad = max(0, round(tokens - guessed - more * per_line))
    while len(pool) < lines * 2 + 64:
        pool += haystack.filler(filler, len(pool), rng)
    lines, pad, first = await _fit(tok, tokens, make(depths[0]), per_line, lines, pad)
    error = None if first == tokens else f"could not fit the prompt to {tokens} tokens (got {first})"
    yield Fitted(tokens, depths[0], filler, target, distractors, make(depths[0])(lines, pad), error)
    counts = await tok.count([make(d)(lines, pad) for d in depths[1:]]) if depths[1:] else []
    for depth, count in zip(depths[1:], counts):
        n_lines, n_pad = lines, pad
        if count != tokens:
            n_lines, n_pad, count = await _fit(tok, tokens, make(depth), per_line, lines, pad)
        error = None if count == tokens else f"could not fit the prompt to {tokens} tokens (got {count})"
        yield Fitted(tokens, depth, filler, target, distractors, make(depth)(n_lines, n_pad), error)


def queue_depth(raw: str) -> float | None:
    """``sglang:num_queue_reqs`` from a ``/metrics`` body (max over series), or None when absent."""
    values = []
    for m in _QUEUE.finditer(raw):
        try:
            values.append(float(m[1]))
        except ValueError:
            continue
    return max(values) if values else None


@dataclass
class QueueGate:
    """Watches the prefill queue (a reading every ``every_s``) and holds each request while it is above the limit.

    The reading runs beside the requests, so a request never waits for it unless the queue is full."""

    transports: dict[str, Transport]
    prefills: list[Role]
    limit: float
    wait_s: float
    timeout_s: float
    on_wait: Callable[[float], None] = lambda _q: None
    every_s: float = 1.0
    _depth: float | None = None
    _read: asyncio.Event = field(default_factory=asyncio.Event)

    async def read(self) -> float | None:
        """The queue now: ``sglang:num_queue_reqs`` summed over the prefill roles; None when unreadable."""
        depths = []
        for role in self.prefills:
            if not role.metrics_url:
                continue
            r = await self.transports[role.node].http_get(role.metrics_url, self.timeout_s,
                                                          direct=not role.http_via_ssh)
            depth = queue_depth(r.body) if r.status == 200 else None
            if depth is not None:
                depths.append(depth)
        return sum(depths) if depths else None

    async def watch(self) -> None:
        """Keep the reading fresh until cancelled."""
        while True:
            self._depth = await self.read()
            self._read.set()
            await asyncio.sleep(self.every_s)

    async def clear(self) -> str | None:
        """None once the queue is at or below the limit (or unreadable); else why nothing was sent."""
        await self._read.wait()
        deadline = time.monotonic() + self.wait_s
        while (depth := self._depth) is not None and depth > self.limit:
            if time.monotonic() >= deadline:
                return (f"not sent: the prefill queue stayed above {self.limit:g} requests ({depth:g}) "
                        f"for {self.wait_s:g} s")
            self.on_wait(depth)
            await asyncio.sleep(min(self.every_s, max(0.05, deadline - time.monotonic())))
        return None


def _completion_text(r: HttpResult) -> tuple[str | None, str | None, int | None]:
    """(answer, error, prompt tokens the server counted) of a ``/v1/completions`` answer."""
    if r.error:
        return None, r.error, None
    if r.status != 200:
        return None, f"HTTP {r.status}: {r.body.strip()[:200]}", None
    try:
        data = json.loads(r.body)
        text = data["choices"][0]["text"]
        if not isinstance(text, str):
            raise TypeError("text is not a string")
    except (ValueError, KeyError, IndexError, TypeError):
        return None, f"not a completion: {r.body.strip()[:120]!r}", None
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    prompt_tokens = usage.get("prompt_tokens")
    return text, None, prompt_tokens if isinstance(prompt_tokens, int) else None


async def ask(router: Router, model: str, case: Fitted, plan: RecallPlan) -> RecallCase:
    body = {"model": model, "prompt": case.prompt, "max_tokens": plan.max_tokens, "temperature": 0}
    r = await router.post("/v1/completions", body, plan.request_timeout_s)
    answer, error, counted = _completion_text(r)
    extra = {"server_tokens": counted} if counted is not None and counted != case.tokens else {}
    return RecallCase(
        tokens=case.tokens, depth=case.depth, filler=case.filler, distractors=case.distractors,
        needle=case.needle.value, found=None if error else judge(answer or "", case.needle.value),
        answer=None if answer is None else answer[:BODY_CAP], elapsed_ms=r.elapsed_ms, error=error, **extra,
    )


def _failed(case: Fitted, error: str) -> RecallCase:
    return RecallCase(tokens=case.tokens, depth=case.depth, filler=case.filler, distractors=case.distractors,
                      needle=case.needle.value, found=None, error=error)


def _unsent(plan: RecallPlan, lengths: tuple[int, ...], error: str) -> list[RecallCase]:
    return [RecallCase(tokens=n, depth=d, filler=f, distractors=plan.distractors, found=None, error=error)
            for n in lengths for f in plan.fillers for d in plan.depths]


async def run_recall(cluster: Cluster, transports: dict[str, Transport], plan: RecallPlan, *, timeout_s: float,
                     progress: RecallProgress | None = None) -> Recall:
    """The grid through the cluster's router; every case is in the result, sent or not.

    Prompts are fitted (shortest length first) while earlier ones are being answered, and the
    prefill queue is watched beside them, so the server's prefill is what the run waits for."""
    report = progress or (lambda _what, _case: None)
    started = utcnow()
    role = cluster.router()
    if role is None:
        error = "the inventory gives this cluster no router with an API URL (api_url or health_url)"
        return Recall(model=plan.model, endpoint="", started_at=started, cases=_unsent(plan, plan.lengths, error))
    router = Router(transports[role.node], role, timeout_s)
    endpoint = router.base + "/v1/completions"
    gate = QueueGate(transports, [r for r in cluster.roles if r.role == "prefill"], plan.queue_limit,
                     plan.queue_wait_s, timeout_s, on_wait=lambda _q: report("waiting", None))
    wanted = plan.model or cluster.model
    watching = asyncio.create_task(gate.watch())
    looked_up = asyncio.create_task(choose_model(router, wanted))  # beside the first prompts' fitting
    tok = tokenizer_for(router, wanted)
    recall = Recall(model=wanted, endpoint=endpoint, started_at=started)
    grid = asyncio.create_task(_send_grid(recall, router, looked_up, tok, gate, plan, report))
    try:
        try:
            recall.model = await looked_up
        except RecallUnavailable as exc:
            grid.cancel()
            with contextlib.suppress(asyncio.CancelledError, RecallUnavailable):
                await grid
            return Recall(model=wanted, endpoint=endpoint, started_at=started,
                          cases=_unsent(plan, plan.lengths, str(exc)), notes=[str(exc)])
        await grid
        recall.tokenizer = tok.name if tok.chosen is not None else None
    finally:
        watching.cancel()
    recall.cases.sort(key=lambda c: (c.tokens, c.filler, c.depth))
    return recall


async def _send_grid(recall: Recall, router: Router, model: asyncio.Task[str], tok: Tokenizer, gate: QueueGate,
                     plan: RecallPlan, report: RecallProgress) -> None:
    """Fit prompts into a short queue (one builder) and send them from it (``concurrency`` senders)."""
    rng = random.Random()  # fresh needles every run: nothing to memorise
    ready: asyncio.Queue[Fitted | None] = asyncio.Queue(maxsize=plan.concurrency * 2)

    def fits(n: int) -> bool:
        limit = tok.max_model_len
        return limit is None or n + plan.max_tokens <= limit

    async def build() -> None:
        try:
            for n in plan.lengths:
                for f in plan.fillers:
                    if not fits(n):  # known once the first count has answered
                        break
                    sent: set[float] = set()
                    try:
                        async for case in fit_prompts(tok, n, f, plan.depths, plan.distractors, rng):
                            if not fits(n):
                                break
                            sent.add(case.depth)
                            await ready.put(case)
                    except RecallUnavailable as exc:
                        for d in plan.depths:
                            if d not in sent:
                                await ready.put(haystack_failed(n, d, f, plan, str(exc)))
                        if str(exc) not in recall.notes:
                            recall.notes.append(str(exc))
                if not fits(n):
                    recall.notes.append(f"{short_length(n)} skipped: the model's context holds {tok.max_model_len} tokens")
                    report("note", None)
        finally:
            for _ in range(plan.concurrency):
                await ready.put(None)

    async def send() -> None:
        while (case := await ready.get()) is not None:
            if case.error is not None:
                result = _failed(case, case.error)
            else:
                blocked = await gate.clear()
                result = _failed(case, blocked) if blocked else await ask(router, await model, case, plan)
            recall.cases.append(result)
            report("case", result)

    await asyncio.gather(build(), *(send() for _ in range(plan.concurrency)))


def haystack_failed(tokens: int, depth: float, filler: str, plan: RecallPlan, error: str) -> Fitted:
    """A case whose prompt could not be built (the tokenizer failed mid-run)."""
    return Fitted(tokens, depth, filler, haystack.Needle("", ""), plan.distractors, "", error)


async def recall_bundle(inventory: Inventory, *, cluster: str | None, plan: RecallPlan, settings: Settings,
                        trigger: Trigger, progress: RecallProgress | None = None,
                        probe_progress: Callable[[str, str], None] | None = None,
                        after_deploy: str | None = None) -> Bundle:
    """The recall grid, then a probe of every role (with the canary): one bundle with a ``recall`` section.

    The probe comes after the grid, so the bundle shows the roles as they were when it ended
    ("every other axis healthy" is read from it). ``after_deploy`` names the deploy that preceded
    this run when it is the first since the last good one (for the finding)."""
    name, cl = inventory.cluster(cluster)
    async with TransportPool(settings) as pool:
        nodes = {r.node for r in cl.roles if r.role in ("router", "prefill")}
        transports: dict[str, Transport] = {n: await pool.get(cl.node(n)) for n in nodes}
        recall = await run_recall(cl, transports, plan, timeout_s=settings.http_timeout_s, progress=progress)
        bundle = await probe(inventory, cluster=name, trigger=trigger, settings=settings, pool=pool,
                             progress=probe_progress)
    if after_deploy:
        recall = recall.model_copy(update={"after_deploy": after_deploy})
    bundle.recall = recall
    bundle.started_at = recall.started_at or bundle.started_at
    return bundle


def plan_from(settings: Settings, **override: object) -> RecallPlan:
    """The default grid and limits from the settings (``OPSBOT_RECALL_*``), with some fields replaced."""
    fields: dict[str, object] = {
        "lengths": tuple(parse_lengths(settings.recall_lengths)), "depths": tuple(parse_depths(settings.recall_depths)),
        "fillers": tuple(parse_fillers(settings.recall_fillers)), "distractors": settings.recall_distractors,
        "max_tokens": settings.recall_max_tokens, "concurrency": settings.recall_concurrency,
        "queue_limit": settings.recall_queue_limit, "queue_wait_s": settings.recall_queue_wait_s,
        "request_timeout_s": settings.recall_request_timeout_s,
    }
    fields.update({k: v for k, v in override.items() if v is not None})
    return RecallPlan(**fields)  # type: ignore[arg-type]
