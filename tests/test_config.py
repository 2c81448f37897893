"""The config file beside the environment: precedence, origins, masking, refusal, and the generated reference."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from opsbot.cli import app
from opsbot.cli.config import reference_markdown
from opsbot.settings import ConfigFileError, Origin, Settings, _key_line, origins

runner = CliRunner()
REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


@pytest.fixture
def config(tmp_path, monkeypatch):
    path = tmp_path / "opsbot.toml"
    monkeypatch.setenv("OPSBOT_CONFIG", str(path))
    for name in ("OPSBOT_PORT", "OPSBOT_HOST", "OPSBOT_SLACK_BOT_TOKEN", "CREDENTIALS_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)
    return path


def test_reference_page_is_generated_from_the_model():
    """docs/configuration.md is what `opsbot config reference` writes: regenerate it when Settings change."""
    assert REFERENCE.read_text(encoding="utf-8") == reference_markdown(), (
        "docs/configuration.md drifted from opsbot/settings.py: run "
        "`opsbot config reference --out docs/configuration.md`")
    for name in Settings.model_fields:
        assert f"`OPSBOT_{name.upper()}`" in REFERENCE.read_text(encoding="utf-8")


def test_env_wins_over_the_file_and_the_file_over_defaults(config, monkeypatch):
    config.write_text('port = 9090\nhost = "10.0.0.1"\nslack_approvers = ["U1", "U2"]\n')
    monkeypatch.setenv("OPSBOT_HOST", "0.0.0.0")
    settings = Settings()
    assert (settings.port, settings.host, settings.slack_approvers) == (9090, "0.0.0.0", ["U1", "U2"])
    where = origins()
    assert (where["port"], where["host"], where["log_since"]) == (Origin.FILE, Origin.ENV, Origin.DEFAULT)


def test_systemd_credentials_are_read_and_masked(config, tmp_path, monkeypatch):
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "OPSBOT_SLACK_BOT_TOKEN").write_text("xoxb-credential-7731")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    monkeypatch.setenv("OPSBOT_DATABASE_URL", "postgresql://opsbot:hunter2pw@db/opsbot")
    config.write_text('slack_signing_secret = "file-secret-5512"\n')
    assert Settings().slack_bot_token == "xoxb-credential-7731"
    result = runner.invoke(app, ["config", "show"])
    assert result.exit_code == 0, result.output
    for secret in ("xoxb-credential-7731", "file-secret-5512", "hunter2pw"):
        assert secret not in result.output
    lines = {line.split()[0]: line.split()[1:] for line in result.output.splitlines()[1:]}
    assert lines["slack_bot_token"] == ["credential", "********"]
    assert lines["slack_signing_secret"] == ["file", "********"]
    assert lines["database_url"] == ["env", "postgresql://opsbot:***@db/opsbot"]
    assert lines["port"] == ["default", "8080"]


@pytest.mark.parametrize(("text", "expected"), [
    ('port = 8080\n\nslak_bot_token = "x"\n', ":3: slak_bot_token: unknown key"),
    ('host = "h"\nport = "eighty"\n', ":2: port: Input should be a valid integer"),
    ('[slack]\nbot_token = "x"\n', ":1: slack: unknown key"),
    ("port = \n", "not TOML: Invalid value (at line 1, column 8)"),
    ('weekly_report_day = "someday"\n', ":1: weekly_report_day: String should match pattern"),
])
def test_a_bad_file_is_refused_at_start_naming_file_line_and_key(config, text, expected):
    config.write_text(text)
    with pytest.raises(ConfigFileError) as caught:
        Settings()
    assert f"{config}" in str(caught.value) and expected in str(caught.value)
    result = runner.invoke(app, ["version"])
    assert result.exit_code == 2
    assert expected in result.output and "Traceback" not in result.output


def test_a_named_file_that_is_missing_is_refused(config):
    result = runner.invoke(app, ["version"])
    assert result.exit_code == 2 and "no such config file" in result.output


@given(st.lists(st.sampled_from(sorted(Settings.model_fields)), min_size=1, max_size=8, unique=True), st.data())
def test_the_line_named_is_the_line_of_the_key(keys, data):
    """Whatever the order and the comments between, a key's problem names the line it is set on."""
    lines = []
    where = {}
    for key in keys:
        lines += ["# a comment"] * data.draw(st.integers(0, 2))
        value = data.draw(st.sampled_from(["1", '"x"', "true", "[1, 2]"]))
        lines.append(f"{key} = {value}")
        where[key] = len(lines)
    text = "\n".join(lines) + "\n"
    for key in keys:
        assert _key_line(text, key) == where[key]
