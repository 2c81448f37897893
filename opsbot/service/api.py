"""REST routes: each translates the request, calls a shared function, and shapes the answer."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, Field

from opsbot.bundle import Trigger
from opsbot.inventory import NAME_RE, UnknownRole
from opsbot.service.alertmanager import Webhook
from opsbot.service.auth import Caller, require, require_alert_sender
from opsbot.service.intake import QueueFull
from opsbot.yamlsource import ConfigError

router = APIRouter()


class ProbeRequest(BaseModel):
    cluster: str | None = Field(None, max_length=64, description="cluster name; default: the only one")
    roles: list[str] = Field(default_factory=list, max_length=32, description="role names or kinds; empty: all")
    wait_s: float | None = Field(None, ge=0, le=60, description="answer inline if done by then (default from settings)")


class RestartRequest(BaseModel):
    role: str = Field(max_length=64, description="role to restart, e.g. decode")
    cluster: str | None = Field(None, max_length=64)
    reason: str | None = Field(None, max_length=2000)


def scope_error(exc: Exception) -> HTTPException:
    """A scope the inventory does not know: 422 with the names it does know."""
    if isinstance(exc, ConfigError):
        return HTTPException(422, "; ".join(p.message for p in exc.problems))
    return HTTPException(422, str(exc))


@router.get("/healthz", tags=["service"], summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/metrics", tags=["service"], summary="opsbot's own Prometheus metrics", response_class=PlainTextResponse)
async def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.runtime.telemetry.registry), media_type=CONTENT_TYPE_LATEST)


@router.post(
    "/probe",
    tags=["probe"],
    summary="Probe a scope and diagnose it",
    responses={200: {"description": "finished within wait_s"}, 202: {"description": "still running: poll GET /probe/{id}"}},
)
async def post_probe(body: ProbeRequest, request: Request, caller: Annotated[Caller, Depends(require("probe"))]) -> JSONResponse:
    runtime = request.app.state.runtime
    for name in body.roles:
        if not NAME_RE.match(name):
            raise HTTPException(422, f"role {name!r}: role names are lower-case letters, digits and '-'")
    try:
        runtime.inventory().cluster(body.cluster or runtime.settings.cluster)[1].select(body.roles)
    except (UnknownRole, ConfigError) as exc:
        raise scope_error(exc) from exc
    trigger = Trigger(kind="rest", user=caller.name, text=" ".join(body.roles) or None)
    job = request.app.state.jobs.start(runtime.run_probe(body.cluster, body.roles or None, trigger))
    wait = runtime.settings.probe_wait_s if body.wait_s is None else body.wait_s
    await asyncio.wait({job.task}, timeout=wait)
    status = 202 if job.state == "running" else 200
    return JSONResponse(job.as_json(), status_code=status, headers={"Location": f"/probe/{job.id}"})


@router.get("/probe/{job_id}", tags=["probe"], summary="A probe job: running, done (with findings) or failed")
async def get_probe(job_id: str, request: Request, _: Annotated[Caller, Depends(require("read"))]) -> dict[str, Any]:
    job = request.app.state.jobs.get(job_id)
    if job is None:
        raise HTTPException(404, f"no probe job {job_id!r} (jobs are kept in memory; finished probes are in GET /reports and the history)")
    return job.as_json()


@router.post(
    "/alerts",
    tags=["alerts"],
    summary="Alertmanager webhook (payload version 4)",
    responses={503: {"description": "queue full: Alertmanager retries"}, 413: {"description": "body too large"}},
)
async def post_alerts(hook: Webhook, request: Request, _: Annotated[Caller, Depends(require_alert_sender())]) -> dict[str, int]:
    try:
        accepted = await request.app.state.intake.accept(hook)
    except QueueFull as exc:
        raise HTTPException(503, f"{exc}; retry later", headers={"Retry-After": "5"}) from exc
    return {"stored": accepted.stored, "duplicates": accepted.duplicates}
