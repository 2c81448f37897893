"""The reviewed table of runbooks/exceptions.yaml: exceptions (type, message, frame, stage) and the
C++ components that write glog lines (by file) → incident classes. First matching rule wins."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from opsbot.diagnose.incidents import INCIDENT_IDS, NOT_BY_RUNBOOK
from opsbot.parse.exceptions import RaisedException, Stage
from opsbot.yamlsource import ConfigError, ConfigProblem, problems_from, read_yaml

EXCEPTIONS_FILE = "exceptions.yaml"


class _Strict(BaseModel):
    # validators built on the first file read: with the compiled set from the cache, none is (runbook_cache.py)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class _Mapped(_Strict):
    incident: str

    @field_validator("incident")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in INCIDENT_IDS or v in NOT_BY_RUNBOOK:
            raise ValueError(f"{v!r} is not an incident id a runbook diagnoses")
        return v


class ExceptionRule(_Mapped):
    type: str | None = Field(None, description="regex searched in the exception's type, e.g. '(^|\\.)OutOfMemoryError$'")
    message: str | None = Field(None, description="regex searched in its message")
    frame: str | None = Field(None, description="regex searched in each of its frames, written 'file:function'")
    innermost: str | None = Field(None, description="regex its innermost frame ('file:function') must match: where it "
                                  "was raised, not only what it passed through")
    under: str | None = Field(None, description="regex one of its frames must match too: the loop it was raised under, "
                              "e.g. a PD event loop")
    stage: list[Stage] = Field(default_factory=list, description="the stages it applies to; empty: any")
    source: str = Field(description="where the type or text comes from (library, file, version)")
    examples: list[str] = Field(default_factory=list, description="'[stage] Type: message' lines the rule must match, "
                                "optionally ' @ file:function > file:function' (its frames, outermost first)")


class ComponentRule(_Mapped):
    file: str = Field(description="regex fully matching the base name of the file a glog line names")
    crash: str | None = Field(None, description="regex searched in a native crash dump's frames (path:function)")
    library: str | None = Field(None, description="the library a line names in its own format (UCX); set, the rule "
                                "matches only that library's lines, whatever the file")
    source: str
    examples: list[str] = Field(default_factory=list, description="file names it must match")


class ExceptionFile(_Strict):
    exceptions: list[ExceptionRule]
    components: dict[str, ComponentRule] = Field(default_factory=dict)


@dataclass(frozen=True)
class _Compiled:
    incident: str
    type: re.Pattern[str] | None
    message: re.Pattern[str] | None
    stages: frozenset[str]
    frame: re.Pattern[str] | None = None
    under: re.Pattern[str] | None = None
    innermost: re.Pattern[str] | None = None

    @property
    def by_stage_only(self) -> bool:
        """A rule that names no type, text or frame: the catch-all of its stage."""
        return self.type is None and self.message is None and self.frame is None and self.under is None and self.innermost is None

    def matches(self, exc: RaisedException) -> bool:
        return (
            (not self.stages or exc.stage in self.stages)
            and (self.type is None or self.type.search(exc.type) is not None)
            and (self.message is None or self.message.search(exc.message) is not None)
            and (self.frame is None or _any_frame(self.frame, exc))
            and (self.under is None or _any_frame(self.under, exc))
            and (self.innermost is None or _innermost(self.innermost, exc))
        )


def _any_frame(rx: re.Pattern[str], exc: RaisedException) -> bool:
    return any(rx.search(f"{file}:{func}") for file, func in zip(exc.files, exc.frames))


def _innermost(rx: re.Pattern[str], exc: RaisedException) -> bool:
    """Whether the frame it was raised in (the last printed, frames being outermost first) matches ``rx``."""
    return bool(exc.frames and exc.files) and rx.search(f"{exc.files[-1]}:{exc.frames[-1]}") is not None


@dataclass(frozen=True)
class ExceptionTable:
    rules: tuple[_Compiled, ...] = ()
    components: tuple[tuple[str, re.Pattern[str], str, str | None], ...] = ()  # (name, file regex, incident, library)
    crashes: tuple[tuple[str, re.Pattern[str], str], ...] = ()  # (name, crash-frame regex, incident)

    def incident(self, exc: RaisedException) -> str | None:
        """The class the first matching rule gives ``exc``, or None."""
        return next((r.incident for r in self.rules if r.matches(exc)), None)

    def named(self, exc: RaisedException) -> bool:
        """Whether the rule that classes ``exc`` names it (type, text, frame) rather than only its stage:
        a named class says more about a crash loop's cause than the stage's catch-all."""
        return next((not r.by_stage_only for r in self.rules if r.matches(exc)), False)

    def component(self, file: str, library: str | None = None) -> tuple[str, str] | None:
        """(component, incident) for a glog line's file (and the library its format names), or None."""
        return next(((name, inc) for name, rx, inc, lib in self.components if lib == library and rx.fullmatch(file)), None)

    def crash_component(self, frames: list[str]) -> tuple[str, str] | None:
        """(component, incident) of the first component a native crash dump's frames pass through."""
        for frame in frames:
            for name, rx, inc in self.crashes:
                if rx.search(frame):
                    return name, inc
        return None


def parse_example(line: str) -> RaisedException:
    """``[stage] Type: message @ file:function > file:function`` (stage and frames optional, outermost first) → an
    exception to test a rule on."""
    stage = "unknown"
    m = re.match(r"^\[(startup|serving|unknown)\]\s*(.*)$", line)
    if m:
        stage, line = m[1], m[2]
    line, _, frames = line.partition(" @ ")
    split = [frame.strip().rpartition(":") for frame in frames.split(" > ")] if frames else []
    type_, _, msg = line.partition(": ")
    return RaisedException(type_.strip(), msg, stage=stage, files=tuple(f for f, _, _ in split),  # type: ignore[arg-type]
                           frames=tuple(func for _, _, func in split))


def load_exception_table(path: Path) -> tuple[ExceptionTable, list[ConfigProblem]]:
    """Compile the table; a bad file or regex is listed (with its line) and that rule left out."""
    if not path.exists():
        return ExceptionTable(), []
    try:
        data, lines = read_yaml(path)
        spec = ExceptionFile.model_validate(data)
    except ConfigError as exc:
        return ExceptionTable(), exc.problems
    except ValidationError as exc:
        return ExceptionTable(), problems_from(exc, path, lines)
    rules, components, crashes, problems = [], [], [], []
    for i, r in enumerate(spec.exceptions):
        try:
            rules.append(_Compiled(r.incident, re.compile(r.type) if r.type else None,
                                   re.compile(r.message) if r.message else None, frozenset(r.stage),
                                   re.compile(r.frame) if r.frame else None, re.compile(r.under) if r.under else None,
                                   re.compile(r.innermost) if r.innermost else None))
        except re.error as exc:
            problems.append(ConfigProblem(str(path), lines.line_of(("exceptions", i)), f"exceptions.{i}", f"bad regex: {exc}"))
    for name, c in spec.components.items():
        try:
            components.append((name, re.compile(c.file), c.incident, c.library))
            if c.crash:
                crashes.append((name, re.compile(c.crash), c.incident))
        except re.error as exc:
            problems.append(ConfigProblem(str(path), lines.line_of(("components", name)), f"components.{name}", f"bad regex: {exc}"))
    return ExceptionTable(tuple(rules), tuple(components), tuple(crashes)), problems


def example_problems(path: Path) -> list[ConfigProblem]:
    """Rules whose own examples the table does not send to their class (an earlier rule wins, or no match)."""
    try:
        data, lines = read_yaml(path)
        spec = ExceptionFile.model_validate(data)
    except (ConfigError, ValidationError):
        return []  # load_exception_table reports these
    table, _ = load_exception_table(path)
    out = []
    for i, r in enumerate(spec.exceptions):
        for j, example in enumerate(r.examples):
            got = table.incident(parse_example(example))
            if got != r.incident:
                out.append(ConfigProblem(str(path), lines.line_of(("exceptions", i, "examples", j)), f"exceptions.{i}.examples.{j}",
                                         f"the table gives this example {got}, not {r.incident}"))
    for name, c in spec.components.items():
        for j, example in enumerate(c.examples):
            if table.component(example, c.library) != (name, c.incident):
                out.append(ConfigProblem(str(path), lines.line_of(("components", name, "examples", j)),
                                         f"components.{name}.examples.{j}", "the table does not give this file to the component"))
    return out
