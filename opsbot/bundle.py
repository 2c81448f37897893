"""The probe bundle, version 1 (../shared/spec/probe-bundle-v1.md): raw evidence of one probe.

These models are the public contract between collect (which fills them), the store (which
keeps them) and parse/diagnose (which read them). Unknown fields are kept and ignored.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

SCHEMA = "opsbot/probe-bundle@1"

SYSTEMD_PROPERTIES = (
    "Id,LoadState,ActiveState,SubState,Result,NRestarts,ExecMainStatus,ExecMainCode,"
    "ExecMainStartTimestamp,ActiveEnterTimestamp,StateChangeTimestamp,MainPID,MemoryCurrent"
)
GPU_QUERY = "index,uuid,name,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw"

TriggerKind = Literal["cli", "rest", "slack", "alert", "schedule"]


def utcnow() -> str:
    """RFC 3339 UTC timestamp with milliseconds."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Envelope(_Open):
    ok: bool
    error: str | None = None
    elapsed_ms: float = 0.0


class Trigger(_Open):
    kind: TriggerKind = "cli"
    text: str | None = None
    user: str | None = None
    alerts: list[str] = Field(default_factory=list)


class SystemdEvidence(Envelope):
    raw: str = ""


class MetricSample(_Open):
    at: str
    raw: str


class MetricsEvidence(Envelope):
    samples: list[MetricSample] = Field(default_factory=list)


class HealthEvidence(Envelope):
    endpoint: str = "/health"
    status: int | None = None
    body: str = ""


class LogsEvidence(Envelope):
    since: str = ""
    raw: str = ""
    truncated: bool = False


class RoleEvidence(_Open):
    role: Literal["prefill", "decode", "router"]
    node: str
    unit: str
    name: str | None = None
    gpus: list[int] = Field(default_factory=list, description="GPU indices the inventory gives the role")
    systemd: SystemdEvidence
    metrics: MetricsEvidence
    health: HealthEvidence
    logs: LogsEvidence

    @property
    def key(self) -> str:
        return self.name or self.role


class GpuEvidence(Envelope):
    query: str = GPU_QUERY
    raw: str = ""


class KernelLogEvidence(Envelope):
    raw: str = ""


class NodeEvidence(_Open):
    node: str
    gpu: GpuEvidence
    kernel_log: KernelLogEvidence | None = None


class Canary(Envelope):
    """One short completion through the router: the only check that moves KV from prefill to decode."""

    endpoint: str = ""
    model: str | None = None
    status: int | None = None
    ttft_ms: float | None = None
    total_ms: float | None = None
    tokens: int | None = None
    body: str | None = None


class RecallCase(_Open):
    tokens: int
    depth: float
    filler: str = "prose"
    distractors: int = 0
    needle: str = ""
    found: bool | None = None
    answer: str | None = None
    elapsed_ms: float | None = None
    error: str | None = None


class Recall(_Open):
    model: str | None = None
    endpoint: str = ""
    tokenizer: str | None = Field(None, description="whose tokens the lengths are in: the server's endpoint or a local tokenizer")
    started_at: str | None = None
    cases: list[RecallCase] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="lengths skipped and other things said about the run")


class Bundle(_Open):
    schema_: Literal["opsbot/probe-bundle@1"] = Field(SCHEMA, alias="schema")
    id: str = Field(default_factory=lambda: uuid.uuid4().hex[:16])
    cluster: str
    trigger: Trigger = Field(default_factory=Trigger)
    started_at: str
    finished_at: str
    roles: list[RoleEvidence] = Field(default_factory=list)
    nodes: list[NodeEvidence] = Field(default_factory=list)
    canary: Canary | None = None
    recall: Recall | None = None

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _optional_sections(cls, data: object) -> object:
        """A malformed ``canary`` or ``recall`` is dropped and listed in ``section_problems``, not a refusal."""
        if not isinstance(data, dict):
            return data
        problems: list[str] = []
        for name, model in (("canary", Canary), ("recall", Recall)):
            value = data.get(name)
            if value is None or isinstance(value, model):
                continue
            try:
                model.model_validate(value)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in (name, *first["loc"]))
                problems.append(f"{where}: {first['msg']} (section ignored)")
                data = {**data, name: None}
        if problems:
            data = {**data, "section_problems": [*data.get("section_problems", []), *problems]}
        return data

    def to_json(self, indent: int | None = 2) -> str:
        return self.model_dump_json(by_alias=True, indent=indent, exclude_none=False)

    def role(self, key: str) -> RoleEvidence | None:
        return next((r for r in self.roles if r.key == key or r.role == key), None)

    def node(self, name: str) -> NodeEvidence | None:
        return next((n for n in self.nodes if n.node == name), None)


class BundleError(ValueError):
    """A file that is not a readable version-1 bundle."""


def parse_bundle(text: str, source: str = "bundle") -> Bundle:
    """Validate bundle JSON, refusing other schema versions and truncated files clearly."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BundleError(f"{source}: not valid JSON (truncated?) at line {exc.lineno} column {exc.colno}: {exc.msg}")
    if not isinstance(data, dict):
        raise BundleError(f"{source}: a bundle is a JSON object")
    schema = data.get("schema")
    if schema != SCHEMA:
        raise BundleError(f"{source}: schema is {schema!r}; this opsbot reads {SCHEMA!r}")
    try:
        return Bundle.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise BundleError(f"{source}: {where}: {first['msg']} ({exc.error_count()} problem(s))") from exc


def read_bundle(path: Path) -> Bundle:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BundleError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return parse_bundle(text, str(path))
