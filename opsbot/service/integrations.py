"""Which of opsbot's integrations work: Prometheus and Alertmanager answer ``/-/ready``; Slack posts and
edits went through. The status page shows it, so a silent pager is seen as one."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

import httpx

from opsbot.settings import Settings
from opsbot.store.models import IncidentRow, now

READY_TIMEOUT_S = 2.0
SLACK_RECENT = timedelta(hours=1)


@dataclass(frozen=True)
class Integration:
    name: str
    where: str | None
    ok: bool | None  # None: not configured
    detail: str


@dataclass(frozen=True)
class PromAlert:
    """An alert as Prometheus evaluates it now (pending or firing), from ``/api/v1/alerts``."""

    name: str
    state: str
    labels: dict[str, str]
    active_at: str


async def prometheus_alerts(url: str | None) -> list[PromAlert]:
    """The alerts Prometheus holds now; [] when it is not configured or does not answer (the check says so)."""
    if not url:
        return []
    try:
        async with httpx.AsyncClient(timeout=READY_TIMEOUT_S, follow_redirects=False) as client:
            answer = await client.get(url.rstrip("/") + "/api/v1/alerts")
        data = answer.json()["data"]["alerts"] if answer.status_code == 200 else []
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return []
    out = []
    for a in data if isinstance(data, list) else []:
        labels = {str(k): str(v) for k, v in (a.get("labels") or {}).items()} if isinstance(a, dict) else {}
        if labels:
            out.append(PromAlert(labels.get("alertname", "?"), str(a.get("state", "?")), labels, str(a.get("activeAt", ""))))
    return sorted(out, key=lambda a: (a.state != "firing", a.name))


async def _ready(name: str, url: str | None, what: str) -> Integration:
    if not url:
        return Integration(name, None, None, f"not configured ({what})")
    try:
        async with httpx.AsyncClient(timeout=READY_TIMEOUT_S, follow_redirects=False) as client:
            answer = await client.get(url.rstrip("/") + "/-/ready")
    except httpx.HTTPError as exc:
        return Integration(name, url, False, f"not answering: {type(exc).__name__} {exc}".strip())
    if answer.status_code != 200:
        return Integration(name, url, False, f"/-/ready answered {answer.status_code}")
    return Integration(name, url, True, "ready")


def recent_slack_failures(store: object) -> list[IncidentRow]:
    """The incidents whose message could not be posted or edited in the last hour, newest first (a thread)."""
    return [r for r in store.slack_failing(limit=20) if r.last_seen >= now() - SLACK_RECENT]  # type: ignore[attr-defined]


def slack_state(settings: Settings, store: object) -> Integration:
    """From the incidents whose message could not be posted or edited in the last hour (runs in a thread)."""
    if not settings.slack_bot_token:
        return Integration("Slack", None, None, "not configured (OPSBOT_SLACK_BOT_TOKEN)")
    failing = recent_slack_failures(store)
    if not failing:
        return Integration("Slack", settings.slack_api_url, True, "posting and editing incident messages")
    latest = failing[0]
    return Integration("Slack", settings.slack_api_url, False,
                       f"{len(failing)} incident message(s) not up to date; latest error "
                       f"(incident {latest.id}): {latest.slack_error}")


async def alert_chain(settings: Settings) -> list[Integration]:
    """Prometheus and Alertmanager, each asked ``/-/ready`` concurrently: the path an alert takes to opsbot."""
    return list(await asyncio.gather(
        _ready("Prometheus", settings.prometheus_url, "OPSBOT_PROMETHEUS_URL"),
        _ready("Alertmanager", settings.alertmanager_url, "OPSBOT_ALERTMANAGER_URL"),
    ))


async def check(settings: Settings, store: object, db: object) -> list[Integration]:
    """Prometheus, Alertmanager and Slack; ``db`` runs a store call off the loop."""
    slack = await db(slack_state, settings, store)  # type: ignore[operator]
    return [*await alert_chain(settings), slack]
