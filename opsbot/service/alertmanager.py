"""The Alertmanager webhook payload, version 4, and how an alert maps to a probe scope.

Pure: models and functions of data. Unknown fields are kept (Alertmanager adds fields over
releases: ``notification_reason`` in 0.32, ``routeLabels`` in 0.34), so new senders still parse.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from opsbot.inventory import NAME_RE

ALL_ROLES = "*"


def _storable(text: str) -> str:
    """Text every backend keeps as sent: a NUL (PostgreSQL refuses it) becomes ``\\x00`` and a lone
    surrogate (not UTF-8; SQLite refuses it) ``\\udXXX``, so the alert is stored and shown escaped
    instead of failing its whole notification, which Alertmanager would retry forever."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _fingerprint(text: str) -> str:
    """A fingerprint that escaping made longer than its column is kept as its SHA-256 (still one key)."""
    return text if len(text) <= 64 else hashlib.sha256(text.encode()).hexdigest()


def _rfc3339_text(value: object) -> object:
    """Times come as RFC 3339 strings; a bare number is refused (the schema says string)."""
    if not isinstance(value, (str, datetime)):
        raise ValueError("write an RFC 3339 time such as 2026-12-01T09:00:00Z")
    return value


def _json_number(value: object) -> object:
    """A JSON number (3 and 3.0 alike, as JSON Schema's integer); not a string or a boolean."""
    if isinstance(value, (bool, str)):
        raise ValueError("write a number")
    return value


Text = Annotated[str, AfterValidator(_storable)]
Labels = dict[Text, Text]
Time = Annotated[datetime, BeforeValidator(_rfc3339_text)]
Fingerprint = Annotated[str, StringConstraints(min_length=1, max_length=64), AfterValidator(_storable),
                        AfterValidator(_fingerprint)]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


# FNV-1a 64 over the sorted label names and values, each followed by the byte 255: what
# Alertmanager's alerts carry as their fingerprint (prometheus/common v0.70 model/signature.go
# labelSetToFingerprint, model/fnv.go, model/fingerprinting.go prints it as %016x).
_FNV_OFFSET64, _FNV_PRIME64, _SEPARATOR = 14695981039346656037, 1099511628211, 255


def label_fingerprint(labels: dict[str, str]) -> str:
    """The fingerprint Alertmanager computes from an alert's labels (``LabelSet.Fingerprint()``)."""
    h = _FNV_OFFSET64
    for name in sorted(labels):
        for byte in (*name.encode(errors="surrogatepass"), _SEPARATOR, *labels[name].encode(errors="surrogatepass"),
                     _SEPARATOR):  # surrogatepass: a lone surrogate (stored escaped) must not make it fail
            h = ((h ^ byte) * _FNV_PRIME64) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


class Alert(_Open):
    status: Literal["firing", "resolved"]
    labels: Labels = Field(default_factory=dict)
    annotations: Labels = Field(default_factory=dict)
    startsAt: Time
    endsAt: Time | None = None
    generatorURL: Text = ""
    # optional in the schema as in the payload: absent (or null) before Alertmanager 0.19, then computed
    fingerprint: Fingerprint | None = Field(None, description="absent before Alertmanager 0.19: computed from the labels")

    @model_validator(mode="before")
    @classmethod
    def _fingerprint_from_labels(cls, data: object) -> object:
        """Version-4 webhooks of Alertmanager before 0.19 carry no fingerprint: compute it as it does."""
        if isinstance(data, dict) and data.get("fingerprint") is None:
            labels = data.get("labels") or {}
            if isinstance(labels, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
                return {**data, "fingerprint": label_fingerprint(labels)}
        return data

    @field_validator("labels")
    @classmethod
    def _scope_labels(cls, labels: dict[str, str]) -> dict[str, str]:
        for key in ("cluster", "role"):
            if key in labels and not NAME_RE.fullmatch(labels[key]):
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
    groupKey: Text = Field(max_length=4096)
    truncatedAlerts: Annotated[int, BeforeValidator(_json_number)] = Field(0, ge=0)
    status: Literal["firing", "resolved"]
    receiver: Text
    groupLabels: Labels = Field(default_factory=dict)
    commonLabels: Labels = Field(default_factory=dict)
    commonAnnotations: Labels = Field(default_factory=dict)
    externalURL: Text = ""
    alerts: list[Alert] = Field(max_length=1000)


def alert_scope(alert: Alert, default_cluster: str) -> tuple[str, str]:
    """(cluster, role) an alert is about, from its ``cluster`` and ``role`` labels."""
    labels = alert.labels
    return labels.get("cluster") or default_cluster, labels.get("role") or ALL_ROLES

