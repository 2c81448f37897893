"""``opsbot db``: the database schema."""

from __future__ import annotations

import typer

app = typer.Typer(help="The database: schema revision and upgrades.", no_args_is_help=True)


@app.command("upgrade")
def upgrade_cmd() -> None:
    """Bring the database (OPSBOT_DATABASE_URL, else SQLite in the data dir) to this opsbot's schema."""
    from opsbot.settings import get_settings
    from opsbot.store.database import StoreError, check_connect, current_revisions, make_engine, masked, upgrade

    url = get_settings().db_url()
    try:
        engine = make_engine(url)
        check_connect(engine)
        before = current_revisions(engine)
        head = upgrade(engine)
    except StoreError as exc:
        typer.secho(str(exc), fg="red", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"{masked(url)}: schema {', '.join(before) or '(empty)'} -> {head}")


@app.command("revision")
def revision_cmd() -> None:
    """Show the database's schema revision and the newest this opsbot knows."""
    from opsbot.settings import get_settings
    from opsbot.store.database import StoreError, current_revisions, head_revision, make_engine, masked

    url = get_settings().db_url()
    try:
        engine = make_engine(url)
        current = current_revisions(engine)
    except StoreError as exc:
        typer.secho(str(exc), fg="red", err=True)
        raise typer.Exit(2) from exc
    except Exception as exc:  # noqa: BLE001 - a driver error becomes one clear line
        typer.secho(f"cannot read {masked(url)}: {exc}", fg="red", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"database: {', '.join(current) or '(empty)'}; this opsbot: {head_revision()}")

