"""The one way opsbot talks to Slack: every post, edit, ephemeral answer and file upload, whoever sends
it (incident messages, alert threads, command answers, button outcomes, reports, recall runs).

A pipeline of named stages, shaped like Alertmanager's notify pipeline (v0.34, commit 68fb2d5:
notify/notify.go:209-210 puts a ``DedupStage`` before a ``RetryStage`` for every integration;
notify/dedup_stage.go:52 ``needsUpdate`` sends only what changed since the group's last notification or
after the repeat interval; notify/retry_stage.go:88 ``exec`` retries with backoff until the deadline;
notify/util.go:245-252 ``Retrier.Check`` retries 5xx answers)::

    fit -> dedup -> queue per channel (order) -> rate limit per channel -> retry (429 Retry-After; 5xx, timeouts)

Each channel has its own worker taking its queue in order: a message waiting out a 429 delays the later
messages of its channel (delivered after it, in order), never another channel's; a message Slack refuses
for good (``channel_not_found``, ``invalid_blocks``) fails alone and the next one goes. Callers await the
delivery (the ``ts`` of a post); a caller that stops waiting does not stop the delivery.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from opsbot.settings import Settings
from opsbot.slack.limits import Block, clip, fit

log = logging.getLogger(__name__)
POST_EVENT = "opsbot_post"  # the metadata of a top-level post without its own: found again after a timeout
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 30.0


class Method(str, Enum):
    """The Web API methods the notifier calls; posts count against the channel's rate."""

    post = "chat.postMessage"
    update = "chat.update"
    ephemeral = "chat.postEphemeral"
    upload = "files.uploadV2"


POSTS = {Method.post, Method.ephemeral, Method.upload}


class NotDelivered(Exception):
    """Slack refused the call for good, or it kept failing for ``retry_for_s``; the message says why."""


@dataclass(frozen=True)
class Delivered:
    """Where the message is: its channel and ``ts`` (None for an ephemeral answer or an upload)."""

    channel: str
    ts: str | None


@dataclass(frozen=True)
class Dedup:
    """What a notification is about (``key``: an alert group, an incident) and what it says (``state``):
    the same state under the same key within ``dedup_for_s`` is sent once (Alertmanager's ``needsUpdate``)."""

    key: str
    state: str


OnRetry = Callable[[str], Awaitable[None]]


@dataclass(eq=False)
class _Call:
    method: Method
    channel: str
    args: dict[str, object]
    result: asyncio.Future[Delivered]
    dedup: Dedup | None = None
    maybe_sent: bool = False
    on_retry: OnRetry | None = None
    files: list[tuple[str, bytes]] = field(default_factory=list)


@dataclass
class TokenBucket:
    """``burst`` posts at once, then ``rate`` per second (pure: the caller passes the clock)."""

    rate: float
    burst: int
    tokens: float | None = None  # None: full, from the first post on
    at: float = 0.0

    def take(self, now: float) -> float:
        """Reserve one post; the seconds to wait before sending it (0: now)."""
        if self.tokens is None:
            self.tokens, self.at = float(self.burst), now
        self.tokens = min(float(self.burst), self.tokens + (now - self.at) * self.rate) - 1
        self.at = now
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate


def retry_after(exc: BaseException) -> float | None:
    """Seconds Slack asked to wait (HTTP 429 ``Retry-After``); None when it did not ask."""
    if not isinstance(exc, SlackApiError) or exc.response is None or exc.response.status_code != 429:
        return None
    headers = exc.response.headers or {}
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if isinstance(value, list):
        value = value[0] if value else None
    try:
        return max(0.0, float(value)) if value is not None else 1.0
    except (TypeError, ValueError):
        return 1.0


def transient(exc: BaseException) -> bool:
    """Worth trying again: a timeout, a connection failure, Slack's 429 or 5xx."""
    if isinstance(exc, SlackApiError):
        return exc.response is not None and (exc.response.status_code == 429 or exc.response.status_code >= 500)
    return isinstance(exc, (asyncio.TimeoutError, OSError, aiohttp.ClientError))


def refused(exc: BaseException) -> bool:
    """Slack answered and said no (nothing was posted): safe to send again without looking first."""
    return isinstance(exc, SlackApiError) and exc.response is not None and exc.response.status_code < 500


def described(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip() if str(exc) else type(exc).__name__


class SlackNotifier:
    """One per service: the Slack client behind the stages; ``drain`` waits for everything queued."""

    def __init__(self, client: AsyncWebClient, *, rate_per_s: float = 1.0, burst: int = 10,
                 retry_for_s: float = 600.0, timeout_s: float = 10.0, dedup_for_s: float = 4 * 3600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.rate_per_s, self.burst = rate_per_s, burst
        self.retry_for_s, self.timeout_s, self.dedup_for_s = retry_for_s, timeout_s, dedup_for_s
        self.first_delay_s = FIRST_DELAY_S
        self.clock = clock
        self._queues: dict[str, deque[_Call]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._buckets: dict[str, TokenBucket] = {}
        self._queued_updates: dict[tuple[str, str], _Call] = {}
        self._sent: dict[str, tuple[str, float]] = {}  # dedup key -> (state, when)

    @classmethod
    def from_settings(cls, settings: Settings, client: AsyncWebClient | None = None) -> SlackNotifier:
        client = client or AsyncWebClient(token=settings.slack_bot_token, base_url=settings.slack_api_url)
        return cls(client, rate_per_s=settings.slack_channel_rate_per_s, burst=settings.slack_channel_burst,
                   retry_for_s=settings.slack_retry_for_s, timeout_s=settings.slack_timeout_s,
                   dedup_for_s=settings.slack_dedup_for_s)

    # -- what callers use -----------------------------------------------------------------------
    async def post(self, channel: str, text: str, blocks: list[Block] | None = None, *, thread_ts: str | None = None,
                   metadata: dict[str, object] | None = None, dedup: Dedup | None = None, maybe_sent: bool = False,
                   on_retry: OnRetry | None = None) -> Delivered | None:
        """``chat.postMessage``; None when ``dedup`` says this was already sent. A top-level post carries
        ``metadata`` (its own, or an id) so that after a timeout it is looked up before being sent again;
        ``maybe_sent``: an earlier try (another process's) may have posted it, look first."""
        args: dict[str, object] = {"text": clip(text)}
        if blocks is not None:
            args["blocks"] = fit(blocks)
        if thread_ts is not None:
            args["thread_ts"] = thread_ts
        else:
            args["metadata"] = metadata or {"event_type": POST_EVENT, "event_payload": {"id": uuid.uuid4().hex}}
        if dedup is not None and self._duplicate(dedup):
            return None
        return await self._send(_Call(Method.post, channel, args, self._future(), dedup, maybe_sent, on_retry))

    async def update(self, channel: str, ts: str, text: str, blocks: list[Block], *,
                     on_retry: OnRetry | None = None) -> Delivered:
        """``chat.update``; an edit of the same message still queued is replaced by this one (the latest wins)."""
        args: dict[str, object] = {"ts": ts, "text": clip(text), "blocks": fit(blocks)}
        queued = self._queued_updates.get((channel, ts))
        if queued is not None:
            queued.args = args
            return await asyncio.shield(queued.result)
        call = _Call(Method.update, channel, args, self._future(), on_retry=on_retry)
        self._queued_updates[(channel, ts)] = call
        return await self._send(call)

    async def ephemeral(self, channel: str, user: str, text: str) -> Delivered:
        """``chat.postEphemeral``: seen by ``user`` only."""
        return await self._send(_Call(Method.ephemeral, channel, {"user": user, "text": clip(text)}, self._future()))

    async def upload(self, channel: str, thread_ts: str | None, files: list[tuple[str, bytes]]) -> Delivered:
        """Files (a report's charts) into the channel, in ``thread_ts``'s thread when given."""
        args: dict[str, object] = {"thread_ts": thread_ts} if thread_ts else {}
        return await self._send(_Call(Method.upload, channel, args, self._future(), files=files))

    async def drain(self) -> None:
        """Until every queued message is delivered or failed (tests, shutdown)."""
        while self._workers:
            await asyncio.gather(*list(self._workers.values()), return_exceptions=True)

    async def close(self) -> None:
        """Stop delivering (shutdown): what is still queued is cancelled, its callers told so."""
        for task in list(self._workers.values()):
            task.cancel()
        await asyncio.gather(*list(self._workers.values()), return_exceptions=True)
        for queue in self._queues.values():
            for call in queue:
                call.result.cancel()
        self._queues.clear()

    # -- dedup stage ----------------------------------------------------------------------------
    def _duplicate(self, dedup: Dedup) -> bool:
        """The same state under the same key was sent (or is queued) within ``dedup_for_s``; else it is noted."""
        now = self.clock()
        if len(self._sent) > 10_000:  # keep only what can still suppress a notification
            self._sent = {k: v for k, v in self._sent.items() if now - v[1] < self.dedup_for_s}
        last = self._sent.get(dedup.key)
        if last is not None and last[0] == dedup.state and now - last[1] < self.dedup_for_s:
            log.info("slack: %s already notified as %s; not sent again", dedup.key, dedup.state)
            return True
        self._sent[dedup.key] = (dedup.state, now)
        return False

    # -- queue and rate limit stages, per channel --------------------------------------------------
    def _future(self) -> asyncio.Future[Delivered]:
        future: asyncio.Future[Delivered] = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda f: f.cancelled() or f.exception())  # a caller gone is no warning
        return future

    async def _send(self, call: _Call) -> Delivered:
        self._queues.setdefault(call.channel, deque()).append(call)
        if call.channel not in self._workers:
            self._workers[call.channel] = asyncio.create_task(self._work(call.channel), name=f"slack:{call.channel}")
        return await asyncio.shield(call.result)  # the caller's cancellation does not cancel the delivery

    async def _work(self, channel: str) -> None:
        queue = self._queues[channel]
        call: _Call | None = None
        try:
            while queue:
                call = queue.popleft()
                if call.method is Method.update:
                    self._queued_updates.pop((channel, str(call.args["ts"])), None)
                if call.method in POSTS:
                    bucket = self._buckets.setdefault(channel, TokenBucket(self.rate_per_s, self.burst))
                    if (wait := bucket.take(self.clock())) > 0:
                        await asyncio.sleep(wait)
                try:
                    call.result.set_result(await self._deliver(call))
                except Exception as exc:  # noqa: BLE001 - one failure never stops the channel's later messages
                    if call.dedup is not None and self._sent.get(call.dedup.key, ("",))[0] == call.dedup.state:
                        del self._sent[call.dedup.key]  # not sent: the next one like it goes
                    log.warning("slack %s to %s not delivered: %s", call.method.value, channel, exc)
                    call.result.set_exception(exc if isinstance(exc, NotDelivered) else NotDelivered(described(exc)))
        except asyncio.CancelledError:
            if call is not None and not call.result.done():
                call.result.cancel()
            raise
        finally:
            del self._workers[channel]
            if not queue:
                self._queues.pop(channel, None)

    # -- retry stage ------------------------------------------------------------------------------
    async def _deliver(self, call: _Call) -> Delivered:
        """Send, retrying what may pass (429 after its ``Retry-After``; 5xx, timeouts with backoff) for
        ``retry_for_s``; a post that may have reached Slack is looked up by its metadata before it is re-sent."""
        deadline = self.clock() + self.retry_for_s
        delay, maybe_sent = self.first_delay_s, call.maybe_sent
        while True:
            try:
                if maybe_sent and (found := await self._find_posted(call)) is not None:
                    return found
                maybe_sent = False  # looked: not there
                return await asyncio.wait_for(self._once(call), self.timeout_s)
            except Exception as exc:  # noqa: BLE001 - sorted below: transient, or refused for good
                if not transient(exc):
                    raise NotDelivered(f"Slack refused {call.method.value}: {described(exc)}") from exc
                maybe_sent = maybe_sent or not refused(exc)
                wait = retry_after(exc)
                if wait is None:
                    wait, delay = delay, min(delay * 2, MAX_DELAY_S)
                if self.clock() + wait > deadline:
                    raise NotDelivered(f"{call.method.value} still failing after {self.retry_for_s:g} s: "
                                       f"{described(exc)}") from exc
                log.info("slack %s to %s: %s; again in %.1f s", call.method.value, call.channel, described(exc), wait)
                if call.on_retry is not None:
                    try:
                        await call.on_retry(described(exc))
                    except Exception:  # noqa: BLE001 - noting the attempt must not lose the message
                        log.exception("slack %s to %s: the failed attempt was not noted", call.method.value, call.channel)
                await asyncio.sleep(wait)

    async def _once(self, call: _Call) -> Delivered:
        client, args = self.client, call.args
        if call.method is Method.post:
            answer = await client.chat_postMessage(channel=call.channel, **args)  # type: ignore[arg-type]
            return Delivered(str(answer.get("channel") or call.channel), str(answer["ts"]))
        if call.method is Method.update:
            answer = await client.chat_update(channel=call.channel, **args)  # type: ignore[arg-type]
            return Delivered(call.channel, str(answer.get("ts") or args["ts"]))
        if call.method is Method.ephemeral:
            await client.chat_postEphemeral(channel=call.channel, **args)  # type: ignore[arg-type]
            return Delivered(call.channel, None)
        uploads = [{"filename": name, "content": data, "title": name} for name, data in call.files]
        await client.files_upload_v2(channel=call.channel, file_uploads=uploads, **args)  # type: ignore[arg-type]
        return Delivered(call.channel, None)

    async def _find_posted(self, call: _Call) -> Delivered | None:
        """The top-level post already in the channel (same metadata), from ``conversations.history``."""
        meta = call.args.get("metadata")
        if call.method is not Method.post or not isinstance(meta, dict):
            return None
        try:
            answer = await asyncio.wait_for(self.client.conversations_history(
                channel=call.channel, limit=100, include_all_metadata=True), self.timeout_s)
        except SlackApiError as exc:
            if transient(exc):
                raise
            log.warning("slack: cannot look for an earlier post in %s (%s); sending it again", call.channel, exc)
            return None
        for message in answer.get("messages") or []:
            found = message.get("metadata") or {}
            if found.get("event_type") == meta["event_type"] and found.get("event_payload") == meta["event_payload"]:
                return Delivered(call.channel, str(message["ts"]))
        return None
