"""Kernel log lines → ``XidEvent`` for every ``NVRM: Xid`` report, and the driver's own reports that
its GPU stopped answering without an Xid (``driver_faults``)."""

from __future__ import annotations

from pydantic import BaseModel

from opsbot.parse.lines import capped_lines, linear
from opsbot.parse.logs import parse_log_line

_XID = linear(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\): (?P<xid>\d{1,6}),?\s*(?P<rest>.*)$")
_PID = linear(r"pid=(\d{1,10})")
_NAME = linear(r"name=([^,]+)")
# The NVIDIA driver (NVRM) saying the GPU's firmware or bus stopped answering, with or without an Xid:
# the GSP's heartbeat or an RPC to it timed out, the memory subsystem failed, the GPU left the bus
# (open-gpu-kernel-modules 595.71.05 kernel_gsp.c _kgspIsHeartbeatTimedOut / _kgspLogRpcTimeout /
# _kgspRpcRecvPoll, kgmmuCheckMemSubsysError; as quoted in NVIDIA/open-gpu-kernel-modules#1200, #1230,
# NVIDIA/NVSentinel#155). Module loading lines (``NVRM: loading NVIDIA UNIX ...``) are not faults.
_DRIVER_FAULT = linear(
    r"NVRM: .*(?:heartbeat timed out|Heartbeat timed out|GSP Timeout|waiting for RPC response from GPU\d* GSP"
    r"|Memory Subsystem Error|fallen off the bus|GPU lost from the bus"
    # the adapter failed to initialise, the driver dumped the GPU's state, or asks for a reset (open-gpu-kernel-
    # modules src/nvidia/arch/nvalloc/unix/src/osinit.c "RmInitAdapter failed!", nv_gpu_crash_dump "A GPU crash
    # dump has been created", Xid 154 "GPU Reset Required"); an uncorrectable ECC error as the driver names it
    r"|RmInitAdapter failed|GPU crash dump has been created|[Rr]eset [Rr]equired|[Uu]ncorrectable (?:ECC|double bit)"
    # the driver's own status codes for a GPU that is gone or broken (src/common/sdk/nvidia/inc/nvstatuscodes.h)
    r"|NV_ERR_(?:GPU_IS_LOST|RESET_REQUIRED|ECC_ERROR|TIMEOUT)\b)"
)


class XidEvent(BaseModel):
    ts: str | None = None
    pci: str
    xid: int
    pid: int | None = None
    process: str | None = None
    message: str


def parse_xid(raw: str) -> list[XidEvent]:
    """Every Xid line in ``raw`` (journald-prefixed or dmesg-style); other lines are ignored."""
    events: list[XidEvent] = []
    for line in capped_lines(raw):
        m = _XID.search(line)
        if not m:
            continue
        entry = parse_log_line(line)
        pid, name = _PID.search(m["rest"]), _NAME.search(m["rest"])
        events.append(
            XidEvent(
                ts=entry.ts,
                pci=m["pci"],
                xid=int(m["xid"]),
                pid=int(pid.group(1)) if pid else None,
                process=name.group(1).strip() if name else None,
                message=m["rest"].strip(),
            )
        )
    return events


def driver_faults(raw: str) -> int:
    """How many NVRM lines in ``raw`` report a GPU whose firmware or bus stopped answering (Xid or not)."""
    return sum(1 for line in capped_lines(raw) if "NVRM" in line and _DRIVER_FAULT.search(line))
