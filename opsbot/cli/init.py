"""``opsbot init HOST...``: discover an existing deployment over SSH and write its inventory.

Each host's SSH key is shown (type and SHA-256 fingerprint) and pinned only when the operator confirms;
the connection that follows verifies that pinned key (``opsbot.collect.transport``). Units are found by
their ExecStart (``opsbot.discover``); the inventory is validated (``opsbot.inventory``) before it is written.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:  # imported when the command runs (the command line's start-up budget)
    from opsbot.discover import HostScan
    from opsbot.inventory import Node
    from opsbot.settings import Settings

_HOST = re.compile(r"^(?:(?P<user>[a-z_][a-z0-9_-]{0,31})@)?(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+)(?::(?P<port>\d{1,5}))?$")


def _parse_host(text: str, user: str) -> tuple[str, str, int]:
    m = _HOST.match(text)
    if not m or not 0 < int(m["port"] or 22) < 65536:
        raise typer.BadParameter(f"{text!r}: write HOST, HOST:PORT or USER@HOST:PORT")
    return m["user"] or user, m["host"].strip("[]"), int(m["port"] or 22)


async def _host_key(address: str, port: int, timeout: float) -> str:
    import asyncio

    import asyncssh

    key = await asyncio.wait_for(asyncssh.get_server_host_key(address, port, config=None), timeout)
    if key is None:
        raise ConnectionError(f"{address}:{port} offered no host key")
    typer.echo(f"{address}:{port} offers host key {key.get_algorithm()} {key.get_fingerprint('sha256')}")
    return key.export_public_key().decode().strip()


async def _scan_host(node: Node, settings: Settings) -> tuple[str, HostScan]:
    """The host's name and what its services run, over one SSH connection that verifies the pinned key."""
    from opsbot.collect.transport import SshTransport
    from opsbot.discover import scan
    from opsbot.inventory import UNIT_RE

    transport = SshTransport(node, settings)
    timeout = settings.command_timeout_s

    async def run(*argv: str) -> str:
        done = await transport.run(list(argv), timeout)
        if not done.ok:
            raise ConnectionError(done.error or f"{' '.join(argv)}: exit {done.exit_status}: {done.stderr.strip()}")
        return done.stdout

    try:
        hostname = (await run("hostname")).strip()
        listed = await run("systemctl", "list-units", "--type=service", "--all", "--no-legend", "--plain")
        files = await run("systemctl", "list-unit-files", "--type=service", "--no-legend", "--plain")
        names = sorted({line.split()[0] for line in (listed + files).splitlines()
                        if line.split() and line.split()[0].endswith(".service") and "@." not in line.split()[0]})
        names = [n for n in names if UNIT_RE.fullmatch(n)]
        show = await run("systemctl", "show", "-p", "Id", "-p", "ExecStart", "-p", "ActiveState", "--", *names)
        first = scan(show)
        scripts = {unit: await run("cat", "--", path) for unit, path in first.scripts.items()}
        return hostname, scan(show, scripts)
    finally:
        await transport.close()


def init(
    hosts: list[str] = typer.Argument(..., help="HOST, HOST:PORT or USER@HOST:PORT of each node"),
    user: str = typer.Option("root", "--user", help="SSH user where HOST does not name one"),
    key_file: Path = typer.Option(None, "--key-file", help="SSH client key (default: the SSH agent / ~/.ssh)"),
    cluster: str = typer.Option("main", "--cluster", help="the cluster's name in the inventory"),
    out: Path = typer.Option(None, "--out", help="inventory to write (default: OPSBOT_INVENTORY, DATA_DIR/inventory.yaml)"),
    force: bool = typer.Option(False, "--force", help="replace OUT if it exists"),
) -> None:
    """Find the SGLang, router and exporter units on HOSTs (host keys pinned on confirmation) and write the inventory."""
    import asyncio

    import yaml

    from opsbot.discover import UnitKind, describe, node_name, roles_of
    from opsbot.inventory import Inventory, Node, load_inventory
    from opsbot.settings import get_settings
    from opsbot.yamlsource import ConfigError

    settings = get_settings()
    target = out or settings.inventory_path()
    if target.exists() and not force:
        typer.secho(f"{target} exists: choose --out, or --force to replace it", fg="red", err=True)
        raise typer.Exit(2)
    parsed = [_parse_host(h, user) for h in hosts]
    nodes: list[Node] = []
    roles: list[dict[str, Any]] = []
    taken: set[str] = set()
    exporters: list[str] = []
    for (login, address, port), typed in zip(parsed, hosts):
        try:
            host_key = asyncio.run(_host_key(address, port, settings.ssh_connect_timeout_s))
        except (OSError, TimeoutError, ConnectionError) as exc:
            typer.secho(f"{typed}: cannot reach SSH: {exc or type(exc).__name__}", fg="red", err=True)
            raise typer.Exit(1) from None
        if not typer.confirm(f"pin this key for {typed}?", default=False):
            typer.echo("not pinned: nothing written")
            raise typer.Exit(1)
        node = Node(name="scan", address=address, port=port, user=login, key_file=key_file, host_key=host_key)
        try:
            hostname, found = asyncio.run(_scan_host(node, settings))
        except Exception as exc:  # noqa: BLE001 - one line per host: the transport says what failed
            typer.secho(f"{typed}: {exc}", fg="red", err=True)
            raise typer.Exit(1) from None
        name = node_name(hostname, address)
        if name in {n.name for n in nodes}:
            name = node_name(f"{name}-{len(nodes) + 1}", address)
        typer.echo(f"{typed} ({name}): {found.services} services; "
                   f"{describe(found.found) or 'no SGLang server, router or GPU exporter unit'}")
        if not found.found:
            continue
        nodes.append(node.model_copy(update={"name": name}))
        roles += roles_of(name, found.found, taken)
        exporters += [f"{name}: {f.unit} on port {f.port}" for f in found.found if f.kind is UnitKind.EXPORTER]
    if not roles:
        typer.secho("no prefill, decode or router unit found: no inventory written", fg="red", err=True)
        raise typer.Exit(1)
    data = {"clusters": {cluster: {"nodes": [n.model_dump(mode="json", exclude_defaults=True) for n in nodes],
                                   "roles": roles}}}
    Inventory.model_validate(data)
    header = "# written by `opsbot init`: host keys pinned on confirmation\n" + "".join(
        f"# GPU exporter {e}\n" for e in exporters)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(header + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    try:
        load_inventory(target)
    except ConfigError as exc:  # pragma: no cover - validated above; the file is checked as written
        typer.secho(str(exc), fg="red", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {target}: {len(nodes)} nodes, {len(roles)} roles; check it with `opsbot inventory check {target}`")
