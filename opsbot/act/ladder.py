"""The remedy ladder (act, pure over the store's rows): cheapest step first, the next once it failed.

A runbook lists the steps that need approval in the order to try them (``reregister`` before
``restart``); for each role one step is offered at a time: the first one that has not failed (or been
refused or dismissed) for the same incident class within ``WINDOW``. The last step of a role is
always offered again, as a lone restart always was.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from opsbot.contracts import Finding, Remedy
from opsbot.store.models import Action

STEP_KINDS = ("reregister", "restart")  # the remedy kinds that are actions, cheapest first in a runbook
WINDOW = timedelta(hours=1)  # how long a failed step keeps the ladder on the next one
ENDED_BADLY = ("failed", "refused")
VERB = {"restart": "restart", "reregister": "re-register the workers of"}


def steps(finding: Finding) -> list[Remedy]:
    """The finding's remedies that are actions needing approval, in the runbook's order."""
    return [r for r in finding.remedies if r.kind in STEP_KINDS and r.approval == "required" and r.role]


def remaining(finding: Finding, recent: Sequence[Action], at: datetime) -> list[Remedy]:
    """The steps still to offer, in order: a step that ended badly for this incident class is passed over
    when a later step acts on the same role. ``recent``: the cluster's actions, any order."""
    tried = {(a.kind, a.role) for a in recent if a.state in ENDED_BADLY and a.created_at >= at - WINDOW
             and (a.reason or "").startswith(f"{finding.incident} (")}
    ladder = steps(finding)
    return [r for i, r in enumerate(ladder)
            if (r.kind, r.role) not in tried or not any(s.role == r.role for s in ladder[i + 1:])]


def said(kind: str, role: str) -> str:
    """'restart decode', 're-register the workers of router'."""
    return f"{VERB.get(kind, kind)} {role}"
