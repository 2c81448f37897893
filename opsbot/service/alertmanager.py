"""The Alertmanager webhook payload, version 4, and how an alert maps to a probe scope.

Pure: models and functions of data. Unknown fields are kept (Alertmanager adds fields over
releases: ``notification_reason`` in 0.32, ``routeLabels`` in 0.34), so new senders still parse.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ALL_ROLES = "*"


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Alert(_Open):
    status: Literal["firing", "resolved"]
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    startsAt: datetime
    endsAt: datetime | None = None
    generatorURL: str = ""
    fingerprint: str = Field(min_length=1, max_length=128)


class Webhook(_Open):
    """One notification for one aggregation group (``groupKey``)."""

    version: Literal["4"] = Field(description='webhook payload version; opsbot reads "4" (Alertmanager >= 0.9)')
    groupKey: str = Field(max_length=4096)
    truncatedAlerts: int = Field(0, ge=0)
    status: Literal["firing", "resolved"]
    receiver: str
    groupLabels: dict[str, str] = Field(default_factory=dict)
    commonLabels: dict[str, str] = Field(default_factory=dict)
    commonAnnotations: dict[str, str] = Field(default_factory=dict)
    externalURL: str = ""
    alerts: list[Alert] = Field(max_length=1000)


def alert_scope(alert: Alert, default_cluster: str) -> tuple[str, str]:
    """(cluster, role) an alert is about, from its ``cluster`` and ``role`` labels."""
    labels = alert.labels
    return labels.get("cluster") or default_cluster, labels.get("role") or ALL_ROLES


def dedup_key(alert: Alert) -> str:
    """Same alert, same state: Alertmanager resends it each group_interval and on HA fail-open."""
    return f"{alert.fingerprint}:{alert.status}:{alert.startsAt.isoformat()}"
