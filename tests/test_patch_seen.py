"""The index-key patch as the probe sees it: the ``patch`` facts, the crash-loop runbook reading a
refusal, and the reports' wording (issue 17 item 3: the run's own line, never a variable)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from opsbot.diagnose import default_runbooks, diagnose
from opsbot.parse.facts import bundle_facts
from opsbot.parse.figures import role_figures
from opsbot.parse.patch import PatchSeen, parse_patch_line, seen_in, window_start
from opsbot.report.model import CriticalContext, CurrentState, RoleConfig
from opsbot.report.status import with_observed_index_keys
from serving.patch import attached_line, refused_line
from tests.scenarios.compose import T0, bundle, healthy_roles

ATTACHED = attached_line("0.1.0", "bf16", "0.5.23")


def _decode(bundle_):
    return next(r for r in bundle_.roles if r.role == "decode")


def test_attached_line_of_the_current_run_is_seen_with_its_time():
    p, d, r = healthy_roles()
    d.started = T0 - timedelta(minutes=5)
    d.logs = [ATTACHED, "Decode batch, #running-req: 8"]
    b = bundle([p, d, r])
    fig = role_figures(b, _decode(b))
    assert fig.index_keys.startswith("bf16, seen in the current run at ")
    facts = bundle_facts(b, default_runbooks().patterns).scopes
    decode = next(v for v in facts.values() if v["role"] == "decode")
    assert decode["patch"] == {"state": "attached", "index_keys": "bf16", "version": "0.1.0", "sglang": "0.5.23"}


def test_a_line_from_the_run_before_says_nothing_about_this_one():
    p, d, r = healthy_roles()
    d.started = T0 - timedelta(minutes=5)
    d.history = [ATTACHED]  # 14 minutes ago: the previous process
    b = bundle([p, d, r])
    # the current run started inside the journal window and printed no line: upstream fp8
    assert role_figures(b, _decode(b)).index_keys == "fp8 (upstream)"


def test_a_run_older_than_the_window_is_unknown():
    p, d, r = healthy_roles()  # started 20 min before the probe, the journal reaches back 15
    b = bundle([p, d, r])
    assert role_figures(b, _decode(b)).index_keys == "unknown"


def test_a_refusal_in_a_crash_loop_is_config_crashloop():
    p, d, r = healthy_roles()
    d.active, d.sub, d.result, d.restarts, d.exit_status = "activating", "auto-restart", "exit-code", 6, 3
    d.started = T0 - timedelta(seconds=30)
    d.gauges, d.counters, d.health, d.health_error = {}, {}, None, "connection refused"
    d.metrics_error = "connection refused"
    d.logs = [refused_line("sglang 0.5.24 is not 0.5.23: C4Indexer.forward_c4_indexer differs (sha256 3f2a...)"),
              "systemd:sglang-dsv4-decode.service: Main process exited, code=exited, status=3/NOTIMPLEMENTED",
              "systemd:sglang-dsv4-decode.service: Failed with result 'exit-code'."] * 3
    found = diagnose(bundle([p, d, r]), default_runbooks()).findings
    assert found and found[0].incident == "config-crashloop", [f.incident for f in found]
    assert not any(f.incident == "role-down" for f in found)


def test_reports_show_what_the_run_printed_and_what_the_spec_asked():
    context = CriticalContext(roles=[RoleConfig(role="decode", node="n2", index_keys_spec="bf16"),
                                     RoleConfig(role="prefill", node="n1", index_keys_spec="bf16")])
    p, d, r = healthy_roles()
    d.started = T0 - timedelta(minutes=5)
    d.logs = [ATTACHED]
    b = bundle([p, d, r])
    current = CurrentState(roles=[role_figures(b, e) for e in b.roles])
    roles = {rc.role: rc.index_keys for rc in with_observed_index_keys(context, current).roles}
    assert roles["decode"].startswith("bf16, seen in the current run")
    assert roles["prefill"] == "unknown (the spec asks for bf16)"


def test_window_start_reads_both_forms_of_since():
    probe = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    assert window_start("-15min", probe) == probe - timedelta(minutes=15)
    assert window_start("2026-12-01T11:45:00+00:00", None) == probe - timedelta(minutes=15)
    assert window_start("yesterday", probe) is None and window_start(None, probe) is None


@given(st.text(max_size=300))
def test_any_line_parses_without_error(text):
    parse_patch_line(text)
    assert seen_in([(text, None)], None, None, True).state in ("attached", "refused", "unknown")


@given(st.sampled_from(["bf16", "fp8"]), st.from_regex(r"[0-9]\.[0-9]\.[0-9]{1,2}", fullmatch=True),
       st.text(alphabet="[]:0123456789 -TZ", max_size=40))
def test_attached_line_round_trips_behind_any_prefix(keys, version, prefix):
    line = parse_patch_line(prefix + attached_line(version, keys, "0.5.23"))
    assert line is not None and line.attached and (line.index_keys, line.version) == (keys, version)
    assert PatchSeen("attached", keys, version, "0.5.23").describe().startswith(keys)
