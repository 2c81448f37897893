"""Render a report model as Markdown, HTML or Slack Block Kit, through jinja2 templates (pure)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Literal

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from opsbot.parse.recall import short_length
from opsbot.report.model import Figure, StatusReport
from opsbot.slack.limits import BLOCKS_MAX, clip

Format = Literal["markdown", "html", "blocks", "json"]
FORMATS: dict[str, Format] = {"md": "markdown", "markdown": "markdown", "html": "html", "blocks": "blocks",
                              "slack": "blocks", "json": "json"}
_TEMPLATES = {"markdown": "report.md.j2", "html": "report.html.j2", "blocks": "report.blocks.j2"}


def age(seconds: float | None) -> str:
    if seconds is None:
        return "unknown age"
    s = int(seconds)
    if s < 90:
        return f"{s} s ago"
    if s < 90 * 60:
        return f"{s // 60} min ago"
    if s < 48 * 3600:
        return f"{s / 3600:.1f} h ago"
    return f"{s / 86400:.1f} days ago"


def when(at: datetime | None) -> str:
    return "—" if at is None else at.strftime("%a %d %b %H:%M")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def number(value: float | None, unit: str = "") -> str:
    """A figure as people read it: latencies in ms below a second, ratios as percent."""
    if value is None:
        return "—"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
    if unit == "ratio":
        return f"{value * 100:.1f} %"
    if abs(value) >= 1000:
        return f"{value:,.0f} {unit}".strip()
    if value == int(value):
        return f"{value:.0f} {unit}".strip()
    return f"{value:.1f} {unit}".strip()


def change(fig: Figure) -> str:
    """'+12 % (worse)' against the week before, or '—' when either week is missing."""
    pct = fig.change_pct
    if pct is None:
        return "—"
    if abs(pct) < 0.5:
        return "no change"
    worse = (pct > 0) == fig.lower_is_better
    return f"{pct:+.0f} % ({'worse' if worse else 'better'})"


def slack(text: object) -> str:
    """Escape what Slack's mrkdwn treats as markup (``&``, ``<``, ``>``)."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("opsbot.report", "templates"),
        autoescape=select_autoescape(["html.j2"]),
        undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
    )
    env.filters.update(age=age, when=when, duration=duration, number=number, change=change, clip=clip, slack=slack,
                       tokens=lambda n: "none" if n is None else short_length(n))
    return env


_ENV = _environment()


def load_templates() -> None:
    """Compile every template now (the service does it at start-up, off the event loop)."""
    for name in _TEMPLATES.values():
        _ENV.get_template(name)


def render(report: StatusReport, fmt: Format | str = "markdown") -> str:
    """The report as text in ``fmt``; Block Kit comes back as a JSON array of blocks."""
    kind = FORMATS.get(fmt)
    if kind is None:
        raise ValueError(f"unknown report format {fmt!r}: use one of md, html, blocks, json")
    if kind == "json":
        return report.model_dump_json(indent=2)
    text = _ENV.get_template(_TEMPLATES[kind]).render(r=report)
    if kind == "blocks":
        blocks = [json.loads(line) for line in text.splitlines() if line.strip()]
        if len(blocks) > BLOCKS_MAX:
            blocks = blocks[: BLOCKS_MAX - 1] + [
                {"type": "context", "elements": [{"type": "mrkdwn", "text": "(report shortened for Slack)"}]}]
        return json.dumps(blocks, indent=1)
    return text
