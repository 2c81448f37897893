"""``opsbot fidelity``: record the greedy-output baseline after a good deploy; compare every decode and rank with it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

if TYPE_CHECKING:
    from rich.table import Table

    from opsbot.bundle import Fidelity
    from opsbot.flow import Flow

app = typer.Typer(help="Output fidelity: fixed greedy prompts compared with the baseline of the last good deploy.",
                  no_args_is_help=True)
err = Console(stderr=True, soft_wrap=True)

ClusterOpt = typer.Option(None, "--cluster", "-c", help="cluster in the inventory")
InventoryOpt = typer.Option(None, "--inventory", "-i", help="inventory YAML (default: settings)")
BaselineOpt = typer.Option(None, "--baseline", help="baseline file (default: DATA_DIR/fidelity/CLUSTER.json)")


def _flow(inventory: Path | None, cluster: str | None) -> tuple[Flow, str]:
    from opsbot.cli.flowroot import cli_flow
    from opsbot.flow import InventoryUnavailable
    from opsbot.inventory import UnknownRole
    from opsbot.settings import get_settings
    from opsbot.yamlsource import ConfigError

    flow = cli_flow(get_settings(), inventory)
    try:
        return flow, flow.cluster_name(cluster)
    except (InventoryUnavailable, ConfigError, UnknownRole) as exc:
        err.print(f"error: {exc}", style="red", markup=False)
        raise typer.Exit(2) from exc


@app.command("record")
def record_cmd(
    cluster: str | None = ClusterOpt, inventory: Path | None = InventoryOpt, baseline: Path | None = BaselineOpt,
    repeats: int = typer.Option(3, "--repeats", min=2, max=20, help="times each prompt is asked of each decode and rank"),
) -> None:
    """Record the baseline: run this after a deploy that passed its checks. Exit 0 recorded, 2 not."""
    import asyncio

    from opsbot.collect.fidelity import FidelityError

    flow, name = _flow(inventory, cluster)
    try:
        base, path = asyncio.run(flow.record_fidelity(name, repeats=repeats, path=baseline))
    except (FidelityError, ValueError) as exc:
        err.print(f"error: no baseline recorded: {exc}", style="red", markup=False)
        raise typer.Exit(2) from exc
    stable = min(p.stable for p in base.prompts.values())
    spread = max(p.spread for p in base.prompts.values())
    typer.echo(f"baseline {base.id} of {base.model} (tokenizer {base.tokenizer}): {len(base.prompts)} prompts, "
               f"{base.answers} answers each; stable prefix >= {stable} tokens, largest spread {spread:.4f} nats; "
               f"saved: {path}")


def cases_table(f: Fidelity) -> Table:
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=f"fidelity against baseline {f.baseline.id if f.baseline else '-'}", title_justify="left")
    for col in ("decode", "rank", "prompt", "verdict", "first divergence", "logprob distance"):
        t.add_column(col, overflow="fold")
    for c in f.cases:
        verdict = ("[yellow]error: " + escape(c.error or "") + "[/]" if c.error else "-" if c.diverged is None
                   else "[red]diverged[/]" if c.diverged else "[green]matches[/]")
        t.add_row(c.instance, "-" if c.dp_rank is None else str(c.dp_rank), c.prompt_id, verdict,
                  "-" if c.first_divergence is None else str(c.first_divergence),
                  "-" if c.logprob_distance is None else f"{c.logprob_distance:.4f}")
    return t


@app.command("check")
def check_cmd(
    cluster: str | None = ClusterOpt, inventory: Path | None = InventoryOpt, baseline: Path | None = BaselineOpt,
    save: Path | None = typer.Option(None, "--save", help="also write the bundle to this file"),
) -> None:
    """Ask every decode instance and rank, compare with the baseline, probe and diagnose; kept as a bundle.

    Exit status: 0 every answer matches, 1 divergence or findings, 2 not judged (no or refused baseline, bad input).
    """
    import asyncio
    import getpass

    from opsbot.bundle import Trigger
    from opsbot.cli.diagnosis_view import render
    from opsbot.cli.flowroot import keep_bundle
    from opsbot.collect.fidelity import FidelityError
    from opsbot.parse.fidelity import verdict

    flow, name = _flow(inventory, cluster)
    try:
        result = asyncio.run(flow.run_fidelity(name, Trigger(kind="cli", text="fidelity", user=getpass.getuser()),
                                               baseline=baseline))
    except (FidelityError, ValueError) as exc:
        err.print(f"error: {exc}", style="red", markup=False)
        raise typer.Exit(2) from exc
    keep_bundle(flow, result, save)
    f = result.bundle.fidelity
    out = Console()
    if f is not None:
        out.print(cases_table(f))
        if f.refused:
            out.print(f"NOT COMPARED: {f.refused}", style="red", markup=False, highlight=False)
    out.print(render(result.diagnosis))
    result_value = verdict(f)
    raise typer.Exit(2 if result_value < 0 else 1 if result_value == 0 or result.diagnosis.findings else 0)
