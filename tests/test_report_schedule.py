"""The weekly job: two schedulers on two Store instances sharing one database run it once per week;
the Slack poster goes through the real slack_sdk client to a local recording Web API."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import pytest
from aiohttp import web
from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from slack_sdk.web.async_client import AsyncWebClient
from sqlalchemy import select

from opsbot.report.schedule import JOB, SlackPoster, run_weekly, schedule_weekly, start_report_scheduler, weekly_trigger
from opsbot.report.week import last_complete_week, zone
from opsbot.settings import Settings
from opsbot.slack.notifier import SlackNotifier
from opsbot.store import Store
from opsbot.store.models import JobRun
from tests.reportseed import seed_week


class RecordingPoster:
    def __init__(self) -> None:
        self.posts: list[tuple[str, str, list[dict], list[tuple[str, bytes]]]] = []

    async def post_report(self, channel: str, text: str, blocks: list[dict], files: list[tuple[str, bytes]]) -> None:
        self.posts.append((channel, text, blocks, files))


def _settings(**kw) -> Settings:
    return Settings(**{"report_timezone": "Europe/Paris", "report_slack_channel": "#ops-reports", **kw})


def test_default_trigger_is_monday_nine_in_the_configured_zone():
    trigger = weekly_trigger(_settings())
    after = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)  # a Tuesday
    fire = trigger.get_next_fire_time(None, after)
    assert fire.isoformat() == "2026-12-07T09:00:00+01:00"
    later = weekly_trigger(_settings(weekly_report_day="fri", weekly_report_time="17:30"))
    assert later.get_next_fire_time(None, after).isoformat() == "2026-12-04T17:30:00+01:00"


async def test_two_instances_on_one_database_post_the_week_once(database_url):
    settings = _settings()
    stores = [Store(database_url), Store(database_url)]
    week = last_complete_week(datetime.now(timezone.utc), zone(settings.report_timezone))
    seed_week(stores[0], week.start)
    poster = RecordingPoster()
    done: list[object] = []
    schedulers = []
    for i, store in enumerate(stores):
        scheduler = AsyncIOScheduler(timezone=zone(settings.report_timezone))
        job = schedule_weekly(scheduler, store, settings, poster, instance=f"opsbot-{i}")
        scheduler.add_listener(lambda ev: done.append(ev), EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
        scheduler.start()
        job.modify(next_run_time=datetime.now(timezone.utc))  # both fire at once, as at Monday 09:00
        schedulers.append(scheduler)
    for _ in range(200):
        if len(done) == 2:
            break
        await asyncio.sleep(0.05)
    for scheduler in schedulers:
        scheduler.shutdown(wait=False)
    assert len(done) == 2 and all(getattr(ev, "exception", None) is None for ev in done)
    assert sorted(str(ev.retval) for ev in done) == sorted(["None", week.label])  # type: ignore[attr-defined]
    assert len(poster.posts) == 1
    channel, text, blocks, files = poster.posts[0]
    assert channel == "#ops-reports" and text.startswith(f"Weekly report {week.label}")
    assert blocks[0]["type"] == "header" and any("decode-wedged" in json.dumps(b) for b in blocks)
    assert [name for name, _ in files] == ["incidents.png"] and files[0][1].startswith(b"\x89PNG")
    kept = stores[1].reports(kind="weekly")
    assert sorted(r.format for r in kept) == ["html", "markdown"] and {r.period for r in kept} == {week.label}
    runs = stores[1].read(lambda s: s.scalars(select(JobRun).where(JobRun.job == JOB)).all())
    assert [(r.period, r.result) for r in runs] == [(week.label, "saved, posted to #ops-reports")]
    # a restarted instance, or a late misfire, does not post it again
    assert await run_weekly(stores[1], settings, poster) is None
    assert len(poster.posts) == 1
    for store in stores:
        store.close()


async def test_a_failed_run_is_recorded_on_its_claim(database_url):
    class BrokenPoster:
        async def post_report(self, *args) -> None:  # type: ignore[no-untyped-def]
            raise ConnectionError("slack is down")

    store = Store(database_url)
    with pytest.raises(ConnectionError):
        await run_weekly(store, _settings(), BrokenPoster())
    runs = store.read(lambda s: s.scalars(select(JobRun)).all())
    assert len(runs) == 1 and runs[0].result == "failed: ConnectionError: slack is down"
    store.close()


async def test_start_report_scheduler_registers_the_job_in_the_running_loop(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'o.db'}")
    now = datetime.now(timezone.utc).astimezone(zone("Europe/Paris"))
    # due later this week: only the weekly job; nothing to catch up
    settings = _settings(weekly_report_day=("mon", "tue", "wed", "thu", "fri", "sat", "sun")[now.weekday()],
                         weekly_report_time="23:59")
    scheduler = start_report_scheduler(store, settings)
    try:
        assert [j.id for j in scheduler.get_jobs()] == [JOB]
        job = scheduler.get_job(JOB)
        assert job.next_run_time - datetime.now(timezone.utc) <= timedelta(days=7)
        assert (job.next_run_time.hour, job.next_run_time.minute) == (23, 59)
    finally:
        scheduler.shutdown(wait=False)
        store.close()


async def test_a_report_missed_while_down_is_made_at_start_and_only_once(database_url):
    settings = _settings(weekly_report_day="mon", weekly_report_time="00:00")  # always already due
    stores = [Store(database_url), Store(database_url)]
    poster = RecordingPoster()
    done: list[object] = []
    schedulers = []
    for i, store in enumerate(stores):
        scheduler = start_report_scheduler(store, settings, poster, instance=f"opsbot-{i}")
        scheduler.add_listener(lambda ev: done.append(ev), EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
        schedulers.append(scheduler)
    for _ in range(200):
        if len(done) == 2:
            break
        await asyncio.sleep(0.05)
    for scheduler in schedulers:
        scheduler.shutdown(wait=False)
    assert len(done) == 2 and len(poster.posts) == 1
    for store in stores:
        store.close()


async def test_slack_poster_sends_blocks_then_charts_through_slack_sdk():
    """The real slack_sdk AsyncWebClient against a local server that records the Web API calls."""
    calls: list[tuple[str, dict]] = []
    uploads: list[bytes] = []

    async def api(request: web.Request) -> web.Response:
        method = request.match_info["method"]
        form = dict(await request.post()) if request.content_type != "application/json" else await request.json()
        form = {**request.query, **form}
        calls.append((method, {k: v if isinstance(v, list) else str(v) for k, v in form.items()}))
        if request.headers.get("Authorization") != "Bearer xoxb-test":
            return web.json_response({"ok": False, "error": "invalid_auth"})
        body = {"chat.postMessage": {"ok": True, "channel": "C0REPORTS", "ts": "1764500000.000100"},
                "files.getUploadURLExternal": {"ok": True, "file_id": f"F{len(uploads)}",
                                               "upload_url": f"{base}/upload/{len(calls)}"},
                "files.completeUploadExternal": {"ok": True, "files": [{"id": "F0"}]}}[method]
        return web.json_response(body)

    async def upload(request: web.Request) -> web.Response:
        uploads.append(await request.read())
        return web.Response(text="OK")

    app = web.Application()
    app.router.add_post("/api/{method}", api)
    app.router.add_post("/upload/{n}", upload)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    try:
        client = AsyncWebClient(token="xoxb-test", base_url=f"{base}/api/")
        png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
        await SlackPoster(SlackNotifier(client)).post_report("#ops-reports", "Weekly report", [{"type": "divider"}], [("latency.png", png)])
    finally:
        await runner.cleanup()
    methods = [m for m, _ in calls]
    assert methods == ["chat.postMessage", "files.getUploadURLExternal", "files.completeUploadExternal"]
    assert calls[0][1]["channel"] == "#ops-reports" and calls[0][1]["blocks"] == [{"type": "divider"}]
    assert calls[1][1]["filename"] == "latency.png" and calls[1][1]["length"] == str(len(png))
    assert calls[2][1]["channel_id"] == "C0REPORTS" and calls[2][1]["thread_ts"] == "1764500000.000100"
    assert png in uploads[0]


async def test_the_service_starts_the_weekly_job(tmp_path, database_url):
    """The service's composition root starts the weekly report trigger, and stops it on the way out."""
    from opsbot.service.app import create_app
    from tests.servicekit import flow_for, lab_settings, replay

    settings = lab_settings(tmp_path, database_url, report_schedule=True, weekly_report_day="fri")
    app = create_app(settings, flow=flow_for(settings, replay("decode-hang-health-200")))
    async with app.router.lifespan_context(app):
        scheduler = app.state.scheduler
        assert scheduler.running
        job = scheduler.get_job(JOB)
        assert job.next_run_time == weekly_trigger(settings).get_next_fire_time(None, datetime.now(timezone.utc))
    await asyncio.sleep(0)  # AsyncIOScheduler.shutdown runs in the loop's next turn
    assert not scheduler.running
