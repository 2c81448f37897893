"""Structure before strings: exceptions and their stage, glog lines by component, native crash dumps,
the unit's state machine, progress by source, ordering by cause and what would decide."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from opsbot.bundle import parse_bundle
from opsbot.cli import app
from opsbot.diagnose import default_runbooks, diagnose
from opsbot.diagnose.exception_table import parse_example
from opsbot.parse.facts import bundle_facts
from opsbot.diagnose.lint import lint
from opsbot.datafiles import data_dir
from opsbot.parse.exceptions import crash_frames, parse_exceptions, stage_of
from opsbot.parse.glog import parse_glog
from opsbot.parse.logs import LOG_FILTER, parse_batch

DEV = Path(__file__).parent / "scenarios" / "dev"

# A Scheduler hit an exception block as SGLang 0.5.23 writes it (managers/scheduler.py run_scheduler_process)
STARTUP_BLOCK = [
    "Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 6365, in run_scheduler_process',
    "    scheduler = Scheduler(server_args, port_args)",
    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 412, in __init__',
    '  File "/sgl/python/sglang/srt/model_executor/model_runner.py", line 301, in load_model',
    "ValueError: Model architectures ['Glm4ForCausalLM'] are not supported for now.",
]
SERVING_BLOCK = [
    "[2026-11-29 10:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 6370, in run_scheduler_process',
    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1201, in event_loop_overlap_disagg_decode',
    '  File "/sgl/python/sglang/srt/managers/schedule_batch.py", line 1380, in retract_decode',
    "AssertionError: No space left for only one request",
]

PANIC_BLOCK = ["thread 'main' panicked at src/main.rs:42:10:", "called `Result::unwrap()` on an `Err` value",
               "thread 'main' panicked at 'boom', src/lib.rs:1:1"]

# Another rank's tail of a failure (source line, carets, exception), then a Scheduler traceback cut after the PD
# decode loop handed a request to its transfer queue: the shape of a multi-rank crash in the journal.
CUT_TAIL = ["    self.prefill_tp_size, self.prefill_dp_size = (", "    ^^^^^^^^^^^^^^^^", "TypeError: cannot unpack non-iterable NoneType object",
            ""]
CUT_HEAD = [
    "Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2279, in run_scheduler_process',
    "    scheduler.event_loop_overlap_disagg_decode()",
    '  File "/sgl/python/sglang/srt/disaggregation/decode.py", line 521, in event_loop_overlap_disagg_decode',
    "    self.process_input_requests(recv_reqs)",
    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 882, in process_input_requests',
    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1038, in handle_generate_request',
    "    self._add_request_to_queue(req)",
]

# A scheduler that died forming its groups, cut twice: without its header, and before its exception line; the
# source line under the last frame is the call it was in (SGLang 0.4.6.post4 model_runner.py)
HEADLESS = [
    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1748, in run_scheduler_process',
    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)",
    '  File "/sgl/python/sglang/srt/model_executor/model_runner.py", line 163, in __init__',
    "    min_per_gpu_memory = self.init_torch_distributed()",
    "                         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
]

# tvm-ffi's SIGSEGV handler (apache/tvm-ffi src/ffi/backtrace.cc) writes native frames the way Python writes its own
TVM_FFI_DUMP = ["!!!!!!! Segfault encountered !!!!!!!", '  File "<unknown>", line 0, in gsignal',
                '  File "<unknown>", line 0, in cuEventQuery', '  File "<unknown>", line 0, in uct_cuda_base_iface_event_fd_arm',
                '  File "<unknown>", line 0, in nixlUcxWorker::arm() const', '  File "<unknown>", line 0, in 0xffffffffffffffff']


def _lines(block: list[str]) -> list[tuple[str, str | None]]:
    return [(line, None) for line in block]


def test_a_traceback_gives_type_message_writer_and_stage_from_its_frames():
    (startup,) = parse_exceptions(_lines(STARTUP_BLOCK))
    assert (startup.type, startup.writer, startup.stage) == ("ValueError", "Scheduler", "startup")
    assert startup.frames == ("run_scheduler_process", "__init__", "load_model")
    (serving,) = parse_exceptions(_lines(SERVING_BLOCK))
    assert (serving.short_type, serving.stage) == ("AssertionError", "serving")


def test_stage_is_unknown_when_only_the_wrapper_frame_is_printed():
    assert stage_of(["run_scheduler_process"], "RuntimeError") == "unknown"
    assert stage_of([], "ModuleNotFoundError") == "startup"


def test_argparse_rank_prefixes_chained_tracebacks_and_the_launchers_verdict():
    found = parse_exceptions(_lines([
        "launch_server.py: error: unrecognized arguments: --max-queued-request 10",
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/x.py", line 1, in init_distributed_environment',
        "[rank0]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
        "During handling of the above exception, another exception occurred:",
        "Initialization failed. warmup error: Traceback (most recent call last):",
    ]))
    assert [(x.type, x.stage) for x in found] == [
        ("ArgumentError", "startup"), ("torch.distributed.DistBackendError", "startup"), ("InitializationFailed", "startup"),
    ]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(STARTUP_BLOCK + SERVING_BLOCK + PANIC_BLOCK + CUT_TAIL + CUT_HEAD + TVM_FFI_DUMP + HEADLESS),
                                  st.text(max_size=80)), max_size=30))
def test_exception_parsing_never_raises(lines):
    for x in parse_exceptions((line, None) for line in lines):
        assert x.stage in ("startup", "serving", "unknown") and x.type
    crash_frames(lines)


def test_glog_lines_of_mooncake_and_c10d():
    line = parse_glog("E0603 20:16:59.104586 27322 worker_pool.cpp:271] Worker: Process failed for slice: transport retry counter exceeded")
    assert line is not None and (line.severity, line.file, line.line, line.is_error) == ("E", "worker_pool.cpp", 271, True)
    c10d = parse_glog("[rank1]:[E1129 10:00:01.000000000 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout")
    assert c10d is not None and c10d.file == "ProcessGroupNCCL.cpp"
    assert parse_glog("Decode batch, #running-req: 8") is None
    assert re.search(LOG_FILTER, "E0603 20:16:59.104586 27322 rdma_endpoint.cpp:408] [Handshake] Failed to modify QP to RTR")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=120))
def test_glog_parsing_never_raises(text):
    line = parse_glog(text)
    assert line is None or line.severity in "IWEF"


def test_the_table_maps_components_crash_dumps_and_its_own_examples():
    rs = default_runbooks()
    assert rs.exceptions.component("worker_pool.cpp") == ("mooncake-transfer-engine", "kv-transfer-failure")
    assert rs.exceptions.component("ProcessGroupNCCL.cpp") == ("torch-nccl", "nccl-failure")
    assert rs.exceptions.component("scheduler.cpp") is None
    frames = crash_frames([
        "Fatal Python error: Segmentation fault", "",
        "Thread 0x00007fb209fff640 (most recent call first):",
        '  File "/sgl/python/sglang/srt/disaggregation/mooncake/transfer_engine.py", line 75 in transfer_sync',
    ])
    assert rs.exceptions.crash_component(frames) == ("mooncake-transfer-engine", "kv-transfer-failure")
    assert rs.exceptions.incident(parse_example("[startup] ImportError: libcuda.so.1: cannot open shared object file")) == "config-crashloop"
    assert rs.exceptions.incident(parse_example("[serving] torch.OutOfMemoryError: CUDA out of memory.")) == "cuda-oom"
    assert rs.exceptions.incident(parse_example("[serving] ValueError: bad request")) is None
    assert not lint(data_dir("runbooks"))


def test_old_sglang_batch_lines_and_metric_names():
    line = parse_batch("Decode batch. #running-req: 1, #token: 75, token usage: 0.00, gen throughput (token/s): 2.69, #queue-req: 0")
    assert line is not None and line.fields["gen throughput (token/s)"] == 2.69
    assert re.search(LOG_FILTER, "Decode batch. #running-req: 1, #token: 75")


def _facts(name: str) -> dict:
    b = parse_bundle((DEV / f"{name}.json").read_text(encoding="utf-8"))
    rs = default_runbooks()
    return bundle_facts(b, rs.patterns, rs.metric_facts, rs.exceptions).scopes


def test_progress_names_its_source():
    new = _facts("decode-wedged")["decode"]["progress"]
    assert new["decode_source"].startswith("realtime_tokens_total") and new["decode_stalled"] is True
    old = _facts("arch-glm4-not-supported")["prefill"]["progress"]  # 0.4.x names: no realtime_tokens_total
    assert old["prefill_source"].startswith("prompt_tokens_total") and "prefill_stalled" not in old


def test_unit_state_machine_and_start_up_exception():
    decode = _facts("arch-glm4-not-supported")["decode"]
    assert decode["unit"]["crash_looping"] and decode["unit"]["restarting"] and decode["unit"]["exit_code"] == 1
    assert decode["exception"]["startup_incident"] == "config-crashloop"
    d = diagnose(parse_bundle((DEV / "arch-glm4-not-supported.json").read_text(encoding="utf-8")), default_runbooks())
    assert d.findings[0].incident == "config-crashloop" and "role-down on decode" in d.findings[0].explains


def test_public_json_adds_explains_and_decide_only():
    d = diagnose(parse_bundle((DEV / "crash-unexplained.json").read_text(encoding="utf-8")), default_runbooks())
    public = d.public()["findings"][0]
    assert public["incident"] == "role-down" and "explains" in public
    assert any("NRestarts moving" in t for t in public["decide"]) and d.findings[0].second_look
    assert {"incident", "severity", "roles", "evidence", "summary", "remedies", "title", "confidence", "missing_facts"} <= set(public)


def test_a_second_look_reads_nrestarts_moving():
    data = json.loads((DEV / "crash-unexplained.json").read_text(encoding="utf-8"))
    before = parse_bundle(json.dumps(data))
    for role in data["roles"]:
        if role["role"] == "decode":
            role["systemd"]["raw"] = role["systemd"]["raw"].replace("NRestarts=5", "NRestarts=9")
    after = parse_bundle(json.dumps(data))
    rs = default_runbooks()
    scopes = bundle_facts(after, rs.patterns, rs.metric_facts, rs.exceptions, previous=before).scopes
    assert scopes["decode"]["unit"]["restarts_moved"] == 4 and scopes["decode"]["unit"]["crash_looping"]
    assert "restarts_moved" not in bundle_facts(after, rs.patterns).scopes["decode"]["unit"]


def test_eval_prints_each_part_and_flags_unsafe_advice(tmp_path):
    for part, names in {"dev": ["crash-unexplained", "healthy"], "other": ["arch-glm4-not-supported"]}.items():
        (tmp_path / part).mkdir()
        for name in names:
            (tmp_path / part / f"{name}.json").write_text((DEV / f"{name}.json").read_text(encoding="utf-8"), encoding="utf-8")
    out = CliRunner().invoke(app, ["eval", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "dev/: 2 bundles, top-1 100.0%, top-3 100.0%, false all-clear 0, unsafe advice 0" in out.output
    assert "other/: 1 bundles, top-1 100.0%" in out.output and "expected \\ top finding" in out.output
    # a healthy label on a bundle where a restart is advised is unsafe advice
    data = json.loads((DEV / "crash-unexplained.json").read_text(encoding="utf-8"))
    data["label"] = {**data["label"], "expected": "healthy"}
    (tmp_path / "dev" / "crash-unexplained.json").write_text(json.dumps(data), encoding="utf-8")
    out = CliRunner().invoke(app, ["eval", str(tmp_path), "--misses"])
    assert out.exit_code == 1 and "unsafe advice 1" in out.output and "miss: dev/crash-unexplained" in out.output
    assert CliRunner().invoke(app, ["eval", str(tmp_path / "nothing")]).exit_code == 2
    # a broken bundle (here: a failure of no known class) answered healthy is a false all-clear, and fails eval
    (tmp_path / "dev" / "crash-unexplained.json").unlink()
    data = json.loads((DEV / "healthy.json").read_text(encoding="utf-8"))
    data["label"] = {**data["label"], "expected": "any-finding"}
    (tmp_path / "dev" / "healthy.json").write_text(json.dumps(data), encoding="utf-8")
    out = CliRunner().invoke(app, ["eval", str(tmp_path), "--misses"])
    assert out.exit_code == 1 and "false all-clear 1" in out.output and "false all-clear: dev/healthy" in out.output


def test_no_restart_is_offered_while_systemd_restarts_the_unit():
    data = json.loads((DEV / "crash-unexplained.json").read_text(encoding="utf-8"))
    gave_up = diagnose(parse_bundle(json.dumps(data)), default_runbooks()).findings[0]
    assert gave_up.incident == "role-down" and [r.kind for r in gave_up.remedies][:1] == ["restart"]
    for role in data["roles"]:
        if role["role"] == "decode":
            role["systemd"]["raw"] = role["systemd"]["raw"].replace("ActiveState=failed", "ActiveState=activating").replace(
                "SubState=failed", "SubState=auto-restart")
    looping = diagnose(parse_bundle(json.dumps(data)), default_runbooks()).findings[0]
    assert looping.incident == "role-down" and "restart" not in [r.kind for r in looping.remedies]
    assert any(r.kind == "no-restart" and "already restarting" in r.text for r in looping.remedies)


def test_a_rust_panic_is_an_exception_with_its_message_on_the_next_line():
    found = parse_exceptions(_lines([
        "thread '<unnamed>' panicked at /cargo/tokio-1.45.1/src/runtime/blocking/shutdown.rs:51:21:",
        "Cannot drop a runtime in a context where blocking is not allowed.",
        "thread 'main' panicked at 'called `Option::unwrap()` on a `None` value', src/main.rs:42:10",
    ]))
    assert [(x.type, x.message, x.stage) for x in found] == [
        ("panic", "Cannot drop a runtime in a context where blocking is not allowed.", "unknown"),
        ("panic", "called `Option::unwrap()` on a `None` value", "unknown"),
    ]
    assert found[0].files == ("/cargo/tokio-1.45.1/src/runtime/blocking/shutdown.rs:51:21",)


def test_frames_keep_their_files_and_the_table_reads_the_frame_an_exception_came_from():
    (x,) = parse_exceptions(_lines([
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 1, in init_process_group',
        "RuntimeError: Connection reset by peer",
    ]))
    assert x.files == ("/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py",)
    table = default_runbooks().exceptions
    assert table.incident(x) == "nccl-failure" and table.named(x)
    generic = parse_example("[startup] RuntimeError: Connection reset by peer")
    assert table.incident(generic) == "config-crashloop" and not table.named(generic)  # only its stage says so


def _crash_loop(lines: list[str], state: str = "crashloop") -> dict:
    """The decode's facts when it crash-loops (or hit its start limit) on ``lines``."""
    from tests.scenarios.compose import compose
    from tests.scenarios.deployments import crashloop, roles

    p, d, r = roles()
    crashloop(d, lines)
    if state == "start-limit":
        unit = d.logs[-1].split(":")[1].strip()
        d.active, d.sub = "failed", "failed"
        d.logs = d.logs[:-1] + [f"systemd: {unit}: Start request repeated too quickly.", f"systemd: {unit}: Failed with result 'exit-code'."]
    bundle = parse_bundle(json.dumps(compose([p, d, r], bundle_id="x")))
    rs = default_runbooks()
    return {"facts": bundle_facts(bundle, rs.patterns, rs.metric_facts, rs.exceptions).scopes["decode"],
            "findings": diagnose(bundle, rs).findings}


def test_the_cause_of_a_start_up_failure_is_the_named_exception_not_the_launchers_verdict():
    out = _crash_loop(["RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
                       "Initialization failed. Please see the error messages above."])
    assert out["facts"]["exception"]["startup_incident"] == "nccl-failure"
    assert out["facts"]["exception"]["type"] == "RuntimeError"
    assert out["findings"][0].incident == "nccl-failure"


def test_lines_a_never_served_role_printed_count_as_start_up_errors():
    glog = _crash_loop(["raw:E1023 10:00:00.000000 123 transfer_engine.cpp:100] Failed to install transport tcp"])
    assert glog["facts"]["exception"]["type"] == "transfer_engine.cpp"
    assert glog["findings"][0].incident == "config-crashloop"
    warn = _crash_loop(["raw:node1:2345:2400 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.2<43127> "
                        "failed : Software caused connection abort", "RuntimeError: Failed to start the scheduler"])
    assert warn["facts"]["exception"]["startup_incident"] == "nccl-failure"
    panic = _crash_loop(["raw:thread 'main' panicked at src/main.rs:42:10:", "raw:Address already in use"])
    assert panic["findings"][0].incident == "config-crashloop"
    chatter = _crash_loop(["raw:node1:234:234 [0] NCCL INFO ncclCommInitRank comm 0x55 rank 0 nranks 4 - Init COMPLETE",
                           "ValueError: Model architectures ['Glm4ForCausalLM'] are not supported for now."])
    assert chatter["facts"]["exception"]["startup_incident"] == "config-crashloop"  # NCCL INFO is not an error
    assert chatter["findings"][0].incident == "config-crashloop"


def test_a_unit_at_its_start_limit_is_a_crash_loop_and_is_never_offered_a_start():
    out = _crash_loop(["raw:some line that names nothing"], state="start-limit")
    unit = out["facts"]["unit"]
    assert unit["start_limit_hit"] and unit["crash_looping"] and not unit["restarting"]
    kinds = [r.kind for f in out["findings"] for r in f.remedies]
    assert "restart" not in kinds and "no-restart" in kinds


def test_an_uncaught_cpp_exception_and_pytorchs_older_log_lines():
    (x,) = parse_exceptions(_lines([
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "  what():  [PG 3 Rank 5] Process group watchdog thread terminated with exception: [Rank 5] Watchdog caught collective "
        "operation timeout",
        "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:609 (most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f3b6d41df86 in libc10.so)",
    ]))
    assert (x.type, x.writer, x.frames) == ("c10::DistBackendError", "c++", ("checkTimeout",))
    assert x.message.startswith("[PG 3 Rank 5] Process group watchdog") and default_runbooks().exceptions.incident(x) == "nccl-failure"
    old = parse_glog("[E ProcessGroupNCCL.cpp:456] Some NCCL operations have failed or timed out.")  # torch < 2.3
    assert old is not None and (old.severity, old.file, old.line) == ("E", "ProcessGroupNCCL.cpp", 456)
    assert re.search(LOG_FILTER, "[E ProcessGroupNCCL.cpp:456] Some NCCL operations have failed or timed out.")


def _pair(state: str, lines: list[str]) -> dict:
    """The decode's facts and the findings when it crash-loops (``crashloop``) or died after hours (``died``) on ``lines``."""
    from tests.scenarios.compose import compose
    from tests.scenarios.deployments import crashloop, died, roles

    p, d, r = roles()
    (crashloop if state == "crashloop" else died)(d, lines)
    bundle = parse_bundle(json.dumps(compose([p, d, r], bundle_id="x")))
    rs = default_runbooks()
    return {"facts": bundle_facts(bundle, rs.patterns, rs.metric_facts, rs.exceptions).scopes["decode"],
            "findings": [f.incident for f in diagnose(bundle, rs).findings]}


def test_the_units_own_timestamps_place_an_exception_after_hours_of_serving_at_serving():
    """Same lines, no batch line, no /metrics (refused): a run that began a minute before them failed at
    start-up; one that began three hours before (ExecMainStartTimestamp) died while serving."""
    lines = ["raw:E1201 11:24:34.169943  3894 worker_pool.cpp:242] Worker: Cannot make connection for endpoint: "
             "10.244.1.107:16339@mlx5_3, mark it inactive"]
    loop, served = _pair("crashloop", lines), _pair("died", lines)
    assert loop["facts"]["exception"]["startup_incident"] == "config-crashloop" and loop["findings"][0] == "config-crashloop"
    assert "startup_incident" not in served["facts"]["exception"] and served["facts"]["exception"]["startup"] == 0
    assert served["facts"]["engine"]["transfer"] == 1 and "config-crashloop" not in served["findings"]


def test_ucx_lines_are_the_nixl_transports_and_a_crash_after_one_is_attributed_to_it():
    line = parse_glog("[1749803291.555759] [vllm-lmcache-zxy-977866c79-jxjnw:7053 :0]          tcp_ep.c:1260 UCX  ERROR "
                      "tcp_ep 0x3c502370 (state=CONNECTED): send(110) failed: Input/output error")
    assert line is not None and (line.severity, line.file, line.line, line.library) == ("E", "tcp_ep.c", 1260, "UCX")
    bare = parse_glog("ib_mlx5_dv.c:433  UCX  ERROR   mlx5dv_devx_obj_modify(opcode=0x503) failed, syndrome 0x5d668c: Remote I/O error")
    assert bare is not None and bare.library == "UCX" and bare.message.startswith("mlx5dv_devx_obj_modify")
    table = default_runbooks().exceptions
    assert table.component("tcp_ep.c", "UCX") == ("ucx", "kv-transfer-failure") and table.component("tcp_ep.c") is None
    out = _pair("died", ["raw:" + bare.file + ":433  UCX  ERROR   mlx5dv_devx_obj_modify(opcode=0x503) failed",
                         "raw:Fatal Python error: Segmentation fault", "raw:", "raw:Current thread (most recent call first):"])
    assert out["facts"]["engine"]["crash_incident"] == "kv-transfer-failure" and out["findings"][0] == "kv-transfer-failure"


def test_the_driver_saying_its_gsp_stopped_answering_is_a_gpu_fault_without_an_xid():
    from opsbot.parse.kernel import driver_faults

    raw = ("2026-11-29T09:59:10+0000 node2 kernel: NVRM: GPU6 _kgspLogRpcTimeout: ****** GSP Timeout ******\n"
           "2026-11-29T09:59:11+0000 node2 kernel: NVRM: _kgspRpcRecvPoll: GSP RM heartbeat timed out\n"
           "2026-11-29T09:00:00+0000 node2 kernel: NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01\n")
    assert driver_faults(raw) == 2
    gsp = _facts("gsp-heartbeat-timeout-gh100")["decode"]
    assert gsp["gpu"]["driver_fault"] == 3 and gsp["gpu"]["hardware_xid"] == 0  # heartbeat, memory subsystem, GSP timeout
    assert _facts("near-nvrm-load-line")["decode"]["gpu"]["driver_fault"] == 0


@given(st.text())
def test_driver_fault_counting_never_raises(raw):
    from opsbot.parse.kernel import driver_faults

    assert 0 <= driver_faults(raw) <= len(raw.splitlines())


def test_a_request_parked_for_its_transfer_while_the_pair_moves_no_token_is_a_transfer_failure():
    stalled = _facts("mori-transfer-stalled-tail-request")
    assert stalled["decode"]["progress"]["tokens_moved"] == 0 and stalled["prefill"]["progress"]["tokens_moved"] == 0
    idle = _facts("near-idle-decode")  # one request in the transfer queue, but the prefill serves cached tokens
    assert idle["prefill"]["progress"]["tokens_moved"] > 0
    d = diagnose(parse_bundle((DEV / "near-idle-decode.json").read_text(encoding="utf-8")), default_runbooks())
    assert not d.findings


@given(st.from_regex(r"[a-z_]{1,12}\.c", fullmatch=True), st.integers(0, 99999),
       st.sampled_from(["ERROR", "FATAL", "WARN", "DIAG"]), st.text(max_size=60).filter(lambda t: "\n" not in t and "\r" not in t))
def test_any_ucx_line_parses_to_its_file_line_and_severity(file, line, level, msg):
    parsed = parse_glog(f"[1749803291.555759] [host:7053 :0] {file:>16}:{line:<4} UCX  {level:<5} {msg}")
    assert parsed is not None and (parsed.file, parsed.line, parsed.library) == (file, line, "UCX")
    assert parsed.is_error == (level in ("ERROR", "FATAL"))


def test_a_cut_traceback_keeps_its_frames_and_takes_the_type_of_the_tail_just_before_it():
    (x,) = parse_exceptions(_lines(CUT_TAIL + CUT_HEAD))
    assert (x.type, x.writer, x.stage) == ("TypeError", "Scheduler", "serving")
    assert x.frames[-2:] == ("handle_generate_request", "_add_request_to_queue")  # and the call it was making
    (alone,) = parse_exceptions(_lines(CUT_HEAD))  # no tail: its frames alone, as a Traceback without a message
    assert (alone.type, alone.message, alone.stage) == ("Traceback", "", "serving")
    # a wrapper frame alone places nothing and is dropped, unless the call it was making does (the event loop)
    assert parse_exceptions(_lines(CUT_HEAD[:2])) == []
    assert [x.stage for x in parse_exceptions(_lines(CUT_HEAD[:3]))] == ["serving"]
    # a tail after an unrelated line is not joined
    apart = parse_exceptions(_lines(CUT_TAIL + ["Decode batch, #running-req: 1"] + CUT_HEAD))
    assert [(y.type, y.frames) for y in apart][0] == ("TypeError", ())


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=4, max_value=len(CUT_HEAD)), st.lists(st.sampled_from(["", "   ", "  ^^^^"]), max_size=3))
def test_a_traceback_cut_anywhere_after_its_event_loop_frame_stays_at_serving(cut, noise):
    found = parse_exceptions(_lines(CUT_HEAD[:cut] + noise))
    assert [(x.stage, x.writer) for x in found] == [("serving", "Scheduler")]


def _role_down(role: str, lines: list[str], minutes: int, state: str = "died") -> dict:
    """``role``'s facts and the findings when its unit exited ``minutes`` after it started, on ``lines``."""
    from datetime import timedelta

    from tests.scenarios.compose import T0, compose
    from tests.scenarios.deployments import crashloop, died, failed, roles

    p, d, r = roles()
    spec = {"prefill": p, "decode": d, "router": r}[role]
    {"died": died, "crashloop": crashloop, "failed": failed}[state](spec, lines)
    spec.started = T0 - timedelta(minutes=minutes)
    bundle = parse_bundle(json.dumps(compose([p, d, r], bundle_id="x")))
    rs = default_runbooks()
    return {"facts": bundle_facts(bundle, rs.patterns, rs.metric_facts, rs.exceptions).scopes[role],
            "findings": [f.incident for f in diagnose(bundle, rs).findings]}


def test_an_exception_at_a_pd_roles_request_intake_is_the_transfers_set_up_not_a_start_up_error():
    """Ten minutes after its start (not long enough for its timestamps to say it served), the decode's frames say
    its event loop ran: what it raised is no start-up error, and raised at its request intake it is the transfer's."""
    out = _role_down("decode", ["raw:" + line for line in CUT_TAIL + CUT_HEAD], minutes=10)
    assert out["facts"]["exception"]["startup"] == 0 and out["facts"]["exception"]["ended_run_incident"] == "kv-transfer-failure"
    assert out["findings"][0] == "kv-transfer-failure" and "config-crashloop" not in out["findings"]
    # raised deeper, in a grammar backend under the same intake: not the transfer's (a dead unit, cause unnamed)
    grammar = CUT_HEAD + ['  File "/sgl/python/sglang/srt/constrained/xgrammar_backend.py", line 9, in dispatch_json',
                          "RuntimeError: invalid JSON schema"]
    other = _role_down("decode", ["raw:" + line for line in grammar], minutes=10)
    assert other["findings"][0] == "role-down" and "config-crashloop" not in other["findings"]
    table = default_runbooks().exceptions
    intake = parse_example("[serving] KeyError: 3 @ /s/disaggregation/prefill.py:event_loop_normal_disagg_prefill > "
                           "/s/disaggregation/prefill.py:create_sender")
    assert table.incident(intake) == "kv-transfer-failure"
    not_pd = parse_example("[serving] KeyError: 3 @ /s/managers/scheduler.py:event_loop_overlap > "
                           "/s/managers/scheduler.py:handle_generate_request")
    assert table.incident(not_pd) is None  # the same intake outside PD has no transfer to set up


def test_a_crash_dump_names_its_component_by_the_native_frames_tvm_ffi_prints():
    frames = crash_frames(TVM_FFI_DUMP)
    assert frames[:2] == ["<unknown>:gsignal", "<unknown>:cuEventQuery"] and "<unknown>:nixlUcxWorker::arm() const" in frames
    table = default_runbooks().exceptions
    assert table.crash_component(frames) == ("ucx", "kv-transfer-failure")
    assert table.crash_component(crash_frames(["Fatal Python error: Segmentation fault", "",
                                               '  File "<unknown>", line 0, in nixlUcxSharedThread::run()'])) == (
        "nixl", "kv-transfer-failure")
    assert table.crash_component(crash_frames(TVM_FFI_DUMP[:3])) is None  # CUDA's frames alone name no component
    assert re.search(LOG_FILTER, TVM_FFI_DUMP[0]) and re.search(LOG_FILTER, TVM_FFI_DUMP[3])
    for state in ("died", "failed"):  # restarted or down for good: the transfer backend's crash, not a bare role-down
        out = _role_down("prefill", ["raw:" + line for line in TVM_FFI_DUMP], minutes=180, state=state)
        assert out["facts"]["engine"]["crash_incident"] == "kv-transfer-failure" and out["findings"][0] == "kv-transfer-failure"


def test_the_routers_own_failed_start_is_a_start_up_error():
    found = parse_exceptions(_lines([
        "Failed to create router: Timeout 300s waiting for workers to become healthy",
        "[2026-11-29 10:00:01] ERROR router: Error starting router: Address already in use (os error 98)",
        "thread 'main' panicked at 'Failed to create router: boom', src/server.rs:25:31",
    ]))
    assert [(x.type, x.writer, x.stage) for x in found] == [
        ("RouterStartFailed", "router", "startup"), ("RouterStartFailed", "router", "unknown"), ("panic", "thread main", "unknown"),
    ]
    assert re.search(LOG_FILTER, "Failed to create router: Timeout 300s waiting for workers to become healthy")
    out = _role_down("router", ["raw:Failed to create router: Timeout 300s waiting for workers to become healthy"],
                     minutes=6, state="crashloop")
    assert out["facts"]["exception"]["startup_incident"] == "config-crashloop" and out["findings"][0] == "config-crashloop"


def test_a_traceback_without_its_header_and_the_call_its_last_frame_was_making():
    (x,) = parse_exceptions(_lines(HEADLESS))
    assert (x.type, x.stage) == ("Traceback", "startup")
    assert x.frames[-2:] == ("__init__", "init_torch_distributed")  # the call under the last frame, a method of self:
    assert x.files[-1] == x.files[-2]  # in the caller's own file
    (y,) = parse_exceptions(_lines(HEADLESS[:-2] + ["    initialize_model_parallel(tensor_model_parallel_size=8)"]))
    assert (y.frames[-1], y.files[-1]) == ("initialize_model_parallel", "")  # a plain call: its file is not known
    table = default_runbooks().exceptions
    assert table.incident(x) == "nccl-failure" and table.named(x)
    # a complete traceback through the same set-up names what it raised: SGLang's own memory check is no NCCL fault
    check = parse_exceptions(_lines(["Traceback (most recent call last):", *HEADLESS[:3],
                                     '  File "/sgl/python/sglang/srt/model_executor/model_runner.py", line 427, in init_torch_distributed',
                                     "ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes."]))
    assert table.incident(check[0]) == "config-crashloop"
    loop = _role_down("decode", ["raw:" + line for line in HEADLESS], minutes=1, state="crashloop")
    assert loop["facts"]["exception"]["startup_incident"] == "nccl-failure" and loop["findings"][0] == "nccl-failure"


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=99999), st.sampled_from([STARTUP_BLOCK, SERVING_BLOCK, CUT_TAIL + CUT_HEAD, HEADLESS]))
def test_a_launchers_task_label_before_every_line_changes_nothing(task, block):
    labelled = parse_exceptions(_lines([f"{task}: {line}" for line in block]))
    assert [(x.type, x.frames, x.stage) for x in labelled] == [(x.type, x.frames, x.stage) for x in parse_exceptions(_lines(block))]


# -- the production service stands apart from the lab ---------------------------------------------------
ROOT = Path(__file__).parent.parent / "opsbot"
PRODUCTION = [*sorted(ROOT.glob("service/**/*.py")),
              *sorted(ROOT.glob("slack/**/*.py")), ROOT / "flow.py",
              *sorted(p for p in ROOT.glob("cli/*.py") if p.name != "lab.py")]


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module a file imports, at its top or inside a function (``from . import x`` resolved)."""
    package = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts[:-1])
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def test_the_production_service_imports_nothing_from_the_lab():
    """opsbot/service, opsbot/slack, opsbot/flow.py and the CLI but ``opsbot lab`` name no opsbot.lab module, even
    inside a function; and importing the service, with what its handlers import, loads none (a subprocess)."""
    named = [f"{p.relative_to(ROOT.parent)}:{line}: {module}" for p in PRODUCTION for line, module in _imports(p)
             if module == "opsbot.lab" or module.startswith("opsbot.lab.")]
    assert named == []
    from opsbot.service.app import HANDLER_MODULES

    code = ("import sys; import opsbot.service.app, opsbot.slack.app, opsbot.flow, opsbot.collect.pool; "
            f"[__import__(m) for m in {HANDLER_MODULES!r}]; "
            "print(sorted(m for m in sys.modules if m == 'opsbot.lab' or m.startswith('opsbot.lab.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT.parent).stdout
    assert out.strip() == "[]"


def test_store_calls_in_async_code_go_through_a_thread():
    """No ``async def`` of opsbot (the lab aside) calls the store directly: a store method is handed to
    ``flow.db`` / ``to_thread`` (``db(store.x, ...)``), never called on the event loop."""
    files = [p for p in sorted(ROOT.rglob("*.py")) if p.relative_to(ROOT).parts[0] != "lab"]
    calls = []
    for path in files:
        for fn in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(fn, ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.FunctionDef, ast.Lambda)) and node is not fn:
                    continue  # a sync helper or a lambda, handed to a thread
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and _names_store(node.func.value) and not _inside_sync(fn, node)):
                    calls.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {ast.unparse(node)[:80]}")
    assert calls == []


def _names_store(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "store") or (
        isinstance(node, ast.Attribute) and node.attr == "store")


def _inside_sync(fn: ast.AsyncFunctionDef, target: ast.AST) -> bool:
    """Whether ``target`` sits inside a nested sync function or lambda of ``fn`` (run in a thread)."""
    for node in ast.walk(fn):
        if (node is not fn and isinstance(node, (ast.FunctionDef, ast.Lambda))
                and any(child is target for child in ast.walk(node))):
            return True
    return False


def test_the_service_finds_the_labs_monitoring_through_the_file_it_writes(tmp_path, monkeypatch):
    """Without an import of the lab: ``opsbot lab up`` writes LAB_DIR/monitoring/monitoring.json, the service's
    settings default to what it names; what the environment sets wins; no file, no change."""
    import json

    from opsbot.settings import Settings, with_running_monitoring

    monkeypatch.delenv("OPSBOT_LAB_DIR", raising=False)
    assert with_running_monitoring(Settings(data_dir=tmp_path)).prometheus_url is None
    (tmp_path / "lab" / "monitoring").mkdir(parents=True)
    (tmp_path / "lab" / "monitoring" / "monitoring.json").write_text(
        json.dumps({"prometheus": "http://127.0.0.1:9090", "alertmanager": "http://127.0.0.1:9093"}))
    found = with_running_monitoring(Settings(data_dir=tmp_path))
    assert (found.prometheus_url, found.alertmanager_url) == ("http://127.0.0.1:9090", "http://127.0.0.1:9093")
    assert with_running_monitoring(Settings(data_dir=tmp_path, prometheus_url="http://prom:9090")).prometheus_url \
        == "http://prom:9090"


def test_slack_is_written_to_only_through_the_notifier():
    """One notifier (opsbot/slack/notifier.py) sends every message: no other module of opsbot calls a Slack
    method that writes (its rate limit, retries and order would be bypassed)."""
    writes = {"chat_postMessage", "chat_update", "chat_postEphemeral", "chat_delete", "files_upload_v2",
              "files_upload", "chat_scheduleMessage"}
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if path == ROOT / "slack" / "notifier.py" or "lab" in path.relative_to(ROOT).parts[:1]:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in writes:
                found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: .{node.attr}")
    assert found == []
