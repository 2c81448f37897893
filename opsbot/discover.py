"""Discovery (``opsbot init``): which systemd units on a host run SGLang, a router or the GPU exporter, read
from their ExecStart, and the inventory they make. Pure: the command line fetches the text over SSH.

What is recognised (the command lines, checked in the real sources):
- an SGLang server: ``python -m sglang.launch_server`` (sglang 0.5.23 ``sglang/launch_server.py``), or any module
  or script named ``launch_server`` (the lab's emulator, the bf16 patch's launcher in front of it); its role is
  ``--disaggregation-mode prefill|decode`` (``sglang/srt/server_args.py``: choices null, prefill, decode; a server
  without it is not a PD role and is listed, not inventoried); ``--port`` (default 30000), ``--host``;
- a router: ``python -m sglang_router.launch_router`` (sglang-router 0.3.2) or ``smg launch`` (smg 1.13
  ``smg/router_args.py``): ``--port`` (default 30000), ``--prometheus-port`` (default 29000), ``--host``;
- the GPU exporter: ``serving/exporter.py`` (module ``serving.exporter``) or the lab's ``gpu_exporter``.
A unit whose ExecStart is a shell script (``opsbot deploy render``'s ``serve-ROLE.sh``) is read through
the script's ``exec`` line.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import PurePosixPath

from opsbot.inventory import NAME_RE, UNIT_RE

SERVER_DEFAULT_PORT = 30000
ROUTER_DEFAULT_PORT = 30000
ROUTER_DEFAULT_PROMETHEUS_PORT = 29000
_ARGV = re.compile(r"argv\[\]=(.*?) ; ")
_UNSPECIFIED = {"0.0.0.0", "::", "[::]", ""}


class UnitKind(StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"
    ROUTER = "router"
    EXPORTER = "exporter"
    SERVER = "server"  # SGLang without --disaggregation-mode: not a PD role


@dataclass(frozen=True)
class FoundUnit:
    unit: str
    kind: UnitKind
    port: int
    host: str
    prometheus_port: int | None = None
    active: str = ""


@dataclass
class HostScan:
    """What one host runs: the units opsbot recognised and how many services it looked at."""

    services: int = 0
    found: list[FoundUnit] = field(default_factory=list)
    scripts: dict[str, str] = field(default_factory=dict)  # unit -> script path to read


def parse_show(text: str) -> list[dict[str, str]]:
    """``systemctl show -p ... UNIT...`` output: one dict per unit block (blocks separated by blank lines)."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
            current = {}
            continue
        key, sep, value = line.partition("=")
        if sep:
            current.setdefault(key, value)
    if current:
        blocks.append(current)
    return blocks


def exec_argv(exec_start: str) -> list[str]:
    """The argv of the first command in systemd's ExecStart property (``{ path=... ; argv[]=... ; ... }``)."""
    m = _ARGV.search(exec_start + " ; ")
    if not m:
        return []
    try:
        return shlex.split(m.group(1))
    except ValueError:
        return m.group(1).split()


def script_argv(script: str) -> list[str]:
    """The argv of a serve script's ``exec`` line (backslash continuations joined)."""
    joined = re.sub(r"\\\n", " ", script)
    for line in joined.splitlines():
        words = line.strip().split(None, 1)
        if words and words[0] == "exec" and len(words) == 2:
            try:
                return shlex.split(words[1])
            except ValueError:
                return words[1].split()
    return []


def _flag(argv: list[str], name: str) -> str | None:
    for i, word in enumerate(argv):
        if word == name and i + 1 < len(argv):
            return argv[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def _port(argv: list[str], name: str, default: int) -> int:
    value = _flag(argv, name)
    return int(value) if value is not None and value.isdigit() and 0 < int(value) < 65536 else default


def _programs(argv: list[str]) -> list[str]:
    """The names a command line runs: each ``-m`` module's last part and each word's basename, without .py."""
    names = []
    for i, word in enumerate(argv):
        if i > 0 and argv[i - 1] == "-m":
            names.append(word.rsplit(".", 1)[-1])
            names.append(word)
        names.append(PurePosixPath(word).name.removesuffix(".py"))
    return names


def classify(unit: str, argv: list[str], active: str = "") -> FoundUnit | None:
    """The unit as opsbot knows it, or None when its command line is none of SGLang, a router or the exporter."""
    programs = _programs(argv)
    host = _flag(argv, "--host") or "127.0.0.1"
    if "launch_server" in programs:
        mode = _flag(argv, "--disaggregation-mode")
        kind = {"prefill": UnitKind.PREFILL, "decode": UnitKind.DECODE}.get(mode or "", UnitKind.SERVER)
        return FoundUnit(unit, kind, _port(argv, "--port", SERVER_DEFAULT_PORT), host, active=active)
    smg = any(PurePosixPath(w).name == "smg" for w in argv[:1]) and "launch" in argv[1:2]
    if "launch_router" in programs or smg:
        return FoundUnit(unit, UnitKind.ROUTER, _port(argv, "--port", ROUTER_DEFAULT_PORT), host,
                         _port(argv, "--prometheus-port", ROUTER_DEFAULT_PROMETHEUS_PORT), active)
    if "serving.exporter" in programs or "exporter" in programs or "gpu_exporter" in programs:
        return FoundUnit(unit, UnitKind.EXPORTER, _port(argv, "--port", 9101), host, active=active)
    return None


def scan(show_text: str, scripts: dict[str, str] | None = None) -> HostScan:
    """Every service block of ``systemctl show`` classified; ``scripts`` holds the text of ExecStart scripts read."""
    result = HostScan()
    for block in parse_show(show_text):
        unit = block.get("Id", "")
        if not UNIT_RE.fullmatch(unit):
            continue
        result.services += 1
        argv = exec_argv(block.get("ExecStart", ""))
        if argv and argv[0].endswith(".sh"):
            if scripts is None or unit not in scripts:
                result.scripts[unit] = argv[0]
                continue
            argv = script_argv(scripts[unit])
        found = classify(unit, argv, block.get("ActiveState", ""))
        if found is not None:
            result.found.append(found)
    return result


def node_name(hostname: str, fallback: str) -> str:
    """An inventory node name from the host's own name (lower-case, [a-z0-9-]), else from what was typed."""
    for candidate in (hostname, fallback):
        name = re.sub(r"[^a-z0-9-]+", "-", candidate.strip().lower()).strip("-")[:63]
        if name and NAME_RE.fullmatch(name):
            return name
    return "node"


def _loopback(host: str) -> str:
    return "127.0.0.1" if host in _UNSPECIFIED else host


def roles_of(node: str, found: list[FoundUnit], taken: set[str]) -> list[dict[str, object]]:
    """Inventory role entries for a node's PD units (names made unique across the cluster in ``taken``)."""
    roles = []
    for f in _one_per_port(found):
        if f.kind not in (UnitKind.PREFILL, UnitKind.DECODE, UnitKind.ROUTER):
            continue
        key, n = f.kind.value, 2
        while key in taken:
            key, n = f"{f.kind.value}-{n}", n + 1
        taken.add(key)
        host = _loopback(f.host)
        metrics_port = f.prometheus_port if f.kind is UnitKind.ROUTER and f.prometheus_port else f.port
        # a router's /readiness answers 200 only with a healthy prefill and decode behind it (serving/rollout.py)
        health = "readiness" if f.kind is UnitKind.ROUTER else "health"
        entry: dict[str, object] = {"role": f.kind.value, "node": node, "unit": f.unit,
                                    "metrics_url": f"http://{host}:{metrics_port}/metrics",
                                    "health_url": f"http://{host}:{f.port}/{health}", "http_via_ssh": True}
        if key != f.kind.value:
            entry["name"] = key
        roles.append(entry)
    return roles


def _one_per_port(found: list[FoundUnit]) -> list[FoundUnit]:
    """Two units of a kind on one port cannot both serve: the active one is the role, the other a leftover
    (a unit a deploy left installed and stopped); the order is kept."""
    best: dict[tuple[UnitKind, str, int], FoundUnit] = {}
    for f in found:
        key = (f.kind, f.host, f.port)
        if key not in best or (f.active == "active" and best[key].active != "active"):
            best[key] = f
    return [f for f in found if best[(f.kind, f.host, f.port)] is f]


def describe(found: list[FoundUnit]) -> str:
    return ", ".join(f"{f.unit} ({f.kind.value}, port {f.port}{', ' + f.active if f.active else ''})" for f in found)
