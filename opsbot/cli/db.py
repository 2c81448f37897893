"""``opsbot db``: the database schema."""

from __future__ import annotations

from pathlib import Path

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



@app.command("backup")
def backup_cmd(
    path: Path = typer.Argument(..., help="the backup file to write"),
    force: bool = typer.Option(False, "--force", help="replace PATH if it exists"),
) -> None:
    """Back the database up while opsbot runs (SQLite's online backup API); for PostgreSQL, say how with pg_dump."""
    from opsbot.settings import get_settings
    from opsbot.store.backup import BackupRefused, backup

    try:
        copied = backup(get_settings().db_url(), path, force=force)
    except BackupRefused as exc:
        typer.secho(str(exc), fg="red", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"{copied.source} -> {copied.target}: {copied.bytes} bytes in {copied.seconds:.2f} s")


@app.command("restore")
def restore_cmd(path: Path = typer.Argument(..., help="a backup written by opsbot db backup")) -> None:
    """Replace the SQLite database with a backup (refused while opsbot serve uses it); the schema is upgraded next."""
    from opsbot.settings import get_settings
    from opsbot.store.backup import BackupRefused, restore
    from opsbot.store.database import StoreError, make_engine, upgrade

    url = get_settings().db_url()
    try:
        copied = restore(url, path)
        head = upgrade(make_engine(url))
    except (BackupRefused, StoreError) as exc:
        typer.secho(str(exc), fg="red", err=True)
        raise typer.Exit(2) from exc
    typer.echo(f"{copied.source} -> {copied.target}: {copied.bytes} bytes restored; schema {head}")
