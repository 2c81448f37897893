"""A game day on the lab: the real alert path, timed. Shared by tests/test_gameday_lab.py and bench/gameday.py.

``GameDay(lab, workdir)`` starts, around a booted lab: the Slack recording server (its own thread and
event loop), ``opsbot serve`` as a subprocess (the one an operator runs), and the lab's monitoring
(real Prometheus with the rendered rules, real Alertmanager posting to that serve with a stored
token). ``run(CLASS)`` breaks the lab the way the class looks and follows the incident: the alert
firing in Prometheus, opsbot's finding, the Slack message, the approver's signed click where the
message offers a restart (else the lab is healed, as an operator would fix it), recovery, and the
resolved alerts closing the message. Nothing in opsbot is replaced or called behind its back.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import httpx

from opsbot.lab.nodes import Lab
from opsbot.store import Store
from tests.databases import free_port
from tests.servicekit import SIGNING_SECRET, block_actions_body, signed
from tests.slackrecorder import SlackRecorder

REPO = Path(__file__).resolve().parents[1]
CHANNEL = "C0GAMEDAY"
REOPEN_S = 10  # the lab's reopen window (rules run at time_scale 0.05: 200 s in production terms)
APPROVER = "U0ALICE"
T = TypeVar("T")


class GameDayError(AssertionError):
    """A step did not happen in time; the message says which and what was seen."""


@dataclass
class Run:
    """One class, one run: seconds from the break to each step (None: not reached / not applicable)."""

    incident: str
    alert_s: float | None = None  # (a) Prometheus reports the class's alert firing
    finding_s: float | None = None  # (b) opsbot's alert-triggered probe named the class
    slack_s: float | None = None  # (c) the incident's Slack message is posted
    recovery_s: float | None = None  # (d) the approved restart verified the role healthy
    resolved_s: float | None = None  # the alerts resolved and the incident closed
    named: str | None = None  # the class the first incident message named
    plan_id: str | None = None  # the restart plan the approver clicked
    restart_offered: bool = False
    messages: int = 0  # top-level Slack messages for the incident (must be 1)
    probes_at_message: int = 0  # alert-triggered probes from the break to the message
    first_message: str = ""  # the message as first posted (its text, blocks as JSON)
    incident_id: str | None = None
    incidents_opened: int = 0  # incidents first seen from the break to the end of the run (1: no stray one)
    plans: int = 0  # restart plans made from the break to the end of the run
    notes: list[str] = field(default_factory=list)


class RecorderThread:
    """The Slack recording server on its own event loop, so blocking test code can drive the lab."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.recorder: SlackRecorder = self.call(SlackRecorder().start())

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def stop(self) -> None:
        self.call(self.recorder.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def wait(what: str, check: Callable[[], T | None], timeout: float, every: float = 0.1) -> T:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise GameDayError(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


class GameDay:
    def __init__(self, lab: Lab, workdir: Path, **env: str) -> None:
        self.lab = lab
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.db_url = f"sqlite:///{(workdir / 'opsbot.db').resolve()}"
        self.extra_env = env
        self.slack: RecorderThread | None = None
        self.serve: subprocess.Popen[bytes] | None = None
        self.store: Store | None = None
        self.token = ""

    # -- set-up ---------------------------------------------------------------------------------
    def start(self) -> GameDay:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.slack = RecorderThread()
        self.store = Store(self.db_url)
        self.token = self.store.create_token(f"gameday-alertmanager-{self.port}", ["probe"])
        self.lab.monitoring.start(f"{self.url}/alerts", self.token)  # first: serve reads its URLs at start
        env = {**os.environ, "PYTHONPATH": str(REPO), **self.environment(), **self.extra_env}
        log = open(self.workdir / "serve.log", "ab")
        self.serve = subprocess.Popen([sys.executable, "-m", "opsbot", "serve", "--port", str(self.port),
                                       "--log-level", "warning"], env=env, stdout=log, stderr=log,
                                      start_new_session=True)
        wait("opsbot serve answering /healthz", self._serving, 60, 0.2)
        return self

    def environment(self) -> dict[str, str]:
        assert self.slack is not None
        return {
            "OPSBOT_DATA_DIR": str(self.workdir), "OPSBOT_DATABASE_URL": self.db_url,
            "OPSBOT_INVENTORY": str(self.lab.inventory_path), "OPSBOT_LAB_DIR": str(self.lab.dir),
            "OPSBOT_HOST": "127.0.0.1", "OPSBOT_PORT": str(self.port), "OPSBOT_COALESCE_WINDOW_S": "0.2",
            "OPSBOT_SLACK_BOT_TOKEN": "xoxb-gameday", "OPSBOT_SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "OPSBOT_SLACK_API_URL": self.slack.recorder.url, "OPSBOT_SLACK_ALERT_CHANNEL": CHANNEL,
            "OPSBOT_SLACK_APPROVERS": json.dumps([APPROVER]), "OPSBOT_RESTART_COOLDOWN_S": "0",
            "OPSBOT_RESTART_BUDGET": "1000", "OPSBOT_REPORT_TIMEZONE": "UTC", "OPSBOT_CHAIN_WATCH_S": "2",
            "OPSBOT_INCIDENT_REOPEN_S": str(REOPEN_S),
        }

    def _serving(self) -> bool:
        assert self.serve is not None
        if self.serve.poll() is not None:
            raise GameDayError(f"opsbot serve exited: {(self.workdir / 'serve.log').read_text()[-2000:]}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        self.lab.monitoring.stop()
        if self.serve is not None:
            self.serve.terminate()
            try:
                self.serve.wait(15)
            except subprocess.TimeoutExpired:
                self.serve.kill()
        if self.slack is not None:
            self.slack.stop()
        if self.store is not None:
            self.store.close()

    # -- what Prometheus, the store and Slack say ----------------------------------------------
    def prometheus_alerts(self) -> list[dict[str, Any]]:
        try:
            answer = httpx.get(f"{self.lab.monitoring.urls.prometheus}/api/v1/alerts", timeout=2)
            return list(answer.json()["data"]["alerts"])
        except (httpx.HTTPError, ValueError, KeyError):
            return []

    def messages(self, incident_id: str) -> list[dict[str, Any]]:
        assert self.slack is not None
        return [m for m in self.slack.recorder.posted(CHANNEL)
                if ((m.get("metadata") or {}).get("event_payload") or {}).get("incident") == incident_id]

    def latest_blocks(self, ts: str) -> list[dict[str, Any]]:
        """The message as Slack shows it now: the last ``chat.update`` of ``ts``, else the post."""
        assert self.slack is not None
        updates = [c.args for c in self.slack.recorder.of("chat.update") if c.args.get("ts") == ts]
        if updates:
            return list(updates[-1]["blocks"])
        return next(m["blocks"] for m in self.slack.recorder.messages if m["ts"] == ts)

    def click_restart(self, ts: str, plan_id: str, user: str = APPROVER) -> int:
        body = block_actions_body("restart_approve", plan_id, user=user, channel=CHANNEL,
                                  message={"ts": ts, "blocks": self.latest_blocks(ts)})
        return httpx.post(f"{self.url}/slack/events", content=body, headers=signed(body), timeout=10).status_code

    def take_down(self, name: str) -> None:
        """Stop the lab's Prometheus or Alertmanager (an integration failing on purpose)."""
        self.lab.monitoring.stop(only=name)

    def bring_back(self) -> None:
        """Start what ``take_down`` stopped (once more if the first start saw it exit while starting)."""
        from opsbot.lab.monitoring import MonitoringError

        try:
            self.lab.monitoring.start(f"{self.url}/alerts", self.token)
        except MonitoringError:
            time.sleep(2)
            self.lab.monitoring.start(f"{self.url}/alerts", self.token)

    def integrations(self) -> str:
        """The status page's integrations table, as served."""
        page = httpx.get(f"{self.url}/", timeout=30).text
        start = page.index('id="integrations"')
        return page[start:page.index("</table>", start)]

    def quiet(self, timeout: float = 90) -> None:
        """The lab healed and calm: no alert pending or firing, every incident closed."""
        assert self.store is not None
        self.lab.reset()
        wait("Prometheus without pending or firing alerts", lambda: not self.prometheus_alerts(), timeout, 0.5)
        wait("every incident resolved", lambda: not self.store.incidents(state="open"), timeout, 0.5)
        last = max((r.resolved_at.timestamp() for r in self.store.incidents(limit=20) if r.resolved_at), default=0.0)
        time.sleep(max(0.0, last + REOPEN_S - time.time()))  # the next break is a new incident, not a flap of this one

    # -- one class ------------------------------------------------------------------------------
    def run(self, incident: str, timeout: float = 60) -> Run:
        """Break the lab as ``incident`` and follow it to the resolved message (``timeout`` per step)."""
        assert self.store is not None
        run = Run(incident)
        since = time.time()
        self.lab.break_class(incident)
        signs = alerted_by(incident)
        fired = wait(f"{incident}: an alert of {sorted(signs)} firing in Prometheus", lambda: [
            a for a in self.prometheus_alerts()
            if a.get("state") == "firing" and a.get("labels", {}).get("incident") in signs], timeout, 0.2)
        run.alert_s = time.time() - since
        names = [a["labels"].get("alertname") for a in fired]
        row = wait(f"{incident}: an incident of that class opened by an alert's probe (alerts firing: {names}; "
                   f"opened: {[r.incident for r in self.store.incidents(state='open')]})", lambda: next(
                       (r for r in self.store.incidents(state="open", incident=incident)
                        if r.first_seen.timestamp() >= since), None), timeout, 0.1)
        run.incident_id = row.id
        opened = sorted((r for r in self.store.incidents(limit=20) if r.first_seen.timestamp() >= since),
                        key=lambda r: r.first_seen)
        run.named = opened[0].incident  # the first class opsbot named after the break
        run.notes += [f"also opened: {r.incident} on {','.join(r.roles)}" for r in opened if r.id != row.id]
        first_probe = self.store.probes(limit=50)
        opening = next(p for p in first_probe if p.id == row.probes[0])
        run.finding_s = (opening.finished_at or opening.started_at).timestamp() - since
        message = wait(f"{incident}: the incident's Slack message", lambda: self.messages(row.id), timeout, 0.05)[0]
        run.slack_s = message["at"] - since
        run.first_message = _text(message["blocks"])
        run.probes_at_message = len([p for p in self.store.probes(limit=200)
                                     if p.trigger_kind == "alert" and p.started_at.timestamp() >= since
                                     and p.started_at.timestamp() <= message["at"]])
        plan = _restart_plan(message["blocks"])
        run.restart_offered = plan is not None
        if plan is not None:
            run.plan_id = plan
            self.click_restart(message["ts"], plan)
            action = wait(f"{incident}: the approved restart finishing", lambda: _done(self.store.action(plan)),
                          timeout + self.lab.settings.verify_deadline_s, 0.2)
            if action.state != "succeeded":
                raise GameDayError(f"{incident}: restart {action.state}: {action.outcome}")
            assert action.finished_at is not None
            run.recovery_s = action.finished_at.timestamp() - since
        else:
            self.lab.reset()  # the operator's fix: what the message says to do
        closed = wait(f"{incident}: alerts resolved and the incident closed",
                      lambda: (r := self.store.incident(row.id)) is not None and r.state == "resolved" and r, timeout, 0.2)
        assert closed.resolved_at is not None
        run.resolved_s = closed.resolved_at.timestamp() - since
        wait(f"{incident}: the message saying it resolved", lambda: "Resolved" in _text(self.latest_blocks(message["ts"])),
             timeout, 0.1)
        run.messages = len(self.messages(row.id))
        since_dt = datetime.fromtimestamp(since, timezone.utc)
        opened_all = [r for r in self.store.incidents(limit=50) if r.first_seen >= since_dt]
        run.incidents_opened = len(opened_all)
        run.plans = len(self.store.actions(since=since_dt, limit=200))
        run.notes += [f"also opened: {r.incident} on {','.join(r.roles)}" for r in opened_all
                      if r.id != row.id and r.first_seen > opened[-1].first_seen]
        assert self.slack is not None
        others = [m for m in self.slack.recorder.posted(CHANNEL) if m["at"] >= since and m["ts"] != message["ts"]]
        run.notes += [f"other message: {m['text'][:120]}" for m in others]
        return run


def alerted_by(incident: str) -> set[str]:
    """The alert rules' incident labels that announce ``incident``: its own, and those its runbook explains
    (a crash loop shows as the role down: no rule sees the configuration error in the log)."""
    from opsbot.datafiles import data_dir
    from opsbot.diagnose.runbook import load_runbooks

    runbook = next((rb for rb in load_runbooks(data_dir("runbooks")).runbooks if rb.spec.id == incident), None)
    explained = {e.split("@")[0] for e in runbook.spec.explains} if runbook is not None else set()
    return {incident, *explained}


def _restart_plan(blocks: list[dict[str, Any]]) -> str | None:
    for b in blocks:
        for e in b.get("elements", []) if b.get("type") == "actions" else []:
            if e.get("action_id") == "restart_approve":
                return str(e["value"])
    return None


def _done(action: Any) -> Any:
    return action if action.state not in ("planned", "approved", "executing") else None


def _text(blocks: list[dict[str, Any]]) -> str:
    return json.dumps(blocks)
