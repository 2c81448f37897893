"""Bearer tokens with nested scopes (act > probe > read): 401 when the caller is unknown, revoked or
expired (the answer says which), 403 when the token lacks the scope."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

Scope = Literal["read", "probe", "act"]
SCOPES: tuple[str, ...] = ("read", "probe", "act")
ALERT_HEADER = "X-Opsbot-Alert-Token"

_bearer = HTTPBearer(auto_error=False, description="opsbot API token (opsbot tokens create --scope ...)")


@dataclass(frozen=True)
class Caller:
    name: str
    scopes: frozenset[str]


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(401, detail, headers={"WWW-Authenticate": 'Bearer realm="opsbot"'})


async def _caller(request: Request, creds: HTTPAuthorizationCredentials | None) -> Caller:
    if creds is None:
        raise _unauthorized("no bearer token: send 'Authorization: Bearer <token>' (opsbot tokens create)")
    flow = request.app.state.flow
    found = await flow.db(flow.store.check_token, creds.credentials)
    if found is None:
        raise _unauthorized("unknown token")
    if found.refused:
        raise _unauthorized(found.refused)
    return Caller(found.name, frozenset(found))  # the token's name is who acts (audit, approvals)


def require(scope: Scope) -> Callable[..., Awaitable[Caller]]:
    """A FastAPI dependency: the caller, who must hold ``scope``."""

    async def dependency(request: Request, creds: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> Caller:
        caller = await _caller(request, creds)
        if scope not in caller.scopes:
            held = ", ".join(sorted(caller.scopes)) or "none"
            raise HTTPException(403, f"this token lacks the {scope!r} scope (it has: {held})")
        return caller

    return dependency


def require_alert_sender() -> Callable[..., Awaitable[Caller]]:
    """Alertmanager cannot sign: accept the shared header, or a bearer token with ``probe``."""

    async def dependency(request: Request, creds: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> Caller:
        shared = request.app.state.flow.settings.alert_token
        sent = request.headers.get(ALERT_HEADER)
        if sent is not None:
            if shared and hmac.compare_digest(sent.encode(), shared.encode()):
                return Caller("alertmanager", frozenset({"probe"}))
            request.app.state.flow.telemetry.alerts_rejected.labels("unauthorized").inc()
            raise _unauthorized(f"{ALERT_HEADER} does not match OPSBOT_ALERT_TOKEN")
        try:
            return await require("probe")(request, creds)
        except HTTPException:
            request.app.state.flow.telemetry.alerts_rejected.labels("unauthorized").inc()
            raise

    return dependency
