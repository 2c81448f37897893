"""Stand-in ``nvidia-smi`` for the lab nodes (part of the emulator; there is no GPU here).

Answers ``--query-gpu=FIELDS --format=csv[,noheader][,nounits]`` in the exact format of the
real tool (fixtures in shared/fixtures/gpu/), from the emulators' GPU holdings.
"""

from __future__ import annotations

import sys

from .gpu import GpuRow, rows

FIELDS = {  # field -> (header, unit, value)
    "index": ("index", "", lambda r: str(r.index)),
    "uuid": ("uuid", "", lambda r: r.uuid),
    "name": ("name", "", lambda r: r.name),
    "memory.used": ("memory.used [MiB]", "MiB", lambda r: str(r.memory_used)),
    "memory.total": ("memory.total [MiB]", "MiB", lambda r: str(r.memory_total)),
    "utilization.gpu": ("utilization.gpu [%]", "%", lambda r: str(r.utilization)),
    "temperature.gpu": ("temperature.gpu", "", lambda r: str(r.temperature)),
    "power.draw": ("power.draw [W]", "W", lambda r: f"{r.power_draw:.2f}"),
    "clocks.current.sm": ("clocks.current.sm [MHz]", "MHz", lambda r: str(r.clocks_sm)),
}


def render(fields: list[str], fmt: set[str], gpu_rows: list[GpuRow]) -> str:
    lines = []
    if "noheader" not in fmt:
        lines.append(", ".join(FIELDS[f][0] for f in fields))
    for r in gpu_rows:
        cells = []
        for f in fields:
            _, unit, value = FIELDS[f]
            cells.append(value(r) if "nounits" in fmt or not unit else f"{value(r)} {unit}")
        lines.append(", ".join(cells))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    fmt_arg = next((a.split("=", 1)[1] for a in argv if a.startswith("--format=")), None)
    if query is None or fmt_arg is None:
        print("opsbot lab stand-in nvidia-smi: only --query-gpu=... --format=csv[,noheader][,nounits] is emulated")
        return 2
    fields = [f.strip() for f in query.split(",") if f.strip()]
    for f in fields:
        if f not in FIELDS:
            print(f'Field "{f}" is not a valid field to query.\n')
            return 2
    fmt = {p.strip() for p in fmt_arg.split(",")}
    if "csv" not in fmt:
        print(f'"{fmt_arg}" is not a valid format.')
        return 2
    sys.stdout.write(render(fields, fmt, rows()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
