"""``opsbot lab``: boot, inspect, break and stop the lab of systemd-nspawn nodes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from opsbot.lab.emulator.control import STATES

if TYPE_CHECKING:
    from opsbot.lab.nodes import Lab

app = typer.Typer(help="The lab: real systemd + sshd nodes running the SGLang emulator (a test stand-in).",
                  no_args_is_help=True)
console = Console()
STATE_HELP = "; ".join(f"{name}: {desc} [{'/'.join(kinds)}]" for name, (kinds, desc) in STATES.items())


def _lab() -> Lab:
    from opsbot.lab.nodes import Lab
    from opsbot.settings import get_settings

    return Lab(get_settings())


def _fail(e: Exception) -> None:
    console.print(f"[red]error:[/red] {e}")
    raise typer.Exit(1)


@app.command()
def up(
    nodes: int = typer.Option(2, "--nodes", "-n", min=1, max=8, help="how many nodes to boot"),
    sglang_version: str = typer.Option(None, "--sglang-version", help="emulate 0.5.23 (default) or 0.5.12"),
) -> None:
    """Build the root file system once, boot the nodes, start the units, write the inventory."""
    from opsbot.lab.emulator.scheduler import VERSIONS
    from opsbot.lab.nodes import Lab, LabError
    from opsbot.lab.rootfs import RootfsError
    from opsbot.settings import get_settings

    settings = get_settings()
    if sglang_version is not None:
        if sglang_version not in VERSIONS:
            _fail(ValueError(f"--sglang-version {sglang_version}: the emulator speaks {', '.join(VERSIONS)}"))
        settings = settings.model_copy(update={"lab_sglang_version": sglang_version})
    lab = Lab(settings)
    with console.status("starting the lab ...") as status:
        def step(msg: str) -> None:
            console.print(f"  [green]•[/green] {msg}")
            status.update(f"{msg} ...")
        try:
            lab.up(nodes, step=step)
        except (LabError, RootfsError) as e:
            _fail(e)
    console.print(f"[bold green]lab up[/bold green]: inventory {lab.inventory_path}")


@app.command()
def down() -> None:
    """Halt every node cleanly; nothing is left running."""
    with console.status("stopping the lab ..."):
        _lab().down(step=lambda m: console.print(f"  [green]•[/green] {m}"))


@app.command()
def status() -> None:
    """Each node (process, sshd) and each unit (state, restarts)."""
    table = Table("node", "sshd", "unit", "role", "state", "restarts")
    for node in _lab().status():
        where = node.name if node.running else f"{node.name} [red]stopped[/red]"
        sshd = f"{node.ssh_port} " + ("[green]up[/green]" if node.sshd else "[red]down[/red]")
        if not node.units:
            table.add_row(where, sshd, "-", "-", "-", "-")
        for u in node.units:
            colour = "green" if u.active_state == "active" else "red"
            table.add_row(where, sshd, u.unit, u.role, f"[{colour}]{u.active_state}/{u.sub_state}[/{colour}]",
                          str(u.n_restarts))
    console.print(table)


@app.command(help=f"Put ROLE's emulator into STATE (kept across restarts). States: {STATE_HELP}")
def inject(
    role: str = typer.Argument(..., help="prefill, decode, router (or an instance name such as decode-2)"),
    state: str = typer.Argument(..., help=", ".join(STATES)),
    message: str = typer.Option(None, "--message", "-m", help="crash: the exception line to die with"),
    no_load: bool = typer.Option(False, "--no-load", help="stop the emulator's own light load"),
    until_restart: bool = typer.Option(False, "--until-restart",
                                       help="the state clears at the role's next start (as a restart fixes it)"),
    beyond: int = typer.Option(None, "--beyond", min=1,
                               help="recall-loss: prompts longer than this many tokens lose their needles"),
) -> None:
    from opsbot.lab.nodes import LabError

    if beyond is not None and state != "recall-loss":
        _fail(ValueError("--beyond applies to the recall-loss state"))
    try:
        changed = _lab().inject(role, state, message, load=not no_load, until_restart=until_restart, beyond=beyond)
    except (LabError, KeyError) as e:
        _fail(e)
    console.print(f"{', '.join(changed)} → [bold]{state}[/bold]" + (" until the next start" if until_restart else ""))
