"""Captures kept with their action: the evidence a restart would have destroyed (record stage)."""

from __future__ import annotations

import zlib

from sqlalchemy import select
from sqlalchemy.orm import Session

from opsbot.contracts.captures import Capture
from opsbot.store.gateway import Gateway
from opsbot.store.models import ActionCapture

STORED_CAP_BYTES = 4 * 1024 * 1024  # of a capture's JSON; its parts are capped one by one before this


def compress_capture(capture: Capture) -> tuple[bytes, int]:
    """The capture as zlib-compressed JSON and its size before; parts past the cap are emptied with a note."""
    data = capture.model_dump_json().encode()
    if len(data) > STORED_CAP_BYTES:
        trimmed = capture.model_copy(deep=True)
        for part in reversed(trimmed.parts):
            if len(trimmed.model_dump_json()) <= STORED_CAP_BYTES:
                break
            if part.text:
                part.text, part.truncated = f"[... {len(part.text)} characters not kept: the capture's cap ...]", True
        data = trimmed.model_dump_json().encode()
    return zlib.compress(data, 6), len(data)


class CaptureRecords(Gateway):
    """Captures by action. Mixed into ``Store`` (it needs ``write`` and ``read``)."""

    def save_capture(self, action_id: str, capture: Capture) -> int:
        blob, size = compress_capture(capture)

        def _write(s: Session) -> int:
            row = ActionCapture(action_id=action_id, role=capture.role, ok=capture.ok, summary=capture.summary(),
                                size_bytes=size, data=blob)
            s.add(row)
            s.flush()
            return row.id

        return self.write(_write, "save capture")

    def captures(self, action_id: str) -> list[Capture]:
        """The captures taken for an action, oldest first."""

        def _read(s: Session) -> list[bytes]:
            q = select(ActionCapture.data).where(ActionCapture.action_id == action_id).order_by(ActionCapture.id)
            return list(s.scalars(q))

        rows = self.read(_read)
        return [Capture.model_validate_json(zlib.decompress(b)) for b in rows]
