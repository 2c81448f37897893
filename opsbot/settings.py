"""Process-wide settings, validated once: the environment (``OPSBOT_*``) over a TOML config file.

Where a value comes from, first wins: keyword arguments (tests), the environment (``OPSBOT_<NAME>``),
systemd credentials (files named ``OPSBOT_<NAME>`` in ``$CREDENTIALS_DIRECTORY``, what the unit's
``LoadCredential=`` gives), the config file (``OPSBOT_CONFIG``, else /etc/opsbot/opsbot.toml when it
exists; keys are the field names), the default. The config file's sources are pydantic-settings'
own (``TomlConfigSettingsSource``, ``SecretsSettingsSource``); this module only refuses a file with
an unknown key or a wrong type, naming the file, the line and the key.
"""

from __future__ import annotations

import json
import os
import re
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, create_model
from pydantic.json_schema import JsonDict
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SecretsSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

CONFIG_ENV = "OPSBOT_CONFIG"
DEFAULT_CONFIG = Path("/etc/opsbot/opsbot.toml")
CREDENTIALS_ENV = "CREDENTIALS_DIRECTORY"  # set by systemd for a unit with LoadCredential=
SECRET: JsonDict = {"secret": True}  # json_schema_extra of a field that is never shown nor logged


class Origin(StrEnum):
    """Where a setting's effective value came from (``opsbot config show``)."""

    DEFAULT = "default"
    ENV = "env"
    CREDENTIAL = "credential"
    FILE = "file"


class ConfigFileError(ValueError):
    """A config file opsbot refuses to start with: it names the file, the line and the key."""


def config_file() -> tuple[Path, bool]:
    """The config file's path and whether it was asked for (``OPSBOT_CONFIG``) rather than the default."""
    named = os.environ.get(CONFIG_ENV)
    return (Path(named), True) if named else (DEFAULT_CONFIG, False)


def _key_line(text: str, key: str) -> int | None:
    """The line (1-based) where ``key`` is set or opened as a table in TOML ``text``."""
    pattern = re.compile(rf"""^\s*(\[\s*)?["']?{re.escape(key)}["']?\s*(=|\])""")
    for number, line in enumerate(text.splitlines(), start=1):
        if pattern.match(line):
            return number
    return None


@lru_cache(maxsize=4)
def _plain_model(settings_cls: type[BaseSettings]) -> type[BaseModel]:
    """The settings' fields as a plain model: validating it reads no sources (BaseSettings would, recursing here)."""
    fields: dict[str, Any] = {name: (field.annotation, field) for name, field in settings_cls.model_fields.items()}
    return create_model(f"{settings_cls.__name__}File", **fields)


class CheckedTomlSource(TomlConfigSettingsSource):
    """pydantic-settings' TOML source, refusing unknown keys and wrong types at start."""

    def __init__(self, settings_cls: type[BaseSettings]) -> None:
        path, named = config_file()
        if named and not path.is_file():
            raise ConfigFileError(f"{path}: no such config file ({CONFIG_ENV})")
        self.path = path
        try:
            super().__init__(settings_cls, toml_file=path if path.is_file() else None)
        except ValueError as exc:  # tomllib.TOMLDecodeError says the line and column
            raise ConfigFileError(f"{path}: not TOML: {exc}") from exc
        except OSError as exc:
            raise ConfigFileError(f"{path}: cannot read: {exc}") from exc
        if self.toml_data:
            self._check(settings_cls)

    def _check(self, settings_cls: type[BaseSettings]) -> None:
        text = self.path.read_text(encoding="utf-8")
        problems = []
        for key in self.toml_data:
            if key not in Settings.model_fields:  # the lab's settings come from the environment only
                problems.append(f"{self.path}:{_key_line(text, key) or '?'}: {key}: unknown key")
        known = {k: v for k, v in self.toml_data.items() if k in settings_cls.model_fields}
        try:
            _plain_model(settings_cls).model_validate(known)
        except ValidationError as exc:
            for error in exc.errors(include_url=False, include_input=False):
                key = str(error["loc"][0]) if error["loc"] else "?"
                problems.append(f"{self.path}:{_key_line(text, key) or '?'}: {key}: {error['msg']}")
        if problems:
            raise ConfigFileError("; ".join(problems))


def _credentials_source(settings_cls: type[BaseSettings]) -> SecretsSettingsSource:
    return SecretsSettingsSource(settings_cls, secrets_dir=os.environ.get(CREDENTIALS_ENV))


class Settings(BaseSettings):
    """Everything opsbot reads from its environment; one class, one place."""

    model_config = SettingsConfigDict(env_prefix="OPSBOT_", env_file=None, extra="ignore")

    data_dir: Path = Field(Path(".opsbot"), description="where the lab, bundles and the SQLite file live")
    inventory: Path | None = Field(None, description="inventory YAML; default: DATA_DIR/inventory.yaml")
    database_url: str | None = Field(
        None, description="SQLAlchemy URL; default: SQLite in DATA_DIR", json_schema_extra=SECRET)
    cluster: str | None = Field(None, description="default cluster when the inventory has several")

    metrics_window_s: float = Field(3.0, ge=0.0, description="seconds between the two /metrics samples")
    ssh_connect_timeout_s: float = Field(5.0, gt=0)
    ssh_idle_s: float = Field(300.0, gt=0, description="the service closes a node's SSH connection unused this long")
    command_timeout_s: float = Field(8.0, gt=0)
    http_timeout_s: float = Field(5.0, gt=0)
    capture_deadline_s: float = Field(
        20.0, gt=0, le=300, description="the capture before a restart (stacks, server info, requests, journal) "
        "stops after this long; what it has by then is kept")
    probe_deadline_s: float = Field(20.0, gt=0, description="no probe takes longer than this")
    max_fanout: int = Field(16, ge=1, description="concurrent SSH commands per probe")
    output_cap_bytes: int = Field(256 * 1024, ge=1024, description="cap on any one command's output")
    log_lines_cap: int = Field(400, ge=10)
    log_since: str = Field("-15min", description="journalctl --since for log axes")
    canary_deadline_s: float = Field(10.0, gt=0, description="the canary completion through the router must finish by then")
    rank_canary_deadline_s: float = Field(
        3.0, gt=0, description="DP attention: each rank's pinned canary (routed_dp_rank) must answer by then; as long "
        "as the metrics window, so a stuck rank's canary does not hold the probe past it"
    )

    # the output-fidelity probe (opsbot fidelity check, OPSBOT_FIDELITY_SCHEDULE)
    fidelity_schedule: str | None = Field(
        None, pattern=r"^\s*\S+(\s+\S+){4}\s*$",
        description="crontab line (report time zone): run `opsbot fidelity check` on it and export the result",
    )
    # the long-context recall probe (opsbot recall, after deploy apply, OPSBOT_RECALL_SCHEDULE)
    recall_schedule: str | None = Field(
        None, pattern=r"^\s*\S+(\s+\S+){4}\s*$",
        description="crontab line (5 fields, report_timezone) for the recall probe in the service; off when unset",
    )
    recall_lengths: str = Field("1k,2k,4k,8k,16k", description="default grid lengths, in the server's tokens")
    recall_depths: str = Field("0,0.25,0.5,0.75,1", description="default needle depths (0 = start, 1 = end)")
    recall_fillers: str = Field("prose", description="default haystack kinds: prose, code, config")
    recall_distractors: int = Field(3, ge=0, le=64, description="near-miss keys around each needle")
    recall_concurrency: int = Field(4, ge=1, le=64, description="recall requests in flight at most")
    recall_queue_limit: float = Field(8, ge=0, description="no recall request is sent while prefill queues more")
    recall_queue_wait_s: float = Field(300.0, ge=0, description="give up waiting for the prefill queue after this")
    recall_request_timeout_s: float = Field(600.0, gt=0, description="deadline of one recall completion")
    recall_max_tokens: int = Field(16, ge=1, le=256, description="answer length bound")

    goal: str | None = Field(None, description="the deployment's goal, the first line of every status report")
    spec: Path | None = Field(None, description="serving spec YAML: the reports' critical context")
    prometheus_url: str | None = Field(None, description="Prometheus base URL for the weekly report's figures")
    alertmanager_url: str | None = Field(None, description="Alertmanager base URL; the status page checks it answers")
    monitoring_file: Path | None = Field(None, description="JSON naming the running Prometheus and Alertmanager, used "
                                         "when their URLs are not set; default: the lab's (opsbot lab up writes it)")
    public_url: str | None = Field(None, description="opsbot's URL as operators reach it (Slack evidence links); "
                                   "default http://HOST:PORT")
    prometheus_timeout_s: float = Field(10.0, gt=0, description="per query; a slower answer is reported missing")
    report_timezone: str = Field("UTC", description="IANA time zone of report weeks and the weekly schedule")
    weekly_report_day: str = Field("mon", pattern=r"^(mon|tue|wed|thu|fri|sat|sun)$")
    weekly_report_time: str = Field("09:00", pattern=r"^([01]\d|2[0-3]):[0-5]\d$", description="HH:MM, local time")
    report_slack_channel: str | None = Field(None, description="channel the weekly report is posted to")
    report_schedule: bool = Field(True, description="the service makes (and posts) the weekly report on schedule")

    # guarded actions (opsbot/act)
    restart_requires_approval: bool = Field(True, description="a restart waits for an approver (--approve, Slack, REST)")
    approval_ttl_s: float = Field(900.0, gt=0, description="an approval (or an unapproved plan) expires after this")
    restart_cooldown_s: float = Field(600.0, ge=0, description="no second restart of one role within this")
    restart_budget: int = Field(3, ge=0, description="restarts per cluster per budget window")
    restart_budget_window_s: float = Field(3600.0, gt=0)
    lock_ttl_s: float = Field(900.0, gt=0, description="a role lock left by a crashed opsbot expires after this")
    gpu_release_timeout_s: float = Field(60.0, gt=0, description="after stop, wait this long for GPU memory to free")
    gpu_release_mib: float = Field(1024.0, ge=0, description="a GPU using at most this much memory counts as free")
    verify_deadline_s: float = Field(120.0, gt=0, description="a restarted role must be verified healthy within this")

    # service, Slack and alert intake (opsbot serve)
    host: str = Field("127.0.0.1", description="address opsbot serve listens on")
    port: int = Field(8080, ge=1, le=65535)
    max_body_bytes: int = Field(1024 * 1024, ge=1024, description="largest request body accepted (413 above)")
    body_read_timeout_s: float = Field(10.0, gt=0, description="a request body must arrive within this (408 after)")
    probe_wait_s: float = Field(2.0, ge=0, description="POST /probe answers inline if done by then, else a job id")
    alert_token: str | None = Field(None, description="shared secret Alertmanager sends in X-Opsbot-Alert-Token", json_schema_extra=SECRET)
    alert_queue_max: int = Field(5000, ge=1, description="accepted alerts waiting for a probe; 503 above")
    coalesce_window_s: float = Field(5.0, ge=0, description="alerts for one (cluster, role) in this window share a probe")
    incident_reopen_s: float = Field(600.0, ge=0, description="a class named again this soon after its incident "
                                     "resolved reopens that incident: a flapping crash loop is one incident, "
                                     "not one per flap")
    incident_stale_s: float = Field(1800.0, ge=0, description="an open incident with no alert firing, no restart "
                                    "running and nothing naming it for this long closes itself, saying so; 0: never")
    alert_probe_attempts: int = Field(3, ge=1, description="probe attempts for an alert before it is given up on")
    alert_retry_s: float = Field(30.0, ge=0, description="a probe that could not run is tried again after this")
    instance_heartbeat_s: float = Field(1.0, gt=0, description="how often this instance renews its lease and sweeps")
    instance_lease_s: float = Field(
        5.0, gt=0, description="an instance silent this long is dead: a live one takes over the alerts it claimed")
    chain_watch_s: float = Field(
        30.0, ge=0, description="while Prometheus or Alertmanager does not answer, opsbot probes every role itself "
        "this often (one instance per interval); 0: off")
    clock_skew_warn_s: float = Field(
        5.0, gt=0, description="warn when this host's clock and PostgreSQL's differ by more than this")
    slack_bot_token: str | None = Field(None, description="xoxb- token; Slack is off without it", json_schema_extra=SECRET)
    slack_signing_secret: str | None = Field(None, description="verifies requests from Slack", json_schema_extra=SECRET)
    slack_app_token: str | None = Field(None, description="xapp- token for Socket Mode", json_schema_extra=SECRET)
    slack_socket_mode: bool = Field(False, description="connect out to Slack (no public ingress needed)")
    slack_api_url: str = Field("https://slack.com/api/", description="Slack Web API base URL")
    slack_command: str = Field("/opsbot", description="the slash command opsbot answers")
    slack_alert_channel: str | None = Field(None, description="channel id where alert findings are posted")
    slack_approvers: list[str] = Field(default_factory=list, description="Slack user ids allowed to approve")
    slack_approver_groups: list[str] = Field(default_factory=list, description="Slack user group ids allowed to approve")
    slack_channel_rate_per_s: float = Field(1.0, gt=0, description="posts per second per channel, after the burst "
                                            "(Slack: about one message per second per channel)")
    slack_channel_burst: int = Field(10, ge=1, description="posts a channel takes at once before the rate applies")
    slack_retry_for_s: float = Field(600.0, gt=0, description="how long a Slack call is retried (429, 5xx, timeouts) "
                                     "before it is reported failed")
    slack_timeout_s: float = Field(10.0, gt=0, description="one Slack Web API call's deadline")
    slack_dedup_for_s: float = Field(4 * 3600.0, ge=0, description="an identical notification of the same key "
                                     "within this long is sent once (Alertmanager's repeat_interval)")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keywords, then the environment, then systemd credentials, then the config file."""
        return init_settings, env_settings, _credentials_source(settings_cls), CheckedTomlSource(settings_cls)

    def inventory_path(self) -> Path:
        return self.inventory or self.data_dir / "inventory.yaml"

    def page_url(self, path: str) -> str:
        """A link to the status page's ``path`` (e.g. a probe view), for messages sent elsewhere."""
        base = self.public_url or f"http://{'127.0.0.1' if self.host in ('0.0.0.0', '::') else self.host}:{self.port}"
        return base.rstrip("/") + path

    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'opsbot.db').resolve()}"

    def monitoring_path(self) -> Path:
        """Where a local monitoring stack says which Prometheus and Alertmanager run: ``MONITORING_FILE``,
        else the one ``opsbot lab up`` writes (``OPSBOT_LAB_DIR``, default DATA_DIR/lab, then
        ``monitoring/monitoring.json``)."""
        if self.monitoring_file is not None:
            return self.monitoring_file
        lab = os.environ.get("OPSBOT_LAB_DIR") or self.data_dir / "lab"
        return Path(lab).resolve() / "monitoring" / "monitoring.json"


def with_running_monitoring(settings: Settings) -> Settings:
    """Settings whose Prometheus and Alertmanager default to the running ones ``monitoring_path()`` names.

    Called where a command composes its settings (``opsbot serve``, status, weekly report); what the
    environment sets always wins, and without the file nothing changes.
    """
    try:
        running = json.loads(settings.monitoring_path().read_text())
    except (OSError, ValueError):
        return settings
    if not isinstance(running, dict):
        return settings
    update = {f"{name}_url": running[name] for name in ("prometheus", "alertmanager")
              if isinstance(running.get(name), str) and running[name] and getattr(settings, f"{name}_url") is None}
    return settings.model_copy(update=update) if update else settings


def origins(settings_cls: type[Settings] = Settings) -> dict[str, Origin]:
    """Where each field of ``settings_cls`` gets its value now, the sources read in their order."""
    found: dict[str, Origin] = {}
    layers: list[tuple[Origin, dict[str, Any]]] = [
        (Origin.ENV, EnvSettingsSource(settings_cls)()),
        (Origin.CREDENTIAL, _credentials_source(settings_cls)()),
        (Origin.FILE, CheckedTomlSource(settings_cls)()),
    ]
    for name in settings_cls.model_fields:
        found[name] = next((origin for origin, values in layers if name in values), Origin.DEFAULT)
    return found


def is_secret(settings_cls: type[Settings], name: str) -> bool:
    extra = settings_cls.model_fields[name].json_schema_extra
    return isinstance(extra, dict) and bool(extra.get("secret"))


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
