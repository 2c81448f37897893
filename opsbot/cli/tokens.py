"""``opsbot tokens``: API bearer tokens (stored hashed; the secret is shown once)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import typer

_SPAN = re.compile(r"(\d{1,5})([mhdw])")
_UNIT = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_lifetime(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``2w`` as a timedelta; ValueError naming the accepted forms."""
    m = _SPAN.fullmatch(text.strip().lower())
    if m is None or int(m.group(1)) == 0:
        raise ValueError(f"--expires {text!r}: write a positive number and a unit, e.g. 30d, 12h, 90m, 2w")
    return timedelta(**{_UNIT[m.group(2)]: int(m.group(1))})


def _when(at: datetime | None, none: str) -> str:
    return at.isoformat(timespec="seconds") if at else none

app = typer.Typer(help="API tokens for the REST API and the Alertmanager webhook.", no_args_is_help=True)


@app.command("create")
def create(
    name: str = typer.Argument(..., help="who or what uses it, e.g. alertmanager, grafana, alice"),
    scope: list[str] = typer.Option(..., "--scope", "-s",
                                    help="read, probe or act (act includes probe, probe includes read)"),
    expires: str | None = typer.Option(None, "--expires", help="lifetime, e.g. 30d, 12h, 90m, 2w; default: never"),
) -> None:
    """Create a token and print its secret (only now: opsbot keeps only its SHA-256)."""
    from opsbot.settings import get_settings
    from opsbot.store import open_store

    with open_store(get_settings().db_url()) as store:
        try:
            lifetime = parse_lifetime(expires) if expires is not None else None
            secret = store.create_token(name, scope, lifetime)
        except ValueError as exc:
            typer.secho(str(exc), fg="red", err=True)
            raise typer.Exit(2) from exc
    typer.echo(secret)
    typer.secho(f"token {name!r} with scopes {', '.join(sorted(set(scope)))}; use it as 'Authorization: Bearer <token>'",
                err=True, fg="green")


@app.command("list")
def list_tokens() -> None:
    """Id, name, scopes, expiry, revocation and last use of the tokens (never their secrets)."""
    from opsbot.inventory import NAME_RE
    from opsbot.settings import get_settings
    from opsbot.store import open_store

    with open_store(get_settings().db_url()) as store:
        for t in store.tokens():
            state = f"revoked {_when(t.revoked_at, '')}" if t.revoked_at else f"expires {_when(t.expires_at, 'never')}"
            name = t.name if NAME_RE.fullmatch(t.name) else repr(t.name)  # one made before names were checked
            typer.echo(f"{t.id}\t{name}\t{','.join(t.scopes)}\t{state}\tlast used {_when(t.last_used_at, 'never')}")


@app.command("revoke")
def revoke(
    name: str | None = typer.Argument(None, help="the token's name (opsbot tokens list)"),
    token_id: int | None = typer.Option(None, "--id", min=1, max=2**62, help="the token's id instead of its name"),
) -> None:
    """Revoke a token by name, or by id with --id: every request with it is refused (401) from now on."""
    from opsbot.settings import get_settings
    from opsbot.store import open_store

    if (name is None) == (token_id is None):
        raise typer.BadParameter("give a token's name, or --id N (not both)")
    with open_store(get_settings().db_url()) as store:
        try:
            row = store.revoke_token(token_id if token_id is not None else str(name))
        except (KeyError, ValueError) as exc:
            typer.secho(str(exc.args[0]), fg="red", err=True)
            raise typer.Exit(2) from exc
    typer.secho(f"token {row.name!r} (id {row.id}) revoked", fg="green", err=True)
