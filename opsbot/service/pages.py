"""The status page (``GET /``): server-side HTML from the same status report the CLI prints."""

from __future__ import annotations

import asyncio
import html
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from opsbot.report.render import age, when
from opsbot.report.current import current_from_bundle, current_from_figures
from opsbot.report.status import build_status
from opsbot.service import integrations

router = APIRouter()
templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
templates.env.filters.update(age=age, when=when)


@dataclass
class PageData:
    report: Any
    probes: list[Any]
    actions: list[Any]
    failed_alerts: list[Any]
    latest_report: Any
    incidents: list[Any] = field(default_factory=list)
    integrations: list[Any] = field(default_factory=list)
    prometheus_alerts: list[Any] = field(default_factory=list)


def page_data(store: Any, settings: Any) -> PageData:
    """Everything the page shows, read in one go (runs in a worker thread)."""
    latest = store.latest_report("weekly") or store.latest_report("status")
    return PageData(
        report=build_status(store, None, settings),
        probes=store.probes(cluster=settings.cluster, limit=10),
        actions=store.actions(cluster=settings.cluster, limit=10),
        failed_alerts=store.failed_alerts(limit=10),
        latest_report=latest,
        incidents=store.incidents(cluster=settings.cluster, limit=10),
    )


@router.get("/", response_class=HTMLResponse, tags=["status"], summary="Status page (HTML)")
async def status_page(request: Request) -> HTMLResponse:
    flow = request.app.state.flow
    data = await flow.db(page_data, flow.store, flow.settings)
    data.integrations, data.prometheus_alerts = await asyncio.gather(
        integrations.check(flow.settings, flow.store, flow.db),
        integrations.prometheus_alerts(flow.settings.prometheus_url))
    data.integrations.append(await request.app.state.chainwatch.state(data.integrations))
    return templates.TemplateResponse(request, "status.html", {"d": data, "r": data.report})


@router.get("/probes/{probe_id}", response_class=HTMLResponse, tags=["status"],
            summary="One stored probe: each role's figures and the findings (the evidence behind a Slack message)",
            responses={404: {"description": "no such probe", "content": {"text/html": {}}}})
async def probe_page(probe_id: str, request: Request) -> HTMLResponse:
    flow = request.app.state.flow
    data = await flow.db(probe_data, flow.store, probe_id[:64])
    if data is None:
        return HTMLResponse(f"<p>no probe {html.escape(probe_id[:64])!s}; <a href=\"/\">status page</a></p>",
                            status_code=404)
    if isinstance(data, str):
        return HTMLResponse(f"<p>{html.escape(data)}; <a href=\"/\">status page</a></p>", status_code=422)
    return templates.TemplateResponse(request, "probe.html", {"p": data})


@dataclass
class ProbeData:
    current: Any
    findings: list[Any]
    trigger: Any
    incident: Any


def probe_data(store: Any, probe_id: str) -> ProbeData | str | None:
    """The probe's figures as stored when it was saved (its logs are not parsed again), its trigger and
    findings; None when there is no such probe, a sentence when its stored bundle cannot be read."""
    try:
        bundle = store.load_bundle(probe_id)
    except KeyError:
        return None
    except (zlib.error, ValueError) as exc:
        return f"the stored bundle of probe {probe_id} is unreadable: {str(exc)[:200]}"
    at = datetime.now(timezone.utc)
    roles = store.probe_figures(probe_id)
    taken = datetime.fromisoformat(bundle.started_at.replace("Z", "+00:00"))
    current = (current_from_bundle(bundle, now=at, fresh=True) if roles is None  # saved before figures were kept
               else current_from_figures(bundle.id, bundle.cluster, taken, roles, now=at, fresh=True))
    return ProbeData(current=current, findings=store.probe_findings(probe_id), trigger=bundle.trigger,
                     incident=store.incident_for_probe(probe_id, bundle.cluster))
