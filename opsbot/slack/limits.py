"""Slack's message limits, the one place opsbot keeps them (Block Kit reference: a section's or a
context element's text is at most 3000 characters, a header's 150, a message at most 50 blocks).

Every message goes through ``fit`` in the notifier; the renderers use the same limits to cut
where a reader expects it (with ``…``) instead of where Slack would refuse the message."""

from __future__ import annotations

from typing import Any

TEXT_MAX = 3000
HEADER_MAX = 150
BLOCKS_MAX = 50

Block = dict[str, Any]


def clip(text: str | None, limit: int = TEXT_MAX) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with ``…``."""
    text = text or ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fit_blocks(blocks: list[Block], room: int = BLOCKS_MAX) -> list[Block]:
    """At most ``room`` blocks; the last one says how many were left out (the status page has them all)."""
    if len(blocks) <= room:
        return blocks
    left = len(blocks) - room + 1
    return blocks[: room - 1] + [{"type": "context", "elements": [
        {"type": "mrkdwn", "text": f"{left} more blocks left out; see the status page"}]}]


def fit(blocks: list[Block]) -> list[Block]:
    """Every text in ``blocks`` within its limit and at most ``BLOCKS_MAX`` blocks: what Slack accepts."""
    return fit_blocks([_fit_block(b) for b in blocks])


def _fit_block(block: Block) -> Block:
    kind = block.get("type")
    if kind in ("section", "header") and isinstance(block.get("text"), dict):
        limit = HEADER_MAX if kind == "header" else TEXT_MAX
        return {**block, "text": {**block["text"], "text": clip(block["text"].get("text"), limit)}}
    if kind == "context" and isinstance(block.get("elements"), list):
        return {**block, "elements": [{**e, "text": clip(e.get("text"))} if isinstance(e, dict) and "text" in e else e
                                      for e in block["elements"]]}
    return block
