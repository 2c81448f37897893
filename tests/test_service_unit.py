"""``opsbot service render``: the unit passes ``systemd-analyze verify`` and scores well on its ``security``
audit (the real systemd tools), and the config file it writes is one opsbot starts with."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from opsbot.cli import app
from opsbot.settings import Settings
from tests.realparts import need_binary

runner = CliRunner()


@pytest.fixture
def rendered(tmp_path):
    result = runner.invoke(app, ["service", "render", str(tmp_path), "--bin", sys.executable,
                                 "--secret", "slack_bot_token", "--secret", "slack_signing_secret",
                                 "--public-url", "https://opsbot.example.com"])
    assert result.exit_code == 0, result.output
    return tmp_path


def test_the_unit_is_hardened_and_verifies_clean(rendered):
    unit = (rendered / "opsbot.service").read_text()
    for line in ("DynamicUser=yes", "ProtectSystem=strict", "StateDirectory=opsbot", "Restart=on-failure",
                 "NoNewPrivileges=yes", "CapabilityBoundingSet=\n", f"ExecStart={sys.executable} serve",
                 "LoadCredential=OPSBOT_SLACK_BOT_TOKEN:/etc/opsbot/credentials/slack_bot_token",
                 "LoadCredential=ssh_key:/etc/opsbot/credentials/ssh_key"):
        assert line in unit
    assert "xoxb" not in unit
    verify = subprocess.run([need_binary("systemd-analyze"), "verify", "--man=no", str(rendered / "opsbot.service")],
                            capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0 and verify.stderr.strip() == "" and verify.stdout.strip() == "", verify.stderr
    audit = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(rendered / "opsbot.service")],
                           capture_output=True, text=True, timeout=60)
    exposure = float(re.search(r"Overall exposure level for opsbot.service: ([\d.]+)", audit.stdout).group(1))
    assert exposure <= 2.0, audit.stdout[-3000:]


def test_the_config_file_is_one_opsbot_starts_with(rendered, monkeypatch):
    monkeypatch.setenv("OPSBOT_CONFIG", str(rendered / "opsbot.toml"))
    for name in ("OPSBOT_DATA_DIR", "OPSBOT_INVENTORY", "OPSBOT_HOST", "OPSBOT_PORT"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    assert str(settings.data_dir) == "/var/lib/opsbot" and str(settings.inventory) == "/etc/opsbot/inventory.yaml"
    assert settings.public_url == "https://opsbot.example.com"
    assert settings.db_url() == "sqlite:////var/lib/opsbot/opsbot.db"


def test_a_setting_that_is_not_secret_is_refused_as_a_credential(tmp_path):
    result = runner.invoke(app, ["service", "render", str(tmp_path), "--secret", "port"])
    assert result.exit_code == 2 and "not a secret setting" in result.output and "slack_bot_token" in result.output
    assert not (tmp_path / "opsbot.service").exists()
