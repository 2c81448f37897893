"""Request body limits (413 over the size, 408 over the time to read it) and clear validation errors."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimit:
    """Read every request body here, before the app sees it: at most ``limit`` bytes (413, by
    Content-Length or while streaming) within ``timeout_s`` (408: a client that declares a length and
    stalls must not hold its connection); then the body is replayed to the app."""

    def __init__(self, app: ASGIApp, limit: int, timeout_s: float = 10.0) -> None:
        self.app, self.limit, self.timeout_s = app, limit, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            return await self._refuse(scope, send, 413, f"request body over {self.limit} bytes (OPSBOT_MAX_BODY_BYTES)")
        try:
            async with asyncio.timeout(self.timeout_s):
                body = await self._read(receive)
        except TimeoutError:
            return await self._refuse(scope, send, 408, f"request body not received within {self.timeout_s:g} s")
        if body is None:
            return await self._refuse(scope, send, 413, f"request body over {self.limit} bytes (OPSBOT_MAX_BODY_BYTES)")
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body, or None when it grows over the limit (or the client went away)."""
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                return None
            more = message.get("more_body", False)
        return b"".join(chunks)

    async def _refuse(self, scope: Scope, send: Send, status: int, detail: str) -> None:
        if scope["path"] == "/alerts":
            reason = "too-large" if status == 413 else "timeout"
            scope["app"].state.flow.telemetry.alerts_rejected.labels(reason).inc()
        headers = {"Connection": "close"} if status == 408 else None
        response = JSONResponse({"detail": detail}, status, headers=headers)
        await response({"type": "http"}, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """400 for a body that is not JSON; 422 naming the first bad field otherwise."""
    errors = exc.errors()
    if request.url.path == "/alerts":
        request.app.state.flow.telemetry.alerts_rejected.labels("invalid").inc()
    if any(e.get("type") == "json_invalid" for e in errors):
        where = next(e for e in errors if e.get("type") == "json_invalid")
        msg = where.get("ctx", {}).get("error", "invalid JSON")
        return JSONResponse({"detail": f"request body is not valid JSON: {msg}"}, 400)
    first = errors[0]
    field = ".".join(str(p) for p in first["loc"] if p != "body") or "body"
    detail = f"{field}: {first['msg']}"
    if len(errors) > 1:
        detail += f" (and {len(errors) - 1} more problem(s))"
    return JSONResponse({"detail": detail, "errors": _plain(errors)}, 422)


def _plain(errors: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in errors]


async def inventory_unavailable(request: Request, exc: Exception) -> JSONResponse:
    """No readable inventory: 503 (Alertmanager retries; nothing was stored)."""
    return JSONResponse({"detail": str(exc)}, 503, headers={"Retry-After": "30"})
