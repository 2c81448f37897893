"""The router's OpenAI-compatible API as opsbot uses it: the model list, completions, streamed answers.

Requests go through the router's node transport (an SSH port forward unless the inventory says
the URL is reachable directly), with a deadline and a cap on what is read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from opsbot.collect.transport import HttpResult, Transport
from opsbot.inventory import Role

BODY_CAP = 2048


@dataclass
class Router:
    """The router as the probe reaches it: its node's transport and API base."""

    transport: Transport
    role: Role
    timeout_s: float

    @property
    def base(self) -> str:
        return self.role.api_base or ""

    async def get(self, path: str) -> HttpResult:
        return await self.transport.http_get(self.base + path, self.timeout_s, BODY_CAP * 64,
                                             direct=not self.role.http_via_ssh)

    async def post(self, path: str, body: dict, timeout_s: float) -> HttpResult:
        return await self.transport.http_post(self.base + path, json.dumps(body).encode(), timeout_s, BODY_CAP * 8,
                                              direct=not self.role.http_via_ssh)


async def served_models(router: Router) -> list[str]:
    """The ids of ``GET /v1/models``; empty when the router does not answer with a model list."""
    r = await router.get("/v1/models")
    if r.error or r.status != 200:
        return []
    try:
        return [m["id"] for m in json.loads(r.body)["data"] if isinstance(m.get("id"), str)]
    except (ValueError, KeyError, TypeError, AttributeError):
        return []


def sse_text(body: str) -> tuple[str, int | None]:
    """Text and completion tokens from OpenAI server-sent events (``data: {...}`` lines, ``[DONE]``)."""
    text, tokens, chunks = [], None, 0
    for line in body.splitlines():
        if not line.startswith("data:") or line[5:].strip() == "[DONE]":
            continue
        try:
            event = json.loads(line[5:])
        except ValueError:
            continue
        for choice in event.get("choices") or []:
            piece = choice.get("text") or (choice.get("delta") or {}).get("content") or ""
            if piece:
                text.append(piece)
                chunks += 1
        usage = event.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            tokens = usage["completion_tokens"]
    return "".join(text), tokens if tokens is not None else (chunks or None)
