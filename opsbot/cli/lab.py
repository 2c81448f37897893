"""``opsbot lab``: boot, inspect, break and stop the lab of systemd-nspawn nodes."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from opsbot.lab.breaks import BREAKS
from opsbot.lab.emulator.control import STATES

if TYPE_CHECKING:
    from opsbot.lab.nodes import Lab
    from opsbot.lab.settings import LabSettings

app = typer.Typer(help="The lab: real systemd + sshd nodes running the SGLang emulator (a test stand-in).",
                  no_args_is_help=True)
console = Console()
STATE_HELP = "; ".join(f"{name}: {desc} [{'/'.join(kinds)}]" for name, (kinds, desc) in STATES.items())


def _lab() -> Lab:
    from opsbot.lab.nodes import Lab
    from opsbot.lab.settings import LabSettings

    return Lab(LabSettings())


def _fail(e: Exception) -> None:
    console.print(f"[red]error:[/red] {e}")
    raise typer.Exit(1)


@app.command()
def up(
    nodes: int = typer.Option(2, "--nodes", "-n", min=1, max=16, help="how many nodes to boot (4+: more PD pairs and routers)"),
    sglang_version: str = typer.Option(None, "--sglang-version", help="emulate 0.5.23 (default) or 0.5.12"),
    monitoring: bool = typer.Option(False, "--monitoring", help="also start Prometheus (the lab's alert rules) "
                                    "and Alertmanager routing to opsbot serve"),
) -> None:
    """Build the root file system once, boot the nodes, start the units, write the inventory."""
    from opsbot.lab.emulator.scheduler import VERSIONS
    from opsbot.lab.monitoring import MonitoringError
    from opsbot.lab.nodes import Lab, LabError
    from opsbot.lab.rootfs import RootfsError
    from opsbot.lab.settings import LabSettings

    settings = LabSettings()
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
            if monitoring:
                step("Prometheus and Alertmanager (the lab's rules, routing to opsbot serve)")
                _start_monitoring(lab, settings)
        except (LabError, RootfsError, MonitoringError) as e:
            _fail(e)
    console.print(f"[bold green]lab up[/bold green]: inventory {lab.inventory_path}")
    if monitoring:
        u = lab.monitoring.urls
        console.print(f"  Prometheus {u.prometheus}  Alertmanager {u.alertmanager}")


def _start_monitoring(lab: Lab, settings: LabSettings) -> None:
    """A probe-scoped token for Alertmanager (stored hashed), then both servers."""
    from opsbot.store import open_store

    monitoring = lab.monitoring
    if all(monitoring.running().values()):
        return
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    with open_store(settings.db_url()) as store:
        token = store.create_token(f"lab-alertmanager-{int(time.time())}", ["probe"])
    monitoring.start(f"http://{host}:{settings.port}/alerts", token)


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
    mon = _lab().monitoring
    running = mon.running()
    for name, url in (("Prometheus", mon.urls.prometheus), ("Alertmanager", mon.urls.alertmanager)):
        up_ = running[name.lower()]
        console.print(f"{name}: {url} " + ("[green]up[/green]" if up_ else "[dim]not running (lab up --monitoring)[/dim]"))


@app.command(name="break", help="Break the lab the way an incident class looks (for training and game days). "
             "--list says what each does; `opsbot lab heal` undoes it.")
def break_(
    incident: str = typer.Argument(None, help="an incident class (spec/incidents.md)"),
    list_: bool = typer.Option(False, "--list", help="every class the lab can break, and how"),
) -> None:
    if list_ or incident is None:
        table = Table("class", "role", "how", "a restart fixes it")
        for name, b in BREAKS.items():
            table.add_row(name, b.role, f"{b.state}: {b.what}", "yes" if b.until_restart else "no")
        console.print(table)
        return
    from opsbot.lab.nodes import LabError

    try:
        how = _lab().break_class(incident)
    except (LabError, KeyError) as e:
        _fail(e)
    console.print(f"{how.role} → [bold]{incident}[/bold] ({how.what})")


@app.command()
def heal() -> None:
    """Every role healthy again: states cleared, stopped or failed units started, journals emptied."""
    from opsbot.lab.nodes import LabError

    with console.status("healing the lab ..."):
        try:
            _lab().reset()
        except LabError as e:
            _fail(e)
    console.print("[bold green]lab healed[/bold green]: every role answers /health")


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
