"""Severity, action state and incident state (floor: no stage imports below this): the words every stage shares.

One map from severity to emoji (Slack) and colour (terminal, HTML), so every renderer agrees.
"""

from __future__ import annotations

from enum import Enum


class Severity(str, Enum):
    critical = "critical"
    high = "high"
    warning = "warning"
    info = "info"

    def __str__(self) -> str:
        return self.value


SEVERITY_RANK: dict[str, int] = {"critical": 0, "high": 1, "warning": 2, "info": 3}
SEVERITY_EMOJI: dict[str, str] = {"critical": ":red_circle:", "high": ":large_red_square:",
                                  "warning": ":large_orange_circle:", "info": ":large_blue_circle:"}
SEVERITY_COLOUR: dict[str, str] = {"critical": "bold red", "high": "red", "warning": "yellow", "info": "cyan"}
UNKNOWN_EMOJI = ":grey_question:"


def severity_rank(severity: str) -> int:
    """Sort key, most severe first; a word no runbook uses sorts last."""
    return SEVERITY_RANK.get(str(severity), len(SEVERITY_RANK))


class RoleState(str, Enum):
    """A role's health on positive evidence only (spec/incidents.md: "healthy" is earned)."""

    healthy = "healthy"
    unknown = "unknown"
    abnormal = "abnormal"

    def __str__(self) -> str:
        return self.value


class ActionState(str, Enum):
    planned = "planned"
    approved = "approved"
    executing = "executing"
    succeeded = "succeeded"
    failed = "failed"
    refused = "refused"
    expired = "expired"
    superseded = "superseded"  # never run: its incident resolved, its class is gone, or another restart fixed the role

    def __str__(self) -> str:
        return self.value


class IncidentState(str, Enum):
    open = "open"
    resolved = "resolved"

    def __str__(self) -> str:
        return self.value


LIVE_ACTIONS: frozenset[ActionState] = frozenset({ActionState.planned, ActionState.approved, ActionState.executing})
RUNNING_ACTIONS: frozenset[ActionState] = frozenset({ActionState.approved, ActionState.executing})


# Which state may follow which; dismissing a planned restart closes it as refused.
TRANSITIONS: dict[ActionState, frozenset[ActionState]] = {
    ActionState.planned: frozenset({ActionState.approved, ActionState.expired, ActionState.refused,
                                    ActionState.superseded}),
    ActionState.approved: frozenset({ActionState.executing, ActionState.expired, ActionState.refused}),
    ActionState.executing: frozenset({ActionState.succeeded, ActionState.failed}),
    ActionState.succeeded: frozenset(),
    ActionState.failed: frozenset(),
    ActionState.refused: frozenset(),
    ActionState.expired: frozenset(),
    ActionState.superseded: frozenset(),
}


def allowed(from_state: str, to_state: str) -> bool:
    """Whether ``to_state`` may follow ``from_state``; staying put (other columns change) always may."""
    return from_state == to_state or ActionState(to_state) in TRANSITIONS[ActionState(from_state)]
