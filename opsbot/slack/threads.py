"""Alert findings in Slack: one thread per Alertmanager group; a resolved alert updates it."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from opsbot.slack.blocks import escape, section
from opsbot.slack.notifier import Dedup, SlackNotifier
from opsbot.store.alerts import group_hash

if TYPE_CHECKING:
    from opsbot.contracts.alerts import StoredAlert
    from opsbot.flow import Flow, ProbeResult

CLAIM_STALE = timedelta(minutes=2)
WAIT_FOR_THREAD_S = 15.0


class ThreadSurface(Protocol):
    """What the alert threads use of the Slack surface (``opsbot.slack.app.SlackSurface``)."""

    flow: Flow
    notifier: SlackNotifier

    def result_blocks(self, result: ProbeResult) -> list[dict[str, Any]]: ...


class AlertThreads:
    """Maps an alert group (``groupKey``, kept hashed) to its thread, in the store's ``slack_group_threads`` table."""

    def __init__(self, surface: ThreadSurface) -> None:
        self.surface = surface

    async def finding(self, group_key: str, alerts: list[StoredAlert], result: ProbeResult | None, error: str | None) -> None:
        channel = self.surface.flow.settings.slack_alert_channel
        if not channel:
            return
        notifier = self.surface.notifier
        store = self.surface.flow.store
        resolved = all(a.status == "resolved" for a in alerts)
        state = "resolved" if resolved else "firing"
        names = escape(", ".join(sorted({a.labels.get("alertname", "alert") for a in alerts})))
        scope = escape(f"{alerts[0].cluster}/{alerts[0].role}")
        head = f"{':white_check_mark: resolved' if resolved else ':rotating_light: firing'}: *{names}* on `{scope}`"
        if result is not None:
            body = self.surface.result_blocks(result)
        else:
            body = [section(f":warning: the probe could not run: {escape(error)}")]
        blocks = [section(head)] + body
        dedup = Dedup(f"alert-group:{group_hash(group_key)}", _said(alerts, result, error))
        db = self.surface.flow.db
        thread = await db(store.slack_thread, group_key)
        if thread is None and await db(store.claim_slack_thread, group_key, channel, CLAIM_STALE):
            try:
                posted = await notifier.post(channel, head, blocks, dedup=dedup)
            except BaseException:
                await db(store.release_slack_thread, group_key)
                raise
            if posted is None:
                await db(store.release_slack_thread, group_key)
                return
            await db(store.save_slack_thread, group_key, channel, posted.ts, state)
            return
        thread = thread or await self._posted_by_another(group_key)
        if thread is None:  # the other instance's post never came: better twice than not at all
            await notifier.post(channel, head, blocks, dedup=dedup)
            return
        if await notifier.post(thread.channel, head, blocks, thread_ts=thread.ts, dedup=dedup) is None:
            return
        if resolved:
            await notifier.update(thread.channel, thread.ts, head,
                                  [section(f"{head}\n_the thread has the probe taken after it resolved_")])
        if state != thread.state:
            await self.surface.flow.db(store.save_slack_thread, group_key, thread.channel, thread.ts, state)

    async def _posted_by_another(self, group_key: str) -> Any:
        """Another instance claimed the group's first message (its alerts reached several instances):
        the thread it posts, once posted; None if it does not come within ``WAIT_FOR_THREAD_S``."""
        store = self.surface.flow.store
        for _ in range(int(WAIT_FOR_THREAD_S / 0.25)):
            if (thread := await self.surface.flow.db(store.slack_thread, group_key)) is not None:
                return thread
            await asyncio.sleep(0.25)
        return None


def _said(alerts: list[StoredAlert], result: ProbeResult | None, error: str | None) -> str:
    """What a group's notification says, for the dedup stage: its alerts and their status (as Alertmanager's
    notification log keeps the firing and resolved sets) and what the probe found."""
    found = sorted(f.incident for f in result.diagnosis.findings) if result is not None else [f"error: {error}"]
    return "|".join(sorted(f"{a.fingerprint}:{a.status}" for a in alerts)) + "|" + ",".join(found)
