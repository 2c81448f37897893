"""The audit log (record stage): append-only, enforced by triggers in the schema."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from opsbot.store.gateway import Gateway
from opsbot.store.models import (
    NOTE_KINDS,
    AuditEntry,
    Decision,
    Note,
    Report,
    now,
)


class AuditRecords(Gateway):
    """Audit entries, and the reports, notes and decisions of the status reports. Mixed into ``Store`` (it needs ``write`` and ``read``)."""

    # -- audit (append-only) -----------------------------------------------------------------

    def audit(self, actor: str, surface: str, what: str, detail: dict[str, Any] | None = None, *,
              cluster: str | None = None, role: str | None = None) -> int:
        def _add(s: Session) -> int:
            row = audit_row(actor, surface, what, detail, cluster, role)
            s.add(row)
            s.flush()
            return row.id

        return self.write(_add, "audit")

    def audit_log(self, *, since: datetime | None = None, role: str | None = None, limit: int = 500) -> list[AuditEntry]:
        q = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit)
        if since:
            q = q.where(AuditEntry.at >= since)
        if role:
            q = q.where(AuditEntry.role == role)
        return list(self.read(lambda s: s.scalars(q).all()))

    # -- reports, notes, decisions -----------------------------------------------------------

    def save_report(self, kind: str, period: str, fmt: str, body: str, meta: dict[str, Any] | None = None) -> int:
        def _add(s: Session) -> int:
            row = Report(kind=kind, period=period, format=fmt, body=body, meta=meta or {})
            s.add(row)
            s.flush()
            return row.id

        return self.write(_add, "save report")

    def latest_report(self, kind: str, fmt: str | None = None) -> Report | None:
        q = select(Report).where(Report.kind == kind).order_by(Report.created_at.desc(), Report.id.desc()).limit(1)
        if fmt:
            q = q.where(Report.format == fmt)
        return self.read(lambda s: s.scalar(q))

    def report(self, report_id: int) -> Report | None:
        return self.read(lambda s: s.get(Report, report_id))

    def reports(self, *, kind: str | None = None, limit: int = 50) -> list[Report]:
        q = select(Report).order_by(Report.created_at.desc(), Report.id.desc()).limit(limit)
        if kind:
            q = q.where(Report.kind == kind)
        return list(self.read(lambda s: s.scalars(q).all()))

    def add_note(self, kind: str, text: str, actor: str) -> int:
        if kind not in NOTE_KINDS:
            raise ValueError(f"note kind {kind!r}: use one of {', '.join(NOTE_KINDS)}")
        if not text.strip():
            raise ValueError("a note needs text")

        def _add(s: Session) -> int:
            row = Note(kind=kind, text=text, actor=actor)
            s.add(row)
            s.add(audit_row(actor, "cli", f"note {kind}", {"text": text}))
            s.flush()
            return row.id

        return self.write(_add, "add note")

    def notes(self, *, since: datetime | None = None, kind: str | None = None) -> list[Note]:
        q = select(Note).order_by(Note.created_at.desc(), Note.id.desc())
        if since:
            q = q.where(Note.created_at >= since)
        if kind:
            q = q.where(Note.kind == kind)
        return list(self.read(lambda s: s.scalars(q).all()))

    def add_decision(self, text: str, why: str, actor: str) -> int:
        if not text.strip() or not why.strip():
            raise ValueError("a decision needs its text and why it was taken")

        def _add(s: Session) -> int:
            row = Decision(text=text, why=why, actor=actor)
            s.add(row)
            s.add(audit_row(actor, "cli", "decision", {"text": text, "why": why}))
            s.flush()
            return row.id

        return self.write(_add, "add decision")

    def decisions(self, *, since: datetime | None = None) -> list[Decision]:
        q = select(Decision).order_by(Decision.created_at.desc(), Decision.id.desc())
        if since:
            q = q.where(Decision.created_at >= since)
        return list(self.read(lambda s: s.scalars(q).all()))


def audit_row(actor: str, surface: str, what: str, detail: dict[str, Any] | None,
               cluster: str | None = None, role: str | None = None) -> AuditEntry:
    json.dumps(detail or {})  # refuse what cannot be kept before the transaction starts
    return AuditEntry(actor=actor, surface=surface, what=what, detail=detail or {}, cluster=cluster, role=role,
                      at=now())
