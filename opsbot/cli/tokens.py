"""``opsbot tokens``: API bearer tokens (stored hashed; the secret is shown once)."""

from __future__ import annotations

import typer

app = typer.Typer(help="API tokens for the REST API and the Alertmanager webhook.", no_args_is_help=True)


@app.command("create")
def create(
    name: str = typer.Argument(..., help="who or what uses it, e.g. alertmanager, grafana, alice"),
    scope: list[str] = typer.Option(..., "--scope", "-s", help="read, probe or act; repeat for several"),
) -> None:
    """Create a token and print its secret (only now: opsbot keeps only its SHA-256)."""
    from opsbot.store import open_store

    with open_store() as store:
        try:
            secret = store.create_token(name, scope)
        except ValueError as exc:
            typer.secho(str(exc), fg="red", err=True)
            raise typer.Exit(2) from exc
    typer.echo(secret)
    typer.secho(f"token {name!r} with scopes {', '.join(sorted(set(scope)))}; use it as 'Authorization: Bearer <token>'",
                err=True, fg="green")


@app.command("list")
def list_tokens() -> None:
    """Names, scopes and last use of the tokens (never their secrets)."""
    from opsbot.store import open_store

    with open_store() as store:
        for t in store.tokens():
            used = t.last_used_at.isoformat(timespec="seconds") if t.last_used_at else "never"
            typer.echo(f"{t.name}\t{','.join(t.scopes)}\tlast used {used}")
