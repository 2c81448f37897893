"""'healthy' is earned (issue 24): each role is healthy only on positive evidence, unknown where its evidence
could not be read, and abnormal evidence that no runbook claims is an ``unexplained`` finding that never
advises a restart. Bundles are composed as SGLang, systemd and nvidia-smi print them, read by the real parsers."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from opsbot.cli import app
from opsbot.contracts import RoleState
from opsbot.diagnose import default_runbooks, diagnose
from opsbot.parse.logs import parse_log_line
from opsbot.parse.verdict import is_abnormal, template
from opsbot.slack.blocks import finding_blocks
from tests.scenarios.compose import RoleSpec, bundle, compose, healthy_roles
from tests.scenarios.deployments import roles as era_roles


def _diag(roles: list[RoleSpec]):
    return diagnose(bundle(roles), default_runbooks())


def _state(d, role: str) -> RoleState:
    return next(r.state for r in d.roles if r.role == role)


def test_every_role_earns_healthy():
    d = _diag(healthy_roles())
    assert d.healthy and d.answer == "healthy" and {r.state for r in d.roles} == {RoleState.healthy}


def test_a_role_whose_evidence_could_not_be_read_is_unknown_not_healthy(tmp_path: Path):
    roles = healthy_roles()
    roles[1].metrics_error, roles[1].logs_error = "timeout after 5.0 s", "ssh: connection refused"
    d = _diag(roles)
    assert not d.findings and not d.healthy and d.answer == "unknown"
    (decode,) = d.unknown_roles
    assert decode.role == "decode" and any("progress could not be read" in r for r in decode.reasons)
    assert any("journal" in r for r in decode.reasons)
    path = tmp_path / "b.json"
    path.write_text(json.dumps(compose(roles)))
    res = CliRunner().invoke(app, ["diagnose", "--json", str(path)])
    out = json.loads(res.output)
    assert res.exit_code == 3 and out["answer"] == "unknown" and out["findings"] == []
    assert [r["state"] for r in out["roles"]] == ["healthy", "unknown", "healthy"]
    text = CliRunner().invoke(app, ["diagnose", str(path)]).output
    assert "unknown (not healthy)" in text and "healthy: every role" not in text
    blocks = json.dumps(finding_blocks("lab", "p-1", d.findings, {}, unknown=d.unknown_roles))
    assert "unknown (not healthy)" in blocks and "no incident found" not in blocks


def test_a_failure_no_runbook_claims_is_unexplained_with_its_lines_and_no_restart():
    roles = healthy_roles()
    roles[1].logs += ["raw:[2026-11-29 09:59:40] ERROR:    Exception in ASGI application",
                      "raw:Traceback (most recent call last):",
                      'raw:  File "/sgl/serving_chat.py", line 612, in _process_messages',
                      "raw:jinja2.exceptions.UndefinedError: 'dict object' has no attribute 'content'"]
    d = _diag(roles)
    (f,) = d.findings
    assert f.incident == "unexplained" and f.roles == ["decode"] and _state(d, "decode") == RoleState.abnormal
    assert f.severity == "high"  # a traceback in a serving role: high, not critical (the unit runs, tokens move)
    assert all(r.kind != "restart" for r in f.remedies) and [r.kind for r in f.remedies] == ["manual"]
    assert any(e.startswith("first abnormal lines: ERROR:    Exception in ASGI application | Traceback") for e in f.evidence)
    assert "UndefinedError" in " ".join(f.evidence)


def test_unexplained_severity_follows_the_evidence_and_yields_to_any_named_class():
    roles = healthy_roles()
    roles[1].active, roles[1].sub, roles[1].result = "failed", "failed", "exit-code"
    roles[1].logs = ["raw:[2026-11-29 09:59:40] Fatal Python error: Aborted"]
    d = _diag(roles)
    assert d.findings[0].incident == "role-down"  # a class names it: unexplained is not said
    assert "unexplained" not in [f.incident for f in d.findings]
    roles = healthy_roles()
    roles[1].logs += ["raw:[2026-11-29 09:59:40] Fatal Python error: Segmentation fault"]
    (f,) = _diag(roles).findings
    assert f.incident == "unexplained" and f.severity == "critical"  # a crash dump


def test_the_soft_watchdog_repeating_while_tokens_move_is_a_note():
    roles = healthy_roles()
    line = "TokenizerManager watchdog timeout (self.watchdog_timeout=60, self.soft=True)"
    roles[1].logs = [line, *roles[1].logs, line, line]
    d = _diag(roles)
    assert d.healthy, [f.incident for f in d.findings]
    (decode,) = [r for r in d.roles if r.role == "decode"]
    assert any("benign while progressing (3x)" in n and "watchdog timeout" in n for n in decode.notes)
    roles[1].logs = ["Watchdog timeout"]  # the scheduler's, quoted without its detail: the incident
    assert _diag(roles).findings[0].incident == "scheduler-watchdog"


def test_a_stale_gauge_is_not_progress_on_0_4():
    p, d, r = era_roles("0.4.3", "mini_lb")
    d.gauges.update(num_running_reqs=8, gen_throughput=184.38)  # the last Decode batch line's value, kept
    d.counters["generation_tokens"] = (2_000_000, 0)
    batch = "raw:[2025-02-27 04:46:39 TP0] Decode batch. #running-req: 8, #token: 62531, token usage: 0.12, gen throughput (token/s): 184.38, #queue-req: 0"
    d.history, d.logs = [batch], []  # 14 minutes old
    assert [f.incident for f in _diag([p, d, r]).findings] == ["decode-wedged"]
    d.history, d.logs = [], [batch.replace("[2025-02-27 ", "[")]  # a fresh line with a time-only header
    assert _diag([p, d, r]).healthy


def test_figures_read_progress_from_the_same_fallbacks_as_the_diagnosis():
    from opsbot.parse.figures import role_figures

    p, d, r = era_roles("0.4.3", "mini_lb")
    d.counters["generation_tokens"] = (2_000_000, 900)
    b = bundle([p, d, r])
    fig = role_figures(b, b.roles[1])
    assert fig.tokens_delta == 900 and fig.tokens_per_s == 300


def test_a_line_of_100000_characters_costs_linear_time():
    for text in ("E" * 100_000, "ERROR " + "a" * 100_000, "0x" + "1/" * 50_000, "'" + "a'" * 50_000):
        started = time.perf_counter()
        entry = parse_log_line(text)
        is_abnormal(entry), template(entry.message)
        assert time.perf_counter() - started < 0.5


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=600))
def test_template_masks_every_number_and_never_grows(text: str):
    out = template(text)
    assert len(out) <= 200 and not re.search(r"\d", out)
    assert isinstance(is_abnormal(parse_log_line(text)), bool)


def test_the_in_tree_sgl_router_names_are_read():
    """sgl-router's own metrics (sgl-router/src/metrics.rs): sgl_router_processed_requests_total{worker} for the
    rate, sgl_router_worker_cb_state{worker_url} (0 closed, 1 open, 2 half-open) for the breaker."""
    from opsbot.parse.figures import role_figures

    p, d, r = healthy_roles()
    r.gauges = {"sgl_router_worker_cb_state{worker_url=http://p0:30000}": 0,
                "sgl_router_worker_health{worker_url=http://p0:30000}": 1}
    r.counters = {"sgl_router_processed_requests{worker=http://p0:30000}": (100, 30)}
    b = bundle([p, d, r])
    assert role_figures(b, b.roles[2]).requests_per_s == 10
    assert diagnose(b, default_runbooks()).healthy
    r.gauges["sgl_router_worker_cb_state{worker_url=http://p0:30000}"] = 1
    assert diagnose(bundle([p, d, r]), default_runbooks()).findings[0].incident == "router-no-healthy-workers"


def test_a_role_with_nothing_readable_is_unknown_with_every_reason():
    roles = healthy_roles()
    roles[0].drop = ("systemd", "metrics", "health", "logs")
    d = _diag(roles)
    (prefill,) = d.unknown_roles
    assert prefill.role == "prefill" and not d.healthy and d.answer == "unknown"
    assert {"systemd state could not be read", "journal could not be read"} <= set(prefill.reasons)
    assert any("progress could not be read" in r for r in prefill.reasons) and any("/health" in r for r in prefill.reasons)


def test_a_gpu_fault_seen_only_in_the_drivers_lines_is_a_gpu_fault():
    """NVRM lines without an Xid and without any SGLang line, in the kernel log or relayed into the role's
    journal: the driver's own status code says the GPU is gone (nvstatuscodes.h NV_ERR_GPU_IS_LOST)."""
    from tests.scenarios.deployments import failed

    line = "NVRM: nvCheckOkFailedNoLog: Check failed: GPU lost from the bus [NV_ERR_GPU_IS_LOST] (0x0000000F)"
    p, d, r = healthy_roles()
    failed(d, [], status="9/KILL")
    assert _diag([p, d, r]).findings[0].incident == "role-down"
    kernel = {"node2": f"2026-11-29T09:59:30+0000 node2 kernel: {line}\n"}
    assert _diag_kw([p, d, r], kernel=kernel).findings[0].incident == "gpu-fault"
    d.logs = [f"raw:{line}", *d.logs]  # the same line relayed into the role's journal
    assert _diag([p, d, r]).findings[0].incident == "gpu-fault"


def _diag_kw(roles: list[RoleSpec], **kw):
    return diagnose(bundle(roles, **kw), default_runbooks())


def test_lab_captures_of_a_healthy_cluster_earn_healthy_on_every_role():
    """Bundles probed from the lab's real nspawn nodes (systemd, journald, the emulator's /metrics and lines)."""
    from opsbot.bundle import parse_bundle

    root = Path(__file__).parent / "scenarios" / "dev"
    for name in ("healthy", "healthy-0.5.12"):
        d = diagnose(parse_bundle((root / f"{name}.json").read_text(encoding="utf-8")), default_runbooks())
        assert d.healthy and {r.state for r in d.roles} == {RoleState.healthy}, name


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 23), st.integers(0, 59), st.integers(0, 59), st.sampled_from(["", "2026-11-29 "]))
def test_a_batch_header_with_or_without_its_date_is_placed_near_the_probe(h: int, m: int, s: int, date: str):
    from datetime import datetime, timedelta, timezone

    from opsbot.parse.facts import _stamp

    entry = parse_log_line(f"[{date}{h:02d}:{m:02d}:{s:02d} TP0] Decode batch. #running-req: 1, gen throughput (token/s): 1.0")
    assert entry.kind == "batch" and entry.tp_rank == 0
    probe = datetime(2026, 11, 29, 10, 0, 0, tzinfo=timezone.utc)
    at = _stamp(entry.ts, probe)
    assert at is not None and (at.hour, at.minute, at.second) == (h, m, s)
    if not date:  # a time-only header: the probe's day, or the day before when that would be after the probe
        assert probe - timedelta(hours=23) <= at <= probe + timedelta(hours=1)


def test_a_router_that_marks_its_workers_unhealthy_is_not_healthy():
    p, d, r = healthy_roles()
    r.gauges["smg_worker_health"] = 0  # the minimum over workers: one is down as the router sees it
    router = next(x for x in _diag([p, d, r]).roles if x.role == "router")
    assert router.state == RoleState.abnormal and any("marks a worker unhealthy" in why for why in router.reasons)


def _line(message: str):
    return parse_log_line(f"2026-11-29T09:59:30+0000 node2 python3[4242]: {message}")


def test_a_server_error_answered_is_an_error_and_a_clients_bad_request_a_note():
    """The status class says whose fault it is: 5xx the server's (abnormal, whatever else moves), 4xx the client's."""
    five = _line('[2025-06-11 06:19:30] INFO:     172.20.0.1:40106 - "POST /v1/responses HTTP/1.1" 500 Internal Server Error')
    four = _line('[2026-04-02 10:00:01] INFO:     172.20.0.1:52344 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request')
    unavailable = _line('INFO:     10.0.0.3:5000 - "POST /generate HTTP/1.1" 503 Service Unavailable')
    assert five.kind == four.kind == unavailable.kind == "access"
    assert is_abnormal(five) and is_abnormal(unavailable) and not is_abnormal(four)
    roles = healthy_roles()
    roles[1].logs = roles[1].logs + ['INFO:     172.20.0.1:52344 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request']
    d = _diag(roles)
    assert d.healthy and any("client error (4xx)" in n for r in d.roles for n in r.notes)
    roles = healthy_roles()
    roles[1].logs = roles[1].logs + ['INFO:     172.20.0.1:40106 - "POST /v1/responses HTTP/1.1" 500 Internal Server Error']
    d = _diag(roles)
    assert not d.healthy and [f.incident for f in d.findings] == ["unexplained"] and _state(d, "decode") == RoleState.abnormal
    assert not [r for f in d.findings for r in f.remedies if r.kind == "restart"]


def test_an_error_report_in_sglangs_level_less_format_is_an_error_and_a_warning_is_not():
    """SGLang prints no level: ``<what> error: <detail>`` is how its logger.error lines read; a line that carries a
    level is read by it, and words that merely contain "error" are not a report."""
    for text in ("[2025-05-11 16:51:15] error: 'NoneType' object is not iterable",
                 "[2026-01-01 10:00:00 TP0] Tool call parsing error: Expecting value: line 1 column 1 (char 0)",
                 "[2026-01-01 10:00:00] Reasoning parsing error: list index out of range"):
        assert is_abnormal(_line(text)), text
    for text in ("[2026-01-01 10:00:00] WARNING: Tool call parsing error: Expecting value",
                 "[2026-01-01 10:00:00] Failed to parse JSON part: {\"name\": 1, JSON parse error: Expecting ',' delimiter",
                 "[http_server] Error: Request is disconnected from the client side (type 3). Abort request obj.rid='61'",
                 "[2026-01-01 10:00:00] server_args=ServerArgs(model_path='m', enable_error_logs=False)"):
        assert not is_abnormal(_line(text)), text


def test_the_router_that_cannot_reach_a_worker_says_so_at_any_log_level():
    """Its health checker's failed checks at DEBUG, with no router metrics collected, are still no healthy worker."""
    p, d, _ = era_roles()
    r = RoleSpec("router", proc="sglang-router", drop=("metrics",), logs=[
        "raw:2025-10-07 23:31:33 DEBUG sglang_router_rs::core::worker_manager: src/core/worker_manager.rs:1031: Worker "
        "grpc://localhost:20000 health check failed: Connection failed for worker grpc://localhost:20000: transport error"])
    diag = _diag([p, d, r])
    assert diag.findings and diag.findings[0].incident == "router-no-healthy-workers"
    # a client of the router going away is not a worker the router cannot reach
    r.logs = ["raw:2026-11-29 09:59:30  WARN smg::middleware: middleware.rs:159: client closed the connection: "
              "Connection reset by peer (os error 104)"]
    assert _diag([p, d, r]).healthy


_RESET = ("raw:2026-01-20 09:59:30 ERROR smg::routers::http::pd_router: src/routers/http/pd_router.rs:684: Decode request "
          "failed decode_url=http://10.0.0.2:30000 error=error sending request for url (http://10.0.0.2:30000/generate)")
_PD_RESET = ("raw:2026-08-20 09:59:31 ERROR smg::routers::http::pd_router: model_gateway/src/routers/http/pd_router.rs:873: "
             "PD request transport error, both sides aborted: error sending request for url (http://10.0.0.2:30000/generate)")


def test_one_reset_keep_alive_connection_is_a_note_but_repeated_resets_or_a_failing_worker_are_no_healthy_worker():
    """The router's upstream client failing on a worker (either order of URL and error, as SMG and sgl-router 0.3.2
    print reqwest's errors): one line alone while the workers serve is an idle connection the worker closed; two, a
    failed health check, or a worker role that is itself abnormal make it a router without a healthy worker."""
    p, d, r = era_roles()
    r.logs = [_RESET]
    diag = _diag([p, d, r])
    assert diag.healthy and any("keep-alive" in n for x in diag.roles for n in x.notes)
    r.logs = [_RESET, _PD_RESET]
    assert _diag([p, d, r]).findings[0].incident == "router-no-healthy-workers"
    p, d, r = era_roles()
    r.logs = [_PD_RESET]
    d.logs = d.logs + ['raw:INFO:     10.0.0.9:5000 - "POST /generate HTTP/1.1" 500 Internal Server Error']
    assert _diag([p, d, r]).findings[0].incident == "router-no-healthy-workers"
    d.logs = d.logs[:-1]
    d.active, d.sub, d.restarts, d.health, d.metrics_error = "activating", "auto-restart", 3, None, "connection refused"
    assert [f.incident for f in _diag([p, d, r]).findings] == ["role-down"]  # which explains the router's lost worker
    p, d, r = era_roles()  # SMG colours its lines whatever its output (logging.rs with_ansi(colorize), colorize: true)
    r.logs = [_RESET.replace(" ERROR smg::routers::http::pd_router:", " \x1b[31mERROR\x1b[0m \x1b[2msmg::routers::http::pd_router"
                             "\x1b[0m\x1b[2m:\x1b[0m"), _PD_RESET]
    line = parse_log_line("2026-01-20T09:59:30+0000 node1 smg[4242]: " + r.logs[0][4:])
    assert "\x1b" not in line.message and is_abnormal(line)
    assert _diag([p, d, r]).findings[0].incident == "router-no-healthy-workers"
    # without the module (a JSON or copied log), the worker's URL names the side; a client of the router never does
    r.logs = ["raw:Decode request failed decode_url=http://10.0.0.2:30000 error=error sending request for url "
              "(http://10.0.0.2:30000/generate): connection closed before message completed"] * 2
    assert _diag([p, d, r]).findings[0].incident == "router-no-healthy-workers"
    r.logs = ["raw:2026-01-20 09:59:30  WARN smg::middleware: client closed the connection: Connection reset by peer "
              "(os error 104) http://10.0.0.5:5000"] * 2
    assert _diag([p, d, r]).healthy
    r.logs = ["raw:2026-01-20 09:59:30  WARN smg::core::worker: src/core/worker.rs:948: HTTP health check failed for "
              'http://10.0.0.2:30000/health: reqwest::Error { kind: Request, url: "http://10.0.0.2:30000/health", source: '
              "hyper_util::client::legacy::Error(SendRequest, hyper::Error(IncompleteMessage)) }"]
    r.gauges["smg_worker_health"] = 0  # the router marks a worker down as it checks: no healthy worker
    assert _diag([p, d, r]).findings[0].incident == "router-no-healthy-workers"
    # failed checks alone while the router's own gauge says every worker passes now and the workers' own evidence is
    # healthy: workers that were starting or restarting (SMG logs each failed check while the engines boot), a note
    r.gauges["smg_worker_health"] = 1
    diag = _diag([p, d, r])
    assert diag.healthy and any("failed health check" in n for x in diag.roles for n in x.notes)
    # a worker abnormal for its own reason, up and checked healthy since (seen on the lab: a saturated prefill answers
    # /health 503 once, a busy scheduler): its own finding, not a router without workers
    d.logs = d.logs + ['raw:INFO:     10.0.0.9:5000 - "POST /generate HTTP/1.1" 500 Internal Server Error']
    assert "router-no-healthy-workers" not in [f.incident for f in _diag([p, d, r]).findings]
    d.logs = d.logs[:-1]
    d.active, d.sub, d.restarts, d.health, d.metrics_error = "activating", "auto-restart", 3, None, "connection refused"
    assert _diag([p, d, r]).findings  # a worker that is itself down: never a note


def test_a_grammar_that_rejects_the_servers_own_token_is_an_error_and_a_clients_schema_that_does_not_compile_a_note():
    """The grammar backend's lines by the stage they report: at run time the grammar rejected a token the server
    produced (SGLang's logger.error, xgrammar's Warning), a request the server failed; at compile time the schema is
    the client's own, refused with 400."""
    for text in ("[2026-05-15 10:00:00 DP0 TP0 EP0] Grammar accept_token failed for req 9f2c with token [73022]: "
                 "Tokens not accepted: 73022",
                 "[10:00:00] /project/cpp/grammar_matcher.cc:1211: Warning: The token id -1 is out of range [0, 129280). "
                 "Rejecting the token.",
                 "[10:00:00] /project/cpp/grammar_matcher.cc:1205: Warning: The matcher has terminated after accepting the "
                 "stop token, but is trying to accept new token with id 198.",
                 "[2025-03-10 10:00:00 TP0] matcher error: token 1919 not allowed",  # llguidance, logger.warning
                 "2026-03-18 11:22:06.731 WARNING 120984 [ TP0 llguidance_backend.py:150] matcher error: x",
                 "[2026-04-02 10:00:00 TP0] WARNING: token 128009 rejected by the grammar of req 7a",  # any backend's words
                 "[2026-04-02 10:00:00 TP0] xgrammar matcher: token 11 not accepted"):
        line = _line(text)
        assert line.kind == "grammar" and is_abnormal(line), text
    for text in ("[2026-01-01 10:00:00 TP0] Hit invalid json_schema: key_string='{\"type\": \"objet\"}', "
                 "e=RuntimeError('Invalid JSON schema')",
                 "[2026-01-01 10:00:00 TP0] Failed to compile json_schema grammar: Invalid JSON schema, self.rid='7a'"):
        line = _line(text)
        assert line.kind == "grammar" and not is_abnormal(line), text
    info = _line("2026-03-18 11:22:06.731 INFO 120984 [ TP0 xgrammar_backend.py:230] Grammar backend ready")
    assert info.kind == "grammar" and not is_abnormal(info)
    roles = healthy_roles()
    roles[1].logs = roles[1].logs + ["Grammar accept_token failed for req 9f2c with token [73022]: Tokens not accepted: 73022",
                                     "raw:Accepted tokens: []", 'raw:Key string: {"type": "object"}']
    d = _diag(roles)
    assert not d.healthy and [f.incident for f in d.findings] == ["unexplained"]
    assert not [r for f in d.findings for r in f.remedies if r.kind == "restart"]
    roles = healthy_roles()
    roles[1].logs = roles[1].logs + ["Hit invalid json_schema: key_string='{\"type\": \"objet\"}', e=RuntimeError('x')",
                                     "Failed to compile json_schema grammar: x, self.rid='7a'",
                                     'raw:INFO:     172.20.0.1:52344 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request']
    d = _diag(roles)
    assert d.healthy and any("does not compile" in n for r in d.roles for n in r.notes)


def test_an_idle_pair_is_no_transfer_failure_but_a_request_held_at_both_ends_is():
    """Idle (nothing runs or waits, no counter moves): one side's transfer-queue gauge is the last value it
    published, and a restart-advising class must not rest on it. The same request parked in the prefill's
    inflight queue and the decode's transfer queue while nothing moves is a transfer that never completes."""
    p, d, r = era_roles()
    for spec in (p, d):
        spec.gauges.update(num_running_reqs=0, num_queue_reqs=0)
        spec.counters = {k: (v[0], 0) for k, v in spec.counters.items()}
        spec.logs = []
    r.counters = {k: (v[0], 0) for k, v in r.counters.items()}
    assert d.gauges["num_decode_transfer_queue_reqs"] == 1
    idle = _diag([p, d, r])
    assert idle.healthy, [f.incident for f in idle.findings]
    p.gauges["num_prefill_inflight_queue_reqs"] = 1
    held = _diag([p, d, r])
    assert [f.incident for f in held.findings][:1] == ["kv-transfer-failure"]


def test_a_bootstrap_failure_counted_for_a_client_abort_advises_no_restart():
    """SGLang counts an aborted request's bootstrap as failed (reference/sglang.md §7.7): with the abort's own line
    in the run, the counter is the client leaving, a note, not a transfer failure to restart for."""
    roles = healthy_roles()
    roles[1].counters["num_bootstrap_failed_reqs"] = (0, 1)
    roles[1].logs = roles[1].logs + [
        "Decode transfer failed for request rank=0 decode_req.req.rid='c3' decode_req.req.bootstrap_room=11 with exception "
        "KVTransferError(bootstrap_room=11): Aborted by AbortReq."]
    d = _diag(roles)
    assert d.healthy, [f.incident for f in d.findings]
    roles[1].logs = roles[1].logs[:1]  # no abort: the failed bootstrap is the transfer path's
    assert [f.incident for f in _diag(roles).findings][:1] == ["kv-transfer-failure"]


def _idle_pair(held: float = 0, refused_line: bool = False) -> list[RoleSpec]:
    """A PD pair after its last batch: nothing running or queued, counters flat, ``held`` in the decode's prealloc queue."""
    p, d, r = healthy_roles()
    for spec in (p, d):
        spec.gauges.update({k: 0 for k in spec.gauges if k.endswith("_queue_reqs") or k == "num_running_reqs"})
        spec.counters = {k: (v[0], 0) for k, v in spec.counters.items()}
    d.gauges["num_decode_prealloc_queue_reqs"] = held
    if refused_line:
        p.logs = p.logs + ['raw:INFO:     10.0.0.3:51234 - "POST /generate HTTP/1.1" 400 Bad Request']
    return [p, d, r]


def test_a_request_parked_for_a_leg_its_peer_refused_is_abnormal_but_one_gauge_alone_is_not():
    # the decode holds a request while it moves nothing: alone, that gauge may be its last published value (healthy)
    assert _diag(_idle_pair(held=1)).healthy
    # the prefill refused a request (a client's 400 is a note alone) and holds none: alone, healthy
    assert _diag(_idle_pair(refused_line=True)).healthy
    # both: the decode waits on a leg that already failed (sglang PR #24159): unexplained, never a restart
    diag = _diag(_idle_pair(held=1, refused_line=True))
    assert diag.findings[0].incident == "unexplained"
    assert _state(diag, "decode") == "abnormal"
    assert not any(r.kind == "restart" for f in diag.findings for r in f.remedies)


def test_the_router_holding_requests_nothing_serves_and_failing_requests_by_its_counters_is_abnormal():
    p, d, r = _idle_pair()
    r.gauges["smg_worker_requests_active{worker=http://10.0.0.2:30000}"] = 1
    r.counters["smg_router_requests"] = (5000, 0)
    assert _state(_diag([p, d, r]), "router") == "abnormal"
    # the same in-flight count while the decode moves tokens: streams being served
    p, d, r = healthy_roles()
    r.gauges["smg_worker_requests_active{worker=http://10.0.0.2:30000}"] = 24
    r.counters["smg_router_requests"] = (5000, 0)
    assert _diag([p, d, r]).healthy
    # 5xx answers counted by the router alone, no line: requests it failed
    p, d, r = healthy_roles()
    r.counters["smg_http_responses{status_code=502}"] = (0, 3)
    assert _state(_diag([p, d, r]), "router") == "abnormal"
    # a client's 400s are not
    r.counters = {"smg_router_requests": (5000, 30), "smg_http_responses{status_code=400}": (0, 3)}
    assert _diag([p, d, r]).healthy


# --- issue 24, fifth round: a PD leg refused or failed elsewhere (tests/scenarios/rules5.py) ------------------------

def _rules5(name: str):
    from tests.scenarios.rules5 import SCENARIOS
    from opsbot.bundle import parse_bundle
    from opsbot.parse.facts import bundle_facts

    rs = default_runbooks()
    b = parse_bundle(json.dumps(SCENARIOS[name]()))
    return bundle_facts(b, rs.patterns, rs.metric_facts, rs.exceptions), diagnose(b, rs)


def test_refused_leg_with_an_uncaused_decode_timeout_is_no_transfer_failure():
    facts, d = _rules5("pd-router-prefill-400-decode-waiting-timeout")
    engines = [s for s in facts.scopes.values() if s["role"] in ("prefill", "decode")]
    assert all(s["requests"]["leg_refused"] == 1 for s in engines)
    decode = next(s for s in engines if s["role"] == "decode")
    assert decode["requests"]["transfer_uncaused"] == 2 and any("its leg was refused" in r for r in decode["verdict"]["reasons"])
    assert [f.incident for f in d.findings] == ["unexplained"]
    assert not any(r.kind == "restart" for f in d.findings for r in f.remedies)


def test_a_transfer_failure_of_the_prefills_own_keeps_kv_transfer_failure():
    for name in ("near-kv-transfer-session-dead-with-client-400", "near-kv-transfer-lost-prefill-with-client-400"):
        facts, d = _rules5(name)
        assert not any(s.get("requests", {}).get("leg_refused") for s in facts.scopes.values()), name
        assert d.findings[0].incident == "kv-transfer-failure", name


def test_one_router_transport_failure_with_a_parked_prefill_is_no_keepalive_reset():
    facts, d = _rules5("smg-pd-decode-transport-error-prefill-waits-bootstrap-no-router-metrics")
    prefill = next(s for s in facts.scopes.values() if s["role"] == "prefill")
    router = next(s for s in facts.scopes.values() if s["role"] == "router")
    assert prefill["requests"]["leg_failed"] == 1 and router["verdict"]["state"] == "abnormal"
    assert [f.incident for f in d.findings] == ["unexplained"]
    facts, d = _rules5("near-router-single-reset-prefill-bootstrap-serving")
    router = next(s for s in facts.scopes.values() if s["role"] == "router")
    assert d.findings == [] and any("keep-alive" in n for n in router["verdict"]["notes"])
