"""The docs cannot lie about commands: every ``opsbot`` line in a fenced block names a real command and real options.

Each command line in README.md and docs/*.md is resolved in the real click tree and its ``--help`` run; every
option it uses must be one of that command's. The cheap ones that need no lab (``RUN``) are also run, in a
scratch data directory, and must succeed. README.md stays a page a newcomer reads: at most 10 KB.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from opsbot.cli import app
from opsbot.settings import get_settings

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
COMMAND = re.compile(r"^(?:\S*/)?opsbot\s")
# the command paths that need no lab, no network and little time: run as written
RUN = (
    "version", "runbooks lint", "config show", "config reference", "deploy check", "deploy render",
    "db upgrade", "db revision", "tokens list", "incidents", "history", "slack manifest",
    "service render", "db backup", "db restore",
)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# pages other branches add (docs/README.md links them already); the lead drops this set when they are in
runner = CliRunner()


@dataclass(frozen=True)
class DocCommand:
    page: str
    line: int
    argv: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: opsbot {' '.join(self.argv)}"


def doc_commands() -> list[DocCommand]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for block in FENCE.finditer(text):
            first = text.count("\n", 0, block.start(1)) + 1
            lines = block.group(1).replace("\\\n", " ").splitlines()
            for offset, line in enumerate(lines):
                if COMMAND.match(line.strip()):
                    argv = shlex.split(line.strip(), comments=True)[1:]
                    found.append(DocCommand(page.relative_to(ROOT).as_posix(), first + offset, tuple(argv)))
    return found


def resolve(argv: tuple[str, ...]) -> tuple[list[str], typer.core.TyperCommand, list[str]]:
    """The command path in the real click tree (typer's own click), its command, and the arguments left after it."""
    command = typer.main.get_command(app)
    path: list[str] = []
    rest = list(argv)
    while isinstance(command, typer.core.TyperGroup) and rest and rest[0] in command.commands:
        path.append(rest[0])
        command = command.commands[rest.pop(0)]
    return path, command, rest


COMMANDS = doc_commands()


def test_the_docs_name_commands():
    assert len(COMMANDS) > 60, "the fenced blocks' commands were not found"
    assert len((ROOT / "README.md").read_bytes()) <= 10 * 1024, "README.md is a newcomer's page: at most 10 KB"


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken


@pytest.mark.parametrize("doc", COMMANDS, ids=str)
def test_every_documented_command_and_option_exists(doc):
    path, command, rest = resolve(doc.argv)
    runnable = not isinstance(command, typer.core.TyperGroup) or command.invoke_without_command
    assert runnable, f"{doc}: no such command (a group: {sorted(command.commands)})"
    options = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    for word in rest:
        if word.startswith("-") and word != "-":
            assert word.split("=", 1)[0] in options, f"{doc}: {command.name} has no option {word}"
    helped = runner.invoke(app, [*path, "--help"])
    assert helped.exit_code == 0, f"{doc}: --help failed: {helped.output}"


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A data directory of its own; the repository's folders the commands name, linked in."""
    for name in ("serving", "runbooks", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "docs").mkdir()  # written to, never the checkout's
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPSBOT_DATA_DIR", str(tmp_path / "data"))
    for name in ("OPSBOT_CONFIG", "OPSBOT_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def test_the_cheap_commands_run_as_written(scratch):
    ran = []
    for doc in COMMANDS:
        if " ".join(resolve(doc.argv)[0]) not in RUN:
            continue
        result = runner.invoke(app, list(doc.argv))
        assert result.exit_code == 0, f"{doc}: exit {result.exit_code}: {result.output[-2000:]}"
        ran.append(doc)
    assert len(ran) >= 8, [str(d) for d in ran]


# the command paths run against the session's lab (real nodes over SSH) as the docs write them
LAB_RUN = ("lab status", "inventory check", "probe")
PLACEHOLDER = re.compile(r"[<\[]|^[A-Z][A-Z_.]+$")


@pytest.mark.lab
def test_the_lab_commands_run_against_the_lab(lab, tmp_path, monkeypatch):
    s = lab.settings
    for name, value in {"OPSBOT_DATA_DIR": tmp_path, "OPSBOT_INVENTORY": lab.inventory_path, "OPSBOT_LAB_DIR": lab.dir,
                        "OPSBOT_LAB_PREFIX": s.lab_prefix, "OPSBOT_LAB_SSH_PORT_BASE": s.lab_ssh_port_base,
                        "OPSBOT_LAB_SERVICE_PORT_BASE": s.lab_service_port_base, "OPSBOT_METRICS_WINDOW_S": 0.3}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.chdir(tmp_path)
    get_settings.cache_clear()
    ran = []
    try:
        for doc in COMMANDS:
            if " ".join(resolve(doc.argv)[0]) not in LAB_RUN or any(PLACEHOLDER.search(w) for w in doc.argv):
                continue
            result = runner.invoke(app, list(doc.argv))
            assert result.exit_code == 0, f"{doc}: exit {result.exit_code}: {result.output[-2000:]}"
            ran.append(str(doc))
    finally:
        get_settings.cache_clear()
    assert len(ran) >= 4, ran
