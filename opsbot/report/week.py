"""ISO weeks (``2026-W48``) as time ranges in the deployment's time zone."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_WEEK = re.compile(r"(\d{4})-W(\d{2})")


class WeekError(ValueError):
    """A week that cannot be reported on: malformed, or not over yet."""


@dataclass(frozen=True)
class Week:
    label: str
    start: datetime
    end: datetime

    @property
    def seconds(self) -> int:
        """The week's length (168 h, or 167/169 across a DST change)."""
        return int((self.end - self.start).total_seconds())

    def previous(self) -> Week:
        return week_of((self.start - timedelta(days=3)).date(), self.start.tzinfo)  # type: ignore[arg-type]


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise WeekError(f"unknown time zone {name!r}: use an IANA name such as 'Europe/Paris' or 'UTC'") from exc


def week_of(day: date, tz: ZoneInfo) -> Week:
    year, number, _ = day.isocalendar()
    monday = date.fromisocalendar(year, number, 1)
    start = datetime.combine(monday, datetime.min.time(), tz)
    end = datetime.combine(monday + timedelta(days=7), datetime.min.time(), tz)
    return Week(f"{year}-W{number:02d}", start, end)


def parse_week(label: str, tz: ZoneInfo) -> Week:
    match = _WEEK.fullmatch(label.strip())
    if not match:
        raise WeekError(f"week {label!r}: write it as YYYY-Www, e.g. 2026-W48")
    year, number = int(match[1]), int(match[2])
    try:
        return week_of(date.fromisocalendar(year, number, 1), tz)
    except ValueError as exc:
        raise WeekError(f"week {label!r}: {year} has no week {number}") from exc


def last_complete_week(now: datetime, tz: ZoneInfo) -> Week:
    """The most recent week that has ended by ``now``."""
    return week_of((now.astimezone(tz) - timedelta(days=7)).date(), tz)


def check_over(week: Week, now: datetime) -> None:
    """Refuse a week that has not ended: its figures would be partial and change later."""
    if week.start > now:
        raise WeekError(f"week {week.label} is in the future (it starts {week.start:%Y-%m-%d}); "
                        "pick a week that has ended, e.g. the default (last week)")
    if week.end > now:
        raise WeekError(f"week {week.label} is not over until {week.end:%Y-%m-%d %H:%M %Z}; "
                        "report on it after that, or use `opsbot status` for now")
