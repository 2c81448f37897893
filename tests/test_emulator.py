"""The SGLang emulator's pure parts: flags, exposition, the simulation, nvidia-smi, the lab layout."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from opsbot.inventory import Inventory
from opsbot.lab.emulator import control, gpu, nvidia_smi
from opsbot.lab.emulator.control import Control, read_control, write_control
from opsbot.lab.emulator.exposition import Registry
from opsbot.lab.emulator.flags import parse_router, parse_server
from opsbot.lab.emulator.launch_server import crash_text
from opsbot.lab.emulator.scheduler import Scheduler
from opsbot.lab.layout import inventory_data, plan_lab, unit_text
from opsbot.lab.settings import LabSettings
from tests.realparts import shared_file

FIXTURE = Path(__file__).parent / "fixtures/gpu/nvidia-smi-query.csv"


# ---- flags ---------------------------------------------------------------------------------------

def test_server_flags_take_sglang_names_defaults_and_abbreviations() -> None:
    args = parse_server(["--model-path", "/m", "--tp", "4", "--disaggregation-mode", "decode"])
    assert args.tp_size == 4 and args.port == 30000 and args.host == "127.0.0.1"
    assert args.watchdog_timeout == 300 and args.decode_log_interval == 40
    assert args.disaggregation_bootstrap_port == 8998 and args.disaggregation_transfer_backend == "mooncake"
    assert args.hicache_size == 0 and args.enable_metrics is False
    assert args.served_model_name == "/m"  # defaults to the model path, the model_name label
    assert parse_server(["--model", "/m", "--tensor-parallel-size", "2"]).tp_size == 2


@pytest.mark.parametrize("argv", [
    ["--model-path", "/m", "--no-such-flag"],
    ["--model-path", "/m", "--disaggregation-mode", "both"],
    ["--tp", "4"],  # --model-path is required
])
def test_bad_server_flags_exit_with_argparse_usage_error(argv, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        parse_server(argv)
    assert e.value.code == 2
    assert "usage: sglang serve" in capsys.readouterr().err


def test_router_flags_pd_prefill_with_and_without_bootstrap_port() -> None:
    args = parse_router(["--pd-disaggregation", "--prefill", "http://p1:30000", "8998", "--prefill", "http://p2:30000",
                         "--decode", "http://d1:30000", "--prometheus-port", "29001"])
    assert args.prefill == [("http://p1:30000", 8998), ("http://p2:30000", None)]
    assert args.decode == ["http://d1:30000"] and args.prometheus_port == 29001
    assert args.health_check_interval_secs == 60 and args.health_check_endpoint == "/health"
    with pytest.raises(SystemExit):
        parse_router(["--pd-disaggregation", "--prefill", "http://p1:30000", "x"])


def test_every_flag_the_lab_passes_is_in_the_sglang_reference() -> None:
    text = shared_file("reference/sglang.md").read_text()
    for role in plan_lab(LabSettings(), 2).roles:
        for flag in (a for a in role.argv if a.startswith("--")):
            snake = flag[2:].replace("-", "_")  # RouterArgs fields are listed by their snake-case names
            assert f"`{flag}" in text or f"{flag} " in text or f"{snake} " in text, f"{flag} not in sglang.md"


# ---- exposition ------------------------------------------------------------------------------------

def test_exposition_parses_and_keeps_types_labels_and_histogram_counts() -> None:
    reg = Registry({"model_name": "m", "tp_rank": "0"})
    reg.family("sglang:num_running_reqs", "gauge", "The number of running requests.")
    reg.family("sglang:realtime_tokens_total", "counter", "Total number of tokens processed.")
    reg.family("sglang:kv_transfer_latency_ms", "histogram", "latency", (1, 10, 100))
    reg.set("sglang:num_running_reqs", 3)
    reg.inc("sglang:realtime_tokens_total", 40, {"mode": "decode"})
    reg.inc("sglang:realtime_tokens_total", 2, {"mode": "decode"})
    for v in (0.5, 5, 50, 500):
        reg.observe("sglang:kv_transfer_latency_ms", v)
    text = reg.render()
    assert 'sglang:num_running_reqs{model_name="m",tp_rank="0"} 3.0' in text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert fams["sglang:realtime_tokens"].type == "counter"
    assert fams["sglang:realtime_tokens"].samples[0].value == 42.0
    buckets = {s.labels["le"]: s.value for s in fams["sglang:kv_transfer_latency_ms"].samples
               if s.name.endswith("_bucket")}
    assert buckets == {"1.0": 1.0, "10.0": 2.0, "100.0": 3.0, "+Inf": 4.0}
    count = [s.value for s in fams["sglang:kv_transfer_latency_ms"].samples if s.name.endswith("_count")]
    assert count == [4.0]


@given(st.text(min_size=0, max_size=40), st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_any_label_value_and_number_round_trips_through_the_parser(label: str, value: float) -> None:
    reg = Registry()
    reg.family("sglang:token_usage", "gauge", "The token usage.")
    reg.set("sglang:token_usage", value, {"model_name": label})
    (fam,) = text_string_to_metric_families(reg.render())
    (sample,) = fam.samples
    assert sample.labels == {"model_name": label} and sample.value == value


# ---- the simulation ------------------------------------------------------------------------------------

class Clock:
    """Simulated time: the scheduler's events fire on it, not on the wall clock."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _sched(tmp_path: Path, mode: str, state: str = "healthy") -> Scheduler:
    path = tmp_path / "control" / f"{mode}.json"
    write_control(path, Control(state))
    return Scheduler(mode, "deepseek-ai/DeepSeek-V4-Flash", str(path), 4, "127.0.0.1:8998", clock=Clock())


def _run(s: Scheduler, seconds: float) -> None:
    for _ in range(round(seconds / 0.1)):
        s.clock.t += 0.1
        s.tick(0.1)


def _tokens(s: Scheduler, mode: str) -> float:
    return s.reg.get("sglang:realtime_tokens_total", {"mode": mode})


def test_healthy_decode_moves_realtime_tokens_and_logs_decode_batches(tmp_path, capsys) -> None:
    s = _sched(tmp_path, "decode")
    _run(s, 2.5)
    assert _tokens(s, "decode") > 0
    out = capsys.readouterr().out
    assert re.search(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d TP0\] Decode batch, #running-req: \d+, #full token: \d+, "
                     r"full token usage: [\d.]+, #swa token: \d+, swa token usage: [\d.]+, pre-allocated usage: ",
                     out, re.M)


def test_wedged_decode_holds_requests_and_moves_nothing(tmp_path, capsys) -> None:
    s = _sched(tmp_path, "decode")
    _run(s, 2.0)
    write_control(s.control_file, Control("wedged"))
    _run(s, 0.2)
    frozen = _tokens(s, "decode")
    capsys.readouterr()
    _run(s, 3.0)
    assert _tokens(s, "decode") == frozen and s.stalled and len(s.running) >= 12
    assert "Decode batch" not in capsys.readouterr().out


def test_until_restart_state_is_taken_up_while_running_and_cleared_at_the_next_start(tmp_path, monkeypatch) -> None:
    s = _sched(tmp_path, "decode")
    _run(s, 1.0)
    time.sleep(0.01)  # a new mtime, as a separate write would have
    write_control(s.control_file, Control("wedged", until_restart=True))
    _run(s, 0.2)  # the running process takes it up (and marks it as its own)
    assert s.control.state == "wedged" and read_control(s.control_file).held_by == control.PROCESS
    frozen = _tokens(s, "decode")
    _run(s, 1.0)
    assert _tokens(s, "decode") == frozen, "still wedged: only a restart clears it"
    assert control.take_up_control(s.control_file, starting=True).state == "wedged"  # same process: kept
    monkeypatch.setattr(control, "PROCESS", "restarted-process")
    assert control.take_up_control(s.control_file, starting=True) == Control()  # the next start: healthy
    assert read_control(s.control_file) == Control()


def test_until_restart_state_injected_before_a_start_holds_for_that_start(tmp_path, monkeypatch) -> None:
    p = tmp_path / "decode.json"
    write_control(p, Control("crash", "boom", until_restart=True))
    monkeypatch.setattr(control, "PROCESS", "first")
    assert control.take_up_control(p, starting=True).state == "crash"
    monkeypatch.setattr(control, "PROCESS", "second")  # systemd's Restart= after the crash: still broken
    assert control.take_up_control(p, starting=True, automatic=True).state == "crash"
    assert read_control(p).held_by == "second"
    monkeypatch.setattr(control, "PROCESS", "third")  # a restart (stop, reset-failed, start): fixed
    assert control.take_up_control(p, starting=True).state == "healthy"
    write_control(p, Control("wedged"))  # a plain injection survives any number of starts
    assert control.take_up_control(p, starting=True).state == "wedged"
    monkeypatch.setattr(control, "PROCESS", "fourth")
    assert control.take_up_control(p, starting=True).state == "wedged"


def test_healthy_prefill_moves_prefill_compute_and_logs_prefill_batches(tmp_path, capsys) -> None:
    s = _sched(tmp_path, "prefill")
    _run(s, 4.0)
    assert _tokens(s, "prefill_compute") > 0
    assert "Prefill batch, #new-seq: " in capsys.readouterr().out


def test_prefill_saturation_fills_the_queue(tmp_path, capsys) -> None:
    s = _sched(tmp_path, "prefill", "prefill-saturated")
    _run(s, 2.5)
    assert s.reg.get("sglang:num_queue_reqs") >= 20
    assert re.search(r"#queue-req: \d\d, #pending-token: \d{6,}", capsys.readouterr().out)


def test_retract_storm_counts_retractions_with_the_real_log_line(tmp_path, capsys) -> None:
    s = _sched(tmp_path, "decode", "retract-storm")
    _run(s, 4.5)
    assert s.reg.get("sglang:num_retracted_requests_total") > 0
    assert s.reg.get("sglang:token_usage") >= 0.99
    assert re.search(r"KV cache pool is full\. Retract requests\. #retracted_reqs: \d+, #new_tokens_gained: \d+, "
                     r"#new_token_ratio: \d\.\d{4} -> \d\.\d{4}", capsys.readouterr().out)


def test_retract_storm_slows_decode_down_but_never_stops_it(tmp_path, capsys) -> None:
    """sglang#26248: a retraction storm takes decode from ~429 to 20-38 tokens/s; it is not a wedge."""
    s = _sched(tmp_path, "decode")
    _run(s, 3.0)  # healthy first: the storm must also slow down the requests already running
    write_control(s.control_file, Control("retract-storm"))
    _run(s, 3.0)
    capsys.readouterr()
    windows = []
    for _ in range(10):  # every probe-length window (3 s, Settings.metrics_window_s) sees the counter move
        before = _tokens(s, "decode")
        _run(s, 3.0)
        windows.append(_tokens(s, "decode") - before)
    assert all(w > 0 for w in windows), windows
    assert 15 <= sum(windows) / 30.0 <= 45, sum(windows) / 30.0
    assert s.reg.get("sglang:num_running_reqs") > 0 and s.reg.get("sglang:num_queue_reqs") > 0
    throughputs = [float(t) for t in re.findall(r"gen throughput \(token/s\): ([\d.]+)", capsys.readouterr().out)]
    assert throughputs and all(15 <= t <= 45 for t in throughputs), throughputs


@pytest.mark.parametrize("state,pattern,counter", [
    ("prefill-saturated", r"KVTransferError\(bootstrap_room=(\d+)\): Aborted by AbortReq\.",
     "sglang:num_transfer_failed_reqs_total"),
    ("kv-transfer-fail", r"Decode transfer failed for request rank=0 .*KVTransferError\(bootstrap_room=(\d+)\)",
     "sglang:num_transfer_failed_reqs_total"),
    ("pd-desync", r"Decode handshake failed for request rank=0 .*KVTransferError\(bootstrap_room=(\d+)\)",
     "sglang:num_bootstrap_failed_reqs_total"),
])
def test_decode_failure_states_log_the_real_strings_and_count(tmp_path, capsys, state, pattern, counter) -> None:
    s = _sched(tmp_path, "decode", state)
    _run(s, 2.5)
    assert s.reg.get(counter) > 0
    m = re.search(pattern, capsys.readouterr().out)
    assert m, state
    assert f"bootstrap_room={m.group(1)}" in m.group(0)


def test_control_file_survives_garbage_and_unknown_states(tmp_path, capsys) -> None:
    p = tmp_path / "c.json"
    assert read_control(p) == Control()
    p.write_text("{not json")
    assert read_control(p).state == "healthy"
    p.write_text('{"state": "melted"}')
    assert read_control(p).state == "healthy"
    assert "unknown state" in capsys.readouterr().out
    write_control(p, Control("wedged", "x", False))
    assert read_control(p) == Control("wedged", "x", False)


def test_crash_text_is_a_traceback_ending_in_the_exception_line() -> None:
    text = crash_text(control.DEFAULT_CRASH_MESSAGE)
    assert text.startswith("Traceback (most recent call last):\n")
    assert text.endswith("ValueError: DeepSeek V4 HiCache currently does not support --hicache-size; "
                         "use --hicache-ratio instead.")
    assert crash_text("boom").endswith("\nRuntimeError: boom")


# ---- nvidia-smi --------------------------------------------------------------------------------------

def test_nvidia_smi_matches_the_real_csv_format(tmp_path, monkeypatch) -> None:
    (tmp_path / "node.json").write_text('{"machine": "m1", "gpus": 2}')
    monkeypatch.setenv("SGLANG_EMULATOR_STATE_DIR", str(tmp_path))
    fields = ["index", "uuid", "name", "memory.used", "memory.total", "utilization.gpu", "temperature.gpu",
              "power.draw", "clocks.current.sm"]
    text = nvidia_smi.render(fields, {"csv"}, gpu.rows(tmp_path))
    header, row0, _ = text.splitlines()
    want_header, want_row = FIXTURE.read_text().splitlines()[:2]
    assert header == want_header
    shape = re.sub(r"GPU-[0-9a-f-]+", "UUID", row0)
    assert shape == re.sub(r"GPU-[0-9a-f-]+", "UUID", want_row)  # idle GPU: the fixture's exact values
    gpu.hold("decode", [1], 126518, root=tmp_path)
    bare = nvidia_smi.render(["index", "memory.used", "memory.total"], {"csv", "noheader", "nounits"},
                             gpu.rows(tmp_path))
    assert bare == "0, 0, 143771\n1, 126518, 143771\n"


def test_nvidia_smi_releases_a_dead_process_and_drops_a_faulted_gpu(tmp_path) -> None:
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "prefill.json").write_text('{"pid": 999999999, "gpus": [0], "mib": 1000}')
    assert [r.memory_used for r in gpu.rows(tmp_path)] == [0, 0, 0, 0]
    gpu.hold("decode", [0, 1, 2, 3], 500, root=tmp_path)
    write_control(tmp_path / "control" / "decode.json", Control("gpu-fault"))
    assert [r.index for r in gpu.rows(tmp_path)] == [0, 1, 2]


def test_nvidia_smi_refuses_unknown_fields(capsys) -> None:
    assert nvidia_smi.main(["--query-gpu=index,bogus", "--format=csv"]) == 2
    assert 'Field "bogus" is not a valid field to query.' in capsys.readouterr().out


# ---- layout --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("nodes", [1, 2, 3, 4, 5, 16])
def test_every_port_in_a_lab_is_unique_and_the_inventory_validates(nodes: int) -> None:
    plan = plan_lab(LabSettings(), nodes)
    ports = [n.ssh_port for n in plan.nodes] + [p for r in plan.roles for p in (r.port, r.prometheus_port) if p]
    ports += list({r.bootstrap_port for r in plan.roles if r.bootstrap_port})
    assert len(ports) == len(set(ports))
    keys = {n.name: f"ssh-ed25519 AAAA{n.name}" for n in plan.nodes}
    data = inventory_data(plan, keys, Path("/k"))
    inv = Inventory.model_validate(yaml.safe_load(yaml.safe_dump(data)))
    assert {r.role for r in inv.clusters["lab"].roles} == {"prefill", "decode", "router"}


def test_a_sixteen_node_lab_has_pd_pairs_with_routers_of_their_own_within_the_port_slot() -> None:
    settings = LabSettings()
    plan = plan_lab(settings, 16)
    kinds = [r.kind for r in plan.roles]
    assert (kinds.count("prefill"), kinds.count("decode"), kinds.count("router")) == (8, 8, 4)
    offsets = [p - settings.lab_service_port_base for r in plan.roles
               for p in (r.port, r.prometheus_port, r.bootstrap_port) if p]
    assert all(0 <= o < 28 or 48 <= o < 60 for o in offsets), "clear of the lab's Prometheus, Alertmanager, exporters"
    router2 = plan.role("router-2")
    assert router2.node == plan.role("prefill-2").node
    assert "http://127.0.0.1:%d" % plan.role("decode-3").port in router2.argv
    decode3 = plan.role("decode-3")
    assert decode3.bootstrap_port == plan.role("prefill-2").bootstrap_port != plan.role("prefill").bootstrap_port
    later = plan.role("router-4").argv  # pairs past the third extra router join it
    assert all(f"http://127.0.0.1:{plan.role(k).port}" in later for k in ("prefill-8", "decode-15"))


def test_unit_runs_the_emulator_with_restart_policy_and_visible_crash_loop() -> None:
    plan = plan_lab(LabSettings(), 2)
    text = unit_text(plan.role("decode"))
    assert "Restart=on-failure" in text and "RestartSec=1" in text and "StartLimitBurst=5" in text
    assert "ExecStart=/usr/bin/python3 -m sglang_emulator.launch_server --model-path" in text
    assert "--disaggregation-mode decode" in text and "--enable-metrics" in text
    router = unit_text(plan.role("router"))
    assert "sglang_emulator.launch_router launch --pd-disaggregation --prefill http://127.0.0.1:30000 30004" in router
    assert "--decode http://127.0.0.1:30001" in router


def test_decode_loses_the_prefill_after_missed_heartbeats_and_recovers(tmp_path, capsys) -> None:
    s = _sched(tmp_path, "decode")
    s.heartbeat(False)  # never connected yet: a decode starting before its prefill says nothing
    _run(s, 1.0)
    s.heartbeat(True)
    s.heartbeat(False)
    assert not s.prefill_lost
    s.heartbeat(False)
    out = capsys.readouterr().out
    assert "Attempting to reconnect to 127.0.0.1:8998..." in out
    assert re.search(r"Lost connection with prefill instance \(bootstrap_addr: 127\.0\.0\.1:8998\), \d+ requests "
                     r"affected", out)
    assert s.reg.get("sglang:num_transfer_failed_reqs_total") >= 1
    left = {r.rid for r in s.running}
    _run(s, 5.0)
    assert {r.rid for r in s.running} <= left  # requests with their KV finish; no new work arrives
    s.heartbeat(True)
    _run(s, 2.0)  # new work arrives at random: a few ticks (emulated time) fill the batch again
    assert len(s.running) == 8


def test_0_5_12_mode_drops_is_streaming_and_speaks_the_old_wording(tmp_path, capsys) -> None:
    path = tmp_path / "control" / "decode.json"
    write_control(path, Control())
    s = Scheduler("decode", "m", str(path), 4, "127.0.0.1:8998", clock=Clock(), version="0.5.12")
    _run(s, 3.0)
    fams = {f.name: f for f in text_string_to_metric_families(s.reg.render())}
    assert all("is_streaming" not in smp.labels for smp in fams["sglang:num_requests"].samples)
    assert "sglang:max_total_num_tokens_swa" not in fams
    s.heartbeat(True)
    s.heartbeat(False)
    s.heartbeat(False)
    assert "Losing connection with prefill instance (bootstrap_addr: 127.0.0.1:8998)" in capsys.readouterr().out
    p = Scheduler("prefill", "m", str(path), 4, clock=Clock(), version="0.5.12")
    _run(p, 4.0)
    out = capsys.readouterr().out
    assert "Prefill batch, " in out and "#optimistic-req" not in out


def test_load_snapshot_goes_stale_while_wedged(tmp_path) -> None:
    s = _sched(tmp_path, "decode")
    _run(s, 1.5)
    snap = s.load_snapshot()
    assert snap["num_running_reqs"] == 8 and snap["disaggregation"]["mode"] == "decode"
    write_control(s.control_file, Control("wedged"))
    s.published -= 60  # as if the last publish was a minute ago
    _run(s, 3.0)
    assert s.load_snapshot()["timestamp"] == time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s.published)) + "Z"
    assert s.load_snapshot()["timestamp"] < time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 30))


# ---- the lab's command line and helpers (no nodes needed) --------------------------------------------

def test_parse_show_reads_one_block_per_unit() -> None:
    from opsbot.lab.nodes import _parse_show

    roles = plan_lab(LabSettings(), 2).node("node1").roles
    out = ("Id=sglang-dsv4-prefill.service\nActiveState=active\nSubState=running\nNRestarts=3\n\n"
           "Id=sglang-router.service\nActiveState=failed\nSubState=failed\nNRestarts=\n")
    rows = _parse_show(out, roles)
    assert [(r.role, r.active_state, r.n_restarts) for r in rows] == [("prefill", "active", 3), ("router", "failed", None)]


@pytest.mark.parametrize("argv,message", [
    (["inject", "decode", "melted"], "unknown state 'melted'"),
    (["inject", "decode", "no-healthy-workers"], "applies to router, not to decode"),
    (["inject", "janitor", "wedged"], "no role 'janitor' in this lab"),
])
def test_inject_refuses_bad_roles_and_states_before_touching_a_node(tmp_path, monkeypatch, argv, message) -> None:
    from typer.testing import CliRunner

    from opsbot.cli import app
    from opsbot.settings import get_settings

    monkeypatch.setenv("OPSBOT_DATA_DIR", str(tmp_path))
    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["lab", *argv])
    get_settings.cache_clear()
    assert result.exit_code == 1
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "lab").exists() or not list((tmp_path / "lab").rglob("*.json"))


# ---- the router ----------------------------------------------------------------------------------

@pytest.mark.parametrize("state", ["healthy", "no-healthy-workers", "prefill-saturated", "wedged"])
def test_router_health_and_liveness_are_process_liveness_only(tmp_path, state) -> None:
    """sglang.md §6.2: /health and /liveness answer 200 "OK" whatever the workers; /readiness carries them."""
    import threading
    import urllib.error
    import urllib.request

    from opsbot.lab.emulator.launch_router import Router, api_handler
    from opsbot.lab.emulator.launch_server import QuietHTTPServer

    control_file = tmp_path / "router.json"
    write_control(control_file, Control(state))
    # workers nobody listens on: every health check fails, as when prefill is saturated or dead
    args = parse_router(["--pd-disaggregation", "--prefill", "http://127.0.0.1:9", "--decode", "http://127.0.0.1:9",
                         "--health-check-timeout-secs", "1", "--health-failure-threshold", "1"])
    router = Router(args, str(control_file))
    for _ in range(3):
        router.check_once()
    httpd = QuietHTTPServer(("127.0.0.1", 0), api_handler(router))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"

    def get(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(base + path, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    try:
        assert get("/health") == (200, "OK")
        assert get("/liveness") == (200, "OK")
        code, body = get("/readiness")
        assert code == 503 and "insufficient healthy workers" in body
        health = [ln for ln in router.reg.render().splitlines() if ln.startswith("smg_worker_health{")]
        assert health and all(ln.endswith(" 0") or ln.endswith(" 0.0") for ln in health), health
    finally:
        httpd.shutdown()


def test_smg_mode_speaks_smg_flags_metrics_and_log_lines(tmp_path, capsys) -> None:
    """`launch` first: smg 1.13's CLI (no --mini-lb, --worker-wedge-secs), families and tracing-format lines."""
    from opsbot.lab.emulator.launch_router import Router

    base = ["--pd-disaggregation", "--prefill", "http://127.0.0.1:9", "--decode", "http://127.0.0.1:9",
            "--health-check-timeout-secs", "1", "--health-failure-threshold", "1"]
    with pytest.raises(SystemExit):
        parse_router([*base, "--mini-lb"], smg=True)
    assert parse_router([*base, "--host", "::"], smg=True).prometheus_host == "::"
    assert parse_router([*base, "--host", "::"]).prometheus_host == "0.0.0.0"  # sglang-router 0.3.2
    args = parse_router([*base, "--worker-wedge-secs", "5"], smg=True)
    control_file = tmp_path / "router.json"
    write_control(control_file, Control("healthy"))
    router = Router(args, str(control_file), smg=True)
    zero = router.reg.render()
    assert 'smg_worker_stalled{reason="wedged",worker="http://127.0.0.1:9"} 0' in zero
    assert "smg_pd_admission_sheds_total 0" in zero and 'smg_worker_overload_shed_total{stage="selection"} 0' in zero
    router.check_once()
    router.check_once()
    text = router.reg.render()
    assert 'smg_worker_stalled{reason="unreachable",worker="http://127.0.0.1:9"} 1' in text
    assert 'smg_worker_health{worker="http://127.0.0.1:9"} 0' in text  # smg labels it by worker only
    out = capsys.readouterr().out
    assert " WARN smg::worker::worker: model_gateway/src/worker/worker.rs:1768: HTTP health check failed for " \
           "http://127.0.0.1:9/health" in out


def test_kv_transfer_fail_until_restart_clears_when_prefill_restarts(tmp_path) -> None:
    """kv-transfer-failure's remedy restarts prefill: decode's failing transfer sessions clear once its prefill
    bootstrap server went away and came back (a restart), not while it keeps answering; a plain state stays."""
    s = _sched(tmp_path, "decode")
    time.sleep(0.01)
    write_control(s.control_file, Control("kv-transfer-fail", until_restart=True))
    _run(s, 0.2)
    assert s.state == "kv-transfer-fail" and s.awaits_peer_restart()
    s.peer_seen(True)
    _run(s, 0.2)
    assert s.state == "kv-transfer-fail", "prefill answering all along: not a restart"
    s.peer_seen(False)  # prefill stopped ...
    s.peer_seen(True)  # ... and started again
    time.sleep(0.01)
    _run(s, 0.2)
    assert s.state == "healthy" and read_control(s.control_file) == Control()
    write_control(s.control_file, Control("kv-transfer-fail"))  # injected without --until-restart: lasts
    _run(s, 0.2)
    s.peer_seen(False)
    s.peer_seen(True)
    _run(s, 0.2)
    assert s.state == "kv-transfer-fail" and not s.awaits_peer_restart()


def test_production_settings_know_nothing_of_the_lab() -> None:
    """Lab settings live with the lab: a production OPSBOT_LAB_* field would be a lab leaking into serve."""
    from opsbot.settings import Settings

    assert not [name for name in Settings.model_fields if name.startswith("lab")]
    assert {"lab_dir", "lab_prefix", "lab_service_port_base"} <= set(LabSettings.model_fields)
    assert LabSettings(data_dir=Path("/tmp/x")).lab_path() == Path("/tmp/x/lab")
