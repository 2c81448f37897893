"""Cooldown and budget (pure): given past restart times, when is the next one allowed?"""

from __future__ import annotations

from datetime import datetime, timedelta


def cooldown_until(last_restarts: list[datetime], cooldown: timedelta, at: datetime) -> datetime | None:
    """When the role may be restarted again, or None when it may be now."""
    if not last_restarts:
        return None
    allowed = max(last_restarts) + cooldown
    return allowed if allowed > at else None


def budget_until(restarts: list[datetime], budget: int, window: timedelta, at: datetime) -> datetime | None:
    """When the cluster's budget has room again, or None when it has room now."""
    recent = sorted(t for t in restarts if t > at - window)
    if len(recent) < budget:
        return None
    if budget == 0:
        return datetime.max.replace(tzinfo=at.tzinfo)
    # the (len - budget + 1)-th oldest must leave the window before there is room for one more
    return recent[len(recent) - budget] + window


def when(at: datetime, now: datetime) -> str:
    """'at 14:32:10 UTC (in 7 min 50 s)' for refusal messages."""
    if at.year == datetime.max.year:
        return "never (the budget is 0; raise OPSBOT_RESTART_BUDGET)"
    left = max(0, int((at - now).total_seconds()))
    mins, secs = divmod(left, 60)
    return f"at {at.strftime('%Y-%m-%d %H:%M:%S')} UTC (in {mins} min {secs} s)"
