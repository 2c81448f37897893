"""The commands opsbot runs on a node, built here only (floor: pure argv lists, no I/O).

Probes, restarts, verification, the inventory check and deploys all take their ``systemctl``,
``nvidia-smi`` and ``journalctl`` command lines from here, so a flag changes in one place.
"""

from __future__ import annotations

from typing import Literal

from opsbot.bundle import GPU_QUERY, SYSTEMD_PROPERTIES


def systemctl(verb: Literal["stop", "start", "restart", "reset-failed", "enable", "is-active", "daemon-reload"],
              unit: str | None = None) -> list[str]:
    return ["systemctl", verb, *([unit] if unit else [])]


def unit_show(unit: str, properties: str = SYSTEMD_PROPERTIES) -> list[str]:
    """``systemctl show`` of the properties opsbot parses (``opsbot.parse.unit``)."""
    return ["systemctl", "show", unit, "--no-pager", f"--property={properties}"]


def unit_load_state(unit: str) -> list[str]:
    """Whether systemd knows the unit at all (``loaded``), for the inventory check."""
    return ["systemctl", "show", unit, "--no-pager", "--property=LoadState", "--value"]


def gpu_query(gpus: list[int] | None = None) -> list[str]:
    """``nvidia-smi`` rows of the fields in ``GPU_QUERY``; only ``gpus`` when given."""
    only = ["-i", ",".join(str(g) for g in gpus)] if gpus else []
    return ["nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits", *only]


def journal(args: list[str], lines: int) -> list[str]:
    """``journalctl`` with ``args`` (``-u UNIT``, ``--since``, ``-k``), ISO times, the last ``lines`` lines.
    ``--all``: a line with a control character (SMG's colour codes) is shown, not "[N B blob data]"."""
    return ["journalctl", *args, "-o", "short-iso", "--all", "--no-pager", "-n", str(lines)]


def unit_invocation(unit: str) -> list[str]:
    """The unit's current run (``InvocationID``): what its journal entries of that run carry."""
    return ["systemctl", "show", unit, "--no-pager", "--property=InvocationID", "--value"]


def invocation_journal(invocation: str) -> list[str]:
    """Every journal line of one run of a unit (its stdout and stderr), message text only."""
    return ["journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "-o", "cat", "--all", "--no-pager"]


def unit_cgroup(unit: str) -> list[str]:
    """The unit's control group (``/system.slice/NAME.service``): every process it started is in it."""
    return ["systemctl", "show", unit, "--no-pager", "--property=ControlGroup", "--value"]


CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd")  # v2, hybrid, v1


def cgroup_procs(cgroup: str) -> list[str]:
    """The pids of a control group and of every group below it, one a line, wherever this host mounts
    systemd's hierarchy (cgroup v2, or v1's hybrid and named layouts; the roots that do not exist are
    skipped, so the exit status says nothing)."""
    return ["find", *(f"{root}{cgroup}" for root in CGROUP_ROOTS), "-name", "cgroup.procs", "-exec", "cat", "{}", "+"]


def process_line(pid: int) -> list[str]:
    """A process's command line as ``ps`` shows it (SGLang renames its subprocesses: ``sglang::scheduler``)."""
    return ["ps", "-o", "args=", "-p", str(pid)]


def stack_dump(pid: int) -> list[str]:
    """Every thread's Python stack of one process, by py-spy (reads its memory; pauses it for an instant)."""
    return ["py-spy", "dump", "--pid", str(pid)]


def run_journal(invocation: str, lines: int) -> list[str]:
    """The last ``lines`` journal lines of one run of a unit, with their times."""
    return ["journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "-o", "short-iso", "--no-pager", "-n", str(lines)]
