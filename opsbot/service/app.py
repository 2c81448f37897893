"""The opsbot service: one FastAPI app carrying REST, the status page, Slack and alert intake."""

from __future__ import annotations

import gc
import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from anyio import to_thread
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError

from opsbot import __version__
from opsbot.flow import Flow, InventoryUnavailable
from opsbot.service import api, pages
from opsbot.service.chainwatch import ChainWatch
from opsbot.service.intake import AlertIntake
from opsbot.service.jobs import Jobs
from opsbot.service.lease import Lease
from opsbot.service.limits import BodyLimit, inventory_unavailable, validation_error
from opsbot.settings import Settings, get_settings, with_running_monitoring
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


def _check_clock(flow: Flow) -> None:
    """Warn when this host's clock is off the database's: claims and leases written by several
    instances are compared by time, so a clock minutes off would take over live work or keep dead work."""
    skew = flow.store.clock_skew() if hasattr(flow.store, "clock_skew") else None
    if skew is None:
        return
    flow.telemetry.clock_skew.set(skew)
    if abs(skew) > flow.settings.clock_skew_warn_s:
        log.warning("this host's clock is %.1f s %s the database server's (warn above %.0f s): leases and claims "
                    "compare times across instances, so fix the clock (NTP/chrony) on this host or the database's",
                    abs(skew), "ahead of" if skew > 0 else "behind", flow.settings.clock_skew_warn_s)


async def _reconcile(flow: Flow) -> None:
    """Settle restarts a dead opsbot left ``executing`` (by looking at the units), as the CLI does at start."""
    try:
        flow.inventory()
    except InventoryUnavailable as exc:
        log.warning("interrupted actions not reconciled at start-up: %s", exc)
        return
    try:
        for o in await flow.reconcile():
            log.warning("reconciled interrupted action %s: %s: %s", o.action_id, o.state, o.message)
    except Exception:  # a node that cannot be reached must not keep the service down; the next start retries
        log.exception("reconciling interrupted actions failed; they stay 'executing' until the next start")


# What handlers import on first use: imported at start-up in a thread, so no first request holds the loop.
HANDLER_MODULES = ("opsbot.act", "opsbot.scope", "opsbot.report.status", "opsbot.report.render", "opsbot.report.weekly",
                   "opsbot.chat.answers", "opsbot.parse.recall", "opsbot.collect.recall", "opsbot.collect.probe",
                   "opsbot.diagnose", "opsbot.diagnose.evaluate")


def _prepare_handlers(app: FastAPI) -> None:
    """Off the loop, before the first request: FastAPI builds each route's validators on its first match
    (a few hundred ms for all of them), handlers import modules on first use, jinja2 compiles a template
    on its first render. All are done here."""
    for name in HANDLER_MODULES:
        importlib.import_module(name)
    from opsbot.report.render import load_templates

    load_templates()
    for page in pages.templates.env.list_templates():
        pages.templates.env.get_template(page)
    nowhere = {"type": "http", "path": "/\x00", "method": "GET", "root_path": "", "headers": [], "query_string": b""}
    for route in app.router.routes:
        route.matches(nowhere)  # walks every route of every included router: each is built once


def create_app(settings: Settings | None = None, *, flow: Flow | None = None) -> FastAPI:
    """The service's composition root: one Settings, one Flow, and every trigger started in the lifespan.

    ``flow`` lets tests and benchmarks choose the store and probe function. In the lab, Prometheus and
    Alertmanager default to the lab's monitoring when it runs.
    """
    settings = with_running_monitoring(settings or get_settings())
    if flow is None:
        from opsbot.collect.pool import KeptPool

        flow = Flow(settings=settings, store=_open_store(settings))
        flow.pool = KeptPool(settings, settings.ssh_idle_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        slack = app.state.slack
        lock = hold_single_instance(flow.store.url) if hasattr(flow.store, "url") else None
        await flow.db(_check_clock, flow)
        await flow.prepare()
        await to_thread.run_sync(_prepare_handlers, app)
        gc.freeze()  # what start-up loaded lives as long as the process: full collections need not scan it
        await _reconcile(flow)
        lease = Lease(flow, sweeps=[app.state.intake.recover, flow.sweep_incidents, *_report_sweeps(flow, slack),
                                    *([slack.incidents.resume] if slack else [])])
        await lease.start()
        app.state.scheduler = _start_reports(flow, slack)
        app.state.recall_scheduler = _start_recall(flow, slack)
        app.state.fidelity_scheduler = _start_fidelity(flow)
        app.state.chainwatch.start()
        socket = await slack.start_socket_mode() if slack else None
        try:
            yield
        finally:
            if socket is not None:
                await socket.close_async()
            for scheduler in (app.state.scheduler, app.state.recall_scheduler, app.state.fidelity_scheduler):
                if scheduler is not None:
                    scheduler.shutdown(wait=False)
            await app.state.chainwatch.stop()
            await app.state.intake.close()
            await lease.stop()
            await app.state.jobs.close()
            if slack:
                await slack.incidents.close()
                await slack.notifier.close()
            if flow.pool is not None:
                await flow.pool.close()
            release_single_instance(lock)

    app = FastAPI(title="opsbot", version=__version__, description=DESCRIPTION, lifespan=lifespan)
    app.state.flow = flow
    app.state.jobs = Jobs()
    app.state.slack = None
    app.state.scheduler = None
    app.state.recall_scheduler = None
    app.state.fidelity_scheduler = None
    app.state.chainwatch = ChainWatch(flow)  # probes by itself while Prometheus or Alertmanager is down
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes, timeout_s=settings.body_read_timeout_s)
    app.add_exception_handler(RequestValidationError, validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(InventoryUnavailable, inventory_unavailable)
    app.include_router(api.router)
    app.include_router(pages.router)
    if settings.slack_signing_secret and settings.slack_bot_token:
        from opsbot.slack.app import SlackSurface
        from opsbot.slack.app import router as slack_router

        app.state.slack = SlackSurface(flow)
        app.include_router(slack_router)
    app.state.intake = AlertIntake(flow, notifier=app.state.slack.threads if app.state.slack else None)
    return app


def _report_sweeps(flow: Flow, slack: Any) -> list[Any]:
    """With reports scheduled: after every heartbeat, take over a weekly report whose instance died."""
    if not flow.settings.report_schedule:
        return []
    from opsbot.report.schedule import SlackPoster, resume_weekly

    poster = SlackPoster(slack.notifier) if slack is not None else None
    return [partial(resume_weekly, flow.store, flow.settings, poster, instance=flow.instance)]


def _start_reports(flow: Flow, slack: Any) -> Any:
    """The weekly report trigger (APScheduler, claimed once per week across instances), posted through Slack."""
    if not flow.settings.report_schedule:
        return None
    from opsbot.report.schedule import SlackPoster, start_report_scheduler

    poster = SlackPoster(slack.notifier) if slack is not None else None
    return start_report_scheduler(flow.store, flow.settings, poster, instance=flow.instance)


def _start_recall(flow: Flow, slack: Any) -> Any:
    """The recall probe on ``OPSBOT_RECALL_SCHEDULE`` (one instance per slot); a worse run is posted to Slack."""
    if not flow.settings.recall_schedule:
        return None
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    from opsbot.report.week import zone
    from opsbot.service.recall_schedule import schedule_recall, slack_poster

    scheduler = AsyncIOScheduler(timezone=zone(flow.settings.report_timezone))
    schedule_recall(scheduler, flow, slack_poster(flow.settings, slack.notifier if slack is not None else None))
    scheduler.start()
    return scheduler


def _start_fidelity(flow: Flow) -> Any:
    """The output-fidelity probe on ``OPSBOT_FIDELITY_SCHEDULE`` (one instance per slot)."""
    if not flow.settings.fidelity_schedule:
        return None
    from opsbot.service.fidelity_schedule import start_fidelity_scheduler

    return start_fidelity_scheduler(flow)
