"""diagnose(): unknown facts, ordering rules, findings, the JSON contract and bad bundles."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import cel
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from opsbot.cli import app
from opsbot.diagnose import default_runbooks, diagnose
from opsbot.scope import interpret, probe_scope
from opsbot.diagnose.conditions import Condition, fact_paths
from tests.scenarios.compose import T0, RoleSpec, bundle, compose, gpu_csv, healthy_roles
from tests.scenarios.deployments import roles as era_roles


def _diag(roles: list[RoleSpec], **kw):
    return diagnose(bundle(roles, **kw), default_runbooks())


def _wedged() -> list[RoleSpec]:
    roles = healthy_roles()
    roles[1].counters["realtime_tokens{mode=decode}"] = (1000, 0)
    return roles


# --- CEL and unknown facts --------------------------------------------------------------

def test_fact_paths_skip_strings_calls_and_macro_variables():
    expr = 'unit.active_state == "metrics.fake" && has(gpu.expected) && failed.exists(a, a == "logs") && logs.x.size() > 0'
    assert fact_paths(expr) == ("unit.active_state", "gpu.expected", "failed", "logs.x")


def _outcome(expr: str, facts: dict, needs: tuple[str, ...] = ()):
    c = Condition(expr)
    return c.evaluate(cel.Context(variables=facts), facts, needs)


def test_missing_fact_makes_the_condition_unknown_and_names_it():
    out = _outcome("metrics.num_running_reqs > 0 && unit.active_state == 'active'", {"metrics": {}, "unit": {"active_state": "active"}})
    assert out.value is None and out.missing == ("metrics.num_running_reqs",) and out.error is None


def test_false_conjunct_decides_despite_a_missing_fact():
    out = _outcome("metrics.num_running_reqs > 0 && unit.active_state == 'active'", {"metrics": {}, "unit": {"active_state": "failed"}})
    assert out.value is False and out.missing == ("metrics.num_running_reqs",)


def test_true_disjunct_decides_and_reports_what_was_missing():
    out = _outcome("logs.watchdog > 0 || delta.x > 0", {"logs": {"watchdog": 2}, "delta": {}})
    assert out.value is True and out.missing == ("delta.x",)


def test_needs_forces_unknown():
    out = _outcome("logs.watchdog > 0", {"logs": {"watchdog": 1}, "window_s": 3.0}, needs=("gpu.count",))
    assert out.value is None and out.missing == ("gpu.count",)


def test_type_error_is_reported_not_raised():
    out = _outcome("unit.active_state > 3", {"unit": {"active_state": "active"}})
    assert out.value is None and out.missing == () and out.error


def test_ints_and_floats_compare():
    assert _outcome("metrics.a == 0 && metrics.b > 1", {"metrics": {"a": 0.0, "b": 2}}).value is True


def test_failed_metrics_axis_gives_undetermined_with_missing_facts():
    roles = _wedged()
    roles[1].metrics_error = "timeout after 5.0 s"
    d = _diag(roles)
    assert "decode-wedged" not in [f.incident for f in d.findings]
    (u,) = [u for u in d.undetermined if u.incident == "decode-wedged"]
    assert u.role == "decode" and "metrics.num_running_reqs" in u.missing_facts and "progress.decode_stalled" in u.missing_facts


def test_a_dead_node_never_raises():
    roles = healthy_roles()
    for axis in ("systemd_error", "metrics_error", "health_error", "logs_error"):
        setattr(roles[1], axis, "ssh: connection refused")
    roles[1].health = None
    d = _diag(roles, gpu_error={"node2": "ssh: connection refused"})
    assert d.findings == []
    assert {u.incident for u in d.undetermined if u.role == "decode"} >= {"decode-wedged", "role-down", "cuda-oom"}


def test_finding_has_values_remedies_and_confidence():
    (f,) = _diag(_wedged()).findings
    assert f.incident == "decode-wedged" and f.severity == "critical" and f.roles == ["decode"]
    assert "running requests: 24" in f.evidence[1] and "0" in f.evidence[2]
    assert f.summary.startswith("decode holds 24 running requests")
    restart = [r for r in f.remedies if r.kind == "restart"]
    assert restart and restart[0].approval == "required" and restart[0].role == "decode"
    assert 0 < f.confidence <= 1 and f.missing_facts == []
    assert f.facts["progress.decode_stalled"] is True


def test_missing_facts_lower_confidence():
    roles = healthy_roles()
    roles[1].logs = ["Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"]
    full = _diag(roles).findings[0]
    roles[1].systemd_error = "timeout"
    partial = _diag(roles).findings[0]
    assert full.incident == partial.incident == "scheduler-watchdog"
    assert partial.confidence == full.confidence  # watchdog reads logs only
    roles = healthy_roles()
    roles[2].gauges["smg_worker_health"] = 0
    roles[2].logs_error = "timeout"
    f = _diag(roles).findings[0]
    assert f.incident == "router-no-healthy-workers" and f.missing_facts == ["logs.router_no_workers", "logs.router_health_check_failed", "logs.router_worker_unreachable"] and f.confidence < 0.85


# --- ordering rules of incidents.md ---------------------------------------------------------

def test_config_crashloop_explains_role_down():
    roles = healthy_roles()
    p = roles[0]
    p.active, p.sub, p.restarts = "activating", "auto-restart", 6
    p.metrics_error = "connection refused"
    p.logs = ["ValueError: DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead."]
    d = _diag(roles)
    assert [f.incident for f in d.findings] == ["config-crashloop"]
    assert d.findings[0].explains == ["role-down on prefill"]
    assert [r.kind for r in d.findings[0].remedies][:1] == ["no-restart"]


def test_same_crash_without_config_error_is_role_down():
    roles = healthy_roles()
    roles[0].active, roles[0].sub, roles[0].restarts = "activating", "auto-restart", 6
    assert [f.incident for f in _diag(roles).findings] == ["role-down"]


def test_saturation_explains_kv_transfer_errors_on_decode():
    roles = healthy_roles()
    roles[0].gauges["num_queue_reqs"] = 80
    roles[1].logs = ["Decode transfer failed for request rank=0 decode_req.req.rid='a' decode_req.req.bootstrap_room=5 "
                     "with exception KVTransferError(bootstrap_room=5): Request 5 timed out after 300.0s in KVPoll.WaitingForInput"]
    d = _diag(roles)
    assert [f.incident for f in d.findings] == ["prefill-queue-saturation"]
    assert d.findings[0].roles == ["prefill", "decode", "router"]
    assert d.findings[0].explains == ["kv-transfer-failure on decode"]


def test_same_transfer_errors_with_a_normal_queue_are_kv_transfer_failure():
    roles = healthy_roles()
    roles[1].logs = ["Decode transfer failed for request rank=0 decode_req.req.rid='a' decode_req.req.bootstrap_room=5 "
                     "with exception KVTransferError(bootstrap_room=5): Request 5 timed out after 300.0s in KVPoll.WaitingForInput"]
    assert [f.incident for f in _diag(roles).findings] == ["kv-transfer-failure"]


def _old_prefill_queue(batch_lines: list[str]) -> list[RoleSpec]:
    """A 0.5.3 prefill (no realtime_tokens_total) with 40 queued requests and none finished in the window."""
    p, d, r = era_roles("0.5.3", "sgl-router")
    p.gauges.update(num_queue_reqs=40, num_running_reqs=6)
    p.counters["prompt_tokens"] = (5_000_000, 0)
    p.logs = batch_lines
    return [p, d, r]


def test_an_older_prefill_without_batch_lines_is_wedged_not_saturated():
    d = _diag(_old_prefill_queue([]))
    assert [f.incident for f in d.findings] == ["prefill-wedged"]
    assert d.findings[0].facts["progress.prefill_stalled"] is True


def test_an_older_prefill_still_writing_batch_lines_is_saturated_not_wedged():
    line = ("Prefill batch. #new-seq: 3, #new-token: 15000, #cached-token: 0, token usage: 0.06, #running-req: 7, "
            "#queue-req: 40, #prealloc-req: 0, #inflight-req: 7, ")
    assert [f.incident for f in _diag(_old_prefill_queue([line])).findings] == ["prefill-queue-saturation"]


def test_an_older_prefill_without_a_journal_proves_no_stall():
    roles = _old_prefill_queue([])
    roles[0].drop = ("logs",)
    assert "prefill-wedged" not in [f.incident for f in _diag(roles).findings]


def test_client_abort_alone_is_benign():
    roles = healthy_roles()
    roles[1].logs = ["Decode transfer failed for request rank=0 decode_req.req.rid='a' decode_req.req.bootstrap_room=5 "
                     "with exception KVTransferError(bootstrap_room=5): Aborted by AbortReq."] * 3
    assert _diag(roles).findings == []


@pytest.mark.parametrize("status,error", [(503, None), (None, "timeout after 5.0 s"), (200, None)])
def test_health_alone_proves_nothing(status, error):
    roles = healthy_roles()
    roles[1].health, roles[1].health_error = status, error
    assert _diag(roles).findings == []
    wedged = _wedged()
    wedged[1].health, wedged[1].health_error = status, error
    assert [f.incident for f in _diag(wedged).findings] == ["decode-wedged"]


def test_findings_are_ordered_most_severe_first():
    roles = _wedged()
    roles[1].gauges["token_usage"] = 0.95
    roles[1].counters["num_retracted_requests"] = (0, 3)
    roles[2].gauges["smg_worker_health"] = 0
    severities = [f.severity for f in _diag(roles).findings]
    assert severities == sorted(severities, key=["critical", "high", "warning", "info"].index)
    assert [f.incident for f in _diag(roles).findings][-1] == "kv-cache-exhausted"


# --- the CLI surface and the JSON contract --------------------------------------------------

def _write(tmp_path: Path, data: dict | str, name: str = "b.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_diagnose_json_contract(tmp_path: Path):
    res = CliRunner().invoke(app, ["diagnose", "--json", str(_write(tmp_path, compose(_wedged(), bundle_id="b-1")))])
    assert res.exit_code == 1, res.output
    out = json.loads(res.output)
    assert out["bundle"] == "b-1"
    (f,) = out["findings"]
    assert {"incident", "severity", "roles", "evidence", "summary", "remedies"} <= set(f)
    assert f["incident"] == "decode-wedged" and f["remedies"][1] == {
        "kind": "restart", "role": "decode", "approval": "required", "text": "Restart decode (its running requests are lost; clients retry).",
        "capture": ["stacks", "server_info", "requests", "journal"]}


def test_diagnose_healthy_is_an_empty_list_and_exit_0(tmp_path: Path):
    res = CliRunner().invoke(app, ["diagnose", "--json", str(_write(tmp_path, compose(healthy_roles())))])
    assert res.exit_code == 0 and json.loads(res.output)["findings"] == []
    res = CliRunner().invoke(app, ["diagnose", str(_write(tmp_path, compose(_wedged()), "w.json"))])
    assert "decode-wedged" in res.output and "needs approval" in res.output


def test_bundle_of_another_schema_version_is_refused(tmp_path: Path):
    data = compose(healthy_roles())
    data["schema"] = "opsbot/probe-bundle@2"
    res = CliRunner().invoke(app, ["diagnose", str(_write(tmp_path, data))])
    assert res.exit_code == 2
    assert "schema is 'opsbot/probe-bundle@2'; this opsbot reads 'opsbot/probe-bundle@1'" in res.output


def test_truncated_bundle_is_refused(tmp_path: Path):
    text = json.dumps(compose(healthy_roles()))
    res = CliRunner().invoke(app, ["diagnose", str(_write(tmp_path, text[: len(text) // 2]))])
    assert res.exit_code == 2 and "not valid JSON (truncated?)" in res.output


def test_missing_file_is_refused(tmp_path: Path):
    res = CliRunner().invoke(app, ["diagnose", str(tmp_path / "nope.json")])
    assert res.exit_code == 2 and "cannot read" in res.output


# --- interpret ---------------------------------------------------------------------------

@pytest.mark.parametrize("text,roles", [
    ("decode is stuck", ["decode"]),
    ("TTFT is minutes", ["prefill"]),
    ("router gives 503s to clients", ["router"]),
    ("prefill and decode both look slow", ["prefill", "decode"]),
    ("everything is broken", []),
    ("is a decoder-only model fine?", []),
    ("the decoder hangs", ["decode"]),
])
def test_interpret(text, roles):
    assert interpret(text) == roles


LAB_KINDS = {"prefill": "prefill", "decode": "decode", "router": "router"}


@pytest.mark.parametrize("named,kinds,scope", [
    (["decode"], LAB_KINDS, ["decode", "prefill", "router"]),
    (["prefill"], LAB_KINDS, ["prefill", "decode", "router"]),
    (["router"], LAB_KINDS, ["router"]),
    ([], LAB_KINDS, []),
    (["decode-2"], {**LAB_KINDS, "decode-2": "decode"}, ["decode-2", "prefill", "router"]),
    (["decode"], {"prefill": "prefill", "decode": "decode"}, ["decode", "prefill"]),  # no router in this cluster
])
def test_probe_scope_brings_the_pd_peer_and_the_router(named, kinds, scope):
    assert probe_scope(named, kinds) == scope


def test_ask_help_says_a_pd_role_brings_its_peer_and_the_router():
    res = CliRunner().invoke(app, ["ask", "--help"], env={"COLUMNS": "200"})
    assert "also probes the other PD role and the router" in " ".join(res.output.split())


def test_interpret_instance_names():
    assert interpret("decode-b is stuck", ["decode-a", "decode-b"]) == ["decode-b"]


@given(st.text())
def test_interpret_never_raises(text):
    assert set(interpret(text)) <= {"prefill", "decode", "router"}


def test_gpu_dropped_from_nvidia_smi_is_a_gpu_fault():
    """The role's GPU 3 is not listed (no Xid needed): gpu.missing counts it."""
    roles = _wedged()
    rows = "".join(line + "\n" for line in gpu_csv(4).splitlines()[:3])
    d = _diag(roles, gpus={"node2": rows})
    assert [f.incident for f in d.findings] == ["gpu-fault"]
    assert d.findings[0].facts["gpu.missing"] == 1 and d.findings[0].explains == ["decode-wedged on decode"]
    other = healthy_roles()
    other[1].gpus = (0, 1, 2)
    assert _diag(other, gpus={"node2": rows}).findings == [], "a GPU the role does not use is not its fault"


def test_same_incident_on_two_roles_is_one_finding():
    roles = healthy_roles()
    line = ("Prefill transfer failed for request rank=0 req.rid='a' req.bootstrap_room=5 with exception "
            "KVTransferError(bootstrap_room=5): Failed to send kv chunk of 5 to 10.0.0.2:1")
    roles[0].logs, roles[1].logs = [line], [line.replace("Prefill", "Decode")]
    (f,) = _diag(roles).findings
    assert f.incident == "kv-transfer-failure" and sorted(f.roles) == ["decode", "prefill"]  # strongest first
    assert f.evidence[0].startswith(f"{f.roles[0]}: ") and any(e.startswith(f"{f.roles[1]}: ") for e in f.evidence)
    assert len({r.text for r in f.remedies}) == len(f.remedies)


def test_a_crashing_prefill_explains_decodes_lost_connection():
    """`kv-transfer-failure@any`: decode losing its prefill is the prefill's crash, not a transfer fault."""
    roles = healthy_roles()
    p, d = roles[0], roles[1]
    p.active, p.sub, p.restarts, p.metrics_error = "activating", "auto-restart", 3, "connection refused"
    p.logs = ["ValueError: DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead."]
    d.logs = ["Losing connection with prefill instance (bootstrap_addr: 10.0.0.1:8998), 3 requests affected"]
    (f,) = _diag(roles).findings
    assert f.incident == "config-crashloop" and f.explains == ["role-down on prefill", "kv-transfer-failure on decode"]
    p.logs = []
    assert [f.incident for f in _diag(roles).findings] == ["role-down"]
    roles[0] = healthy_roles()[0]
    assert [f.incident for f in _diag(roles).findings] == ["kv-transfer-failure"]


def _died_once(spec: RoleSpec, lines: list[str], restarts: int = 0) -> RoleSpec:
    """``spec`` ran for hours, served (its batch lines stay in the window), wrote ``lines`` and exited; with
    ``restarts`` systemd restarts it (auto-restart), without it the unit stays failed."""
    spec.active, spec.sub = ("activating", "auto-restart") if restarts else ("failed", "failed")
    spec.result, spec.restarts, spec.exit_status, spec.main_code = "exit-code", restarts, 1, 1
    spec.metrics_error, spec.health, spec.health_error, spec.nulls = "connection refused", None, "connection refused", True
    spec.started = T0 - timedelta(hours=3)
    spec.logs = spec.logs + lines + [f"systemd: sglang-dsv4-{spec.role}.service: Main process exited, code=exited, status=1/FAILURE"]
    return spec


def test_what_killed_a_dead_unit_outranks_role_down_and_explains_it():
    """role-down is the last resort for a dead unit: the transfer engine's own E lines in its journal name
    the cause (no crash dump needed), and the cause lists the role being down as explained."""
    roles = healthy_roles()
    _died_once(roles[0], ["raw:E0603 20:16:59.104586 27322 worker_pool.cpp:271] Worker: Process failed for slice "
                          "(opcode: 1, retry_cnt: 0): transport retry counter exceeded"])
    top = _diag(roles).findings[0]
    assert top.incident == "kv-transfer-failure" and top.roles[0] == "prefill" and "role-down on prefill" in top.explains
    roles = healthy_roles()
    _died_once(roles[0], [])  # nothing says why: role-down, which explains what its peers see
    roles[1].logs = ["Losing connection with prefill instance (bootstrap_addr: 10.0.0.1:8998), 3 requests affected"]
    (f,) = _diag(roles).findings
    assert f.incident == "role-down" and f.explains == ["kv-transfer-failure on decode"]


@pytest.mark.parametrize("prefix", ["0: ", "sglang-prefill-1  | "])
def test_a_crash_dump_relayed_by_a_launcher_still_names_the_component(prefix):
    """srun --label and docker compose put their label before every line: the faulthandler dump through
    Mooncake's transfer_sync still names the transfer engine, not only the role being down."""
    dump = ["Fatal Python error: Segmentation fault", "", "Thread 0x00007fb209fff640 (most recent call first):",
            '  File "/sgl/python/sglang/srt/disaggregation/mooncake/transfer_engine.py", line 75 in transfer_sync',
            '  File "/usr/lib/python3.10/concurrent/futures/thread.py", line 58 in run']
    roles = healthy_roles()
    _died_once(roles[0], [f"raw:{prefix}{line}" for line in dump], restarts=1)
    top = _diag(roles).findings[0]
    assert top.incident == "kv-transfer-failure" and "role-down on prefill" in top.explains


def test_an_smg_pool_with_one_pd_kind_only_has_no_worker_of_the_other():
    """SMG sets smg_worker_pool_size per worker_type it registered: decode's series alone means no prefill."""
    roles = healthy_roles()
    roles[2].gauges = {"smg_worker_pool_size{connection_mode=http,model=m,worker_type=decode}": 1, "smg_worker_health": 1}
    assert [f.incident for f in _diag(roles).findings] == ["router-no-healthy-workers"]
    roles[2].gauges["smg_worker_pool_size{connection_mode=http,model=m,worker_type=prefill}"] = 1
    assert _diag(roles).findings == []


def test_the_exception_that_ended_a_served_run_names_the_cause():
    """An exception the table classes by its frame ends a unit's last run: that class holds even though
    the run served first (its batch lines are in the window), while the unit is down."""
    trace = ["Scheduler hit an exception: Traceback (most recent call last):",
             '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2110, in event_loop_overlap',
             '  File "/sgl/python/sglang/srt/distributed/device_communicators/pynccl.py", line 140, in all_reduce',
             "RuntimeError: unhandled system error"]
    roles = healthy_roles()
    _died_once(roles[1], trace)
    top = _diag(roles).findings[0]
    assert top.incident == "nccl-failure" and "role-down on decode" in top.explains
    roles = healthy_roles()
    roles[1].logs = roles[1].logs[:1] + trace + roles[1].logs[1:]  # running and serving again: history
    assert "nccl-failure" not in [f.incident for f in _diag(roles).findings]


def test_a_down_units_earlier_runs_do_not_name_what_stopped_it():
    """Transfer errors of a run before the last one (before ExecMainStartTimestamp) are history: the unit
    served again and was then stopped, which is role-down."""
    roles = healthy_roles()
    d = roles[1]
    d.history = ["Decode transfer failed for request rank=0 decode_req.req.rid='a' decode_req.req.bootstrap_room=5 with "
                 "exception KVTransferError(bootstrap_room=5): Failed to get kvcache from prefill instance"]
    d.active, d.sub, d.result, d.started = "inactive", "dead", "success", T0 - timedelta(minutes=10)
    d.metrics_error, d.health, d.health_error, d.nulls = "connection refused", None, "connection refused", True
    d.logs = d.logs + ["systemd: Stopped sglang-dsv4-decode.service."]
    assert [f.incident for f in _diag(roles).findings] == ["role-down"]


def test_an_exception_raised_in_the_transfer_backend_ended_the_run():
    """A traceback through SGLang's KV transfer backend (disaggregation/nixl/) after serving names the cause of
    the unit's death, whatever its type; the same frames while the unit runs on are history of nothing."""
    trace = ["Traceback (most recent call last):",
             '  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/nixl/conn.py", line 1153, in transfer_worker',
             '  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/nixl/conn.py", line 2062, in maybe_send_extra',
             "RuntimeError: handle not found"]
    roles = healthy_roles()
    _died_once(roles[0], trace)
    top = _diag(roles).findings[0]
    assert top.incident == "kv-transfer-failure" and "role-down on prefill" in top.explains


def test_a_native_backtrace_through_libnccl_is_the_collectives():
    roles = healthy_roles()
    _died_once(roles[1], ["[node2:4242:1:4300] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x8)",
                          "==== backtrace (tid:   4300) ====",
                          " 0  /usr/lib/x86_64-linux-gnu/libnccl.so.2(ncclProxyProgress+0x1a2) [0x7f3b6e7236fc]",
                          " 1  /usr/lib/x86_64-linux-gnu/libc.so.6(+0x94ac3) [0x7f3c74f76ac3]"])
    top = _diag(roles).findings[0]
    assert top.incident == "nccl-failure" and "role-down on decode" in top.explains


def test_one_exit_without_a_restart_is_not_a_crash_loop():
    """An error line that names no class, written by a unit that exited once and stays failed (no restart,
    no start limit), is not a start-up error: role-down. The same unit restarting again and again is a
    crash loop, whose start-up error makes it config-crashloop."""
    roles = healthy_roles()
    _died_once(roles[1], ["Scheduler hit an exception: engine core exited unexpectedly"])
    roles[1].logs = roles[1].logs[-2:]  # no batch line in the window: nothing shows it served
    assert [f.incident for f in _diag(roles).findings] == ["role-down"]
    _died_once(roles[1], [], restarts=6).started = T0 - timedelta(seconds=62)  # each run dies right after its start
    roles[1].logs = roles[1].logs[-3:]
    assert _diag(roles).findings[0].incident == "config-crashloop"


def _canary(status: int, body: str) -> dict:
    return {"extra": {"canary": {"ok": False, "error": None, "elapsed_ms": 40.0, "endpoint": "http://node1:8000/v1/chat/completions",
                                 "model": "m", "status": status, "ttft_ms": None, "total_ms": 40.0, "tokens": 0, "body": body}}}


@pytest.mark.parametrize("status,body,found", [
    (503, '{"error": {"type": "Service Unavailable", "code": "no_prefill_servers", "message": "No prefill servers available"}}', True),
    (503, '{"error": {"type": "Service Unavailable", "code": "server_selection_failed", "message": "No available servers: x"}}', True),
    (503, '{"error": {"type": "Service Unavailable", "code": "no_workers", "message": "No available workers"}}', True),
    (500, "Failed to select PD pair: Failed to select worker pair P/D", True),  # sgl-router 0.1.x: plain text
    # SMG sheds load with no_available_workers when every worker is overloaded: no health failure
    (503, '{"error": {"type": "Service Unavailable", "code": "no_available_workers", "message": "All workers for model \'m\' are overloaded"}}', False),
    # ... while the regular router answers with the same code when every breaker is open or worker unhealthy
    (503, '{"error": {"type": "Service Unavailable", "code": "no_available_workers", "message": "All workers are unavailable (circuit breaker open or unhealthy)"}}', True),
    (503, '{"error": {"type": "Service Unavailable", "code": "server_unavailable", "message": "Server returned status: 503"}}', False),
    (503, "The request queue is full.", False),
])
def test_the_routers_answer_to_the_canary_says_when_it_has_no_worker(status, body, found):
    """Structure first: the error code of SMG's JSON answer; sgl-router's plain-text answers by its own words."""
    incidents = [f.incident for f in _diag(healthy_roles(), **_canary(status, body)).findings]
    assert ("router-no-healthy-workers" in incidents) is found


def test_a_worker_kind_missing_from_the_routers_pool_is_no_healthy_worker():
    roles = healthy_roles()
    roles[2].gauges.update({"smg_worker_pool_size{worker_type=prefill}": 1, "smg_worker_pool_size{worker_type=decode}": 0})
    roles[2].gauges.pop("smg_worker_pool_size")
    assert [f.incident for f in _diag(roles).findings] == ["router-no-healthy-workers"]
    roles[2].gauges["smg_worker_pool_size{worker_type=decode}"] = 1
    assert _diag(roles).findings == []


def test_terminal_does_not_call_missing_evidence_healthy():
    from rich.console import Console

    from opsbot.cli.diagnosis_view import render

    roles = healthy_roles()
    roles[1].metrics_error, roles[1].logs = "timeout", []  # no counter and no batch line: progress unread
    console = Console(record=True, width=120)
    console.print(render(_diag(roles)))
    text = console.export_text()
    assert "unknown (not healthy)" in text and "healthy:" not in text and "could not be decided" in text
    assert "progress.decode_stalled" in text and "progress could not be read" in text
    console = Console(record=True, width=120)
    console.print(render(_diag(healthy_roles())))
    assert "healthy: every role shows positive evidence of health" in console.export_text()


# --- retraction storms slow decode down; they are not a wedge --------------------------------------

@pytest.mark.parametrize("name", ["retract-storm", "retract-storm-0.5.12"])
def test_retract_storm_lab_bundle_moves_decode_and_never_fires_decode_wedged(name):
    from opsbot.bundle import read_bundle
    from opsbot.parse.facts import bundle_facts

    b = read_bundle(Path(__file__).parent / "scenarios" / "dev" / f"{name}.json")
    decode = bundle_facts(b, default_runbooks().patterns).scopes["decode"]
    assert decode["delta"]["realtime_tokens_decode"] > 0  # slowed (sglang#26248), not stopped
    assert decode["rate"]["realtime_tokens_decode"] < 100
    d = diagnose(b, default_runbooks())
    assert [f.incident for f in d.findings] == ["kv-cache-exhausted"]
    # not even fired-and-explained: the flat-counter condition is false
    assert not any("decode-wedged" in e for f in d.findings for e in f.explains)


def test_kv_cache_exhausted_fires_whether_or_not_decode_still_progresses():
    roles = healthy_roles()
    d = roles[1]
    d.gauges.update(token_usage=0.99, num_running_reqs=2, num_queue_reqs=46)
    d.counters["num_retracted_requests"] = (100, 9)
    for moved in (80, 0):
        d.counters["realtime_tokens{mode=decode}"] = (5_000_000, moved)
        assert [f.incident for f in _diag(roles).findings][:1] == ["kv-cache-exhausted"], moved


# --- log facts count the current run; logs_window keeps the history -------------------------------

def _stale_decode(active: str = "active", sub: str = "running") -> list[RoleSpec]:
    """Decode logged CUDA OOM and a transfer error, then was restarted after them (T0-50 s)."""
    from datetime import timedelta

    from tests.scenarios.compose import T0

    roles = healthy_roles()
    d = roles[1]
    d.active, d.sub, d.restarts = active, sub, 1
    d.logs = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
              "Decode transfer failed for request rank=0 decode_req.req.rid='x' decode_req.req.bootstrap_room=7 with "
              "exception KVTransferError(bootstrap_room=7): Failed to get kvcache from prefill instance, it might be dead",
              *d.logs]  # stamped T0-60 s, T0-59 s, T0-58 s
    d.started = T0 - timedelta(seconds=50)
    return roles


def _decode_facts(roles: list[RoleSpec]) -> dict:
    from opsbot.parse.facts import bundle_facts

    return bundle_facts(bundle(roles), default_runbooks().patterns).scopes["decode"]


def test_log_lines_before_the_current_run_are_history_not_logs():
    f = _decode_facts(_stale_decode())
    assert f["logs"]["cuda_oom"] == 0 and f["logs"]["kv_transfer_error"] == 0
    assert f["logs_window"]["cuda_oom"] == 1 and f["logs_window"]["kv_transfer_error"] == 1
    found = [x.incident for x in _diag(_stale_decode()).findings]
    assert "cuda-oom" not in found and "kv-transfer-failure" not in found, found


def test_log_lines_after_the_current_run_started_count():
    from datetime import timedelta

    from tests.scenarios.compose import T0

    roles = _stale_decode()
    roles[1].started = T0 - timedelta(minutes=5)  # the errors happened in this run
    f = _decode_facts(roles)
    assert f["logs"]["cuda_oom"] == 1 and f["logs"]["kv_transfer_error"] == 1
    assert "cuda-oom" in [x.incident for x in _diag(roles).findings]


def test_a_line_in_the_second_the_run_started_is_the_runs_only_if_its_main_process_wrote_it():
    """systemd restarts a unit 100 ms after it died: the dying process's last line and the new run's start can
    share a second; journald's PID (the stream's opener: the main process) tells them apart."""
    from datetime import timedelta

    from opsbot.parse.facts import bundle_facts
    from tests.scenarios.compose import T0

    roles = _stale_decode()
    roles[1].started = T0 - timedelta(seconds=60)  # the second the OOM line was written in
    b = bundle(roles)
    assert bundle_facts(b, default_runbooks().patterns).scopes["decode"]["logs"]["cuda_oom"] == 1  # MainPID wrote it
    raw = b.role("decode").logs.raw
    oom = next(line for line in raw.splitlines() if "OutOfMemoryError" in line)
    b.role("decode").logs.raw = raw.replace(oom, oom.replace("[4242]", "[4100]"))  # the process before wrote it
    f = bundle_facts(b, default_runbooks().patterns).scopes["decode"]
    assert f["logs"]["cuda_oom"] == 0 and f["logs_window"]["cuda_oom"] == 1


def test_a_unit_that_is_not_active_counts_the_whole_window():
    f = _decode_facts(_stale_decode("activating", "auto-restart"))
    assert f["logs"]["cuda_oom"] == f["logs_window"]["cuda_oom"] == 1
    assert [x.incident for x in _diag(_stale_decode("activating", "auto-restart")).findings][:1] == ["cuda-oom"]


def test_a_death_before_a_restart_that_has_not_recovered_is_still_reported():
    roles = _stale_decode()
    roles[1].counters["realtime_tokens{mode=decode}"] = (1000, 0)  # the new run makes no progress either
    assert "cuda-oom" in [x.incident for x in _diag(roles).findings]


# --- the router: /health is liveness only; worker health comes from smg_worker_health ----------------

def test_router_without_healthy_workers_fires_although_its_health_says_ok():
    roles = healthy_roles()
    roles[2].gauges["smg_worker_health"] = 0  # /readiness would be 503; /health stays 200 "OK" (§6.2)
    roles[2].health = 200
    assert [f.incident for f in _diag(roles).findings] == ["router-no-healthy-workers"]


def test_router_health_503_alone_is_not_a_router_incident():
    roles = healthy_roles()
    roles[2].health = 503  # e.g. /readiness flapping while smg_worker_health says the workers are fine
    assert [f.incident for f in _diag(roles).findings] == []


def test_router_worker_health_lines_fire_at_warn_level():
    roles = healthy_roles()
    roles[2].logs = ["2026-11-29 09:59:59  WARN sglang_router_rs::routers::http::pd_router: No healthy worker pair "
                     "available: prefill=0 decode=1"]
    assert [f.incident for f in _diag(roles).findings] == ["router-no-healthy-workers"]

def test_log_prefilter_matches_where_any_pattern_does():
    """The one-regex prefilter of log lines skips only lines no pattern matches (every corpus line)."""
    from opsbot.bundle import parse_bundle
    from opsbot.parse.facts import _any_pattern
    from opsbot.parse.logs import parse_log_lines

    rs = default_runbooks()
    anything = _any_pattern(tuple(rs.patterns))
    assert anything is not None
    hits = 0
    for path in sorted((Path(__file__).parent / "scenarios").glob("*/*.json")):
        for role in parse_bundle(path.read_text(encoding="utf-8")).roles:
            for entry in parse_log_lines(role.logs.raw or ""):
                some = any(p.regex.search(entry.message) for p in rs.patterns if not p.words)  # worded ones run alone
                assert (anything.search(entry.message) is not None) == some, entry.message
                hits += some
    assert hits > 0


def test_log_pattern_set_finds_what_each_pattern_finds():
    """The one-pass RE2 set of the log patterns, with ``holds`` for words and ``unless``, counts a line for
    exactly the patterns whose ``matches`` is true (every corpus line, and lines made to hit words and unless);
    its entry ``len(patterns)`` matches every line, so that no answer (RE2's DFA out of memory) is told from no
    match; the ``unless`` entries after it say what each pattern's ``unless`` search says."""
    from opsbot.bundle import parse_bundle
    from opsbot.parse.facts import _pattern_set, _unless_entries
    from opsbot.parse.logs import parse_log_lines

    patterns = tuple(default_runbooks().patterns)
    matching = _pattern_set(patterns)
    unless = _unless_entries(patterns)
    assert matching is not None and any(u > len(patterns) for u in unless)
    messages = ["", "x" * 4096, "NIXL transfer failed: retry counter exceeded", "No healthy worker pair available",
                "KVTransferError: Decode transfer failed: Aborted by AbortReq.", "Mooncake transfer failed: no error"]
    for path in sorted((Path(__file__).parent / "scenarios").glob("*/*.json")):
        for role in parse_bundle(path.read_text(encoding="utf-8")).roles:
            messages += [entry.message for entry in parse_log_lines(role.logs.raw or "")]
    counted = excluded = 0
    for message in messages:
        hits = matching(message)
        assert hits is not None and len(patterns) in hits, message
        for i, p in enumerate(patterns):
            if p.unless is not None:
                assert (unless[i] in hits) == (p.unless.search(message) is not None), (p.name, message)
                excluded += unless[i] in hits
        found = {i for i in hits if i < len(patterns) and patterns[i].holds(message)}
        assert found == {i for i, p in enumerate(patterns) if p.matches(message)}, message
        assert found == {i for i in hits if i < len(patterns) and patterns[i].holds(message, unless[i] in hits)}, message
        counted += bool(found)
    assert counted > 0 and excluded > 0


@pytest.mark.parametrize(("usage", "expected"), [(0.95, "kv-cache-exhausted"), (0.30, "kv-transfer-failure")])
def test_requests_held_in_the_prealloc_queue_wait_for_memory_when_the_pool_is_full(usage: float, expected: str):
    """A PD decode pre-allocates a request's KV 'once there is available kv' (disaggregation/decode.py): parked
    requests with a full pool wait for memory (no restart helps), with room they wait for a transfer."""
    roles = healthy_roles()
    d = roles[1]
    d.gauges.update(num_running_reqs=0, num_queue_reqs=0, num_decode_prealloc_queue_reqs=8,
                    num_decode_transfer_queue_reqs=0, token_usage=usage)
    d.counters["realtime_tokens{mode=decode}"] = (1000, 0)
    found = [f.incident for f in _diag(roles).findings]
    assert found and found[0] == expected, found
    if expected == "kv-cache-exhausted":
        assert "kv-transfer-failure" not in found


@pytest.mark.parametrize(("age_s", "looping"), [(4, True), (30, False)])
def test_runs_that_keep_ending_the_same_way_name_the_class_while_the_new_run_is_young(age_s: int, looping: bool):
    """systemd restarted decode after each CUDA OOM; the current run serves for now. Younger than the runs
    before it lasted, it is the crash loop of what ended them (cuda-oom, no restart advised); once it has
    outlived them, those deaths are history."""
    from datetime import timedelta

    from tests.scenarios.compose import T0

    roles = healthy_roles()
    d = roles[1]
    d.restarts = 3
    oom = ["Scheduler hit an exception: Traceback (most recent call last):",
           'raw:  File "/usr/local/lib/python3.11/dist-packages/sglang/srt/managers/scheduler.py", line 6350, in '
           "run_scheduler_process",
           "raw:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]
    batches = ["Decode batch, #running-req: 8, gen throughput (token/s): 300.0, #queue-req: 0"] * 4
    d.logs = [*oom, *batches, *oom, *d.logs]  # two runs died 7 s apart, at T0-60 s and T0-53 s
    d.started = T0 - timedelta(seconds=age_s)
    found = [f.incident for f in _diag(roles).findings]
    assert ("cuda-oom" in found[:1]) is looping, found
