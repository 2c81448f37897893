"""Kernel log lines → ``XidEvent`` for every ``NVRM: Xid`` report."""

from __future__ import annotations

import re

from pydantic import BaseModel

from opsbot.parse.logs import parse_log_line

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\): (?P<xid>\d{1,6}),?\s*(?P<rest>.*)$")
_PID = re.compile(r"pid=(\d{1,10})")
_NAME = re.compile(r"name=([^,]+)")


class XidEvent(BaseModel):
    ts: str | None = None
    pci: str
    xid: int
    pid: int | None = None
    process: str | None = None
    message: str


def parse_xid(raw: str) -> list[XidEvent]:
    """Every Xid line in ``raw`` (journald-prefixed or dmesg-style); other lines are ignored."""
    events: list[XidEvent] = []
    for line in raw.splitlines():
        m = _XID.search(line)
        if not m:
            continue
        entry = parse_log_line(line)
        pid, name = _PID.search(m["rest"]), _NAME.search(m["rest"])
        events.append(
            XidEvent(
                ts=entry.ts,
                pci=m["pci"],
                xid=int(m["xid"]),
                pid=int(pid.group(1)) if pid else None,
                process=name.group(1).strip() if name else None,
                message=m["rest"].strip(),
            )
        )
    return events
