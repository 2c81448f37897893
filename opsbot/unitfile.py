"""opsbot itself as a systemd service: the hardened unit for ``opsbot serve`` and its config file.

State (the SQLite database, bundles) lives in the unit's ``StateDirectory`` (/var/lib/opsbot), which is
``data_dir`` in the config file; secrets reach opsbot as systemd credentials (``LoadCredential=``), read
by ``opsbot.settings`` from ``$CREDENTIALS_DIRECTORY`` and never written into the unit or the file.
Directives: systemd.exec(5), systemd.service(5), systemd 252 (Debian 12), checked by ``systemd-analyze verify``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from opsbot.settings import Settings, is_secret

STATE_DIR = Path("/var/lib/opsbot")
CONFIG_DIR = Path("/etc/opsbot")
UNIT_NAME = "opsbot.service"
CREDENTIALS_RUN_DIR = Path("/run/credentials") / UNIT_NAME  # where systemd puts LoadCredential= files

HARDENING = """\
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
ProcSubset=pid
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallErrorNumber=EPERM
CapabilityBoundingSet=
AmbientCapabilities=
UMask=0077
"""


class UnitProblem(ValueError):
    """A render option opsbot refuses (an unknown secret, a relative path)."""


@dataclass(frozen=True)
class UnitSpec:
    """What the operator chooses; everything else is fixed hardening."""

    executable: Path = Path("/opt/opsbot/bin/opsbot")
    user: str | None = None  # None: DynamicUser=yes
    secrets: tuple[str, ...] = ()  # Settings fields given as credentials from CONFIG_DIR/credentials/<name>
    ssh_key: bool = True  # the SSH client key as credential ``ssh_key`` (the inventory's key_file points at it)
    host: str = "127.0.0.1"
    port: int = 8080
    public_url: str | None = None
    extra: dict[str, str | int | float | bool] = field(default_factory=dict)

    def check(self) -> None:
        if not self.executable.is_absolute():
            raise UnitProblem(f"--bin must be an absolute path (got {self.executable})")
        for name in self.secrets:
            if name not in Settings.model_fields or not is_secret(Settings, name):
                secret = sorted(n for n in Settings.model_fields if is_secret(Settings, n))
                raise UnitProblem(f"--secret {name}: not a secret setting; these are: {', '.join(secret)}")


def credential_source(name: str) -> Path:
    return CONFIG_DIR / "credentials" / name


def render_unit(spec: UnitSpec) -> str:
    """The unit file for ``opsbot serve``."""
    spec.check()
    who = f"User={spec.user}\nGroup={spec.user}\n" if spec.user else "DynamicUser=yes\n"
    creds = "".join(f"LoadCredential=OPSBOT_{name.upper()}:{credential_source(name)}\n" for name in spec.secrets)
    if spec.ssh_key:
        creds += f"LoadCredential=ssh_key:{credential_source('ssh_key')}\n"
    return (
        "[Unit]\n"
        "Description=opsbot: incident response for SGLang prefill/decode\n"
        "After=network-online.target\nWants=network-online.target\n\n"
        "[Service]\n"
        "Type=exec\n"
        f"ExecStart={spec.executable} serve\n"
        f"Environment=OPSBOT_CONFIG={CONFIG_DIR / 'opsbot.toml'}\n"
        "Environment=PYTHONUNBUFFERED=1\n"
        f"{who}"
        f"StateDirectory={STATE_DIR.name}\nStateDirectoryMode=0700\n"
        f"WorkingDirectory={STATE_DIR}\n"
        f"{creds}"
        "Restart=on-failure\nRestartSec=5s\n"
        "TimeoutStopSec=30s\n"
        f"{HARDENING}\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )


def _toml_value(value: str | float | bool | Path) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(str(value))  # a TOML basic string: JSON's escapes are TOML's


def render_config(spec: UnitSpec) -> str:
    """The config file the unit reads (OPSBOT_CONFIG): paths under the unit's directories, no secrets."""
    values: dict[str, str | int | float | bool | Path] = {
        "data_dir": STATE_DIR,
        "inventory": CONFIG_DIR / "inventory.yaml",
        "host": spec.host,
        "port": spec.port,
    }
    if spec.public_url:
        values["public_url"] = spec.public_url
    values.update(spec.extra)
    lines = [
        "# opsbot's settings (docs/configuration.md lists every key); the environment overrides them.",
        f"# Secrets are not here: they are systemd credentials, files in {CONFIG_DIR / 'credentials'} (mode 0600).",
    ]
    if spec.ssh_key:
        lines.append(f"# The inventory's nodes use key_file: {CREDENTIALS_RUN_DIR / 'ssh_key'}")
    lines += [f"{key} = {_toml_value(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"
