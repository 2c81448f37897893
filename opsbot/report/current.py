"""Current state for a report: each role's figures from one probe bundle (pure)."""

from __future__ import annotations

from datetime import datetime

from opsbot.bundle import Bundle
from opsbot.parse.figures import role_figures
from opsbot.report.model import CurrentState


def current_from_bundle(bundle: Bundle, *, now: datetime, fresh: bool, incidents: list[str] | None = None,
                        role_gpus: dict[str, list[int]] | None = None) -> CurrentState:
    taken = datetime.fromisoformat(bundle.started_at.replace("Z", "+00:00"))
    return CurrentState(
        probe_id=bundle.id, cluster=bundle.cluster, taken_at=taken,
        age_s=max(0.0, (now - taken).total_seconds()), fresh=fresh,
        roles=[role_figures(bundle, r, (role_gpus or {}).get(r.key)) for r in bundle.roles],
        incidents=list(incidents or []),
    )
