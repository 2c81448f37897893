"""Slack request checks done on the raw bytes, before anything parses them (pure functions).

Slack signs ``v0:<timestamp>:<raw body>`` with the app's signing secret (HMAC-SHA256, header
``X-Slack-Signature: v0=<hex>``, timestamp in ``X-Slack-Request-Timestamp``) and a request older
than five minutes must be refused. Only a request that passes is parsed; one that does not parse
is answered 400, never a server error.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

WINDOW_S = 300
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")


def signature_problem(secret: str, timestamp: str | None, signature: str | None, body: bytes, now: float) -> str | None:
    """Why the request is not Slack's (None when it is): missing or malformed headers, too old, wrong HMAC."""
    if timestamp is None or signature is None:
        return "missing X-Slack-Request-Timestamp or X-Slack-Signature"
    if not _TIMESTAMP.fullmatch(timestamp):
        return "X-Slack-Request-Timestamp is not a Unix time in seconds"
    if abs(now - int(timestamp)) > WINDOW_S:
        return "X-Slack-Request-Timestamp is more than 5 minutes away from now"
    if not _SIGNATURE.fullmatch(signature):
        return "X-Slack-Signature is not v0=<64 hex digits>"
    expected = "v0=" + hmac.new(secret.encode(), b"v0:" + timestamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        return "X-Slack-Signature does not match the body"
    return None


def body_problem(content_type: str, body: bytes) -> str | None:
    """Why a signed body cannot be a Slack request (None when it can): not UTF-8, bad form or JSON."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return "the body is not UTF-8"
    if content_type.split(";")[0].strip().lower() == "application/json":
        return _json_object_problem(text, "the JSON body")
    try:
        form = parse_qs(text, keep_blank_values=True, strict_parsing=bool(text), errors="strict")
    except (ValueError, UnicodeDecodeError):
        return "the form body is not application/x-www-form-urlencoded"
    if "payload" in form:
        return _json_object_problem(form["payload"][0], "the form field payload", _interaction_problem)
    return None


def _json_object_problem(text: str, what: str, shape: Callable[[dict[str, Any]], str | None] | None = None) -> str | None:
    try:
        value = json.loads(text)
    except ValueError:
        return f"{what} is not JSON"
    if not isinstance(value, dict):
        return f"{what} is not a JSON object"
    problem = shape(value) if shape else None
    return f"{what}: {problem}" if problem else None


def _interaction_problem(payload: dict[str, Any]) -> str | None:
    """What an interactive payload lacks that Slack always sends (its fields as Slack's reference lists
    them for ``block_actions``, ``view_submission`` and ``view_closed``); None when it has them."""
    if not isinstance(payload.get("type"), str):
        return "type is not a string"
    if not isinstance(payload.get("user"), dict) or not isinstance(payload["user"].get("id"), str):
        return "user.id is not a string"
    if payload["type"] == "block_actions":
        actions = payload.get("actions")
        if not isinstance(actions, list) or not actions:
            return "actions is not a non-empty list"
        if not all(isinstance(a, dict) and isinstance(a.get("action_id"), str) for a in actions):
            return "an action has no action_id"
    if payload["type"] in ("view_submission", "view_closed"):
        view = payload.get("view")
        if not isinstance(view, dict) or not isinstance(view.get("type"), str):
            return "view.type is not a string"
    return None
