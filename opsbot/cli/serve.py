"""``opsbot serve``: the REST API, status page, Slack app and alert intake under uvicorn."""

from __future__ import annotations

import typer


def serve(
    host: str = typer.Option(None, help="listen address (default OPSBOT_HOST, 127.0.0.1)"),
    port: int = typer.Option(None, help="listen port (default OPSBOT_PORT, 8080)"),
    log_level: str = typer.Option("info", help="uvicorn log level"),
) -> None:
    """Run opsbot as a service: REST + status page on HTTP, Slack at /slack/events, alerts at /alerts."""
    import uvicorn

    from opsbot.service.app import create_app
    from opsbot.settings import get_settings
    from opsbot.store.exclusive import SecondInstance, hold_single_instance

    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    try:
        hold_single_instance(settings.db_url())  # the app's start-up takes it again (same process: kept)
    except SecondInstance as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    app = create_app(settings)
    typer.echo(f"opsbot serving on http://{host or settings.host}:{port or settings.port}  (docs: /docs)")
    uvicorn.run(app, host=host or settings.host, port=port or settings.port, log_level=log_level)
