"""The lab against real systemd-nspawn nodes: sshd, systemd units, journald, the emulator."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from opsbot.lab.nodes import Lab

pytestmark = pytest.mark.lab

SCHEDULER_LABELS = {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"}
GPU_QUERY = [
    "nvidia-smi",
    "--query-gpu=index,uuid,name,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw",
    "--format=csv,noheader,nounits",
]


def get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def samples(lab: Lab, role: str) -> dict[tuple[str, frozenset], float]:
    status, body = get(lab.url(role, "/metrics"))
    assert status == 200
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(body)
        for s in fam.samples
    }


def value(s: dict, name: str, **labels: str) -> float:
    hits = [v for (n, ls), v in s.items() if n == name and set(labels.items()) <= set(ls)]
    assert hits, f"{name}{labels} missing"
    return sum(hits)


def unit_show(lab: Lab, node: str, unit: str) -> dict[str, str]:
    out = lab.ssh(node, ["systemctl", "show", "-p", "ActiveState,SubState,NRestarts,MainPID,Result", unit]).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def wait_for(cond, timeout: float, what: str, every: float = 0.5):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture
def healthy(lab: Lab):
    yield lab
    lab.reset()


def test_nodes_boot_with_units_running_and_inventory_pinned(lab: Lab) -> None:
    inv = lab.inventory
    _, cluster = inv.cluster(None)
    assert [n.name for n in cluster.nodes] == lab.node_names == ["node1", "node2"]
    assert {(r.role, r.node, r.unit) for r in cluster.roles} == {
        ("prefill", "node1", "sglang-dsv4-prefill.service"),
        ("router", "node1", "sglang-router.service"),
        ("decode", "node2", "sglang-dsv4-decode.service"),
    }
    for node in lab.status():
        assert node.running and node.sshd
        assert node.units and all(u.active_state == "active" for u in node.units), node.units


def test_each_node_has_its_own_host_key_and_it_is_the_pinned_one(lab: Lab) -> None:
    _, cluster = lab.inventory.cluster(None)
    pinned = {n.name: n.host_key for n in cluster.nodes}
    assert len(set(pinned.values())) == len(pinned)
    for n in cluster.nodes:
        scan = subprocess.run(["ssh-keyscan", "-p", str(n.port), "-t", "ed25519,rsa,ecdsa", "127.0.0.1"],
                              capture_output=True, text=True, timeout=15).stdout
        offered = {" ".join(line.split()[1:3]) for line in scan.splitlines() if line and not line.startswith("#")}
        assert offered == {pinned[n.name]}, f"{n.name} offers {offered}"


def test_unknown_host_key_is_refused_by_the_ssh_client(lab: Lab, tmp_path) -> None:
    _, cluster = lab.inventory.cluster(None)
    other = cluster.nodes[1].host_key
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"[127.0.0.1]:{cluster.nodes[0].port} {other}\n")
    res = subprocess.run(
        ["ssh", "-i", str(cluster.nodes[0].key_file), "-p", str(cluster.nodes[0].port), "-o", "BatchMode=yes",
         "-o", f"UserKnownHostsFile={wrong}", "-o", "StrictHostKeyChecking=yes", "root@127.0.0.1", "true"],
        capture_output=True, text=True, timeout=15,
    )
    assert res.returncode != 0 and "HOST IDENTIFICATION HAS CHANGED" in res.stderr


def test_metrics_parse_with_exact_sglang_names_and_labels(lab: Lab) -> None:
    # the lab's decode runs DP attention with two ranks: each rank's series adds dp_rank (sglang 0.5.23
    # observability/metrics_collector.py:1391-1392), with its own attention-TP-0 tp_rank
    for role, engine, extra in (("prefill", "prefill", set()), ("decode", "decode", {"dp_rank"})):
        status, body = get(lab.url(role, "/metrics"))
        assert status == 200
        fams = {f.name: f for f in text_string_to_metric_families(body)}
        for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
                     "sglang:gen_throughput", "sglang:num_prefill_bootstrap_queue_reqs",
                     "sglang:num_decode_transfer_queue_reqs", "sglang:num_retracted_reqs"):
            assert fams[name].type == "gauge", name
        for name in ("sglang:realtime_tokens", "sglang:num_transfer_failed_reqs", "sglang:prompt_tokens",
                     "sglang:generation_tokens", "sglang:num_requests", "sglang:cached_tokens"):
            assert fams[name].type == "counter", name
        assert fams["sglang:kv_transfer_latency_ms"].type == "histogram"
        running = fams["sglang:num_running_reqs"].samples[0]
        assert set(running.labels) == SCHEDULER_LABELS | extra and running.labels["engine_type"] == engine
        if extra:
            ranks = {(s.labels["dp_rank"], s.labels["tp_rank"]) for s in fams["sglang:num_running_reqs"].samples}
            assert ranks == {("0", "0"), ("1", "2")}  # tp 4, dp 2: ranks 0 and 1 on TP 0 and TP 2
        assert "pid" in fams["sglang:num_retracted_reqs"].samples[0].labels
        modes = {s.labels["mode"] for s in fams["sglang:realtime_tokens"].samples}
        assert modes == {"prefill_compute", "prefill_cache", "decode"}
        streaming = {s.labels.get("is_streaming") for s in fams["sglang:num_requests"].samples}
        assert streaming == {"true", "false"}
    status, body = get(lab.url("router", "/metrics"))
    names = {f.name for f in text_string_to_metric_families(body)}
    assert {"smg_worker_health", "smg_worker_pool_size"} <= names
    # the node sees the same endpoint (what the probe reads through its SSH port forward)
    res = lab.ssh("node2", ["python3", "-c", f"import urllib.request;print(urllib.request.urlopen("
                                             f"{lab.url('decode', '/metrics')!r}).read().decode())"])
    assert "sglang:num_running_reqs{" in res.stdout


def test_healthy_decode_moves_realtime_tokens_and_wedged_does_not(healthy: Lab) -> None:
    lab = healthy
    key = "sglang:realtime_tokens_total"
    a = value(samples(lab, "decode"), key, mode="decode")
    time.sleep(2.5)
    b = value(samples(lab, "decode"), key, mode="decode")
    assert b > a, "healthy decode must make progress"
    lab.inject("decode", "wedged")
    time.sleep(1.5)
    first = samples(lab, "decode")
    time.sleep(3)
    second = samples(lab, "decode")
    assert value(second, "sglang:num_running_reqs") > 0
    assert value(second, key, mode="decode") == value(first, key, mode="decode")
    # the unit itself stays active: only the metrics tell
    assert unit_show(lab, "node2", "sglang-dsv4-decode.service")["ActiveState"] == "active"


def test_killed_process_makes_nrestarts_climb(healthy: Lab) -> None:
    lab = healthy
    unit = "sglang-dsv4-decode.service"
    before = unit_show(lab, "node2", unit)
    lab.ssh("node2", ["kill", "-9", before["MainPID"]])
    after = wait_for(
        lambda: (s := unit_show(lab, "node2", unit))["NRestarts"] != before["NRestarts"] and s["ActiveState"] == "active"
        and s, 15, "the unit to restart")
    assert int(after["NRestarts"]) == int(before["NRestarts"]) + 1
    assert after["MainPID"] != before["MainPID"]


def test_crash_state_makes_a_crash_loop_with_the_message_in_the_journal(healthy: Lab) -> None:
    lab = healthy
    unit = "sglang-dsv4-prefill.service"
    lab.inject("prefill", "crash")
    wait_for(lambda: int(unit_show(lab, "node1", unit)["NRestarts"] or 0) >= 2, 30, "restarts to climb")
    log = lab.ssh("node1", ["journalctl", "-u", unit, "--no-pager", "-n", "200"]).stdout
    assert "ValueError: DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead." in log
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log


def test_custom_crash_message_reaches_the_journal(healthy: Lab) -> None:
    lab = healthy
    unit = "sglang-dsv4-decode.service"
    lab.inject("decode", "crash", message="Not enough memory. Please try to increase --mem-fraction-static.")
    want = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    wait_for(lambda: want in lab.ssh("node2", ["journalctl", "-u", unit, "--no-pager", "-n", "100"]).stdout,
             20, "the custom message")


def test_nvidia_smi_shows_memory_held_while_the_role_runs(healthy: Lab) -> None:
    lab = healthy

    def used() -> list[int]:
        out = lab.ssh("node2", GPU_QUERY).stdout.strip().splitlines()
        assert len(out) == 4 and all(", NVIDIA H200, " in row and ", 143771, " in row for row in out), out
        return [int(row.split(", ")[3]) for row in out]

    assert min(used()) > 100_000
    lab.ssh("node2", ["systemctl", "stop", "sglang-dsv4-decode.service"], 20)
    assert used() == [0, 0, 0, 0]


def test_router_reports_no_healthy_workers(healthy: Lab) -> None:
    lab = healthy
    wait_for(lambda: get(lab.url("router", "/readiness"))[0] == 200, 30, "the router to be ready")
    lab.inject("router", "no-healthy-workers")
    status, body = wait_for(lambda: (r := get(lab.url("router", "/readiness")))[0] == 503 and r, 15, "503")
    assert "insufficient healthy workers" in body
    assert get(lab.url("router", "/health"))[0] == 200  # liveness only


def test_prefill_saturation_cascades_to_decode_aborts(healthy: Lab) -> None:
    lab = healthy
    assert lab.inject("prefill", "prefill-saturated") == ["prefill", "decode"]
    wait_for(lambda: value(samples(lab, "prefill"), "sglang:num_queue_reqs") >= 20, 15, "a long prefill queue")
    log = wait_for(
        lambda: (out := lab.ssh("node2", ["journalctl", "-u", "sglang-dsv4-decode.service", "--no-pager",
                                          "-n", "50"]).stdout) and "Aborted by AbortReq." in out and out,
        15, "the decode abort cascade")
    assert "KVTransferError(bootstrap_room=" in log
    assert value(samples(lab, "decode"), "sglang:num_transfer_failed_reqs_total") > 0
    # the router's /health and /liveness are process liveness only, whatever its workers do (§6.2)
    assert get(lab.url("router", "/health")) == (200, "OK")
    assert get(lab.url("router", "/liveness")) == (200, "OK")


def test_stopped_sshd_refuses_and_comes_back(healthy: Lab) -> None:
    lab = healthy
    lab.stop_sshd("node2")
    try:
        assert lab.ssh("node2", ["true"], timeout=5).returncode != 0
        assert lab.ssh("node1", ["true"], timeout=5).returncode == 0
    finally:
        lab.start_sshd("node2")
    wait_for(lambda: lab.ssh("node2", ["true"], timeout=5).returncode == 0, 15, "sshd back")


@pytest.mark.parametrize("state,line", [
    ("oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"),
    ("watchdog", "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"),
    ("nccl-timeout", "Triggering SIGQUIT for cleanup..."),
])
def test_runtime_deaths_log_and_restart(healthy: Lab, state: str, line: str) -> None:
    lab = healthy
    unit = "sglang-dsv4-decode.service"
    before = int(unit_show(lab, "node2", unit)["NRestarts"])
    lab.inject("decode", state)
    wait_for(lambda: int(unit_show(lab, "node2", unit)["NRestarts"]) > before, 30, f"{state} to kill the server")
    log = lab.ssh("node2", ["journalctl", "-u", unit, "--no-pager", "-n", "80"]).stdout
    assert line in log
    assert "SIGQUIT received. signum=" in log and "It usually means one child failed." in log


def test_a_request_through_the_router_reaches_prefill_and_decode(healthy: Lab) -> None:
    lab = healthy
    wait_for(lambda: get(lab.url("router", "/readiness"))[0] == 200, 30, "the router to be ready")
    chat = ("endpoint", "/v1/chat/completions")

    def served(role: str) -> float:
        return sum(v for (n, ls), v in samples(lab, role).items() if n == "sglang:http_requests_total" and chat in ls)

    before = {r: served(r) for r in ("prefill", "decode")}
    body = b'{"model": "deepseek-ai/DeepSeek-V4-Flash", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}'
    req = urllib.request.Request(lab.url("router", "/v1/chat/completions"), data=body,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200 and b'"chat.completion"' in resp.read()
    for role in ("prefill", "decode"):
        assert served(role) == before[role] + 1, role
    assert get(lab.url("router", "/health_generate"), timeout=30)[0] == 200


def test_wedged_health_answers_503_after_the_health_check_timeout(healthy: Lab) -> None:
    lab = healthy
    assert get(lab.url("decode", "/health"))[0] == 200
    lab.inject("decode", "wedged")
    time.sleep(0.6)
    t = time.monotonic()
    assert get(lab.url("decode", "/health"), timeout=15)[0] == 503
    assert time.monotonic() - t >= 2.5  # it waited for progress first, as SGLang does
    log = lab.ssh("node2", ["journalctl", "-u", "sglang-dsv4-decode.service", "--no-pager", "-n", "20"]).stdout
    assert "Health check failed. Server couldn't get a response from detokenizer for last 3 seconds." in log
    status, body = get(lab.url("decode", "/v1/loads?include=all"))  # shared memory: answers anyway
    assert status == 200 and '"num_running_reqs"' in body
    with pytest.raises(OSError):  # /server_info round-trips to the wedged scheduler: it hangs
        urllib.request.urlopen(lab.url("decode", "/server_info"), timeout=2)


def test_stopping_prefill_makes_decode_lose_it(healthy: Lab) -> None:
    lab = healthy
    time.sleep(5.5)  # one heartbeat after start: the decode has connected to the prefill bootstrap server
    lab.ssh("node1", ["systemctl", "stop", "sglang-dsv4-prefill.service"], 20)
    wait_for(
        lambda: "Lost connection with prefill instance (bootstrap_addr: 127.0.0.1:"
        in lab.ssh("node2", ["journalctl", "-u", "sglang-dsv4-decode.service", "--no-pager", "-n", "40"]).stdout,
        25, "the decode to notice", every=1.0)


def test_a_coloured_line_reaches_the_probe_as_text_not_blob_data(lab: Lab) -> None:
    """SMG writes ANSI colour codes whatever its output. The lab's journalctl (systemd 252) strips them from
    short output by itself; older ones print such a line as "[N B blob data]" unless asked for --all (journalctl(1):
    "Show all fields in full, even if they include unprintable characters"), which the probe now always asks."""
    from opsbot.nodecommands import journal

    tag = f"opsbot-ansi-{time.monotonic_ns()}"
    line = r"\033[2m2026-05-01T10:00:00Z\033[0m \033[31mERROR\033[0m smg::routers::http::pd_router: Decode request failed\n"
    assert lab.ssh(lab.node_names[0], ["systemd-cat", "-t", tag, "printf", line]).returncode == 0
    deadline = time.monotonic() + 10
    while True:
        out = lab.ssh(lab.node_names[0], journal(["-t", tag], 10)).stdout
        if "Decode request failed" in out or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert "Decode request failed" in out and "blob data" not in out, out
