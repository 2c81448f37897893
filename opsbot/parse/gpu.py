"""``nvidia-smi --query-gpu=... --format=csv`` output → ``GpuRow`` per GPU."""

from __future__ import annotations

import re

from pydantic import BaseModel

from opsbot.bundle import GPU_QUERY
from opsbot.parse.errors import ParseError
from opsbot.parse.lines import capped_lines

FIELDS = GPU_QUERY.split(",")
_MISSING = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "[gpu is lost]"}
# re (called per cell): linear as written, the unit and its trailing spaces one optional group
_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(?:(?:mib|%|w|c|mhz)\s*)?$", re.IGNORECASE)


class GpuRow(BaseModel):
    index: int
    uuid: str | None = None
    name: str | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    utilization_pct: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None


def _number(value: str) -> float | None:
    if value.strip().lower() in _MISSING:
        return None
    m = _NUMBER.match(value)
    return float(m.group(1)) if m else None


def _column_order(header: list[str]) -> list[str]:
    """Map a header such as ``memory.used [MiB]`` back to the query field names."""
    return [h.split("[")[0].strip().lower() for h in header]


def parse_gpu_csv(raw: str) -> list[GpuRow]:
    """Read rows with or without the header and units; ``[N/A]`` becomes None.

    A line that is not a GPU row (e.g. ``NVIDIA-SMI has failed because it couldn't communicate
    with the NVIDIA driver``) raises ``ParseError`` quoting it.
    """
    rows: list[GpuRow] = []
    columns = FIELDS
    for n, line in enumerate(capped_lines(raw), start=1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if cells[0].lower() == "index":
            columns = _column_order(cells)
            continue
        if len(cells) < len(FIELDS) or not (cells[0].isascii() and cells[0].isdigit() and len(cells[0]) <= 4):  # [0-9]{1,4}
            raise ParseError(
                f"nvidia-smi line {n} is not a GPU row of {len(FIELDS)} fields ({GPU_QUERY}): {line.strip()[:160]!r}"
            )
        cell = dict(zip(columns, cells))
        if any(f not in cell for f in FIELDS):
            missing = [f for f in FIELDS if f not in cell]
            raise ParseError(f"nvidia-smi header lacks {', '.join(missing)}; query with --query-gpu={GPU_QUERY}")
        text = {k: (None if v.lower() in _MISSING else v) for k, v in cell.items()}
        rows.append(
            GpuRow(
                index=int(cell["index"]),
                uuid=text["uuid"],
                name=text["name"],
                memory_used_mib=_number(cell["memory.used"]),
                memory_total_mib=_number(cell["memory.total"]),
                utilization_pct=_number(cell["utilization.gpu"]),
                temperature_c=_number(cell["temperature.gpu"]),
                power_w=_number(cell["power.draw"]),
            )
        )
    return rows
