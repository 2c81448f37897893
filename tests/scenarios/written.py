"""Write the corpus bundles taken from real incidents in public issue threads.

Each bundle carries a ``label``: the class it must be diagnosed as (``healthy`` = no finding),
classes that may also be reported, classes that must not be, and the thread it comes from.
Log lines follow the wording quoted in the thread (or SGLang's source where the thread
paraphrases). Run ``python -m tests.scenarios.written`` to rewrite them into ``dev/`` and ``test/``
(the part chosen by the source, see ``split.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from tests.scenarios.compose import RoleSpec, T0, Writer, gpu_csv, healthy_roles, register
from tests.scenarios.split import write

SCENARIOS: dict[str, Callable[[], dict]] = {}

ABORT = ("Decode transfer failed for request rank=0 decode_req.req.rid='{rid}' decode_req.req.bootstrap_room={room} "
         "with exception KVTransferError(bootstrap_room={room}): Aborted by AbortReq.")
SERVER_ARGS = ("server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V4-Flash', mem_fraction_static=0.88, "
               "watchdog_timeout=300, enable_hierarchical_cache=True, hicache_ratio=2.0, hicache_size=0, "
               "disaggregation_mode='decode', disaggregation_transfer_backend='mooncake')")


def scenario(name: str, expected: str, source: str, note: str, also: tuple[str, ...] = (),
             must_not: tuple[str, ...] = ()) -> Callable[[Writer], Callable[[], dict]]:
    return register(SCENARIOS, "written", name, {"expected": expected, "also": list(also), "must_not": list(must_not),
                                                 "source": source, "note": note})


def _roles() -> tuple[RoleSpec, RoleSpec, RoleSpec]:
    p, d, r = healthy_roles()
    return p, d, r


@scenario("prefill-saturation-unbootstrapped", "prefill-queue-saturation",
          "https://github.com/sgl-project/sglang/issues/11809",
          "TTFT surges while unbootstrapped requests pile up on prefill under high concurrency; client aborts cascade to decode",
          must_not=("kv-transfer-failure",))
def _saturation():
    p, d, r = _roles()
    p.gauges.update(num_queue_reqs=64, num_prefill_bootstrap_queue_reqs=180, num_running_reqs=8)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (9_000_000, 96_000)
    p.counters["num_aborted_requests"] = (40, 17)
    p.logs = ["Prefill batch, #new-seq: 8, #new-token: 32768, #cached-token: 0, full token usage: 0.62, swa token usage: 0.20, "
              "#running-req: 8, #queue-req: 64, #pending-token: 412000, #bootstrap-req: 180, #inflight-req: 6, cuda graph: False, "
              "input throughput (token/s): 31500.00"]
    d.logs = [ABORT.format(rid=f"r{i}", room=1000 + i) for i in range(12)]
    d.counters["num_transfer_failed_reqs"] = (3, 12)
    return [p, d, r], {}


@scenario("prefill-saturation-bootstrap-timeout", "prefill-queue-saturation",
          "https://github.com/sgl-project/sglang/issues/10110",
          "1P1D at 64 RPS: the system stalls, then 'Prefill bootstrap failed ... timed out after 300.0s in KVPoll.Bootstrapping'",
          must_not=("kv-transfer-failure",))
def _saturation_timeout():
    p, d, r = _roles()
    p.gauges.update(num_queue_reqs=120, num_prefill_bootstrap_queue_reqs=64)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (4_000_000, 60_000)
    p.logs = ["Prefill bootstrap failed for request rank=2 req.rid='d3fd6575d3b24b598367fcbdf1bdd21a' "
              "req.bootstrap_room=5975098084415727586 with exception KVTransferError(bootstrap_room=5975098084415727586): "
              "Request 5975098084415727586 timed out after 300.0s in KVPoll.Bootstrapping"]
    d.logs = [ABORT.format(rid="a1", room=77)]
    return [p, d, r], {}


@scenario("kv-transfer-protection-error", "kv-transfer-failure",
          "https://github.com/sgl-project/sglang/issues/10560",
          "Mooncake 'local protection error'; decode: 'Failed to get kvcache from prefill instance' while /health stays 200")
def _kv_transfer():
    p, d, r = _roles()
    d.logs = [
        "Decode transfer failed for request rank=0 decode_req.req.rid='3ce84ffb82764f45b028dd8e6c4beed1' "
        "decode_req.req.bootstrap_room=1655955501905217457 with exception KVTransferError(bootstrap_room=1655955501905217457): "
        "Failed to get kvcache from prefill instance, it might be dead",
        "Decode transfer failed for request rank=1 decode_req.req.rid='3ce84ffb82764f45b028dd8e6c4beed1' "
        "decode_req.req.bootstrap_room=1655955501905217457 with exception KVTransferError(bootstrap_room=1655955501905217457): "
        "Failed due to an unknown reason from another rank",
    ]
    d.counters["num_transfer_failed_reqs"] = (0, 1)
    return [p, d, r], {}


@scenario("kv-transfer-mooncake-upgrade", "kv-transfer-failure",
          "https://github.com/sgl-project/sglang/issues/12688",
          "after upgrading to 0.5.4.post3 PD requests hang, then fail with transfer errors (Mooncake)")
def _kv_transfer2():
    p, d, r = _roles()
    p.logs = ["Session 10.0.0.2:15347 failed.",
              "Prefill transfer failed for request rank=0 req.rid='54701dfc' req.bootstrap_room=8812 with exception "
              "KVTransferError(bootstrap_room=8812): Failed to send kv chunk of 8812 to 10.0.0.2:15347"]
    d.logs = ["Decode transfer failed for request rank=0 decode_req.req.rid='54701dfc' decode_req.req.bootstrap_room=8812 "
              "with exception KVTransferError(bootstrap_room=8812): Failed to get kvcache from prefill instance, it might be dead"]
    return [p, d, r], {}


@scenario("decode-hang-health-timeout", "decode-wedged",
          "https://github.com/sgl-project/sglang/pull/28039",
          "PD decode with spec+grammar+DP attention deadlocks; /health stops responding, requests hang")
def _wedged():
    p, d, r = _roles()
    d.gauges.update(num_running_reqs=37, token_usage=0.41)
    d.counters["realtime_tokens{mode=decode}"] = (8_800_000, 0)
    d.health, d.health_error = None, "timeout after 5.0 s"
    d.logs = []
    return [p, d, r], {}


@scenario("decode-hang-health-200", "decode-wedged",
          "https://github.com/sgl-project/sglang/pull/32209",
          "PD decode hang with DP attention and MTP: the first routed request times out after 240 s; /health (fake bootstrap) still 200")
def _wedged2():
    p, d, r = _roles()
    d.gauges.update(num_running_reqs=1, token_usage=0.02)
    d.counters["realtime_tokens{mode=decode}"] = (120, 0)
    return [p, d, r], {}


@scenario("nccl-collective-timeout", "nccl-failure",
          "https://github.com/sgl-project/sglang/issues/3784",
          "multi-node TP: 'Watchdog caught collective operation timeout: WorkNCCL(... Timeout(ms)=600000)'; process dies",
          also=("role-down",))
def _nccl():
    p, d, r = _roles()
    d.active, d.sub, d.result, d.restarts, d.exit_status = "activating", "auto-restart", "core-dump", 2, 6
    d.metrics_error, d.health, d.health_error = "connection refused", None, "connection refused"
    d.logs = [
        "[rank26]:[E222 08:52:08.000000000 ProcessGroupNCCL.cpp:616] [Rank 26] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600005 milliseconds before timing out.",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "systemd: sglang-dsv4-decode.service: Main process exited, code=dumped, status=6/ABRT",
    ]
    return [p, d, r], {}


@scenario("cuda-oom-kv-pool", "cuda-oom",
          "https://github.com/sgl-project/sglang/issues/12496",
          "start-up allocates the KV pool and dies: 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB'")
def _oom():
    p, d, r = _roles()
    d.active, d.sub, d.result, d.restarts, d.exit_status = "activating", "auto-restart", "exit-code", 4, 1
    d.metrics_error, d.health, d.health_error = "connection refused", None, "connection refused"
    d.logs = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB. GPU 0 has a total capacity of 23.52 GiB "
              "of which 13.00 MiB is free. Including non-PyTorch memory, this process has 23.48 GiB memory in use.",
              "systemd: sglang-dsv4-decode.service: Main process exited, code=exited, status=1/FAILURE"]
    return [p, d, r], {}


@scenario("decode-oom-pd", "cuda-oom",
          "https://github.com/sgl-project/sglang/issues/6857",
          "1P1D benchmark: 'Decode out of memory happened', then requests stay stuck in the prealloc queue",
          also=("decode-wedged",))
def _oom2():
    p, d, r = _roles()
    d.logs = ["Decode out of memory. Try to lower your batch size.\nTry to allocate 512 tokens."]
    d.gauges.update(num_decode_prealloc_queue_reqs=9)
    return [p, d, r], {}


@scenario("retraction-collapse", "kv-cache-exhausted",
          "https://github.com/sgl-project/sglang/issues/26248",
          "full token usage 1.00, KV cache pool full triggers retraction and decode throughput collapses ~14x")
def _retract():
    p, d, r = _roles()
    d.gauges.update(token_usage=1.0, num_running_reqs=4, num_queue_reqs=3, num_retracted_reqs=2)
    d.counters["num_retracted_requests"] = (10, 2)
    d.counters["realtime_tokens{mode=decode}"] = (9_000_000, 90)
    d.logs = ["Decode batch, #running-req: 4, #full token: 2642688, full token usage: 1.00, #swa token: 14592, swa token usage: 0.06, "
              "cuda graph: True, gen throughput (token/s): 429.34, #queue-req: 3",
              "KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 65536, #new_token_ratio: 0.7000 -> 1.0000",
              "Decode batch, #running-req: 3, #full token: 2600000, full token usage: 1.00, #swa token: 14000, swa token usage: 0.06, "
              "cuda graph: True, gen throughput (token/s): 20.12, #queue-req: 4"]
    return [p, d, r], {}


@scenario("watchdog-timeout-old-wording", "scheduler-watchdog",
          "https://github.com/sgl-project/sglang/issues/3752",
          "multi-node DeepSeek-R1 with torch.compile: 'Watchdog timeout (self.watchdog_timeout=300)' and the server is killed",
          also=("role-down",))
def _watchdog():
    p, d, r = _roles()
    p.active, p.sub, p.result, p.restarts = "activating", "auto-restart", "signal", 1
    p.metrics_error, p.health, p.health_error = "connection refused", None, "connection refused"
    p.logs = ["Watchdog timeout (self.watchdog_timeout=300)",
              "Received sigquit from a child process. It usually means the child failed.",
              "systemd: sglang-dsv4-prefill.service: Main process exited, code=killed, status=9/KILL"]
    return [p, d, r], {}


@scenario("gpu-fallen-off-bus", "gpu-fault",
          "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1151",
          "random Xid 79: 'GPU has fallen off the bus'; nvidia-smi cannot read the GPU; the role's ranks hang",
          also=("decode-wedged",))
def _gpu():
    p, d, r = _roles()
    kernel = ("2026-11-29T09:59:40+0000 node2 kernel: NVRM: GPU at PCI:0000:06:00: GPU-0b6b7808-c002-f593-ac86-cd8e57757b94\n"
              "2026-11-29T09:59:40+0000 node2 kernel: NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.\n"
              "2026-11-29T09:59:40+0000 node2 kernel: NVRM: GPU 0000:06:00.0: GPU has fallen off the bus.\n")
    d.counters["realtime_tokens{mode=decode}"] = (5_000_000, 0)
    return [p, d, r], {"kernel": {"node2": kernel}, "gpus": {"node2": gpu_csv(4, lost=(2,))}}


@scenario("router-missing-prefill-flag", "config-crashloop",
          "https://github.com/sgl-project/sglang/issues/12535",
          "router launched in PD mode without --prefill: 'Error starting router: PD disaggregation mode requires --prefill'",
          must_not=("role-down",))
def _router_config():
    p, d, r = _roles()
    r.active, r.sub, r.result, r.restarts, r.exit_status = "activating", "auto-restart", "exit-code", 7, 1
    r.metrics_error, r.health, r.health_error = "connection refused", None, "connection refused"
    r.logs = ["Error starting router: PD disaggregation mode requires --prefill",
              "systemd: sglang-router.service: Main process exited, code=exited, status=1/FAILURE",
              "systemd: sglang-router.service: Scheduled restart job, restart counter is at 7."]
    return [p, d, r], {}


@scenario("dsv4-hicache-size", "config-crashloop",
          "https://github.com/sgl-project/sglang/pull/24691",
          "DeepSeek V4 HiCache (added in this PR) sizes host pages by --hicache-ratio; hybrid_pool_assembler.py raises "
          "ValueError for --hicache-size > 0 (0.5.12 and 0.5.23)",
          must_not=("role-down",))
def _hicache():
    p, d, r = _roles()
    p.active, p.sub, p.result, p.restarts, p.exit_status = "activating", "auto-restart", "exit-code", 5, 1
    p.metrics_error, p.health, p.health_error = "connection refused", None, "connection refused"
    p.logs = ["Traceback (most recent call last):",
              "ValueError: DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead.",
              "systemd: sglang-dsv4-prefill.service: Main process exited, code=exited, status=1/FAILURE"]
    return [p, d, r], {}


@scenario("router-no-healthy-pair", "router-no-healthy-workers",
          "https://github.com/sgl-project/sglang/issues/33740",
          "PD router and worker health disagree while a worker is (re)initializing; the router has no healthy prefill+decode pair")
def _router():
    p, d, r = _roles()
    r.gauges.update(smg_worker_health=0)
    r.counters["smg_router_request_errors{error_type=no_workers}"] = (3, 25)
    r.logs = ["2026-11-29 10:00:01  ERROR sglang_router_rs::routers::http::pd_router: No healthy worker pair available: prefill=0 decode=1"]
    return [p, d, r], {}


@scenario("prefill-pp-bootstrap-divergence", "prefill-wedged",
          "https://github.com/sgl-project/sglang/issues/34572",
          "PP disaggregated prefill: after an abort storm the stages deadlock in send/recv; /health keeps answering 200")
def _prefill_wedged():
    p, d, r = _roles()
    p.gauges.update(num_queue_reqs=23, num_running_reqs=4, num_prefill_bootstrap_queue_reqs=6)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (7_700_000, 0)
    p.logs = [ABORT.replace("Decode transfer", "Prefill bootstrap").replace("decode_req.", "").format(rid=f"x{i}", room=90 + i)
              for i in range(3)]
    return [p, d, r], {}


@scenario("prefill-nixl-hang", "prefill-wedged",
          "https://github.com/sgl-project/sglang/issues/6320",
          "fresh nixl: after a 16384-token prefill batch the prefill logs stop; the request never gets its first token")
def _prefill_wedged2():
    p, d, r = _roles()
    p.gauges.update(num_queue_reqs=1, num_running_reqs=1)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (16_388, 0)
    p.logs = ["Prefill batch. #new-seq: 1, #new-token: 16384, #cached-token: 0, token usage: 0.00, #running-req: 0, "
              "#unbootstrapped-req: 0, #queue-req: 0, #transferring-req: 0"]
    return [p, d, r], {}


# --- near misses: each looks like one class and must not be diagnosed as it -------------------

@scenario("near-client-aborts-only", "healthy",
          "https://github.com/sgl-project/sglang/issues/10613",
          "clients cancel requests (Ctrl+C): 'Aborted by AbortReq.' lines alone, prefill queue normal, counters moving",
          must_not=("kv-transfer-failure", "prefill-queue-saturation"))
def _aborts():
    p, d, r = _roles()
    d.logs += [ABORT.format(rid=f"c{i}", room=500 + i) for i in range(5)]
    d.counters["num_transfer_failed_reqs"] = (0, 5)
    return [p, d, r], {}


@scenario("near-health-503-busy", "healthy",
          "reference/sglang.md §2.1: /health is skipped while the scheduler is busy and uses a fake bootstrap",
          "decode's /health times out under load, but it decodes tokens: /health alone proves nothing",
          must_not=("decode-wedged",))
def _health():
    p, d, r = _roles()
    d.health, d.health_error = None, "timeout after 5.0 s"
    return [p, d, r], {}


@scenario("near-idle-decode", "healthy", "reference/sglang.md §1.3 (idle metrics republish)",
          "no requests: the decode counter does not move, but nothing is running", must_not=("decode-wedged", "prefill-wedged"))
def _idle():
    p, d, r = _roles()
    d.gauges.update(num_running_reqs=0)
    d.counters["realtime_tokens{mode=decode}"] = (5_000_000, 0)
    p.gauges.update(num_running_reqs=0, num_queue_reqs=0)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (1_200_000, 0)
    return [p, d, r], {}


@scenario("near-busy-prefill", "healthy", "https://github.com/sgl-project/sglang/issues/11809",
          "a dozen queued requests under a burst and computing: busy, not saturated", must_not=("prefill-queue-saturation",))
def _busy():
    p, d, r = _roles()
    p.gauges.update(num_queue_reqs=12)
    return [p, d, r], {}


@scenario("near-server-args-echo", "healthy", "SGLang prints server_args at start-up (0.5.12 and 0.5.23)",
          "the start-up echo names hicache_size, mem_fraction_static, watchdog_timeout and NCCL; no error",
          must_not=("config-crashloop", "cuda-oom", "scheduler-watchdog", "nccl-failure"))
def _echo():
    p, d, r = _roles()
    d.logs = [SERVER_ARGS, "NCCL version 2.27.3+cuda12.9", "Init torch distributed ends. mem usage=1.20 GB"] + d.logs
    return [p, d, r], {}


@scenario("near-config-error-recovered", "healthy", "https://github.com/sgl-project/sglang/pull/24691",
          "yesterday's --hicache-size ValueError is still in the journal window, but the fixed unit runs and serves",
          must_not=("config-crashloop", "role-down"))
def _recovered():
    p, d, r = _roles()
    p.restarts = 5
    p.logs = ["ValueError: DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead."] + p.logs
    return [p, d, r], {}


@scenario("near-oom-before-restart", "healthy", "systemd ExecMainStartTimestamp: lines before the current run are history",
          "decode hit CUDA OOM and transfer errors, was restarted, and now serves: the lines precede the current "
          "run's start (ExecMainStartTimestamp), so they are history, not the present",
          must_not=("cuda-oom", "kv-transfer-failure", "role-down"))
def _oom_recovered():
    p, d, r = _roles()
    d.restarts = 1
    d.logs = [
        "Decode transfer failed for request rank=0 decode_req.req.rid='x1' decode_req.req.bootstrap_room=77 with exception "
        "KVTransferError(bootstrap_room=77): Failed to get kvcache from prefill instance, it might be dead",
        "Scheduler hit an exception: Traceback (most recent call last):",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 GiB "
        "of which 1.06 GiB is free.",
        "systemd: sglang-dsv4-decode.service: Main process exited, code=exited, status=1/FAILURE",
        "systemd: sglang-dsv4-decode.service: Scheduled restart job, restart counter is at 1.",
    ] + d.logs
    d.started = T0 - timedelta(seconds=50)  # lines are stamped T0-60s, T0-59s, ...: the first five precede it
    return [p, d, r], {}


@scenario("near-full-cache-no-retraction", "healthy", "https://github.com/sgl-project/sglang/issues/6778",
          "token usage near 1.0 with radix-cached tokens, but nothing retracted and tokens flow", must_not=("kv-cache-exhausted",))
def _full():
    p, d, r = _roles()
    d.gauges.update(token_usage=0.97)
    return [p, d, r], {}


@scenario("near-nvrm-load-line", "healthy", "https://github.com/NVIDIA/NVSentinel/issues/155",
          "driver load messages in the kernel log are not Xid events", must_not=("gpu-fault",))
def _nvrm():
    p, d, r = _roles()
    kernel = "2026-11-29T09:00:00+0000 node2 kernel: NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01\n"
    return [p, d, r], {"kernel": {"node2": kernel}}


@scenario("near-role-stopped", "role-down", "systemctl stop by an operator",
          "decode stopped cleanly: role-down, and no configuration error, OOM or watchdog to blame",
          must_not=("config-crashloop", "cuda-oom", "scheduler-watchdog"))
def _stopped():
    p, d, r = _roles()
    d.active, d.sub, d.result = "inactive", "dead", "success"
    d.metrics_error, d.health, d.health_error = "connection refused", None, "connection refused"
    d.logs = ["systemd: Stopped sglang-dsv4-decode.service."]
    return [p, d, r], {}


@scenario("near-router-healthy-workers", "healthy", "reference/sglang.md §6.2",
          "router up with healthy workers; a past 'no healthy worker' line is not in the window", must_not=("router-no-healthy-workers",))
def _router_ok():
    return list(_roles()), {}


@scenario("near-role-killed-no-exception", "role-down",
          "kill -9 of a serving role (an operator, or the kernel's OOM killer), no Restart=",
          "decode served, then was killed by SIGKILL with no exception and no restart configured: failed "
          "(Result=signal, NRestarts=0); nothing it printed explains it, so role-down, and a start is safe",
          must_not=("config-crashloop", "cuda-oom", "scheduler-watchdog", "nccl-failure"))
def _killed():
    p, d, r = _roles()
    d.active, d.sub, d.result, d.exit_status, d.main_code = "failed", "failed", "signal", 9, 2
    d.metrics_error, d.health, d.health_error, d.nulls = "connection refused", None, "connection refused", True
    d.logs = d.logs + ["systemd: sglang-dsv4-decode.service: Main process exited, code=killed, status=9/KILL",
                       "systemd: sglang-dsv4-decode.service: Failed with result 'signal'."]
    return [p, d, r], {}


@scenario("near-role-stopped-after-serving", "role-down", "systemctl stop after hours of serving",
          "prefill served (batch lines in the window), then an operator stopped it cleanly: inactive/dead, "
          "Result=success; a stop is not a crash loop", must_not=("config-crashloop", "prefill-wedged", "cuda-oom"))
def _stopped_after_serving():
    p, d, r = _roles()
    p.active, p.sub, p.result = "inactive", "dead", "success"
    p.metrics_error, p.health, p.health_error, p.nulls = "connection refused", None, "connection refused", True
    p.logs = p.logs + ["systemd: Stopping sglang-dsv4-prefill.service...",
                       "systemd: sglang-dsv4-prefill.service: Deactivated successfully.",
                       "systemd: Stopped sglang-dsv4-prefill.service."]
    return [p, d, r], {}


if __name__ == "__main__":
    for p in write(SCENARIOS):
        print(p)
