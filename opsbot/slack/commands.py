"""What an operator typed after ``/opsbot``, as a command (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Verb = Literal["help", "status", "probe", "restart", "report", "ask"]

HELP = [
    ("what happened last night | since 02:00 | this week", "incidents and actions then (your time zone)"),
    ("why did decode restart", "the latest restart: approver, evidence, outcome"),
    ("is it safe to restart prefill", "the guards' dry run: cooldown, budget, lock, pair"),
    ("incidents", "open and recent incidents"),
    ("history decode 24h", "what opsbot saw and did for a role"),
    ("decode is stuck", "probe the roles the words name, then diagnose"),
    ("status", "the current status of every role"),
    ("probe [ROLE ...]", "probe the roles (all when none) and diagnose"),
    ("restart ROLE", "plan a restart; it runs when an allowed approver clicks Restart"),
    ("report weekly", "the latest weekly report"),
    ("help", "this list"),
]


@dataclass(frozen=True)
class Command:
    verb: Verb
    args: list[str] = field(default_factory=list)
    text: str = ""


def parse_command(text: str) -> Command:
    """``restart decode`` → Command("restart", ["decode"]); free text is a question to ``ask``."""
    words = text.strip().split()
    if not words or words[0].lower() in ("help", "-h", "--help"):
        return Command("help")
    head, rest = words[0].lower(), words[1:]
    if head in ("status", "probe", "restart", "report"):
        return Command(head, [w.lower() for w in rest], text.strip())  # type: ignore[arg-type]
    return Command("ask", [], text.strip())
