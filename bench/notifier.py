"""The Slack notifier (opsbot/slack/notifier.py) against the local recording Slack server: what it costs
per message, and how a storm is delivered.

    python bench/notifier.py [--messages 500] [--channels 10] [--storm 5]

Rows, each with the event loop watched (worst lag; stalls over 100 ms must be 0):
(a) baseline: the slack_sdk client alone, ``chat.postMessage`` awaited one after another;
(b) the same messages through the notifier into one channel (queue, fit, metadata, retry stage);
(c) spread over ``--channels`` channels (one worker each);
(d) one channel while Slack answers ``--storm`` x 429 (``Retry-After: 1``) then ``--storm`` x 500:
    every message delivered, in order, the time it took.
Rate limiting is off in (a)-(d) (it is a policy, not a cost); the tests check it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from slack_sdk.web.async_client import AsyncWebClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from opsbot.slack.notifier import SlackNotifier  # noqa: E402
from tests.loopwatch import LoopWatchdog  # noqa: E402
from tests.slackrecorder import SlackRecorder  # noqa: E402


async def _row(name: str, n: int, work) -> list[str]:  # type: ignore[no-untyped-def]
    async with LoopWatchdog().watching() as watchdog:
        start = time.monotonic()
        extra = await work()
        took = time.monotonic() - start
    return [name, str(n), f"{took:.2f}", f"{n / took:.0f}", f"{took / n * 1000:.2f}",
            f"{watchdog.worst_s * 1000:.0f}", str(len(watchdog.stalls)), extra or ""]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=500)
    ap.add_argument("--channels", type=int, default=10)
    ap.add_argument("--storm", type=int, default=5)
    args = ap.parse_args()
    n = args.messages
    slack = await SlackRecorder().start()
    client = AsyncWebClient(token="xoxb-bench", base_url=slack.url)
    notifier = SlackNotifier(client, rate_per_s=1e9, burst=10**9)
    notifier.first_delay_s = 0.1

    async def sdk_alone() -> None:
        for i in range(n):
            await client.chat_postMessage(channel="C0BASE", text=f"m{i}")

    async def one_channel() -> None:
        await asyncio.gather(*(notifier.post("C0ONE", f"m{i}") for i in range(n)))

    async def many_channels() -> None:
        await asyncio.gather(*(notifier.post(f"C0M{i % args.channels}", f"m{i}") for i in range(n)))

    async def storm() -> str:
        slack.fail("chat.postMessage", *["429"] * args.storm, *["500"] * args.storm)
        await asyncio.gather(*(notifier.post("C0STORM", f"m{i}") for i in range(n)))
        texts = [m["text"] for m in slack.posted("C0STORM")]
        return "in order, none lost" if texts == [f"m{i}" for i in range(n)] else f"WRONG: {len(texts)} delivered"

    rows = [await _row("(a) baseline: slack_sdk alone, one by one", n, sdk_alone),
            await _row("(b) notifier, one channel", n, one_channel),
            await _row(f"(c) notifier, {args.channels} channels", n, many_channels),
            await _row(f"(d) notifier, one channel, {args.storm}x429 + {args.storm}x500", n, storm)]
    await slack.stop()
    table = Table(title="Slack notifier against the recording server")
    for head in ("run", "messages", "s", "msg/s", "ms/msg", "worst loop lag ms", "stalls > 100 ms", "delivery"):
        table.add_column(head)
    for row in rows:
        table.add_row(*row)
    Console().print(table)


if __name__ == "__main__":
    asyncio.run(main())
