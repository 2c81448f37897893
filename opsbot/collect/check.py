"""``inventory check``: can opsbot reach every node, trust its key, and find every unit?"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from opsbot.collect.transport import HostKeyRefused, TransportPool
from opsbot.nodecommands import unit_load_state
from opsbot.inventory import Cluster, Inventory, Node
from opsbot.settings import Settings


@dataclass(frozen=True)
class CheckRow:
    cluster: str
    node: str
    subject: str  # "ssh" or a unit name
    ok: bool
    detail: str


async def _check_node(pool: TransportPool, cluster: str, cl: Cluster, node: Node, s: Settings) -> list[CheckRow]:
    t = await pool.get(node)
    try:
        await t.connect()
    except HostKeyRefused as exc:
        return [CheckRow(cluster, node.name, "ssh", False, f"host key refused: {exc}")]
    except ConnectionError as exc:
        return [CheckRow(cluster, node.name, "ssh", False, str(exc))]
    how = "local" if node.transport == "local" else f"{node.user}@{node.address}:{node.port}, host key verified"
    if getattr(t.inner, "recorded_key", False):
        how += f" (first use: key recorded in {node.known_hosts})"
    rows = [CheckRow(cluster, node.name, "ssh", True, how)]
    for role in (r for r in cl.roles if r.node == node.name):
        r = await t.run(unit_load_state(role.unit), s.command_timeout_s)
        state = r.stdout.strip()
        if not r.ok:
            rows.append(CheckRow(cluster, node.name, role.unit, False, r.error or r.stderr.strip()[:200]))
        elif state != "loaded":
            rows.append(CheckRow(cluster, node.name, role.unit, False,
                                 f"LoadState={state or '?'}: install the unit on {node.name} or fix 'unit:' for role {role.key}"))
        else:
            rows.append(CheckRow(cluster, node.name, role.unit, True, f"{role.key}: loaded"))
    return rows


async def check_inventory(inventory: Inventory, settings: Settings) -> list[CheckRow]:
    """Connect to every node of every cluster (host keys verified) and look up every unit."""
    async with TransportPool(settings) as pool:
        groups = await asyncio.gather(
            *(_check_node(pool, name, cl, node, settings) for name, cl in inventory.clusters.items() for node in cl.nodes)
        )
    return [row for rows in groups for row in rows]
