"""An accepted alert as the intake hands it on: to the probe it triggers and to the surfaces that post it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StoredAlert:
    """What the worker and the notifiers need of an alert row."""

    id: int
    group_key: str
    fingerprint: str
    status: str
    cluster: str
    role: str
    labels: dict[str, str]
