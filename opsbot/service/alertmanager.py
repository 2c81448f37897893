"""The Alertmanager webhook payload, version 4, and how an alert maps to a probe scope.

Pure: models and functions of data. Unknown fields are kept (Alertmanager adds fields over
releases: ``notification_reason`` in 0.32, ``routeLabels`` in 0.34), so new senders still parse.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from opsbot.inventory import NAME_RE

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
    fingerprint: str = Field(min_length=1, max_length=64)

    @field_validator("labels")
    @classmethod
    def _scope_labels(cls, labels: dict[str, str]) -> dict[str, str]:
        for key in ("cluster", "role"):
            if key in labels and not NAME_RE.match(labels[key]):
                raise ValueError(f"label {key}={labels[key][:80]!r}: use lower-case letters, digits and '-' (an inventory name)")
        if len(labels.get("alertname", "")) > 200:
            raise ValueError("label alertname: at most 200 characters")
        return labels

    @property
    def ends(self) -> datetime | None:
        """``endsAt``, or None for Alertmanager's zero time on firing alerts."""
        return self.endsAt if self.endsAt is not None and self.endsAt.year > 1 else None


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

