"""Load a spec and apply every rule: the one gate before rendering, diffing or applying."""

from __future__ import annotations

from pathlib import Path

from opsbot.yamlsource import ConfigError, ConfigProblem, read_yaml
from serving.rules import Violation, check
from serving.spec import DeploymentSpec, load_spec


class SpecRefused(ConfigError):
    """The spec parsed but breaks deployment rules; ``violations`` says which, with fixes."""

    def __init__(self, path: Path, violations: list[Violation]):
        self.violations = violations
        _, lines = read_yaml(path)
        super().__init__(
            [ConfigProblem(str(path), lines.line_of(v.where), ".".join(map(str, v.where)),
                           f"[{v.rule}] {v.reason}. Fix: {v.fix}") for v in violations]
        )


def load_checked(path: Path) -> DeploymentSpec:
    """The spec at ``path`` if it loads and breaks no rule; else ``ConfigError`` / ``SpecRefused``."""
    spec = load_spec(path)
    violations = check(spec)
    if violations:
        raise SpecRefused(path, violations)
    return spec
