"""Alert findings in Slack: one thread per Alertmanager group; a resolved alert updates it."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from opsbot.slack.blocks import escape, section

if TYPE_CHECKING:
    from opsbot.contracts.alerts import StoredAlert
    from opsbot.flow import Flow, ProbeResult

CLAIM_STALE = timedelta(minutes=2)
WAIT_FOR_THREAD_S = 15.0


class ThreadSurface(Protocol):
    """What the alert threads use of the Slack surface (``opsbot.slack.app.SlackSurface``)."""

    flow: Flow
    client: Any  # slack_sdk's AsyncWebClient

    def result_blocks(self, result: ProbeResult) -> list[dict[str, Any]]: ...


class AlertThreads:
    """Maps an alert group (``groupKey``) to its thread, kept in the store's ``slack_threads`` table."""

    def __init__(self, surface: ThreadSurface) -> None:
        self.surface = surface

    async def finding(self, group_key: str, alerts: list[StoredAlert], result: ProbeResult | None, error: str | None) -> None:
        channel = self.surface.flow.settings.slack_alert_channel
        if not channel:
            return
        client = self.surface.client
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
        db = self.surface.flow.db
        thread = await db(store.slack_thread, group_key)
        if thread is None and await db(store.claim_slack_thread, group_key, channel, CLAIM_STALE):
            try:
                posted = await client.chat_postMessage(channel=channel, text=head, blocks=blocks)
            except BaseException:
                await db(store.release_slack_thread, group_key)
                raise
            await db(store.save_slack_thread, group_key, channel, posted["ts"], state)
            return
        thread = thread or await self._posted_by_another(group_key)
        if thread is None:  # the other instance's post never came: better twice than not at all
            await client.chat_postMessage(channel=channel, text=head, blocks=blocks)
            return
        await client.chat_postMessage(channel=thread.channel, thread_ts=thread.ts, text=head, blocks=blocks)
        if resolved:
            await client.chat_update(channel=thread.channel, ts=thread.ts, text=head,
                                     blocks=[section(f"{head}\n_the thread has the probe taken after it resolved_")])
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
