"""The status page (``GET /``): server-side HTML from the same status report the CLI prints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from opsbot.report.render import age, when
from opsbot.report.status import build_status

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


def page_data(store: Any, settings: Any) -> PageData:
    """Everything the page shows, read in one go (runs in a worker thread)."""
    latest = store.latest_report("weekly") or store.latest_report("status")
    return PageData(
        report=build_status(store, None, settings),
        probes=store.probes(cluster=settings.cluster, limit=10),
        actions=store.actions(cluster=settings.cluster, limit=10),
        failed_alerts=store.failed_alerts(limit=10),
        latest_report=latest,
    )


@router.get("/", response_class=HTMLResponse, tags=["status"], summary="Status page (HTML)")
async def status_page(request: Request) -> HTMLResponse:
    flow = request.app.state.flow
    data = await flow.db(page_data, flow.store, flow.settings)
    return templates.TemplateResponse(request, "status.html", {"d": data, "r": data.report})
