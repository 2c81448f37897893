"""Block Kit messages for findings, plans and outcomes (pure: data in, blocks out).

Slack's limits (``opsbot.slack.limits``) are respected here: section text is cut where a reader sees
it cut, and a message carries at most 50 blocks (``msg_blocks_too_long`` otherwise). Every text that came from outside
(alert labels, log lines, findings' evidence, reasons, operator text) goes through ``escape``, so
``<!channel>`` or ``<https://x|click>`` in it shows as text and never pings or links.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opsbot.bundle import Recall
from opsbot.contracts import SEVERITY_EMOJI, UNKNOWN_EMOJI, Finding, RestartCost, RoleHealth
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


# ladder: the button of a re-registration says so (its label is also the line written when it is clicked)
LABELS = {"restart": ("Restart {role}", "Restart {role}?", "Runs behind cooldown, budget and lock, then verified.", "Restart"),
          "reregister": ("Re-register {role}'s workers", "Re-register the workers {role} marks down?",
                         "Removes and re-adds them through its worker API (nothing restarts), then verified.",
                         "Re-register")}


def restart_buttons(role: str, plan_id: str, kind: str = "restart") -> Block:
    """Restart (with a confirm dialog: it is destructive) and Dismiss, both bound to the plan; ``kind``: the
    action's kind (a ``reregister`` of the ladder is labelled as one)."""
    label, title, text, confirm = (s.format(role=role) for s in LABELS.get(kind, LABELS["restart"]))
    return {
        "type": "actions",
        "block_id": f"plan:{plan_id}"[:255],
        "elements": [
            {
                "type": "button",
                "action_id": "restart_approve",
                "text": {"type": "plain_text", "text": label[:75]},
                "style": "danger",
                "value": plan_id,
                "confirm": {
                    "title": {"type": "plain_text", "text": title[:100]},
                    "text": {"type": "mrkdwn", "text": text},
                    "confirm": {"type": "plain_text", "text": confirm},
                    "deny": {"type": "plain_text", "text": "Cancel"},
                },
            },
            {"type": "button", "action_id": "restart_dismiss", "value": plan_id,
             "text": {"type": "plain_text", "text": "Dismiss"}},
        ],
    }


def cost_blocks(role: str, cost: RestartCost | None) -> list[Block]:
    """What restarting ``role`` costs (ladder: opsbot/act/cost.py), shown above its Restart button."""
    if cost is None:
        return []
    icon = ":warning: " if cost.warnings else ""
    return [section(f"{icon}*Cost of restarting {escape(role)}*\n" + "\n".join(f"• {escape(c)}" for c in cost.said()))]


def finding_blocks(cluster: str, probe_ref: str, findings: list[Finding], plans: dict[str, str], *,
                   costs: dict[str, RestartCost] | None = None, kinds: dict[str, str] | None = None,
                   unknown: Sequence[RoleHealth] = ()) -> list[Block]:
    """One section per finding (title, summary, evidence, remedies) and buttons for ``plans`` (role → plan id),
    each after what it costs (``costs``: role → cost); without a finding, healthy, or unknown (not an
    all-clear) with the roles whose evidence could not be read."""
    if not findings and unknown:
        lines = "\n".join(f"• *{escape(r.role)}*: {escape('; '.join(r.reasons))}" for r in unknown)
        return [section(f"{UNKNOWN_EMOJI} *{escape(cluster)}*: unknown (not healthy): no finding, but evidence could "
                        f"not be read\n{lines}"), context(f"probe `{escape(probe_ref)}`")]
    if not findings:
        return [section(f":white_check_mark: *{escape(cluster)}*: no incident found, every role healthy"),
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
    tail = [b for role, plan_id in plans.items()
            for b in (*cost_blocks(role, (costs or {}).get(role)),
                      restart_buttons(role, plan_id, (kinds or {}).get(role, "restart")))]
    tail.append(context(f"cluster `{escape(cluster)}` · probe `{escape(probe_ref)}`"))
    return _fit(blocks, room=BLOCKS_MAX - len(tail)) + tail


def plan_blocks(role: str, plan_id: str, commands: list[str], expires: str, cost: RestartCost | None = None) -> list[Block]:
    cmds = escape("\n".join(commands)) or "(no commands)"
    return [
        section(f"*Restart plan for {escape(role)}* (expires {expires})\n```{cmds}```"),
        *cost_blocks(role, cost),
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
