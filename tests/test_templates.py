"""What differs from a role's own healthy probes (issue 24): log templates kept per role in the store, learned
only from healthy probes, capped; a role that is not healthy names its lines whose templates it never printed
while healthy. The pure part with composed bundles, the store on SQLite and PostgreSQL, the flow end to end."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console
from sqlalchemy import func, select

from opsbot.bundle import Bundle, Trigger
from opsbot.cli.diagnosis_view import render
from opsbot.contracts import RoleState
from opsbot.diagnose import default_runbooks, diagnose
from opsbot.flow import Flow
from opsbot.parse.templates import (
    _MASK,
    _RUNS,
    MIN_HEALTHY_PROBES,
    TEMPLATES_PER_PROBE,
    RoleHistory,
    line_template,
    template_key,
    visible,
)
from opsbot.slack.blocks import finding_blocks
from opsbot.store import Store
from opsbot.store import templates as store_templates
from opsbot.store.models import RoleLogTemplate
from tests.scenarios.compose import RoleSpec, bundle, healthy_roles
from tests.servicekit import lab_settings

NEW_LINE = "[2026-11-29 09:59:40] ERROR:    Scheduler saw page 4711 of req 9f3c2a71e0b44d1c freed twice"


def _bundle(roles: list[RoleSpec]) -> Bundle:
    return bundle(roles).model_copy(update={"id": uuid.uuid4().hex[:16]})


def _broken() -> list[RoleSpec]:
    roles = healthy_roles()
    roles[1].logs += [f"raw:{NEW_LINE}"]
    return roles


def _decode(d: Any) -> Any:
    return next(r for r in d.roles if r.role == "decode")


# -- the template of a line ------------------------------------------------------------------------------


def test_a_template_masks_what_varies_between_repeats_of_one_message():
    a = line_template("Decode batch, #running-req: 32, #token: 11179, token usage: 0.08, gen throughput (token/s): 1635.11")
    b = line_template("Decode batch, #running-req: 7, #token: 12, token usage: 0.91, gen throughput (token/s): 3.5")
    assert a == b and "<*>" in a and "32" not in a
    ids = [line_template(f"Abort request rid={rid} from 10.0.0.{n}:{port}")
           for rid, n, port in (("9f3c2a71e0b44d1c", 3, 40052), ("deadbeefcafebabe", 17, 8998))]
    assert ids[0] == ids[1]
    assert line_template('File "/sgl/a.py", line 12, in run') == line_template('File "/usr/b.py", line 981, in run')
    assert line_template("values [1, 2, 3, 4]") == line_template("values [5]")
    assert line_template("KV transfer failed") != line_template("KV transfer done")


@given(st.text(max_size=3000))
def test_a_template_is_capped_and_never_carries_a_control_character(text: str):
    t = line_template(text)
    assert len(t) <= 200 and not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in t)
    assert len(template_key(t)) == 32


@given(st.text(alphabet="0123456789abcdefxz:=/.'\" \t-_#\x00٣", max_size=600))
def test_a_template_is_its_shape_s_whatever_the_digits(text: str):
    """What makes the cache right: no mask tells one digit, or one length of a run of digits, from another."""
    uncached = visible(" ".join(_RUNS.sub("<*>", _MASK.sub("<*>", text[:400])).split()))[:200]
    assert line_template(text) == uncached


def test_visible_escapes_control_characters():
    assert visible("a\x1b[31mb\x00c\x9b") == "a\\x1b[31mb\\x00c\\x9b"


# -- the diagnosis with and without history --------------------------------------------------------------


def test_offline_a_diagnosis_says_nothing_of_history():
    d = diagnose(_bundle(_broken()), default_runbooks())
    (f,) = d.findings
    assert f.incident == "unexplained"
    assert not any("healthy" in e for e in f.evidence) and not any("since healthy" in r for r in _decode(d).reasons)
    assert all(r.templates is None for r in d.roles)


def test_too_little_history_says_so():
    history = {"decode": RoleHistory(MIN_HEALTHY_PROBES - 1, frozenset())}
    (f,) = diagnose(_bundle(_broken()), default_runbooks(), history=history).findings
    assert any(e.startswith("no healthy history yet: 2 healthy probe(s) of decode") for e in f.evidence)


def test_a_line_never_seen_while_healthy_is_named_in_the_finding_and_the_role_verdict():
    healthy = diagnose(_bundle(healthy_roles()), default_runbooks(), history={})
    assert healthy.healthy
    taught = _decode(healthy).templates
    assert taught and all(isinstance(t, str) for t in taught.values())
    history = {"decode": RoleHistory(MIN_HEALTHY_PROBES, frozenset(taught))}
    d = diagnose(_bundle(_broken()), default_runbooks(), history=history)
    (f,) = d.findings
    (said,) = [e for e in f.evidence if "since healthy" in e]
    assert said.startswith("new since healthy: 1 template(s) never seen on decode while healthy (3 healthy probes): ")
    assert said.endswith("ERROR:    Scheduler saw page 4711 of req 9f3c2a71e0b44d1c freed twice")
    decode = _decode(d)
    assert decode.state == RoleState.abnormal and said in decode.reasons and decode.templates is None
    assert said not in f.summary  # the summary keeps the verdict's own reasons
    # every line seen while healthy: said, so a person knows the logs are not what changed
    both = history | {"decode": RoleHistory(5, frozenset(taught) | {template_key(line_template(NEW_LINE.split("] ", 1)[1]))})}
    (f,) = diagnose(_bundle(_broken()), default_runbooks(), history=both).findings
    assert any(e.startswith("new since healthy: none") for e in f.evidence)


def test_a_traceback_s_exception_is_shown_before_its_frames():
    roles = healthy_roles()
    roles[1].logs += ["raw:[2026-11-29 09:59:40] ERROR:    Exception in ASGI application",
                      "raw:Traceback (most recent call last):",
                      'raw:  File "/sgl/serving_chat.py", line 612, in _process_messages',
                      "raw:jinja2.exceptions.UndefinedError: 'dict object' has no attribute 'content'"]
    (f,) = diagnose(_bundle(roles), default_runbooks(), history={"decode": RoleHistory(4, frozenset())}).findings
    (said,) = [e for e in f.evidence if "since healthy" in e]
    assert "5 template(s)" in said and "(first 3)" in said  # the batch line is new too: nothing was taught
    shown = said.split(" (first 3): ", 1)[1].split(" | ")
    assert [line.split(",")[0] for line in shown] == [
        "Decode batch", "ERROR:    Exception in ASGI application", "jinja2.exceptions.UndefinedError: 'dict object' has no attribute 'content'"]


def test_the_history_changes_no_finding_and_no_state():
    """Only evidence lines differ: the findings, their order and every role's state are the offline ones."""
    for roles in (healthy_roles(), _broken()):
        b = _bundle(roles)
        offline, online = diagnose(b, default_runbooks()), diagnose(b, default_runbooks(), history={})
        assert [f.incident for f in offline.findings] == [f.incident for f in online.findings]
        assert [r.state for r in offline.roles] == [r.state for r in online.roles]


def test_a_hostile_line_is_shown_escaped_on_every_surface():
    roles = healthy_roles()
    # a colour/CSI sequence is dropped before any reader (opsbot.parse.logs); any other control character is escaped
    roles[1].logs += ["raw:[2026-11-29 09:59:40] ERROR: <!channel> [bold]x[/bold] \x1b[2J \x1b]0;pwned\x07 <https://evil|click>"]
    history = {"decode": RoleHistory(3, frozenset())}
    d = diagnose(_bundle(roles), default_runbooks(), history=history)
    (said,) = [e for e in d.findings[0].evidence if "since healthy" in e]
    assert "\x1b" not in said and "\x07" not in said and "[2J" not in said and "\\x1b]0;pwned\\x07" in said
    blocks = json.dumps(finding_blocks("lab", "p-1", d.findings, {}))
    assert "<!channel>" not in blocks and "&lt;!channel&gt;" in blocks
    public = json.dumps(d.public())
    assert "templates" not in public  # what the store learns is never part of the public diagnosis
    out = io.StringIO()
    Console(file=out, width=400, force_terminal=False).print(render(d))
    assert "[bold]x[/bold]" in out.getvalue() and "\x1b" not in out.getvalue()  # no rich markup, no escape


def test_a_flood_of_distinct_lines_teaches_at_most_the_per_probe_cap():
    roles = healthy_roles()
    roles[1].logs += [f"raw:[2026-11-29 09:59:40] INFO: line kind {chr(65 + i % 26)}{chr(65 + i // 26 % 26)}"
                      f"{chr(65 + i // 676)}" for i in range(TEMPLATES_PER_PROBE + 50)]
    d = diagnose(_bundle(roles), default_runbooks(), history={})
    assert d.healthy and len(_decode(d).templates) == TEMPLATES_PER_PROBE


# -- the store ---------------------------------------------------------------------------------------------


@pytest.fixture
def store(database_url):
    s = Store(database_url)
    yield s
    s.close()


def _save(store: Store, roles: list[RoleSpec], history: dict[str, RoleHistory] | None = None, at: datetime | None = None):
    b = _bundle(roles)
    if at is not None:
        b = b.model_copy(update={"started_at": at.isoformat()})
    d = diagnose(b, default_runbooks(), history=store.role_history(b.cluster, [r.key for r in b.roles])
                 if history is None else history)
    store.save_probe(b, d)
    return b, d


def test_healthy_probes_teach_and_the_history_round_trips(store):
    assert store.role_history("lab", ["decode"]) == {"decode": RoleHistory()}
    _b, d = _save(store, healthy_roles())
    _save(store, healthy_roles())
    h = store.role_history("lab", ["prefill", "decode", "router", "nobody"])
    assert h["decode"].healthy_probes == 2 and h["decode"].keys == frozenset(_decode(d).templates)
    assert h["nobody"] == RoleHistory() and h["router"].healthy_probes == 2
    (row,) = store.role_templates("lab", "decode")
    assert row.healthy_probes == 2 and row.template.startswith("Decode batch, #running-req: <*>")
    assert row.first_seen <= row.last_seen and row.last_seen.tzinfo is not None
    assert store.role_history("other", ["decode"])["decode"] == RoleHistory()  # per cluster


def test_only_healthy_probes_teach(store):
    _save(store, healthy_roles())
    _b, d = _save(store, _broken())
    assert _decode(d).state == RoleState.abnormal
    h = store.role_history("lab", ["decode", "prefill"])
    assert h["decode"].healthy_probes == 1 and len(h["decode"].keys) == 1  # the error line taught nothing
    assert h["prefill"].healthy_probes == 2  # its own verdict was healthy in both probes
    # a diagnosis made without history (offline) teaches nothing, not even a healthy probe
    b = _bundle(healthy_roles())
    store.save_probe(b, diagnose(b, default_runbooks()))
    assert store.role_history("lab", ["decode"])["decode"].healthy_probes == 1


def test_a_control_character_in_a_template_is_stored_on_every_database(store):
    roles = healthy_roles()
    roles[1].logs += ["raw:[2026-11-29 09:59:40] INFO: odd \x00 byte and \x1b escape"]
    _b, d = _save(store, roles)
    assert _decode(d).state == RoleState.healthy
    assert any("\\x00" in r.template for r in store.role_templates("lab", "decode"))


def test_the_templates_of_a_role_are_capped_least_recently_seen_first(store, monkeypatch):
    monkeypatch.setattr(store_templates, "TEMPLATES_PER_ROLE", 5)
    t0 = datetime(2026, 12, 1, tzinfo=timezone.utc)
    for n in range(3):  # three probes, each with three lines of its own and the batch line
        roles = healthy_roles()
        roles[1].logs += [f"raw:[2026-11-29 09:59:40] INFO: probe {chr(65 + n)} line {chr(65 + i)}" for i in range(3)]
        _save(store, roles, at=t0 + timedelta(minutes=n))
    rows = store.role_templates("lab", "decode")
    assert len(rows) == 5
    kept = {r.template for r in rows}
    assert "INFO: probe C line A" in kept and not any(t.startswith("INFO: probe A") for t in kept)
    assert rows[0].healthy_probes == 3  # the batch line, seen in every probe, stays
    # a bundle saved late brings its templates back but moves no last_seen backwards
    _save(store, healthy_roles(), at=t0 - timedelta(days=1))
    assert max(r.last_seen for r in store.role_templates("lab", "decode")) == t0 + timedelta(minutes=2)
    n = store.read(lambda s: s.scalar(select(func.count()).select_from(RoleLogTemplate)))
    assert n <= 5 + len(store.role_templates("lab", "prefill"))


def test_the_migration_goes_down_to_0009_and_up_again_keeping_the_probes(store):
    from alembic import command
    from sqlalchemy import inspect

    from opsbot.store.database import alembic_config

    b, _d = _save(store, healthy_roles())
    config = alembic_config()
    with store.engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0009_notifier")
    tables = set(inspect(store.engine).get_table_names())
    assert "probes" in tables and not {"role_log_templates", "role_log_history"} & tables
    with store.engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
    assert store.load_bundle(b.id).id == b.id and store.role_history("lab", ["decode"])["decode"] == RoleHistory()
    _save(store, healthy_roles())
    assert store.role_history("lab", ["decode"])["decode"].healthy_probes == 1


def test_saves_at_once_count_every_healthy_probe(database_url, monkeypatch):
    """Two instances saving probes of the same roles at once, at the cap: no conflict is lost, no save fails."""
    monkeypatch.setattr(store_templates, "TEMPLATES_PER_ROLE", 3)
    stores = [Store(database_url) for _ in range(2)]
    work = []
    for n in range(10):
        roles = healthy_roles()
        roles[1].logs += [f"raw:[2026-11-29 09:59:40] INFO: shared line {chr(65 + i)}" for i in range(3)]
        roles[1].logs += [f"raw:[2026-11-29 09:59:40] INFO: own line {chr(65 + n)}"]
        b = _bundle(roles)
        work.append((b, diagnose(b, default_runbooks(), history={})))
    errors: list[BaseException] = []

    def save(store: Store, part: list[tuple[Bundle, Any]]) -> None:
        try:
            for b, d in part:
                store.save_probe(b, d)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=save, args=(s, work[i::2])) for i, s in enumerate(stores)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert errors == []
    assert stores[0].role_history("lab", ["decode"])["decode"].healthy_probes == 10
    assert len(stores[0].role_templates("lab", "decode")) == 3
    [s.close() for s in stores]


# -- the flow: probe, diagnose with history, record ------------------------------------------------------


def test_the_flow_names_a_line_new_since_healthy_in_the_unexplained_finding(tmp_path, database_url):
    """Probed healthy three times, then with an error line no runbook claims: the finding says the line's
    template was never seen on decode while healthy; the probes before that say there is no history yet."""
    settings = lab_settings(tmp_path, database_url)
    answers = [healthy_roles(), _broken(), healthy_roles(), healthy_roles(), _broken()]

    async def probe(inventory: Any, *, trigger: Trigger | None = None, **_: Any) -> Bundle:
        return _bundle(answers.pop(0)).model_copy(update={"trigger": trigger or Trigger()})

    flow = Flow(settings=settings, store=Store(settings.db_url()), probe=probe)

    async def run() -> list[Any]:
        return [await flow.run_probe(None, None, Trigger(kind="cli", user="alice")) for _ in range(5)]

    results = asyncio.run(run())
    early = results[1].diagnosis.findings[0]
    assert early.incident == "unexplained"
    assert any(e.startswith("no healthy history yet: 1 healthy probe(s) of decode") for e in early.evidence)
    last = results[4].diagnosis.findings[0]
    (said,) = [e for e in last.evidence if "since healthy" in e]
    assert said.startswith("new since healthy: 1 template(s) never seen on decode while healthy (3 healthy probes)")
    assert "Scheduler saw page 4711" in said
    stored = flow.store.probe_findings(results[4].probe_id)[0]
    assert said in stored.evidence  # recorded as shown
    assert said in json.dumps(results[4].as_json())  # the REST answer
    assert said in json.dumps(finding_blocks("lab", results[4].probe_id, results[4].diagnosis.findings, {}))  # Slack
    out = io.StringIO()
    Console(file=out, width=1000, force_terminal=False).print(render(results[4].diagnosis))  # opsbot probe / ask
    assert said in out.getvalue()
    flow.store.close()
