"""A local stand-in for Slack's Web API that records every call (Slack itself is not reachable).

It answers the methods opsbot uses the way Slack documents them (``{"ok": true, ...}``), so the
real ``slack_sdk`` client and bolt app run unchanged with ``base_url`` pointed here.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web


@dataclass
class Call:
    method: str
    args: dict[str, Any]
    status: int = 200  # what the recorder answered (500 or 429 when told to fail)
    at: float = field(default_factory=time.monotonic)


@dataclass
class SlackRecorder:
    group_members: dict[str, list[str]] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None
    _ts: Any = field(default_factory=lambda: itertools.count(1))
    _changed: asyncio.Event | None = None
    envelopes: list[dict[str, Any]] = field(default_factory=list)
    zones: dict[str, str] = field(default_factory=dict)  # user id -> tz of the profile (users.info)
    failures: dict[str, list[str]] = field(default_factory=dict)  # method -> "500" | "429" | "refused" | "timeout"
    retry_after: str = "1"  # the Retry-After header of a 429 answer, in seconds as Slack sends it
    slow_s: float = 3.0  # how long a "timeout" answer takes (the message is kept, as Slack would)
    messages: list[dict[str, Any]] = field(default_factory=list)  # what chat.postMessage put in channels

    def fail(self, method: str, *how: str) -> None:
        """The next calls of ``method`` answer 500 (not posted), 429 ``ratelimited`` with ``Retry-After``
        (not posted, as Slack's Web API rate limits answer) or answer late ("timeout": posted)."""
        self.failures.setdefault(method, []).extend(how)

    def posted(self, channel: str | None = None) -> list[dict[str, Any]]:
        """Top-level messages really posted (not thread replies), oldest first."""
        return [m for m in self.messages if not m.get("thread_ts") and (channel is None or m["channel"] == channel)]

    async def start(self) -> SlackRecorder:
        app = web.Application()
        app.router.add_post("/api/{method}", self._api)
        app.router.add_get("/api/{method}", self._api)
        app.router.add_post("/response/{id}", self._response_url)
        app.router.add_get("/link", self._socket)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/api/"
        self._changed = asyncio.Event()
        return self

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    def response_url(self, key: str = "1") -> str:
        return self.url.replace("/api/", f"/response/{key}")

    def of(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    async def wait_for(self, method: str, count: int = 1, timeout: float = 15.0, where: Any = None) -> list[Call]:
        """Until ``count`` calls of ``method`` (matching ``where``) were recorded."""
        async def _wait() -> list[Call]:
            while True:
                hits = [c for c in self.of(method) if where is None or where(c)]
                if len(hits) >= count:
                    return hits
                assert self._changed is not None
                self._changed.clear()
                await self._changed.wait()

        return await asyncio.wait_for(_wait(), timeout)

    async def _record(self, method: str, args: dict[str, Any]) -> None:
        self.calls.append(Call(method, args))
        assert self._changed is not None
        self._changed.set()

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        raw = await request.read()
        if request.method == "GET":
            args = dict(request.query)
        elif request.content_type == "application/json":
            args = json.loads(raw or b"{}")
        else:
            args = dict(parse_qsl(raw.decode()))
        for key in ("blocks",):
            if isinstance(args.get(key), str):
                args[key] = json.loads(args[key])
        how = self.failures.get(method, [None]).pop(0) if self.failures.get(method) else None
        if how == "500":
            self.calls.append(Call(method, args, 500))
            return web.json_response({"ok": False, "error": "internal_error"}, status=500)
        if how == "refused":  # Slack's answer to a call it will never accept (HTTP 200, ok: false)
            self.calls.append(Call(method, args, 200))
            return web.json_response({"ok": False, "error": "not_in_channel"})
        if how == "429":
            self.calls.append(Call(method, args, 429))
            return web.json_response({"ok": False, "error": "ratelimited"}, status=429,
                                     headers={"Retry-After": self.retry_after})
        await self._record(method, args)
        answer: dict[str, Any] = {"ok": True}
        if method == "auth.test":
            answer.update(url="https://lab.slack.com/", team="lab", user="opsbot", team_id="T0LAB", user_id="U0BOT", bot_id="B0BOT")
        elif method in ("chat.postMessage", "chat.update"):
            ts = args.get("ts") or f"1700000000.{next(self._ts):06d}"
            answer.update(channel=args.get("channel"), ts=ts, message={"text": args.get("text", "")})
            if method == "chat.postMessage":
                meta = args.get("metadata")
                self.messages.append({"at": time.time(), "channel": args.get("channel"), "ts": ts, "text": args.get("text", ""),
                                      "thread_ts": args.get("thread_ts"), "blocks": args.get("blocks"),
                                      "metadata": json.loads(meta) if isinstance(meta, str) else meta})
        elif method == "conversations.history":
            answer.update(messages=[m for m in reversed(self.posted(args.get("channel")))], has_more=False)
        elif method == "users.info":
            zone = self.zones.get(args.get("user", ""))
            answer.update(user={"id": args.get("user"), **({"tz": zone} if zone else {})})
        elif method == "chat.postEphemeral":
            answer.update(message_ts=f"1700000001.{next(self._ts):06d}")
        elif method == "apps.connections.open":
            answer.update(url=self.url.replace("http://", "ws://").replace("/api/", "/link"))
        elif method == "usergroups.users.list":
            answer.update(users=self.group_members.get(args.get("usergroup", ""), []))
        if how == "timeout":
            await asyncio.sleep(self.slow_s)
        return web.json_response(answer)

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        """Socket Mode: hello, then the queued envelopes; what the app sends back is recorded as acks."""
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_json({"type": "hello", "num_connections": 1, "debug_info": {"host": "recorder"}})
        for envelope in self.envelopes:
            await ws.send_json(envelope)
        async for msg in ws:
            if msg.type == web.WSMsgType.TEXT:
                await self._record("socket_ack", json.loads(msg.data))
        return ws

    async def _response_url(self, request: web.Request) -> web.Response:
        await self._record("response_url", json.loads(await request.read() or b"{}"))
        return web.Response(text="ok")
