"""``systemctl show`` output → ``UnitState``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from opsbot.parse.errors import ParseError

# systemd prints these for "no value"; MemoryCurrent uses UINT64_MAX when accounting is off.
_UNSET = {"", "[not set]", "n/a", "infinity", "18446744073709551615"}


class UnitState(BaseModel):
    """The state of one systemd unit as ``systemctl show`` reported it."""

    model_config = ConfigDict(frozen=True)

    id: str | None = None
    load_state: str | None = None
    active_state: str | None = None
    sub_state: str | None = None
    result: str | None = None
    n_restarts: int | None = None
    exec_main_status: int | None = None
    exec_main_code: int | None = None
    main_pid: int | None = None
    memory_current: int | None = None
    exec_main_start_timestamp: str | None = None
    active_enter_timestamp: str | None = None
    state_change_timestamp: str | None = None
    properties: dict[str, str] = Field(default_factory=dict, description="every property, as printed")

    @property
    def exists(self) -> bool:
        return self.load_state not in (None, "not-found")


def _int(props: dict[str, str], key: str) -> int | None:
    value = props.get(key, "").strip()
    if value.lower() in _UNSET:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _text(props: dict[str, str], key: str) -> str | None:
    value = props.get(key, "").strip()
    return None if value.lower() in _UNSET else value


def parse_unit(raw: str) -> UnitState:
    """Parse ``Key=Value`` lines; raise ``ParseError`` when there are none at all."""
    props: dict[str, str] = {}
    for line in raw.splitlines():
        key, sep, value = line.partition("=")
        if sep and key and key.isidentifier():
            props[key] = value
    if not props:
        first = raw.strip().splitlines()[0][:120] if raw.strip() else "(empty)"
        raise ParseError(f"systemctl show output has no Key=Value properties; it starts with: {first!r}")
    return UnitState(
        id=_text(props, "Id"),
        load_state=_text(props, "LoadState"),
        active_state=_text(props, "ActiveState"),
        sub_state=_text(props, "SubState"),
        result=_text(props, "Result"),
        n_restarts=_int(props, "NRestarts"),
        exec_main_status=_int(props, "ExecMainStatus"),
        exec_main_code=_int(props, "ExecMainCode"),
        main_pid=_int(props, "MainPID"),
        memory_current=_int(props, "MemoryCurrent"),
        exec_main_start_timestamp=_text(props, "ExecMainStartTimestamp"),
        active_enter_timestamp=_text(props, "ActiveEnterTimestamp"),
        state_change_timestamp=_text(props, "StateChangeTimestamp"),
        properties=props,
    )
