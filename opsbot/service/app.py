"""The opsbot service: one FastAPI app carrying REST, the status page, Slack and alert intake."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError

from opsbot import __version__
from opsbot.service import api, pages
from opsbot.service.intake import AlertIntake
from opsbot.service.jobs import Jobs
from opsbot.service.limits import BodyLimit, inventory_unavailable, validation_error
from opsbot.service.runtime import InventoryUnavailable, Runtime
from opsbot.settings import Settings, get_settings
from opsbot.store.exclusive import hold_single_instance, release_single_instance

log = logging.getLogger(__name__)

DESCRIPTION = """\
Incident response for SGLang prefill/decode deployments. Authenticate with
`Authorization: Bearer <token>` (`opsbot tokens create --scope read|probe|act`); a missing or
unknown token is answered 401, a token without the route's scope 403.
"""


def _open_store(settings: Settings) -> Any:
    from opsbot.store import Store

    return Store(settings.db_url())


def _check_clock(runtime: Runtime) -> None:
    """Warn when this host's clock is off the database's: claims and leases written by several
    instances are compared by time, so a clock minutes off would take over live work or keep dead work."""
    skew = runtime.store.clock_skew() if hasattr(runtime.store, "clock_skew") else None
    if skew is None:
        return
    runtime.telemetry.clock_skew.set(skew)
    if abs(skew) > runtime.settings.clock_skew_warn_s:
        log.warning("this host's clock is %.1f s %s the database server's (warn above %.0f s): leases and claims "
                    "compare times across instances, so fix the clock (NTP/chrony) on this host or the database's",
                    abs(skew), "ahead of" if skew > 0 else "behind", runtime.settings.clock_skew_warn_s)


async def _reconcile(runtime: Runtime) -> None:
    """Settle restarts a dead opsbot left ``executing`` (by looking at the units), as the CLI does at start."""
    from opsbot.act import reconcile

    try:
        inventory = runtime.inventory()
    except InventoryUnavailable as exc:
        log.warning("interrupted actions not reconciled at start-up: %s", exc)
        return
    try:
        for o in await reconcile(runtime.store, inventory, runtime.settings):
            log.warning("reconciled interrupted action %s: %s: %s", o.action_id, o.state, o.message)
    except Exception:  # a node that cannot be reached must not keep the service down; the next start retries
        log.exception("reconciling interrupted actions failed; they stay 'executing' until the next start")


def create_app(settings: Settings | None = None, *, runtime: Runtime | None = None) -> FastAPI:
    """Build the app; ``runtime`` lets tests and benchmarks choose the store and probe function."""
    settings = settings or get_settings()
    if runtime is None:
        from opsbot.collect.pool import KeptPool

        runtime = Runtime(settings=settings, store=_open_store(settings))
        runtime.pool = KeptPool(settings, settings.ssh_idle_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        slack = app.state.slack
        lock = hold_single_instance(runtime.store.url) if hasattr(runtime.store, "url") else None
        await runtime.db(_check_clock, runtime)
        await _reconcile(runtime)
        recovered = await app.state.intake.recover()
        if recovered:
            log.info("picked up %d stored alerts that had no probe yet", recovered)
        socket = await slack.start_socket_mode() if slack else None
        try:
            yield
        finally:
            if socket is not None:
                await socket.close_async()
            await app.state.intake.close()
            await app.state.jobs.close()
            if runtime.pool is not None:
                await runtime.pool.close()
            release_single_instance(lock)

    app = FastAPI(title="opsbot", version=__version__, description=DESCRIPTION, lifespan=lifespan)
    app.state.runtime = runtime
    app.state.jobs = Jobs()
    app.state.slack = None
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(InventoryUnavailable, inventory_unavailable)  # type: ignore[arg-type]
    app.include_router(api.router)
    app.include_router(pages.router)
    if settings.slack_signing_secret and settings.slack_bot_token:
        from opsbot.slack.app import SlackSurface
        from opsbot.slack.app import router as slack_router

        app.state.slack = SlackSurface(runtime)
        app.include_router(slack_router)
    app.state.intake = AlertIntake(runtime, notifier=app.state.slack.threads if app.state.slack else None)
    return app

