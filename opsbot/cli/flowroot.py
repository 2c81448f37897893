"""The CLI's composition root and its files: the Flow a command runs on, the inventory it loads, the bundles
it keeps. Every command that probes or reads a bundle imports these from here."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

if TYPE_CHECKING:
    from opsbot.bundle import Bundle
    from opsbot.flow import Flow, ProbeResult
    from opsbot.inventory import Inventory
    from opsbot.settings import Settings

err = Console(stderr=True, soft_wrap=True)


def load_or_exit(path: Path) -> Inventory:
    from opsbot.inventory import load_inventory
    from opsbot.yamlsource import ConfigError

    try:
        return load_inventory(path)
    except ConfigError as exc:
        for problem in exc.problems:
            err.print(str(problem), style="red", markup=False)
        raise typer.Exit(2) from exc


def save_bundle(bundle: Bundle, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(bundle.to_json(), encoding="utf-8")
    return path


def cli_flow(settings: Settings, inventory: Path | None = None) -> Flow:
    """The CLI's composition root: one Flow over the configured store (``--inventory`` overrides the file)."""
    from opsbot.flow import Flow
    from opsbot.store import StoreError, open_store

    if inventory is not None:
        settings = settings.model_copy(update={"inventory": inventory})
    try:
        return Flow(settings=settings, store=open_store(settings.db_url()))
    except StoreError as exc:
        err.print(str(exc), style="red", markup=False)
        raise typer.Exit(2) from exc


def keep_bundle(flow: Flow, result: ProbeResult, save: Path | None) -> None:
    """The bundle as a JSON file too (DATA_DIR/bundles and ``--save``); say where, and which probe row holds it."""
    bundle = result.bundle
    kept = save_bundle(bundle, flow.settings.data_dir / "bundles" / f"{bundle.id}.json")
    if save:
        save_bundle(bundle, save)
    err.print(f"probe {result.probe_id} recorded; bundle saved: {kept}" + (f" and {save}" if save else ""),
              highlight=False, markup=False)
    for role, action_id in result.plans.items():
        err.print(f"restart of {role} planned: `opsbot actions approve {action_id}`", highlight=False, markup=False)
