"""Block Kit messages for findings, plans and outcomes (pure: data in, blocks out).

Slack's limits (``opsbot.slack.limits``) are respected here: section text is cut where a reader sees
it cut, and a message carries at most 50 blocks (``msg_blocks_too_long`` otherwise). Every text that came from outside
(alert labels, log lines, findings' evidence, reasons, operator text) goes through ``escape``, so
``<!channel>`` or ``<https://x|click>`` in it shows as text and never pings or links.
"""

from __future__ import annotations

from typing import Any

from opsbot.bundle import Recall
from opsbot.contracts import SEVERITY_EMOJI, UNKNOWN_EMOJI, Finding
from opsbot.parse.recall import grid, short_length, summarize
from opsbot.report.render import slack as escape
from opsbot.slack.commands import HELP
from opsbot.slack.limits import BLOCKS_MAX, clip
from opsbot.slack.limits import fit_blocks as _fit

Block = dict[str, Any]


def section(markdown: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": clip(markdown)}}


def context(markdown: str) -> Block:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": clip(markdown)}]}


def help_blocks(command: str) -> list[Block]:
    lines = "\n".join(f"`{command} {usage}`: {what}" for usage, what in HELP)
    return [section(f"*opsbot*: incident response for the SGLang PD deployment\n{lines}")]


def restart_buttons(role: str, plan_id: str) -> Block:
    """Restart (with a confirm dialog: it is destructive) and Dismiss, both bound to the plan."""
    return {
        "type": "actions",
        "block_id": f"plan:{plan_id}"[:255],
        "elements": [
            {
                "type": "button",
                "action_id": "restart_approve",
                "text": {"type": "plain_text", "text": f"Restart {role}"},
                "style": "danger",
                "value": plan_id,
                "confirm": {
                    "title": {"type": "plain_text", "text": f"Restart {role}?"},
                    "text": {"type": "mrkdwn", "text": "Runs behind cooldown, budget and lock, then verified."},
                    "confirm": {"type": "plain_text", "text": "Restart"},
                    "deny": {"type": "plain_text", "text": "Cancel"},
                },
            },
            {"type": "button", "action_id": "restart_dismiss", "value": plan_id,
             "text": {"type": "plain_text", "text": "Dismiss"}},
        ],
    }


def finding_blocks(cluster: str, probe_ref: str, findings: list[Finding], plans: dict[str, str]) -> list[Block]:
    """One section per finding (title, summary, evidence, remedies) and buttons for ``plans`` (role → plan id)."""
    if not findings:
        return [section(f":white_check_mark: *{escape(cluster)}*: no incident found"),
                context(f"probe `{escape(probe_ref)}`")]
    blocks: list[Block] = []
    for f in findings:
        icon = SEVERITY_EMOJI.get(str(f.severity), UNKNOWN_EMOJI)
        roles = escape(", ".join(f.roles))
        head = f"{icon} *{escape(f.title or f.incident)}* (`{escape(f.incident)}`, {escape(f.severity)}) on *{roles}*"
        if f.summary:
            head += f"\n{escape(f.summary)}"
        blocks.append(section(head))
        if f.evidence:
            blocks.append(section("*Evidence*\n" + "\n".join(f"• {escape(e)}" for e in f.evidence)))
        remedies = [r.text for r in f.remedies if getattr(r, "text", None)]
        if remedies:
            blocks.append(section("*What to do*\n" + "\n".join(f"• {escape(t)}" for t in remedies)))
        missing = getattr(f, "missing_facts", None)
        if missing:
            blocks.append(context("could not collect: " + escape(", ".join(missing))))
    tail = [restart_buttons(role, plan_id) for role, plan_id in plans.items()]
    tail.append(context(f"cluster `{escape(cluster)}` · probe `{escape(probe_ref)}`"))
    return _fit(blocks, room=BLOCKS_MAX - len(tail)) + tail


def plan_blocks(role: str, plan_id: str, commands: list[str], expires: str) -> list[Block]:
    cmds = escape("\n".join(commands)) or "(no commands)"
    return [
        section(f"*Restart plan for {escape(role)}* (expires {expires})\n```{cmds}```"),
        restart_buttons(role, plan_id),
    ]


def decided_blocks(original: list[Block], line: str) -> list[Block]:
    """The original message with its buttons replaced by who decided what (no double clicks)."""
    kept = [b for b in original if b.get("type") != "actions"]
    return _fit(kept, room=BLOCKS_MAX - 1) + [section(line)]


def recall_blocks(recall: Recall, title: str, note: str | None = None) -> list[Block]:
    """A recall run for Slack: the title, the grid (length x depth) in a code block, the summary, a note."""
    lengths, depths, cells = grid(recall)
    mark = {"found": "found", "lost": "LOST", "error": "error", "mixed": "mixed"}
    rows = [["length", *(f"{d:g}" for d in depths)]]
    rows += [[short_length(n), *(mark.get(cells.get((n, d), ""), "-") for d in depths)] for n in lengths]
    width = max(len(c) for r in rows for c in r) + 2
    table = "\n".join("".join(c.ljust(width) for c in r).rstrip() for r in rows)
    s = summarize(recall)
    where = (f"full recall up to {short_length(s.longest_full)}" if s.longest_full else "no length fully recalled") + (
        f", lost from {short_length(s.threshold)}" if s.threshold else "")
    blocks = [section(f"*{escape(title)}*"), section(f"```{escape(table)}```"),
              context(escape(f"{where}; {s.found}/{s.judged} found, {s.errors} not judged; model {recall.model}; "
                            f"tokenizer {recall.tokenizer}"))]
    if note:
        blocks.append(section(escape(note)))
    return blocks
