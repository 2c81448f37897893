"""Emulated GPUs: which role holds which GPU's memory, and the rows the stand-in nvidia-smi prints.

A running emulator records its holding (pid, GPUs, MiB) under ``STATE_DIR/gpu/``; a holding
whose pid is gone is released, exactly as the driver frees a dead process's memory.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .control import read_control

NAME = "NVIDIA H200"
TOTAL_MIB = 143771
IDLE = {"util": 0, "temp": 39, "power": 81.39}


@dataclass
class GpuRow:
    index: int
    uuid: str
    name: str
    memory_used: int
    memory_total: int
    utilization: int
    temperature: int
    power_draw: float
    clocks_sm: int


def state_dir() -> Path:
    return Path(os.environ.get("SGLANG_EMULATOR_STATE_DIR", "/var/lib/opsbot-lab"))


def visible_gpus(tp_size: int) -> list[int]:
    env = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    gpus = [int(g) for g in env.split(",") if g.strip().isdigit()]
    return (gpus or list(range(tp_size)))[: max(tp_size, 1)]


def hold(role: str, gpus: list[int], mib: int, busy: bool = True, root: Path | None = None) -> None:
    """Record that this process holds ``mib`` on each of ``gpus`` (atomic replace)."""
    d = (root or state_dir()) / "gpu"
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{role}.tmp"
    tmp.write_text(json.dumps({"pid": os.getpid(), "gpus": gpus, "mib": mib, "busy": busy}))
    os.replace(tmp, d / f"{role}.json")


def release(role: str, root: Path | None = None) -> None:
    ((root or state_dir()) / "gpu" / f"{role}.json").unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def gpu_uuid(machine: str, index: int) -> str:
    h = hashlib.sha256(f"{machine}/{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def rows(root: Path | None = None) -> list[GpuRow]:
    """Every GPU of this node with memory held by live emulators; faulted GPUs are missing."""
    root = root or state_dir()
    try:
        node = json.loads((root / "node.json").read_text())
    except (OSError, ValueError):
        node = {}
    count, machine = int(node.get("gpus", 4)), str(node.get("machine", "lab"))
    used = {i: 0 for i in range(count)}
    busy = {i: False for i in range(count)}
    faulted: set[int] = set()
    for f in sorted((root / "gpu").glob("*.json")):
        try:
            h = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if not _alive(int(h.get("pid", 0))):
            continue
        for g in h.get("gpus", []):
            if g in used:
                used[g] += int(h.get("mib", 0))
                busy[g] = busy[g] or bool(h.get("busy"))
        if read_control(root / "control" / f"{f.stem}.json").state == "gpu-fault" and h.get("gpus"):
            faulted.add(h["gpus"][-1])
    out = []
    for i in range(count):
        if i in faulted:
            continue
        hot = busy[i]
        out.append(GpuRow(
            i, gpu_uuid(machine, i), NAME, used[i], TOTAL_MIB,
            93 if hot else 0, 58 if hot else int(IDLE["temp"]), 512.67 if hot else (113.5 if used[i] else IDLE["power"]),
            1980 if hot else 345,
        ))
    return out
