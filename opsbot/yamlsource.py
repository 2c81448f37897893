"""YAML files validated by pydantic, with errors that name the file, the line and the fix.

Every configuration file opsbot reads (inventory, runbooks, deployment specs) goes through
``load_model`` so a bad file is refused the same way everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

if TYPE_CHECKING:
    import yaml

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class ConfigProblem:
    file: str
    line: int | None
    where: str
    message: str

    def __str__(self) -> str:
        at = f"{self.file}:{self.line}" if self.line else self.file
        loc = f" ({self.where})" if self.where else ""
        return f"{at}{loc}: {self.message}"


class ConfigError(ValueError):
    """A configuration file was refused; ``problems`` lists every reason found."""

    def __init__(self, problems: list[ConfigProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class _Lines:
    """Maps a pydantic error location to the line of the YAML node it points at."""

    def __init__(self, root: yaml.Node | None):
        self.root = root

    def line_of(self, loc: tuple[Any, ...]) -> int | None:
        import yaml

        node = self.root
        line = node.start_mark.line + 1 if node is not None else None
        for key in loc:
            child = None
            if isinstance(node, yaml.MappingNode):
                for k, v in node.value:
                    if k.value == str(key):
                        child = v
                        line = k.start_mark.line + 1
                        break
            elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
                child = node.value[key]
                line = child.start_mark.line + 1
            if child is None:
                break
            node = child
        return line


def read_yaml(path: Path) -> tuple[Any, _Lines]:
    """Parse ``path``; syntax errors become a ``ConfigError`` with the line.

    PyYAML is imported here, not with the module: ``opsbot diagnose`` reads no YAML when its runbooks
    come compiled from the cache (opsbot/diagnose/runbook_cache.py)."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when PyYAML has it: several times faster
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([ConfigProblem(str(path), None, "", f"cannot read: {exc.strerror or exc}")]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError([ConfigProblem(str(path), None, "", "not UTF-8 text")]) from exc
    try:
        node = yaml.compose(text, Loader=loader)
        data = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        reason = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([ConfigProblem(str(path), line, "", f"YAML syntax error: {reason}")]) from exc
    return data, _Lines(node)


def _hint(err: ErrorDetails) -> str:
    kind = err.get("type", "")
    if kind == "missing":
        return "add this field"
    if kind == "extra_forbidden":
        return "remove it (unknown field; check the spelling)"
    if kind == "literal_error":
        return f"write one of {err.get('ctx', {}).get('expected', 'the allowed values')}"
    return ""


def problems_from(exc: ValidationError, path: Path, lines: _Lines) -> list[ConfigProblem]:
    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        where = ".".join(str(p) for p in loc)
        msg = err["msg"]
        hint = _hint(err)
        out.append(ConfigProblem(str(path), lines.line_of(loc), where, f"{msg}; {hint}" if hint else msg))
    return out


def load_model(path: Path, model: type[M]) -> M:
    """Read ``path`` as YAML and validate it as ``model``, or raise ``ConfigError``."""
    data, lines = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError([ConfigProblem(str(path), 1, "", "expected a mapping at the top level")])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(problems_from(exc, path, lines)) from exc
