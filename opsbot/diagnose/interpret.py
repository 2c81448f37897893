"""``interpret``: which roles an operator's words are about ("decode is stuck" → decode)."""

from __future__ import annotations

import re

# Words people use for each role; a role's own instance names are matched too.
ROLE_WORDS: dict[str, tuple[str, ...]] = {
    "prefill": ("prefill", "prefills", "ttft", "first token", "time to first", "prompt processing", "bootstrap"),
    "decode": ("decode", "decoding", "decoder", "generation", "generating", "tokens per second", "tpot", "itl", "streaming"),
    "router": ("router", "gateway", "smg", "load balancer", "lb", "5xx", "502", "503", "routing"),
}


def interpret(text: str, names: list[str] | None = None) -> list[str]:
    """Role kinds (and instance names from ``names``) the words mention; [] means all roles."""
    words = " ".join(re.findall(r"[a-z0-9-]+", text.lower()))
    found: list[str] = []
    for name in names or []:
        if re.search(rf"(?<![\w-]){re.escape(name.lower())}(?![\w-])", words) and name not in found:
            found.append(name)
    for role, cues in ROLE_WORDS.items():
        if role in found:
            continue
        if any(re.search(rf"(?<![\w-]){re.escape(cue)}(?![\w-])", words) for cue in cues):
            found.append(role)
    return found
