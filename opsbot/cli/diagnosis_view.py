"""Render a diagnosis for the terminal with rich (pure: returns renderables)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from opsbot.contracts import SEVERITY_COLOUR, Diagnosis, Finding
from opsbot.parse.templates import visible

_REMEDY_MARK = {"restart": "↻ restart", "config": "⚙ config", "no-restart": "✋ no restart", "manual": "✎ manual"}


def _plain(text: str, style: str = "") -> Text:
    """Outside text (log lines in the evidence, a role's reasons) as text: no rich markup, no terminal escapes."""
    return Text(visible(text), style=style)


def _finding(i: int, f: Finding) -> Panel:
    body = Table.grid(padding=(0, 1))
    body.add_column(style="dim", no_wrap=True)
    body.add_column()
    body.add_row("what", _plain(f.summary, "bold"))
    for line in f.evidence:
        body.add_row("evidence", _plain(line))
    body.add_row("why", f.explain)
    for r in f.remedies:
        approval = " (needs approval)" if r.approval == "required" else ""
        body.add_row(_REMEDY_MARK[r.kind], f"{r.text}{approval}")
    if f.explains:
        body.add_row("explains", ", ".join(f.explains))
    for text in f.decide:
        body.add_row("would decide", text + (" (opsbot ask --second-look)" if f.second_look else ""))
    if f.missing_facts:
        body.add_row("not collected", ", ".join(f.missing_facts))
    title = Text.assemble((f"{i}. {f.incident}", SEVERITY_COLOUR.get(str(f.severity), "")), f"  {f.title}  ",
                          (f"[{f.severity}, {', '.join(f.roles)}, confidence {f.confidence:.0%}]", "dim"))
    return Panel(body, title=title, title_align="left", border_style=SEVERITY_COLOUR.get(str(f.severity), "white"))


_STATE_STYLE = {"healthy": "green", "unknown": "yellow", "abnormal": "red"}


def _roles(d: Diagnosis) -> Table:
    """Each role's verdict: healthy only on positive evidence; unknown with what could not be read."""
    t = Table(title="roles", title_justify="left", show_edge=False)
    t.add_column("role")
    t.add_column("state")
    t.add_column("why / notes")
    for r in d.roles:
        t.add_row(_plain(r.role), Text(str(r.state), style=_STATE_STYLE.get(str(r.state), "")),
                  _plain("; ".join(r.reasons + r.notes)))
    return t


def render(d: Diagnosis) -> RenderableType:
    """Findings most likely first; 'healthy' only when every role earned it, 'unknown' when a role's evidence
    could not be read; each role's verdict; then what could not be decided."""
    parts: list[RenderableType] = []
    if d.healthy:
        text = "healthy: every role shows positive evidence of health"
        if d.undetermined:
            text += f"; {len(d.undetermined)} condition(s) could not be decided (below)"
        parts.append(Panel(Text(text, style="bold green"), title=f"bundle {d.bundle}", title_align="left"))
    elif not d.findings:
        unknown = ", ".join(r.role for r in d.unknown_roles)
        undecided = f"{len(d.undetermined)} condition(s) could not be decided; " if d.undetermined else ""
        text = f"unknown (not healthy): {undecided}no finding, but the evidence of {unknown} could not be read (below)"
        parts.append(Panel(Text(text, style="bold yellow"), title=f"bundle {d.bundle}", title_align="left"))
    parts += [_finding(i, f) for i, f in enumerate(d.findings, start=1)]
    if d.roles:
        parts.append(_roles(d))
    if d.undetermined:
        t = Table(title="undetermined (facts not collected)", title_justify="left", show_edge=False)
        t.add_column("incident")
        t.add_column("role")
        t.add_column("missing facts / error")
        for u in d.undetermined:
            t.add_row(u.incident, u.role, ", ".join(u.missing_facts) or (u.error or ""))
        parts.append(t)
    for p in d.problems:
        parts.append(Text(f"! {p}", style="yellow"))
    return Group(*parts)
