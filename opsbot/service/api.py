"""REST routes: each translates the request, calls a shared function, and shapes the answer."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from anyio import to_thread
from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from opsbot.contracts.captures import Capture
from opsbot.bundle import Trigger
from opsbot.contracts import ActionState, RestartCost
from opsbot.inventory import NAME_RE, UnknownRole
from opsbot.service.alertmanager import Webhook
from opsbot.service.auth import Caller, require, require_alert_sender
from opsbot.service.intake import QueueFull
from opsbot.service.integrations import recent_slack_failures
from opsbot.store.database import unavailable
from opsbot.yamlsource import ConfigError

# An inventory name, as the schema says it (and the app checks it: one rule, not two).
Name = Annotated[str, StringConstraints(pattern=f"^{NAME_RE.pattern}$")]


class FieldProblem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class Problem(BaseModel):
    """Every refusal: what was wrong, in words; for a bad field, the fields too."""

    detail: str
    errors: list[FieldProblem] | None = None


def _problem(why: str) -> dict[str, Any]:
    return {"model": Problem, "description": why}


# Answers any route can give (auth, body limits, validation), documented once for all of them.
COMMON: dict[int | str, dict[str, Any]] = {
    400: _problem("the body is not valid JSON"),
    401: _problem("no token, or an unknown, revoked or expired one"),
    403: _problem("the token lacks the route's scope"),
    408: _problem("the request body did not arrive in time"),
    413: _problem("the request body is too large"),
    422: _problem("a field is invalid: detail names it"),
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: _problem("no such thing")}
router = APIRouter(responses=COMMON)


class ProbeRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    cluster: Name | None = Field(None, description="cluster name; default: the only one")
    roles: list[Name] = Field(default_factory=list, max_length=32, description="role names or kinds; empty: all")
    wait_s: float | None = Field(None, ge=0, le=60, description="answer inline if done by then (default from settings)")


class RestartRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    role: Name = Field(description="role to restart, e.g. decode")
    cluster: Name | None = None
    reason: str | None = Field(None, max_length=2000)


def check_scope(flow: Any, cluster: str | None, roles: list[str]) -> None:
    """404 for a cluster or role the inventory does not have (naming the ones it has); 422 when the
    inventory has several clusters and none was named."""
    inventory = flow.inventory()
    name = cluster or flow.settings.cluster
    if name is not None and name not in inventory.clusters:
        raise HTTPException(404, f"no cluster {name!r}; known: {', '.join(inventory.clusters)}")
    try:
        inventory.cluster(name)[1].select(roles)
    except UnknownRole as exc:
        raise HTTPException(404, str(exc)) from exc
    except ConfigError as exc:
        raise HTTPException(422, "; ".join(p.message for p in exc.problems)) from exc


@router.get("/healthz", tags=["service"], summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/metrics", tags=["service"], summary="opsbot's own Prometheus metrics", response_class=PlainTextResponse)
async def metrics(request: Request) -> Response:
    flow = request.app.state.flow
    if flow.settings.slack_bot_token:  # what the status page shows, as a gauge opsbot's own alert rules read
        flow.telemetry.slack_failing.set(len(await flow.db(recent_slack_failures, flow.store)))
    return Response(generate_latest(flow.telemetry.registry), media_type=CONTENT_TYPE_LATEST)


@router.post(
    "/probe",
    tags=["probe"],
    summary="Probe a scope and diagnose it",
    responses={200: {"description": "finished within wait_s"}, 202: {"description": "still running: poll GET /probe/{id}"},
               **NOT_FOUND},
)
async def post_probe(body: ProbeRequest, request: Request, caller: Annotated[Caller, Depends(require("probe"))]) -> JSONResponse:
    flow = request.app.state.flow
    check_scope(flow, body.cluster, body.roles)
    trigger = Trigger(kind="rest", user=caller.name, text=" ".join(body.roles) or None)
    job = request.app.state.jobs.start(flow.run_probe(body.cluster, body.roles or None, trigger))
    wait = flow.settings.probe_wait_s if body.wait_s is None else body.wait_s
    await asyncio.wait({job.task}, timeout=wait)
    status = 202 if job.state == "running" else 200
    return JSONResponse(job.as_json(), status_code=status, headers={"Location": f"/probe/{job.id}"})


@router.get("/probe/{job_id}", tags=["probe"], summary="A probe job: running, done (with findings) or failed",
            responses=NOT_FOUND)
async def get_probe(job_id: str, request: Request, _: Annotated[Caller, Depends(require("read"))]) -> dict[str, Any]:
    job = request.app.state.jobs.get(job_id)
    if job is None:
        raise HTTPException(404, f"no probe job {job_id!r} (jobs are kept in memory; stored probes: opsbot history)")
    return job.as_json()


@router.post(
    "/alerts",
    tags=["alerts"],
    summary="Alertmanager webhook (payload version 4)",
    responses={503: _problem("queue full, no inventory, or the database away: Alertmanager retries")},
)
async def post_alerts(hook: Webhook, request: Request, _: Annotated[Caller, Depends(require_alert_sender())]) -> dict[str, int]:
    try:
        accepted = await request.app.state.intake.accept(hook)
    except QueueFull as exc:
        raise HTTPException(503, f"{exc}; retry later", headers={"Retry-After": "5"}) from exc
    except Exception as exc:  # the database is away: nothing was acknowledged, Alertmanager sends it again
        if not unavailable(exc):
            raise
        request.app.state.flow.telemetry.alerts_rejected.labels("database-unavailable").inc()
        raise HTTPException(503, "the database is unavailable; retry later", headers={"Retry-After": "5"}) from exc
    return {"stored": accepted.stored, "duplicates": accepted.duplicates}


STATUS_TYPES = {"application/json": "json", "text/markdown": "markdown", "text/html": "html"}


def negotiate(accept: str | None) -> tuple[str, str]:
    """(media type, report format) for an Accept header; JSON when nothing better matches."""
    for part in (accept or "").split(","):
        media = part.split(";")[0].strip().lower()
        if media in STATUS_TYPES:
            return media, STATUS_TYPES[media]
    return "application/json", "json"


@router.get(
    "/status",
    tags=["reports"],
    summary="The current status report: JSON, Markdown or HTML by Accept",
    responses={200: {"content": {"text/markdown": {}, "text/html": {}}}},
)
async def get_status(request: Request, _: Annotated[Caller, Depends(require("read"))]) -> Response:
    from opsbot.report.render import render
    from opsbot.report.status import build_status

    flow = request.app.state.flow
    media, fmt = negotiate(request.headers.get("accept"))
    report = await flow.db(build_status, flow.store, None, flow.settings)
    return Response(await to_thread.run_sync(render, report, fmt), media_type=media)


class ReportSummary(BaseModel):
    id: int
    kind: str
    period: str
    format: str
    created_at: Any


@router.get("/reports", tags=["reports"], summary="Saved reports, newest first")
async def list_reports(
    request: Request, _: Annotated[Caller, Depends(require("read"))],
    kind: Literal["status", "weekly"] | None = None, limit: int = 50,
) -> list[ReportSummary]:
    flow = request.app.state.flow
    rows = await flow.db(flow.store.reports, kind=kind, limit=max(1, min(limit, 500)))
    return [ReportSummary(id=r.id, kind=r.kind, period=r.period, format=r.format, created_at=r.created_at) for r in rows]


@router.get("/reports/{report_id}", tags=["reports"], summary="One saved report, in the format it was saved in",
            responses=NOT_FOUND)
async def get_report(report_id: int, request: Request, _: Annotated[Caller, Depends(require("read"))]) -> Response:
    flow = request.app.state.flow
    if not -(2**31) <= report_id < 2**31:  # an INTEGER column (32 bits on PostgreSQL): beyond it no row exists
        raise HTTPException(404, f"no report {report_id}")
    row = await flow.db(flow.store.report, report_id)
    if row is None:
        raise HTTPException(404, f"no report {report_id}; GET /reports lists them")
    media = {"html": "text/html", "json": "application/json", "blocks": "application/json"}.get(row.format, "text/markdown")
    return Response(row.body, media_type=media)


class ActionView(BaseModel):
    """An action as surfaces show it: where it is in plan → approve → execute → verify."""

    id: str
    state: ActionState
    cluster: str
    role: str = Field(description="the roles, comma-joined (kept for older clients; see roles)")
    roles: list[str] = Field(default_factory=list, description="the role keys it restarts")
    requested_by: str
    approved_by: str | None = None
    expires_at: Any = None
    outcome: str | None = None
    steps: list[list[str]] = Field(default_factory=list)
    cost: RestartCost | None = Field(None, description="ladder: what the restart costs, as the approval says it")
    message: str | None = None


def action_view(row: Any, message: str | None = None) -> ActionView:
    return ActionView(
        id=row.id, state=row.state, cluster=row.cluster, role=row.role, roles=row.roles, requested_by=row.requested_by,
        approved_by=row.approved_by, expires_at=row.expires_at, outcome=row.outcome,
        steps=plan_steps(row.plan), message=message,
        cost=plan_cost(row.plan),
    )


def plan_steps(plan: object) -> list[list[str]]:
    """The argv of each step of a stored plan; a plan or step that is not the expected shape shows none."""
    steps = plan.get("steps") if isinstance(plan, dict) else None
    if not isinstance(steps, list):
        return []
    return [[str(a) for a in s["argv"]] for s in steps if isinstance(s, dict) and isinstance(s.get("argv"), list)]


def plan_cost(plan: object) -> RestartCost | None:
    """What a stored plan says its restart costs; None when the plan or its cost is not the expected shape."""
    cost = plan.get("cost") if isinstance(plan, dict) else None
    try:
        return RestartCost.model_validate(cost) if isinstance(cost, dict) else None
    except ValueError:
        return None


@router.post("/actions/restart", tags=["actions"], summary="Plan a restart; it runs once approved", status_code=201,
             responses=NOT_FOUND)
async def post_restart(body: RestartRequest, request: Request, caller: Annotated[Caller, Depends(require("act"))]) -> ActionView:
    from opsbot.act import PlanRefused

    flow = request.app.state.flow
    check_scope(flow, body.cluster, [body.role])
    try:
        action, _plan = await flow.request_restart(
            [body.role], body.cluster, actor=caller.name, surface="rest", reason=body.reason
        )
    except (ConfigError, PlanRefused) as exc:
        raise HTTPException(422, str(exc)) from exc
    return action_view(action, f"approve with POST /actions/{action.id}/approve before it expires")


async def _existing_action(flow: Any, action_id: str) -> Any:
    """The action, or 404 naming it."""
    try:
        return await flow.db(flow.store.action, action_id)
    except KeyError as exc:
        raise HTTPException(404, str(exc.args[0])) from exc


@router.get("/actions/{action_id}", tags=["actions"], summary="One action and its state", responses=NOT_FOUND)
async def get_action(action_id: str, request: Request, _: Annotated[Caller, Depends(require("read"))]) -> ActionView:
    return action_view(await _existing_action(request.app.state.flow, action_id))


@router.get("/actions/{action_id}/capture", tags=["actions"], responses=NOT_FOUND,
            summary="What was captured before the action's restart: stacks, server state, requests, last lines")
async def get_capture(action_id: str, request: Request, _: Annotated[Caller, Depends(require("read"))]) -> list[Capture]:
    flow = request.app.state.flow
    await _existing_action(flow, action_id)
    captures: list[Capture] = await flow.db(flow.store.captures, action_id)
    return captures


@router.post(
    "/actions/{action_id}/approve",
    tags=["actions"],
    summary="Approve a planned restart and run it (guardrails: cooldown, budget, lock, verify)",
    responses={409: _problem("not waiting for approval (superseded, expired, run, dismissed; the detail says why): "
                             "nothing was restarted"), **NOT_FOUND},
)
async def approve_action(action_id: str, request: Request, caller: Annotated[Caller, Depends(require("act"))]) -> ActionView:
    from opsbot.act import ApprovalRefused

    flow = request.app.state.flow
    await _existing_action(flow, action_id)
    try:
        outcome = await flow.approve_and_execute(action_id, approver=caller.name, surface="rest")
    except ApprovalRefused as exc:
        raise HTTPException(409, str(exc)) from exc
    return action_view(await flow.db(flow.store.action, action_id), outcome.message)


@router.post("/actions/{action_id}/dismiss", tags=["actions"], summary="Dismiss a planned restart",
             responses={409: _problem("not pending"), **NOT_FOUND})
async def dismiss_action(action_id: str, request: Request, caller: Annotated[Caller, Depends(require("act"))]) -> ActionView:
    flow = request.app.state.flow
    row = await flow.dismiss(action_id, actor=caller.name, surface="rest")
    if row is None:
        try:
            current = await flow.db(flow.store.action, action_id)
        except KeyError as exc:
            raise HTTPException(404, str(exc.args[0])) from exc
        raise HTTPException(409, f"action {action_id} is {current.state}, not waiting for approval")
    return action_view(row)


@router.get("/incidents", tags=["incidents"], summary="Incidents, newest first: class, alerts, probes, actions, timeline")
async def list_incidents(
    request: Request, _: Annotated[Caller, Depends(require("read"))],
    state: Literal["open", "resolved"] | None = None,
    since: str | None = Query(None, description="incidents open at any time since (RFC 3339 / ISO 8601)",
                              json_schema_extra={"format": "date-time"}),
    limit: int = Query(100, ge=1, le=1000),
) -> list[dict[str, Any]]:
    flow = request.app.state.flow
    try:
        start = datetime.fromisoformat(since.replace("z", "Z")) if since is not None else None
    except ValueError as exc:
        raise HTTPException(422, f"since: {(since or '')[:40]!r} is not an ISO 8601 time") from exc
    if start is not None and start.tzinfo is None:
        start = start.replace(tzinfo=timezone.utc)
    try:  # 0001-01-01T00:00:00+14:00 is before year 1 in UTC: no datetime holds it
        start = start.astimezone(timezone.utc) if start is not None else None
    except OverflowError as exc:
        raise HTTPException(422, f"since: {(since or '')[:40]!r} is out of range in UTC") from exc
    rows = await flow.db(flow.store.incidents, since=start, state=state, cluster=flow.settings.cluster,
                            limit=limit)
    return [r.as_json() for r in rows]


@router.get("/incidents/{incident_id}", tags=["incidents"], summary="One incident with its timeline",
            responses=NOT_FOUND)
async def get_incident(incident_id: str, request: Request, _: Annotated[Caller, Depends(require("read"))]) -> dict[str, Any]:
    flow = request.app.state.flow
    row = await flow.db(flow.store.incident, incident_id[:64])
    if row is None:
        raise HTTPException(404, f"no incident {incident_id[:64]!r}; GET /incidents lists them")
    return row.as_json()
