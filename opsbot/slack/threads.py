"""Alert findings in Slack: one thread per Alertmanager group; a resolved alert updates it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opsbot.slack.blocks import section

if TYPE_CHECKING:
    from opsbot.service.intake import StoredAlert
    from opsbot.service.runtime import ProbeResult
    from opsbot.slack.app import SlackSurface

THREAD = "slack alert thread"


class AlertThreads:
    """Maps an alert group (``groupKey``) to its thread; the mapping is kept in the audit log."""

    def __init__(self, surface: SlackSurface) -> None:
        self.surface = surface
        self._ts: dict[str, str] = {}

    async def finding(self, group_key: str, alerts: list[StoredAlert], result: ProbeResult | None, error: str | None) -> None:
        channel = self.surface.runtime.settings.slack_alert_channel
        if not channel:
            return
        client = self.surface.client
        resolved = all(a.status == "resolved" for a in alerts)
        names = ", ".join(sorted({a.labels.get("alertname", "alert") for a in alerts}))
        scope = f"{alerts[0].cluster}/{alerts[0].role}"
        head = f"{':white_check_mark: resolved' if resolved else ':rotating_light: firing'}: *{names}* on `{scope}`"
        if result is not None:
            body = await self.surface.result_blocks(result, actor="alertmanager")
        else:
            body = [section(f":warning: the probe could not run: {error}")]
        blocks = [section(head)] + body
        ts = await self._thread(group_key)
        if ts is None:
            posted = await client.chat_postMessage(channel=channel, text=head, blocks=blocks)
            await self._remember(group_key, channel, posted["ts"])
            return
        await client.chat_postMessage(channel=channel, thread_ts=ts, text=head, blocks=blocks)
        if resolved:
            await client.chat_update(channel=channel, ts=ts, text=head,
                                     blocks=[section(f"{head}\n_the thread has the probe taken after it resolved_")])

    async def _thread(self, group_key: str) -> str | None:
        if group_key in self._ts:
            return self._ts[group_key]
        runtime = self.surface.runtime
        entries = await runtime.db(runtime.store.audit_log, limit=2000)
        for e in entries:
            if e.what == THREAD and e.detail.get("group_key") == group_key:
                self._ts[group_key] = e.detail["ts"]
                return e.detail["ts"]
        return None

    async def _remember(self, group_key: str, channel: str, ts: str) -> None:
        self._ts[group_key] = ts
        runtime = self.surface.runtime
        detail: dict[str, Any] = {"group_key": group_key, "channel": channel, "ts": ts}
        await runtime.db(runtime.store.audit, "opsbot", "slack", THREAD, detail)
