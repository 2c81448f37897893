"""What a capture before a restart keeps: the stuck role's stacks, its state and its last lines.

A restart destroys the evidence SGLang's maintainers ask for in every hang report; this is what is
kept of it, as an artifact of the action (``opsbot.act.capture`` takes it, the store keeps it).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, Field


class PartKind(StrEnum):
    """One kind of evidence a capture takes; runbooks name the kinds they want (``capture:``)."""

    STACKS = "stacks"  # py-spy dump of every process of the unit's cgroup, twice a few seconds apart
    SERVER_INFO = "server_info"  # GET /server_info (the server's flags and state; may hang when wedged)
    REQUESTS = "requests"  # GET /v1/loads?include=all: the in-flight request summary, non-blocking
    JOURNAL = "journal"  # the current run's last journal lines


ALL_PARTS: tuple[PartKind, ...] = (PartKind.STACKS, PartKind.SERVER_INFO, PartKind.REQUESTS, PartKind.JOURNAL)


class CapturePart(BaseModel):
    """One piece of evidence: what was asked, what came back (capped), or why nothing did."""

    kind: PartKind
    name: str  # e.g. "stacks pid 812 (sglang::scheduler_TP0), round 2"
    ok: bool
    text: str = ""
    error: str | None = None
    truncated: bool = False
    elapsed_ms: float = 0.0


class Capture(BaseModel):
    """Everything captured of one role before its restart, in the order it was taken."""

    cluster: str
    role: str
    unit: str
    started_at: datetime
    finished_at: datetime | None = None
    pids: list[int] = Field(default_factory=list)
    parts: list[CapturePart] = Field(default_factory=list)
    error: str | None = None  # the capture as a whole failed or ran out of time (the restart goes on)

    @property
    def ok(self) -> bool:
        return self.error is None and any(p.ok for p in self.parts)

    def summary(self) -> str:
        """One line for a timeline, a Slack reply or ``opsbot actions show``."""
        kept = [p for p in self.parts if p.ok]
        dumps = sum(1 for p in kept if p.kind is PartKind.STACKS)
        failed = [f"{p.name}: {p.error}" for p in self.parts if not p.ok][:3]
        head = f"{dumps} stack dump(s) of {len(self.pids)} process(es), {len(kept)} of {len(self.parts)} part(s) kept"
        return head + (f"; failed: {'; '.join(failed)}" if failed else "") + (f"; {self.error}" if self.error else "")
