"""Current state for a report: each role's figures from one probe (pure): computed from its bundle,
or as stored when the probe was saved (a page view never parses logs)."""

from __future__ import annotations

from datetime import datetime

from opsbot.bundle import Bundle
from opsbot.parse.figures import RoleFigures, gpu_memory, role_figures
from opsbot.report.model import CurrentState


def current_from_bundle(bundle: Bundle, *, now: datetime, fresh: bool, incidents: list[str] | None = None,
                        role_gpus: dict[str, list[int]] | None = None) -> CurrentState:
    taken = datetime.fromisoformat(bundle.started_at.replace("Z", "+00:00"))
    roles = [role_figures(bundle, r, (role_gpus or {}).get(r.key)) for r in bundle.roles]
    return current_from_figures(bundle.id, bundle.cluster, taken, roles, now=now, fresh=fresh, incidents=incidents)


def current_from_figures(probe_id: str, cluster: str, taken: datetime, roles: list[RoleFigures], *, now: datetime,
                         fresh: bool, incidents: list[str] | None = None) -> CurrentState:
    return CurrentState(
        probe_id=probe_id, cluster=cluster, taken_at=taken,
        age_s=max(0.0, (now - taken).total_seconds()), fresh=fresh,
        roles=roles, incidents=list(incidents or []),
    )


def with_role_gpus(roles: list[RoleFigures], bundle: Bundle, role_gpus: dict[str, list[int]]) -> list[RoleFigures]:
    """Stored figures with GPU memory counted on the GPUs the serving spec gives each role (a CSV, no logs)."""
    out = []
    for fig in roles:
        evidence = next((r for r in bundle.roles if r.key == fig.role), None)
        if evidence is not None and fig.role in role_gpus and evidence.role != "router":
            memory, count, _problem = gpu_memory(bundle, evidence, role_gpus[fig.role])
            fig = fig.model_copy(update={"gpu_memory_gib": memory, "gpus": count})
        out.append(fig)
    return out
