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

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

SCHEMA: Literal["opsbot/probe-bundle@1"] = "opsbot/probe-bundle@1"

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
    """Unknown fields are kept; a null where the field has a default reads as the field being absent."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        return {k: v for k, v in data.items() if v is not None or not _has_default(cls, k)}


def _has_default(model: type[BaseModel], name: str) -> bool:
    f = model.model_fields.get(name) or next((x for x in model.model_fields.values() if x.alias == name), None)
    return f is not None and not f.is_required()


class Envelope(_Open):
    ok: bool = Field(False, description="absent: true when there is no error and something was collected")
    error: str | None = None
    elapsed_ms: float = 0.0

    @model_validator(mode="before")
    @classmethod
    def _ok_when_absent(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("ok") is None:
            content = any(data.get(k) not in (None, "", []) for k in ("raw", "samples", "status", "body"))
            return {**data, "ok": data.get("error") is None and content}
        return data


class Trigger(_Open):
    kind: TriggerKind = "cli"
    text: str | None = None
    user: str | None = None
    alerts: list[str] = Field(default_factory=list)


class SystemdEvidence(Envelope):
    raw: str = ""


class MetricSample(_Open):
    at: str = ""
    raw: str = ""


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


_NOT_COLLECTED = {"ok": False, "error": "not in the bundle"}


class Canary(Envelope):
    """One short completion through the router: the only check that moves KV from prefill to decode."""

    endpoint: str = ""
    model: str | None = None
    status: int | None = None
    ttft_ms: float | None = None
    total_ms: float | None = None
    tokens: int | None = None
    body: str | None = None
    # why the probe stopped waiting for it: the other axes had already named a class (not evidence either way)
    not_awaited: str | None = None
    # why it was not sent at all (e.g. the server refuses ``routed_dp_rank``): not evidence either way
    skipped: str | None = None


class RankEvidence(_Open):
    """One DP-attention rank of a role: its pinned canary (``routed_dp_rank``). Its metric series stay in the
    role's ``/metrics`` samples (label ``dp_rank``) and are read from there."""

    dp_rank: int = Field(ge=0)
    canary: Canary | None = None


class RoleEvidence(_Open):
    role: Literal["prefill", "decode", "router"]
    node: str = "unknown"
    unit: str = ""
    name: str | None = None
    gpus: list[int] = Field(default_factory=list, description="GPU indices the inventory gives the role")
    systemd: SystemdEvidence = Field(default_factory=lambda: SystemdEvidence(**_NOT_COLLECTED))
    metrics: MetricsEvidence = Field(default_factory=lambda: MetricsEvidence(**_NOT_COLLECTED))
    health: HealthEvidence = Field(default_factory=lambda: HealthEvidence(**_NOT_COLLECTED))
    logs: LogsEvidence = Field(default_factory=lambda: LogsEvidence(**_NOT_COLLECTED))
    ranks: list[RankEvidence] | None = Field(None, description="DP attention: one entry per rank; absent without it")

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
    gpu: GpuEvidence = Field(default_factory=lambda: GpuEvidence(**_NOT_COLLECTED))
    kernel_log: KernelLogEvidence | None = None


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


class FidelityBaseline(_Open):
    id: str = ""
    recorded_at: str | None = None
    model: str | None = None
    tokenizer: str | None = None


class FidelityCase(_Open):
    """One fixed greedy prompt asked of one decode instance (and rank), compared with the baseline."""

    prompt_id: str
    instance: str = ""
    dp_rank: int | None = None
    tokens: list[int] = Field(default_factory=list)
    logprobs: list[float] | None = None
    first_divergence: int | None = None
    logprob_distance: float | None = None
    diverged: bool | None = Field(None, description="beyond the baseline's tolerance; None: not judged")
    error: str | None = None


class Fidelity(_Open):
    baseline: FidelityBaseline | None = None
    cases: list[FidelityCase] = Field(default_factory=list)
    refused: str | None = Field(None, description="why the run was not compared (a baseline of another model)")
    after_deploy: str | None = Field(None, description="the deploy recorded since the baseline, in a line")


class Bundle(_Open):
    schema_: Literal["opsbot/probe-bundle@1"] = Field(SCHEMA, alias="schema")
    id: str = Field(default_factory=lambda: uuid.uuid4().hex[:16])
    cluster: str = ""
    trigger: Trigger = Field(default_factory=Trigger)
    started_at: str = ""
    finished_at: str = ""
    roles: list[RoleEvidence] = Field(default_factory=list)
    nodes: list[NodeEvidence] = Field(default_factory=list)
    canary: Canary | None = None
    recall: Recall | None = None
    fidelity: Fidelity | None = None

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    _problems: list[str] = PrivateAttr(default_factory=list)

    @property
    def problems(self) -> list[str]:
        """What was malformed in the file and left out (``section: why``), as read by ``parse_bundle``."""
        return self._problems

    def to_json(self, indent: int | None = 2) -> str:
        return self.model_dump_json(by_alias=True, indent=indent, exclude_none=False)

    def role(self, key: str) -> RoleEvidence | None:
        return next((r for r in self.roles if r.key == key or r.role == key), None)

    def node(self, name: str) -> NodeEvidence | None:
        return next((n for n in self.nodes if n.node == name), None)


class BundleError(ValueError):
    """A file that is not a readable version-1 bundle."""


# Where a validation error is contained: a role's or node's evidence section, then the entry itself.
_SECTIONS = {("roles", "systemd"), ("roles", "metrics"), ("roles", "health"), ("roles", "logs"), ("roles", "ranks"),
             ("nodes", "gpu"), ("nodes", "kernel_log")}
_LIST_SECTIONS = {("roles", "ranks")}  # optional lists: a malformed one is left out, not read as an envelope
_TOP_OPTIONAL = ("trigger", "recall", "canary", "fidelity", "id", "cluster", "started_at", "finished_at")


def _contain(data: dict, loc: tuple, msg: str) -> str | None:
    """Replace the smallest section holding the error at ``loc``; the problem it lists, or None."""
    head = loc[0] if loc else None
    if head in ("roles", "nodes") and len(loc) >= 2 and isinstance(loc[1], int):
        entries, i = data[head], loc[1]
        if len(loc) >= 3 and (head, loc[2]) in _LIST_SECTIONS and isinstance(entries[i], dict):
            entries[i][loc[2]] = None
            return f"{head}[{i}].{loc[2]}: {msg}; left out"
        if len(loc) >= 3 and (head, loc[2]) in _SECTIONS and isinstance(entries[i], dict):
            entries[i][loc[2]] = {"ok": False, "error": f"malformed in the bundle: {msg}"}
            return f"{head}[{i}].{loc[2]}: {msg}; read as not collected"
        entries[i] = None
        return f"{head}[{i}]: {'.'.join(map(str, loc[2:])) or 'entry'}: {msg}; left out"
    if head in ("roles", "nodes"):
        data[head] = []
        return f"{head}: {msg}; no {head} read"
    if head in _TOP_OPTIONAL:
        data.pop(head, None)
        return f"{head}: {msg}; ignored"
    return None


def _salvage(data: dict, source: str) -> Bundle:
    """Validate, containing every malformed section as a listed problem; a few passes at most, since
    containing a section can only remove errors."""
    problems: list[str] = []
    for _ in range(8):
        for key in ("roles", "nodes"):
            if isinstance(data.get(key), list):
                data[key] = [e for e in data[key] if e is not None]
        try:
            bundle = Bundle.model_validate(data)
        except ValidationError as exc:
            done: set[tuple] = set()
            for error in exc.errors():
                loc = tuple(error["loc"])
                entry = loc[0] in ("roles", "nodes") and len(loc) >= 2 and isinstance(loc[1], int)
                section = loc[:3] if entry and len(loc) >= 3 and (loc[0], loc[2]) in _SECTIONS else loc[:2] if entry else loc[:1]
                if section in done or any(section[: len(d)] == d for d in done):
                    continue
                problem = _contain(data, loc, error["msg"])
                if problem is None:
                    where = ".".join(str(p) for p in loc)
                    raise BundleError(f"{source}: {where}: {error['msg']} ({exc.error_count()} problem(s))") from exc
                problems.append(problem)
                done.add(section)
            continue
        bundle._problems = problems
        return bundle
    raise BundleError(f"{source}: too many malformed sections to read")


def parse_bundle(text: str, source: str = "bundle") -> Bundle:
    """Read bundle JSON as the spec says: nulls are absent, a malformed section is a listed problem
    (``Bundle.problems``) and the rest is read; only a file that is not a bundle is refused."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BundleError(f"{source}: not valid JSON (truncated?) at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise BundleError(f"{source}: JSON nested too deeply to be a bundle") from None
    if not isinstance(data, dict):
        raise BundleError(f"{source}: not a probe bundle: a bundle is a JSON object, this is a JSON {type(data).__name__}")
    schema = data.get("schema")
    if schema is None and not any(isinstance(data.get(k), list) for k in ("roles", "nodes")):
        raise BundleError(f"{source}: not a probe bundle: no 'schema' field and no roles or nodes")
    if schema is not None and schema != SCHEMA:
        raise BundleError(f"{source}: schema is {schema!r}; this opsbot reads {SCHEMA!r}")
    data = {**data, "schema": SCHEMA}
    return _salvage(data, source)


def read_bundle(path: Path) -> Bundle:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BundleError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise BundleError(f"{path}: not a probe bundle: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    return parse_bundle(text, str(path))
