"""The report models: one status report, and the weekly report that extends it with figures.

Every renderer (Markdown, HTML, Slack Block Kit) reads these and nothing else, so what a
report says is decided once, in ``status.py`` / ``weekly.py``.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Literal

from pydantic import BaseModel, Field

from opsbot.parse.figures import RoleFigures

NoteKind = Literal["done", "doing", "blocked", "next"]


class CurrentState(BaseModel):
    probe_id: str | None = None
    cluster: str | None = None
    taken_at: datetime | None = None
    age_s: float | None = None
    fresh: bool = False
    roles: list[RoleFigures] = Field(default_factory=list)
    incidents: list[str] = Field(default_factory=list, description="incident ids of this probe's findings")
    missing: str | None = Field(None, description="why there are no figures, when there are none")


class Incident(BaseModel):
    """An incident class seen in a period: its latest finding, with evidence, and how often it was seen."""

    incident: str
    severity: str
    title: str | None = None
    summary: str | None = None
    roles: list[str] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)
    first_at: datetime
    last_at: datetime
    probes: int = 1
    probe_id: str | None = None


class ActionEntry(BaseModel):
    id: str
    kind: str
    cluster: str
    role: str
    requested_by: str
    surface: str
    approved_by: str | None = None
    approved_surface: str | None = None
    at: datetime
    state: str
    outcome: str | None = None


class NoteEntry(BaseModel):
    kind: NoteKind
    text: str
    actor: str
    at: datetime


class DecisionEntry(BaseModel):
    text: str
    why: str
    actor: str
    at: datetime


class RoleConfig(BaseModel):
    role: str
    node: str
    gpus: list[int] = Field(default_factory=list)
    tp: int | None = None
    numa_node: int | None = None
    mem_fraction_static: float | None = None
    hicache_ratio: float | None = None
    context_length: int | None = None
    transfer_backend: str | None = None
    index_keys: str | None = Field(None, description="index keys the current run shows: 'bf16, seen in the current "
                                   "run at 12:00 (...)', 'fp8 (upstream)', 'patch refused: ...' or 'unknown'")
    index_keys_spec: str | None = Field(None, description="what the serving spec asks for (bf16 or fp8)")


class CriticalContext(BaseModel):
    source: str | None = Field(None, description="the serving spec it was read from")
    deployment: str | None = None
    model: str | None = None
    roles: list[RoleConfig] = Field(default_factory=list)
    admission: str | None = Field(None, description="router admission control, in words")
    router_policy: str | None = None
    prometheus_jobs: list[str] = Field(default_factory=list, description="the prefill and decode scrape jobs")
    missing: str | None = None


class Figure(BaseModel):
    """A weekly figure, this week against the week before; ``missing`` says why a value is absent."""

    key: str
    label: str
    unit: str = ""
    value: float | None = None
    previous: float | None = None
    missing: str | None = None
    lower_is_better: bool = True

    @property
    def change_pct(self) -> float | None:
        if self.value is None or self.previous in (None, 0):
            return None
        return (self.value - self.previous) / abs(self.previous) * 100.0


class Chart(BaseModel):
    key: str
    title: str
    png_base64: str


class RecallDay(BaseModel):
    """One day of recall runs: the longest length every run of the day recalled fully (None: none, or no run)."""

    day: date
    runs: int = 0
    longest_full: int | None = None
    failed: int = 0


class RecallFailure(BaseModel):
    """A recall run that lost needles or could not judge any."""

    at: datetime
    probe_id: str
    cluster: str
    trigger: str
    pattern: str
    longest_full: int | None = None
    threshold: int | None = None
    errors: int = 0


class IncidentRecord(BaseModel):
    """One incident record of the week (the ``incidents`` table): its class, when, how long, what was done."""

    id: str
    incident: str
    cluster: str
    roles: list[str] = Field(default_factory=list)
    first_seen: datetime
    resolved_at: datetime | None = None
    time_to_recovery_s: float | None = None
    actions: list[str] = Field(default_factory=list, description="each action of the incident, in a line")


class Durations(BaseModel):
    """Time to diagnosis / recovery over the incidents of a period, in seconds."""

    count: int = 0
    median_s: float | None = None
    worst_s: float | None = None


class StatusReport(BaseModel):
    kind: Literal["status", "weekly"] = "status"
    title: str
    generated_at: datetime
    since: datetime | None = Field(None, description="start of the period: the last report, or the week's start")
    until: datetime
    goal: str | None = None
    current: CurrentState = Field(default_factory=CurrentState)
    incidents: list[Incident] = Field(default_factory=list)
    actions: list[ActionEntry] = Field(default_factory=list)
    done: list[NoteEntry] = Field(default_factory=list)
    doing: list[NoteEntry] = Field(default_factory=list)
    blocked: list[NoteEntry] = Field(default_factory=list)
    next_steps: list[NoteEntry] = Field(default_factory=list)
    decisions: list[DecisionEntry] = Field(default_factory=list)
    context: CriticalContext = Field(default_factory=CriticalContext)


class WeeklyReport(StatusReport):
    kind: Literal["status", "weekly"] = "weekly"
    week: str
    previous_week: str
    figures: list[Figure] = Field(default_factory=list)
    charts: list[Chart] = Field(default_factory=list)
    by_class: dict[str, int] = Field(default_factory=dict)
    by_class_previous: dict[str, int] = Field(default_factory=dict)
    time_to_diagnosis: Durations = Field(default_factory=Durations)
    time_to_recovery: Durations = Field(default_factory=Durations)
    restarts_by_opsbot: int = 0
    incident_records: list[IncidentRecord] = Field(default_factory=list, description="the week's incident records")
    missing: list[str] = Field(default_factory=list, description="figures that could not be had, and why")
    recall_days: list[RecallDay] = Field(default_factory=list, description="long-context recall per day")
    recall_failed: list[RecallFailure] = Field(default_factory=list, description="recall runs that failed")

    def figure(self, key: str) -> Figure | None:
        return next((f for f in self.figures if f.key == key), None)
