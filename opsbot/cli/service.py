"""``opsbot service``: opsbot itself as a systemd service."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(help="Run opsbot as a systemd service: the unit and its config file.", no_args_is_help=True)


@app.command("render")
def render(
    out: Path = typer.Argument(..., help="directory to write opsbot.service and opsbot.toml into"),
    executable: Path = typer.Option(Path("/opt/opsbot/bin/opsbot"), "--bin", help="the installed opsbot (a venv's)"),
    user: str = typer.Option(None, "--user", help="run as this user (default: a DynamicUser)"),
    secret: list[str] = typer.Option([], "--secret", help="a secret setting given as a credential (repeat)"),
    no_ssh_key: bool = typer.Option(False, "--no-ssh-key", help="no ssh_key credential (local transports only)"),
    host: str = typer.Option("127.0.0.1", "--host", help="listen address written to the config file"),
    port: int = typer.Option(8080, "--port", help="listen port written to the config file"),
    public_url: str = typer.Option(None, "--public-url", help="opsbot's URL as operators reach it"),
) -> None:
    """Write a hardened unit for `opsbot serve` and its config file; print how to install them."""
    from opsbot.unitfile import (
        CONFIG_DIR,
        UNIT_NAME,
        UnitProblem,
        UnitSpec,
        credential_source,
        render_config,
        render_unit,
    )

    spec = UnitSpec(executable=executable, user=user, secrets=tuple(secret), ssh_key=not no_ssh_key,
                    host=host, port=port, public_url=public_url)
    try:
        unit, config = render_unit(spec), render_config(spec)
    except UnitProblem as exc:
        typer.secho(f"error: {exc}", fg="red", err=True)
        raise typer.Exit(2) from None
    out.mkdir(parents=True, exist_ok=True)
    (out / UNIT_NAME).write_text(unit, encoding="utf-8")
    (out / "opsbot.toml").write_text(config, encoding="utf-8")
    creds = [credential_source(n) for n in spec.secrets] + ([credential_source("ssh_key")] if spec.ssh_key else [])
    typer.echo(f"wrote {out / UNIT_NAME} and {out / 'opsbot.toml'}. To install:")
    typer.echo(f"  install -m 0644 {out / UNIT_NAME} /etc/systemd/system/ && "
               f"install -D -m 0644 {out / 'opsbot.toml'} {CONFIG_DIR / 'opsbot.toml'}")
    for path in creds:
        typer.echo(f"  install -D -m 0600 /dev/stdin {path}    # paste the secret, then Ctrl-D")
    typer.echo(f"  systemctl daemon-reload && systemctl enable --now {UNIT_NAME}")
