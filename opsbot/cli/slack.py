"""``opsbot slack``: the Slack app in one step."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import typer

app = typer.Typer(help="The Slack app: its manifest.", no_args_is_help=True)


@app.command("manifest")
def manifest_cmd(
    url: str = typer.Option(None, "--url", help="opsbot's public HTTPS base URL (Slack posts to URL/slack/events)"),
    socket_mode: bool = typer.Option(False, "--socket-mode", help="no Request URL: opsbot connects out to Slack"),
    name: str = typer.Option("opsbot", "--name", help="the app's and the bot user's name"),
) -> None:
    """Print the Slack app manifest (JSON): paste it at api.slack.com/apps -> Create New App -> From a manifest."""
    from opsbot.settings import get_settings
    from opsbot.slack.manifest import manifest

    if socket_mode == (url is not None):
        typer.secho("error: give --url https://... or --socket-mode (one of them)", fg="red", err=True)
        raise typer.Exit(2)
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme != "https" or not parts.netloc or parts.query or parts.fragment:
            typer.secho(f"error: --url must be an https:// base URL without query (got {url!r})", fg="red", err=True)
            raise typer.Exit(2)
    typer.echo(json.dumps(manifest(get_settings(), url, name=name), indent=2))
