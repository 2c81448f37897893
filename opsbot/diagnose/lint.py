"""``lint``: every problem in a runbook directory, for ``opsbot runbooks lint`` and CI."""

from __future__ import annotations

from pathlib import Path

from opsbot.diagnose.exception_table import EXCEPTIONS_FILE, example_problems
from opsbot.diagnose.incidents import INCIDENT_IDS, NOT_BY_RUNBOOK
from opsbot.diagnose.runbook import PATTERNS_FILE, PatternFile, load_patterns, load_runbooks
from opsbot.yamlsource import ConfigError, ConfigProblem, read_yaml


def _example_problems(path: Path) -> list[ConfigProblem]:
    """A pattern whose own examples it does not match is wrong (or its examples are)."""
    try:
        data, lines = read_yaml(path)
        spec = PatternFile.model_validate(data)
    except (ConfigError, ValueError):  # load_patterns reports these
        return []
    compiled = {p.name: p for p in load_patterns(path)[0]}
    out = []
    for name, p in spec.patterns.items():
        if name not in compiled:
            continue
        for i, example in enumerate(p.examples):
            if not compiled[name].matches(example):
                out.append(ConfigProblem(str(path), lines.line_of(("patterns", name, "examples", i)),
                                         f"patterns.{name}.examples.{i}", "the pattern does not match its own example"))
    return out


def lint(directory: Path) -> list[ConfigProblem]:
    """Schema, CEL, fact-name, incident-id and pattern problems, and classes with no runbook."""
    rs = load_runbooks(directory)
    problems = list(rs.problems)
    if (directory / PATTERNS_FILE).exists():
        problems += _example_problems(directory / PATTERNS_FILE)
    else:
        problems.append(ConfigProblem(str(directory / PATTERNS_FILE), None, "", "missing: runbooks read log patterns from it"))
    problems += example_problems(directory / EXCEPTIONS_FILE)
    for rb in rs.runbooks:
        for other in rs.runbooks:
            if rb.id < other.id and any(rb.explains(other.id, *where) and other.explains(rb.id, *where)
                                        for where in ((True, True), (False, True), (False, False))):
                problems.append(ConfigProblem(str(rb.path), None, "explains",
                                              f"{rb.id} and {other.id} explain each other: both would be dropped"))
    refused = {p.file for p in rs.problems}
    for incident in sorted(INCIDENT_IDS - NOT_BY_RUNBOOK - set(rs.ids())):
        path = directory / f"{incident}.yaml"
        if str(path) not in refused:
            problems.append(ConfigProblem(str(path), None, "", f"no runbook for incident class {incident!r}"))
    return problems
