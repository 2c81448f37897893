"""Runbooks: one reviewed YAML file per incident class, validated and compiled once.

A file that does not load (YAML syntax, schema, CEL, unknown facts, unknown incident id) is
refused with its file and line and left out of the set; the other runbooks still run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Literal, get_args

import jinja2
import jinja2.sandbox
from jinja2 import nodes
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from opsbot.contracts.captures import PartKind
from opsbot.contracts.states import Severity
from opsbot.diagnose.conditions import Condition, ConditionError
from opsbot.diagnose.exception_table import EXCEPTIONS_FILE, ExceptionTable, load_exception_table
from opsbot.diagnose.incidents import INCIDENT_IDS, NOT_BY_RUNBOOK
from opsbot.parse.lines import linear, linear_error, refusal
from opsbot.parse.logs import Pattern
from opsbot.parse.facts import (
    PROGRESS_SOURCES, REQUEST_FAMILIES, ROUTING_ERROR_COUNTERS, ROUTING_GAUGES, TRANSFER_QUEUES, unknown_fact,
)
from opsbot.yamlsource import ConfigError, ConfigProblem, problems_from, read_yaml

RoleKind = Literal["prefill", "decode", "router"]
ROLE_KINDS: tuple[RoleKind, ...] = get_args(RoleKind)

PATTERNS_FILE = "patterns.yaml"


class _Strict(BaseModel):
    # validators built on the first file read: with the compiled set from the cache, none is (runbook_cache.py)
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class RemedySpec(_Strict):
    # ladder: reregister = remove and re-add, through the router's worker API, the workers it marks down while
    # their engines answer (opsbot/act/reregister.py); offered before a restart listed after it
    kind: Literal["restart", "reregister", "config", "no-restart", "manual"]
    role: RoleKind | None = Field(None, description="the role it acts on; default: the role the runbook matched")
    approval: Literal["required", "none"] = "none"
    text: str
    when: str | None = Field(None, description="CEL: offer this remedy only when it holds (e.g. not while systemd restarts it)")
    capture: list[PartKind] | None = Field(
        None, description="restart: the evidence taken before it runs (stacks, server_info, requests, journal); "
        "[] only when nothing is alive to capture")

    @model_validator(mode="after")
    def _restart_needs_approval(self) -> RemedySpec:
        if self.kind in ("restart", "reregister") and self.approval != "required":
            raise ValueError(f"a {self.kind} always needs approval: write approval: required")
        if self.kind == "reregister" and self.role not in (None, "router"):
            raise ValueError("reregister goes through the router's worker API: write role: router")
        if self.kind == "restart" and self.capture is None:
            raise ValueError("a restart says what it captures first: write capture: [stacks, server_info, requests, "
                             "journal] for a role that is alive, capture: [] for one that is not")
        if self.kind != "restart" and self.capture:
            raise ValueError("only a restart captures evidence first: remove capture")
        return self


class DecideSpec(_Strict):
    """What would tell this class apart from another one that may also hold."""

    vs: str = Field(description="the other incident id")
    when: str | None = Field(None, description="CEL: also say it when this holds (else only when vs is found too)")
    text: str = Field(description="the evidence that decides, e.g. 'a second probe in 60 s: NRestarts moving means crash loop'")
    second_look: bool = Field(False, description="a second probe decides it: `opsbot ask --second-look` takes it")

    @field_validator("vs")
    @classmethod
    def _known_vs(cls, v: str) -> str:
        if v not in INCIDENT_IDS:
            raise ValueError(f"{v!r} is not an incident id of spec/incidents.md")
        return v


# where an ``explains`` entry applies: "" a role both share, or after "@" in ``id@scope``
_SCOPES = frozenset({"", "node", "other", "any"})


class RunbookSpec(_Strict):
    id: str
    title: str
    severity: Severity
    roles: list[RoleKind] = Field(min_length=1, description="the role kinds the condition is evaluated for")
    affects: list[RoleKind] = Field(default_factory=list, description="other roles whose symptoms it causes")
    when: str = Field(min_length=1, description="CEL condition over the facts (runbooks/README.md)")
    needs: list[str] = Field(default_factory=list, description="facts without which the answer is unknown")
    summary: str
    evidence: list[str] = Field(min_length=1)
    explain: str
    remedies: list[RemedySpec] = Field(min_length=1)
    explains: list[str] = Field(
        default_factory=list,
        description="incident ids this one accounts for on a role it shares; 'id@node' on a role of the same node, "
        "'id@other' on a role it does not share, 'id@any' on any role of the bundle",
    )
    confidence: float = Field(0.9, gt=0.0, le=1.0)
    decide: list[DecideSpec] = Field(default_factory=list, description="evidence that tells it apart from close classes")

    @field_validator("id")
    @classmethod
    def _known_id(cls, v: str) -> str:
        if v not in INCIDENT_IDS:
            raise ValueError(f"{v!r} is not an incident id of spec/incidents.md; use one of {sorted(INCIDENT_IDS)}")
        if v in NOT_BY_RUNBOOK:
            raise ValueError(f"{v!r} is not diagnosed by a runbook")
        return v

    @field_validator("explains")
    @classmethod
    def _known_explained(cls, v: list[str]) -> list[str]:
        bad = [x for x in v if x.split("@", 1)[0] not in INCIDENT_IDS or x.partition("@")[2] not in _SCOPES]
        if bad:
            raise ValueError(f"unknown incident id(s) {bad}; use ids of spec/incidents.md")
        return v


class PatternSpec(_Strict):
    regex: str
    unless: str | None = Field(None, description="a line that also matches this is not counted")
    words: list[str] = Field(
        default_factory=list,
        description="plain text of which a line must hold one before the regex runs (speed: a substring test is cheap)",
    )
    source: str = Field(description="where the string comes from (SGLang file and versions)")
    examples: list[str] = Field(default_factory=list, description="real lines it must match")


class PatternFile(_Strict):
    patterns: dict[str, PatternSpec]

    @field_validator("patterns")
    @classmethod
    def _names(cls, v: dict[str, PatternSpec]) -> dict[str, PatternSpec]:
        for name in v:
            if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
                raise ValueError(f"pattern name {name!r}: use lower-case letters, digits and '_'")
        return v


_TEMPLATES = jinja2.sandbox.ImmutableSandboxedEnvironment(
    undefined=jinja2.ChainableUndefined,
    autoescape=False,
    finalize=lambda v: "n/a" if isinstance(v, jinja2.Undefined) or v is None else _fmt(v),
)


def _fmt(v: object) -> object:
    if isinstance(v, float):
        return int(v) if v.is_integer() and abs(v) < 1e15 else float(f"{v:.4g}")
    return v


@dataclass(frozen=True)
class Template:
    """A runbook text: turned into Python source at load (which checks syntax and filters), into a
    code object on its first render.

    Most texts of most runbooks are never rendered in a process; compiling all of them up front was
    a third of ``opsbot diagnose``'s start. The Python source is kept with the compiled runbook set
    (runbook_cache.py), so a render there neither lexes nor parses the text again.
    """

    source: str
    python: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # raises TemplateSyntaxError as from_string would
        object.__setattr__(self, "python", _TEMPLATES.compile(self.source, raw=True))

    def render(self, scope: dict[str, Any]) -> str:
        return _compiled(self.python).render(scope)


@lru_cache(maxsize=None)
def _compiled(python: str) -> jinja2.Template:
    """What ``from_string`` gives, from the Python it generated (jinja2's own loaders do the same from bytecode)."""
    return _TEMPLATES.template_class.from_code(_TEMPLATES, compile(python, "<template>", "exec"),
                                               _TEMPLATES.make_globals(None), None)


def template_paths(source: str) -> set[str]:
    """The dotted names a template reads, e.g. ``roles.decode.logs.abort_req`` (``x["y"]`` too)."""
    out: set[str] = set()

    def chain(node: nodes.Node) -> list[str] | None:
        if isinstance(node, nodes.Name):
            return [node.name]
        if isinstance(node, nodes.Getattr):
            head = chain(node.node)
            return head + [node.attr] if head else None
        if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
            head = chain(node.node)
            return head + [node.arg.value] if head else None
        return None

    def walk(node: nodes.Node) -> None:
        names = chain(node)
        if names:
            out.add(".".join(names))
            return
        for child in node.iter_child_nodes():
            walk(child)

    walk(_TEMPLATES.parse(source))
    return out


@dataclass(frozen=True)
class Runbook:
    """A runbook whose condition and templates are compiled, ready to evaluate."""

    spec: RunbookSpec
    path: Path
    condition: Condition
    summary: Template
    evidence: tuple[Template, ...]
    remedy_texts: tuple[Template, ...]

    @property
    def id(self) -> str:
        return self.spec.id

    decide_conditions: tuple[Condition | None, ...] = ()
    remedy_conditions: tuple[Condition | None, ...] = ()

    def explains(self, incident: str, shared_role: bool, shared_node: bool = False) -> bool:
        """Whether a finding of ``incident`` is accounted for by this runbook's finding: ``id`` on a role
        they share, ``id@node`` on a role of the same node, ``id@other`` on a role they do not share (what a
        dead role's peers see, while on that role itself a class naming what killed it outranks it),
        ``id@any`` on any role."""
        ex = self.spec.explains
        return (f"{incident}@any" in ex or (shared_role and incident in ex)
                or ((shared_role or shared_node) and f"{incident}@node" in ex)
                or (not shared_role and f"{incident}@other" in ex))


@dataclass
class RunbookSet:
    runbooks: list[Runbook] = field(default_factory=list)
    patterns: list[Pattern] = field(default_factory=list)
    problems: list[ConfigProblem] = field(default_factory=list)
    exceptions: ExceptionTable = field(default_factory=ExceptionTable)

    def ids(self) -> list[str]:
        return [r.id for r in self.runbooks]

    @cached_property
    def cel_reads(self) -> dict[str, dict[str, Any]]:
        """Per role kind, the tree of fact paths its runbooks' CEL (``when``, ``decide``, remedies'
        ``when``) reads: ``{"unit": {"active_state": None}, "failed": None}``, None = the whole value.
        Only these are handed to CEL, whose conversion of a Python map costs per key (the ``roles`` map
        of every peer's facts alone was two thirds of the runbook step)."""
        trees: dict[str, dict[str, Any]] = {kind: {} for kind in ROLE_KINDS}
        for rb in self.runbooks:
            conditions = (rb.condition, *rb.decide_conditions, *rb.remedy_conditions)
            paths = {p for c in conditions if c for p in c.facts}
            for kind in rb.spec.roles:
                for path in paths:
                    _add_path(trees[kind], path.split("."))
        return trees

    @cached_property
    def metric_facts(self) -> dict[str, frozenset[str] | None]:
        """Per role kind, the ``metrics``/``delta``/``rate`` fact names conditions and templates read.

        A runbook reads its own roles' facts, and ``roles.<kind>.…`` those of another kind
        (``roles.<instance>.…``: of any kind). None for a kind whose whole group is read
        (``"x" in metrics``, ``{{ roles.decode }}``): then every family has to be parsed.
        """
        wanted: dict[str, set[str] | None] = {kind: set() for kind in ROLE_KINDS}
        for rb in self.runbooks:
            spec = rb.spec
            texts = [spec.summary, *spec.evidence, *(r.text for r in spec.remedies)]
            for path in {*rb.condition.facts, *spec.needs, *(p for t in texts for p in template_paths(t))}:
                parts, kinds = path.split("."), list(spec.roles)
                if parts[0] == "roles":
                    kinds = [parts[1]] if len(parts) > 1 and parts[1] in ROLE_KINDS else list(ROLE_KINDS)
                    parts = parts[2:]
                    if not parts:
                        wanted.update(dict.fromkeys(kinds))
                        continue
                if parts[0] == "progress":  # the best source; older ones are FALLBACK_METRICS, read when it is absent
                    parts = ["metrics", *(srcs[0][1] for srcs in PROGRESS_SOURCES.values()), *TRANSFER_QUEUES]
                elif parts[0] == "routing":
                    parts = ["metrics", *ROUTING_ERROR_COUNTERS, *ROUTING_GAUGES]
                elif parts[0] not in ("metrics", "delta", "rate", "requests"):
                    continue
                for kind in kinds:
                    names = wanted[kind]
                    if parts[0] == "requests":  # the request side of each kind of role (parse/facts.py _requests)
                        if names is not None:
                            names.update(REQUEST_FAMILIES["router" if kind == "router" else "engine"])
                    elif len(parts) < 2:
                        wanted[kind] = None
                    elif names is not None:
                        names.update(parts[1:])
        return {kind: None if names is None else frozenset(names) for kind, names in wanted.items()}


def _add_path(tree: dict[str, Any], parts: list[str]) -> None:
    """Put a dotted path into a read tree; a path that ends at a node reads all of it."""
    head, rest = parts[0], parts[1:]
    if not rest:
        tree[head] = None
    elif head not in tree:
        tree[head] = {}
        _add_path(tree[head], rest)
    elif tree[head] is not None:
        _add_path(tree[head], rest)


def pick(facts: dict[str, Any], tree: dict[str, Any]) -> dict[str, Any]:
    """The part of nested ``facts`` a read tree names (absent stays absent, so ``has()`` is unchanged)."""
    out = {}
    for key, sub in tree.items():
        if key in facts:
            value = facts[key]
            out[key] = pick(value, sub) if sub is not None and isinstance(value, dict) else value
    return out


def load_patterns(path: Path) -> tuple[list[Pattern], list[ConfigProblem]]:
    """Compile the named log patterns; a bad regex is refused with its line, the others kept."""
    try:
        data, lines = read_yaml(path)
        spec = PatternFile.model_validate(data)
    except ConfigError as exc:
        return [], exc.problems
    except ValidationError as exc:
        return [], problems_from(exc, path, lines)
    out, problems = [], []
    for name, p in spec.patterns.items():
        try:
            out.append(Pattern(name, linear(p.regex), linear(p.unless) if p.unless else None, tuple(p.words)))
        except linear_error as exc:  # RE2's syntax: no lookaround, no backreference (matching stays linear)
            problems.append(ConfigProblem(str(path), lines.line_of(("patterns", name)), f"patterns.{name}",
                                          f"bad regex (RE2 syntax, linear-time): {refusal(exc)}"))
    return out, problems


def compile_runbook(path: Path, pattern_names: set[str]) -> Runbook:
    """Load, validate and compile one runbook file, or raise ``ConfigError`` naming file and line."""
    data, lines = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError([ConfigProblem(str(path), 1, "", "expected a mapping at the top level")])
    try:
        spec = RunbookSpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(problems_from(exc, path, lines)) from exc
    problems: list[ConfigProblem] = []
    if path.stem != spec.id:
        problems.append(ConfigProblem(str(path), lines.line_of(("id",)), "id", f"the file of runbook {spec.id!r} is named {spec.id}.yaml"))
    condition = None
    try:
        condition = Condition(spec.when)
    except ConditionError as exc:
        problems.append(ConfigProblem(str(path), lines.line_of(("when",)), "when", str(exc)))
    if condition is not None:
        for fact in sorted(set(condition.facts) | set(spec.needs)):
            why = unknown_fact(fact, pattern_names)
            if why:
                where = "needs" if fact in spec.needs and fact not in condition.facts else "when"
                problems.append(ConfigProblem(str(path), lines.line_of((where,)), where, why))
    templates = []
    for key, items in (("summary", [spec.summary]), ("evidence", spec.evidence), ("remedies", [r.text for r in spec.remedies])):
        compiled = []
        for i, text in enumerate(items):
            try:
                compiled.append(Template(text))
            except jinja2.TemplateSyntaxError as exc:
                loc = (key,) if key == "summary" else (key, i)
                problems.append(ConfigProblem(str(path), lines.line_of(loc), ".".join(map(str, loc)), f"template: {exc.message}"))
        templates.append(tuple(compiled))
    remedy_conds = _optional_conditions([r.when for r in spec.remedies], "remedies", path, lines, pattern_names, problems)
    decides = _optional_conditions([d.when for d in spec.decide], "decide", path, lines, pattern_names, problems)
    if problems:
        raise ConfigError(problems)
    assert condition is not None
    return Runbook(spec, path, condition, templates[0][0], templates[1], templates[2], tuple(decides), tuple(remedy_conds))


def load_runbooks(directory: Path = Path("runbooks")) -> RunbookSet:
    """Every runbook in ``directory`` that loads; the refused ones are listed in ``problems``."""
    rs = RunbookSet()
    if not directory.is_dir():
        rs.problems.append(ConfigProblem(str(directory), None, "", "no runbook directory here; pass the path to runbooks/"))
        return rs
    patterns_path = directory / PATTERNS_FILE
    if patterns_path.exists():
        rs.patterns, rs.problems = load_patterns(patterns_path)
    rs.exceptions, table_problems = load_exception_table(directory / EXCEPTIONS_FILE)
    rs.problems += table_problems
    names = {p.name for p in rs.patterns}
    seen: dict[str, Path] = {}
    for path in sorted(directory.glob("*.yaml")):
        if path.name in (PATTERNS_FILE, EXCEPTIONS_FILE):
            continue
        try:
            rb = compile_runbook(path, names)
        except ConfigError as exc:
            rs.problems.extend(exc.problems)
            continue
        if rb.id in seen:
            rs.problems.append(ConfigProblem(str(path), 1, "id", f"runbook {rb.id!r} is already defined in {seen[rb.id]}"))
            continue
        seen[rb.id] = path
        rs.runbooks.append(rb)
    return rs


def _optional_conditions(whens: list[str | None], key: str, path: Path, lines: Any, pattern_names: set[str],
                         problems: list[ConfigProblem]) -> list[Condition | None]:
    """Compile each item's optional ``when`` (remedies, decide), listing bad CEL and unknown facts as problems."""
    out: list[Condition | None] = []
    for i, when in enumerate(whens):
        where, loc = f"{key}.{i}.when", (key, i, "when")
        try:
            cond = Condition(when) if when else None
        except ConditionError as exc:
            problems.append(ConfigProblem(str(path), lines.line_of(loc), where, str(exc)))
            continue
        out.append(cond)
        for fact in cond.facts if cond else ():
            if why := unknown_fact(fact, pattern_names):
                problems.append(ConfigProblem(str(path), lines.line_of(loc), where, why))
    return out
