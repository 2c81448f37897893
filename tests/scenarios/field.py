"""Write the field corpus: bundles a probe would have collected during incidents reported in
public threads (SGLang, Mooncake, NIXL, NCCL, the router in its sgl-router and SMG forms).

Each scenario cites its thread in ``label.source`` and keeps the thread's log lines verbatim.
What the thread does not quote (unit state, metrics, /health) is written the way the thread's
SGLang version, router and systemd would show that failure: a crash loop is ``activating
(auto-restart)`` with ``NRestarts`` climbing; a refused /health has a null status and body; an
old version exposes its own metric names and batch lines (read in that version's wheel, see
``deployments.py``). Run ``python -m tests.scenarios.field`` to rewrite them into ``dev/`` and ``test/``
(the part chosen by the thread, see ``split.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta

from tests.scenarios.compose import T0, RoleSpec, compose, gpu_csv
from tests.scenarios.deployments import crashloop, died, failed, raw, recovered, roles
from tests.scenarios.split import write

SCENARIOS: dict[str, Callable[[], dict]] = {}
RAW: dict[str, tuple[Callable[[], tuple[list[RoleSpec], dict]], str]] = {}  # name -> (roles function, source)


def scenario(name: str, expected: str, source: str, note: str, also: tuple[str, ...] = (), must_not: tuple[str, ...] = ()):
    def wrap(fn: Callable[[], tuple[list[RoleSpec], dict]]) -> Callable[[], dict]:
        def build() -> dict:
            roles, kw = fn()
            data = compose(roles, bundle_id=f"field-{name}", **kw)
            data["label"] = {"expected": expected, "also": list(also), "must_not": list(must_not), "source": source, "note": note}
            return data

        if name in SCENARIOS:
            raise ValueError(f"two field scenarios named {name}")
        SCENARIOS[name], RAW[name] = build, (fn, source)
        return build

    return wrap



def _abort(rid: str, room: int, side: str = "Decode transfer") -> str:
    """SGLang's own line for a request aborted by its client (disaggregation/decode.py)."""
    req = "decode_req.req" if side.startswith("Decode") else "req"
    return (f"{side} failed for request rank=0 {req}.rid='{rid}' {req}.bootstrap_room={room} "
            f"with exception KVTransferError(bootstrap_room={room}): Aborted by AbortReq.")


def canary(status: int | None, body: str | None, error: str | None = None) -> dict:
    """One short completion through the router, as the probe records it."""
    return {"extra": {"canary": {"ok": error is None and status == 200, "error": error, "elapsed_ms": 40.0,
                       "endpoint": "http://node1:8000/v1/chat/completions", "model": "qwen3-8b", "status": status,
                       "ttft_ms": None, "total_ms": 40.0, "tokens": 0, "body": body}}}


# === KV transfer: Mooncake, NIXL, bootstrap =====================================================

@scenario("mooncake-transfer-sync-segfault", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/7338",
          "0.4.7 + Mooncake without RDMA: the prefill's transfer thread segfaults in transfer_sync (fixed by mooncake 0.3.6)",
          also=("role-down", "router-no-healthy-workers"), must_not=("config-crashloop", "cuda-oom"))
def _mooncake_segv():
    p, d, r = roles("0.4.6", "mini_lb")
    died(p, raw(["Fatal Python error: Segmentation fault", "",
                 "Thread 0x00007fb209fff640 (most recent call first):",
                 '  File "/home/sglang_0.4.7_dea8aa7/python/sglang/srt/disaggregation/mooncake/transfer_engine.py", line 75 in transfer_sync',
                 '  File "/home/sglang_0.4.7_dea8aa7/python/sglang/srt/disaggregation/mooncake/conn.py", line 259 in process_layer',
                 '  File "/usr/lib/python3.10/concurrent/futures/thread.py", line 58 in run',
                 '  File "/usr/lib/python3.10/concurrent/futures/thread.py", line 83 in _worker']),
         status="11/SEGV", code="dumped")
    return [p, d, r], {}


@scenario("mooncake-segment-descriptor", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/26008",
          "sglang 0.5.10 with mooncake transfer-engine 0.3.11: 'Local segment descriptor not found' and requests fail; "
          "0.3.9 works", must_not=("healthy", "prefill-queue-saturation"))
def _segment_descriptor():
    p, d, r = roles()
    p.logs += raw(["E0521 16:22:21.694042   162 transfer_metadata.cpp:877] Local segment descriptor not found",
                   "I0521 16:41:10.810740  4097 transfer_metadata_dump.cpp:51] Failed to get segment descriptor for segment "
                   "10.112.116.43:16917 address 0x715448048300--0x71544804a400"])
    p.counters["num_transfer_failed_reqs"] = (4, 3)
    return [p, d, r], {}


@scenario("nixl-ucx-segfault", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/6694",
          "NIXL backend over UCX/TCP on L40S: the prefill segfaults in uct_tcp_ep_am_bcopy right after the decode's bootstrap /route",
          also=("role-down", "router-no-healthy-workers"), must_not=("config-crashloop",))
def _nixl_segv():
    p, d, r = roles("0.4.6", "mini_lb")
    died(p, raw([
        '[2025-05-28 09:43:43] 127.0.0.1 [28/May/2025:09:43:43 +0000] "GET /route?engine_rank=0 HTTP/1.1" 200 262 "-" "python-requests/2.32.3"',
        "[ubuntu-GPU-L40S-4802111:12796:1:13303] Caught signal 11 (Segmentation fault: invalid permissions for mapped object at address 0x7fbd60001400)",
        "==== backtrace (tid:  13303) ====",
        " 0  /usr/local/lib/python3.10/dist-packages/.nixl.mesonpy.libs/plugins/../../nixl.libs/libucs-97f10f8d.so.0.0.0(ucs_handle_error+0x294) [0x7fbec008fba4]",
        " 1  /usr/local/lib/python3.10/dist-packages/.nixl.mesonpy.libs/plugins/../../nixl.libs/libucs-97f10f8d.so.0.0.0(+0x38d65) [0x7fbec008fd65]",
        " 3  /usr/lib/x86_64-linux-gnu/libc.so.6(+0x1a07cd) [0x7fc0957437cd]",
        " 5  /usr/local/lib/python3.10/dist-packages/.nixl.mesonpy.libs/plugins/../../nixl.libs/libuct-b36f5a30.so.0.0.0(uct_tcp_ep_am_bcopy+0x8a) [0x7fbeb852804a]",
    ]), status="11/SEGV", code="dumped")
    return [p, d, r], {}


# === router ======================================================================================

@scenario("router-breaker-fake-dead-prefill", "router-no-healthy-workers", "https://github.com/sgl-project/sglang/issues/31206",
          "sgl-router 0.2.4 (sgl_model_gateway) PD: the prefill's circuit breaker opened after client timeouts and never closed; "
          "requests still go to decode, which logs 'Aborted by AbortReq' while waiting for KV that never comes; prefill is idle",
          must_not=("kv-transfer-failure", "prefill-wedged", "decode-wedged"))
def _breaker():
    p, d, r = roles()
    p.gauges.update(num_running_reqs=0, num_queue_reqs=0)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (1_200_000, 0)
    d.gauges.update(num_running_reqs=0, num_decode_transfer_queue_reqs=0, num_decode_prealloc_queue_reqs=6)
    d.counters["realtime_tokens{mode=decode}"] = (5_000_000, 0)
    d.logs = [_abort(f"{i:032x}", 7_300_000_000_000_000_000 + i) for i in range(4)]
    d.counters["num_transfer_failed_reqs"] = (12, 4)
    r.gauges.update({"smg_worker_cb_state{worker=http://10.0.0.1:30000}": 1, "smg_worker_cb_state{worker=http://10.0.0.2:30001}": 0})
    r.logs = raw(["Circuit breaker state transition: open -> half_open"])  # as quoted in the thread, without its prefix
    return [p, d, r], {}


@scenario("router-all-circuits-open-at-start", "router-no-healthy-workers", "https://github.com/SemiAnalysisAI/InferenceX/pull/2255",
          "DeepSeek V4 2P1D: a 500-request eval fired at the router before prefill served tripped both prefill breakers; every "
          "request gets 503 'No available prefill workers (all circuits open or unhealthy)' and the circuits never reclose",
          must_not=("role-down", "prefill-wedged"))
def _all_open():
    p, d, r = roles()
    p.gauges.update(num_running_reqs=0, num_queue_reqs=0)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (0, 0)
    d.gauges.update(num_running_reqs=0)
    d.counters["realtime_tokens{mode=decode}"] = (0, 0)
    r.gauges.update({"smg_worker_cb_state{worker=http://10.0.0.1:30000}": 1, "smg_worker_cb_state{worker=http://10.0.0.3:30000}": 1})
    r.counters["smg_router_request_errors{error_type=no_workers}"] = (500, 41)
    r.logs = []
    return [p, d, r], canary(503, "No available prefill workers (all circuits open or unhealthy)")


# === configuration at start-up ===================================================================

USAGE_043 = ("usage: launch_server.py [-h] --model-path MODEL_PATH [--tokenizer-path TOKENIZER_PATH] [--host HOST] [--port PORT] "
             "[--tokenizer-mode {auto,slow}] [--skip-tokenizer-init]")


@scenario("argparse-enable-reasoning", "config-crashloop", "https://github.com/sgl-project/sglang/issues/4116",
          "0.4.3: --enable-reasoning is not a flag of this version; argparse exits 2 at every start",
          also=("router-no-healthy-workers",), must_not=("role-down", "cuda-oom", "nccl-failure"))
def _enable_reasoning():
    p, d, r = roles("0.4.3", "mini_lb")
    crashloop(p, raw(["INFO 03-06 10:05:08 __init__.py:190] Automatically detected platform cuda.", USAGE_043,
                      "launch_server.py: error: unrecognized arguments: --enable-reasoning"]), status="2/INVALIDARGUMENT", restarts=9)
    return [p, d, r], {}


@scenario("argparse-enable-metrics-underscore", "config-crashloop", "https://github.com/sgl-project/sglang/issues/5032",
          "0.4.4: --enable_metrics (underscore) is refused by argparse; the decode unit restarts without end",
          also=("router-no-healthy-workers",), must_not=("role-down",))
def _enable_metrics():
    p, d, r = roles("0.4.3", "mini_lb")
    crashloop(d, raw(["INFO 04-03 17:50:56 __init__.py:190] Automatically detected platform cuda.", USAGE_043,
                      "launch_server.py: error: unrecognized arguments: --enable_metrics"]), status="2/INVALIDARGUMENT", restarts=4)
    return [p, d, r], {}


@scenario("argparse-reasoning-parser-underscore", "config-crashloop", "https://github.com/sgl-project/sglang/issues/12818",
          "0.5.5 Kimi-K2: --reasoning_parser kimi_k2 (underscore) is an unrecognized argument; use --reasoning-parser",
          also=("router-no-healthy-workers",), must_not=("role-down",))
def _reasoning_parser():
    p, d, r = roles("0.5.3", "sgl-router")
    crashloop(p, raw(["launch_server.py: error: unrecognized arguments: --reasoning_parser kimi_k2"]), status="2/INVALIDARGUMENT", restarts=12)
    return [p, d, r], {}


# === watchdog and NCCL ===========================================================================

@scenario("watchdog-pyspy-missing", "scheduler-watchdog", "https://github.com/sgl-project/sglang/issues/7783",
          "a batch of 109 requests hangs for 300 s; the watchdog fires, py-spy is missing so no dump, and the server exits",
          also=("role-down", "router-no-healthy-workers"), must_not=("config-crashloop", "kv-cache-exhausted"))
def _watchdog_pyspy():
    p, d, r = roles("0.5.3", "sgl-router")
    died(d, raw([
        '[2025-08-02 19:24:26] INFO:     172.16.19.148:37398 - "POST /v1/completions HTTP/1.1" 200 OK',
        "[2025-08-02 19:24:30 TP3] Watchdog timeout (self.watchdog_timeout=300)",
        "[2025-08-02 19:24:30 TP3] self.cur_batch.batch_size()=109, self.cur_batch.reqs=[Req(rid=185ef8b8d25943c8aaa7f4b2630be2e0, "
        "input_ids=[128000, 128000, 128006, 9125, 128007, 198, 2675, 527, 279, 1",
        "[2025-08-02 06:06:21 TP2] Pyspy failed to dump PID 171. Error: /bin/dash: 1: py-spy: not found",
    ]), status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("nccl-allgather-timeout-2xh100", "nccl-failure", "https://github.com/sgl-project/sglang/issues/3424",
          "DeepSeek R1 over two H100 nodes crashes occasionally: an _ALLGATHER_BASE times out after 600 s and the watchdog aborts",
          also=("role-down", "router-no-healthy-workers"), must_not=("config-crashloop", "scheduler-watchdog"))
def _nccl_allgather():
    p, d, r = roles("0.4.3", "mini_lb")
    died(d, raw([
        "frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x7effaa1d3bb3 in /home/miniconda3/envs/sglang/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so)",
        "frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x14d (0x7effaa1d561d in /home/miniconda3/envs/sglang/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so)",
        "[rank1]:[E210 02:06:33.347835395 ProcessGroupNCCL.cpp:1595] [PG ID 2 PG GUID 3 Rank 1] Process group watchdog thread terminated "
        "with exception: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1522789, OpType=_ALLGATHER_BASE, "
        "NumelIn=298960, NumelOut=4783360, Timeout(ms)=600000) ran for 600003 milliseconds before timing out.",
        "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:618 (most recent call first):",
    ]), status="6/ABRT", code="dumped", restarts=2)
    return [p, d, r], {}


@scenario("nccl-allreduce-timeout-after-idle", "nccl-failure", "https://github.com/sgl-project/sglang/issues/3836",
          "DeepSeek-R1 on two H100x8 nodes: after an idle period the first prefill hangs, then an ALLREDUCE times out at 600 s",
          also=("role-down", "scheduler-watchdog", "prefill-wedged", "router-no-healthy-workers"), must_not=("config-crashloop",))
def _nccl_idle():
    p, d, r = roles("0.4.3", "mini_lb")
    died(p, raw([
        "deepseek-yanfa:190:3197 [2] NCCL INFO ncclCommSplit comm 0x5601dc4ed8b0 rank 2 nranks 16 cudaDev 2 nvmlDev 2 busId 41000 "
        "parent 0x5601b34852c0 color 1197013201 key 2 commId 0x44d8628a425864f9 - Init COMPLETE",
        "[rank4]:[E226 11:16:37.104512039 ProcessGroupNCCL.cpp:616] [Rank 4] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=5653, OpType=ALLREDUCE, NumelIn=58720256, NumelOut=58720256, Timeout(ms)=600000) ran for 600011 milliseconds before timing out.",
    ]), status="6/ABRT", code="dumped")
    return [p, d, r], {}


@scenario("nccl-startup-allreduce-timeout", "nccl-failure", "https://github.com/sgl-project/sglang/issues/3368",
          "two-node DeepSeek-V3: right after loading weights the first ALLREDUCE (SeqNum=2) times out; every restart does the same",
          also=("router-no-healthy-workers",), must_not=("config-crashloop", "role-down"))
def _nccl_startup():
    p, d, r = roles("0.4.3", "mini_lb")
    crashloop(p, raw([
        "[2025-02-07 01:19:40 TP0] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=38.13 GB",
        "[rank6]:[E207 01:29:36.730311765 ProcessGroupNCCL.cpp:616] [Rank 6] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600050 milliseconds before timing out.",
        "[rank6]:[E207 01:29:36.730815661 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 6] Exception (either an "
        "error or timeout) detected by watchdog at work: 2, last enqueued NCCL work: 2, last completed NCCL work: 1.",
    ]), status="6/ABRT", code="dumped", restarts=3)
    p.started = T0 - timedelta(minutes=11)  # one start: load (2 min) then the 10-minute collective timeout
    return [p, d, r], {}


@scenario("nccl-timeout-under-perf-test", "nccl-failure", "https://github.com/sgl-project/sglang/issues/3932",
          "DeepSeek R1 on 2x8 H100: after 1-2 h of performance testing an _ALLGATHER_BASE times out and the server dies",
          also=("role-down", "router-no-healthy-workers"), must_not=("config-crashloop",))
def _nccl_perf():
    p, d, r = roles("0.4.3", "mini_lb")
    died(d, raw([
        "[rank4]:[E304 12:54:52.122900428 ProcessGroupNCCL.cpp:616] [Rank 4] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=151721, OpType=_ALLGATHER_BASE, NumelIn=8080, NumelOut=129280, Timeout(ms)=600000) ran for 600049 milliseconds before timing out.",
        "[rank4]:[E304 12:54:52.123659968 ProcessGroupNCCL.cpp:1785] [PG ID 2 PG GUID 3 Rank 4] Exception (either an error or timeout) "
        "detected by watchdog at work: 151721, last enqueued NCCL work: 151721, last completed NCCL work: 151720.",
        "[rank4]:[E304 12:54:52.123690744 ProcessGroupNCCL.cpp:1834] [PG ID 2 PG GUID 3 Rank 4] Timeout at NCCL work: 151721, "
        "last enqueued NCCL work: 151721, last completed NCCL work: 151720.",
    ]), status="6/ABRT", code="dumped")
    return [p, d, r], {}


# === healthy and near misses =====================================================================

@scenario("healthy-old-decode-slowing", "healthy", "https://github.com/sgl-project/sglang/issues/3909",
          "0.4.3: throughput eases from 186.6 to 184.4 token/s as sequences grow; requests finish, nothing is wrong",
          must_not=("decode-wedged", "kv-cache-exhausted"))
def _old_slowing():
    p, d, r = roles("0.4.3", "mini_lb")
    d.logs = raw([
        "[2025-02-27 04:46:39 TP0] Decode batch. #running-req: 8, #token: 62531, token usage: 0.12, gen throughput (token/s): 186.64, #queue-req: 0",
        "[2025-02-27 04:46:41 TP0] Decode batch. #running-req: 8, #token: 62851, token usage: 0.13, gen throughput (token/s): 185.93, #queue-req: 0",
        "[2025-02-27 04:46:43 TP0] Decode batch. #running-req: 8, #token: 63171, token usage: 0.13, gen throughput (token/s): 186.99, #queue-req: 0",
        "[2025-02-27 04:46:53 TP0] Decode batch. #running-req: 8, #token: 65091, token usage: 0.13, gen throughput (token/s): 184.38, #queue-req: 0",
    ])
    d.gauges.update(num_running_reqs=8, token_usage=0.13, gen_throughput=184.38)
    d.counters["generation_tokens"] = (2_000_000, 0)  # nothing finished in the window: only gen_throughput shows progress
    return [p, d, r], {}


@scenario("healthy-dp-attention-h20", "healthy", "https://github.com/sgl-project/sglang/pull/11854",
          "DeepSeek-R1 on H20-96G with DP attention at batch 32 per rank: busy and fine (0.5.3-era batch lines)",
          must_not=("decode-wedged", "kv-cache-exhausted", "prefill-queue-saturation"))
def _h20():
    p, d, r = roles("0.5.3", "sgl-router")
    d.logs = raw([
        "2025-10-20 03:02:22 INFO 31223 [DP3 TP3 EP3 scheduler_metrics_mixin.py:222] Decode batch. #running-req: 32, #token: 157952, "
        "token usage: 0.21, accept len: 1.93, pre-allocated usage: 0.00, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 693.45, #queue-req: 0",
        "2025-10-20 03:02:22 INFO 31225 [DP5 TP5 EP5 scheduler_metrics_mixin.py:222] Decode batch. #running-req: 32, #token: 164224, "
        "token usage: 0.22, accept len: 1.92, pre-allocated usage: 0.00, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 674.19, #queue-req: 1",
        "2025-10-20 03:02:22 INFO 31222 [DP2 TP2 EP2 scheduler_metrics_mixin.py:222] Decode batch. #running-req: 32, #token: 162112, "
        "token usage: 0.22, accept len: 1.90, pre-allocated usage: 0.00, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 655.17, #queue-req: 1",
    ])
    d.gauges.update(num_running_reqs=32, token_usage=0.22, gen_throughput=674.19)
    return [p, d, r], {}


# --- batch 2 ---------------------------------------------------------------------------------------

@scenario("mooncake-register-memory-einval", "config-crashloop", "https://github.com/sgl-project/sglang/issues/6894",
          "0.4.6 PD with Mooncake: ibv memory registration fails (Invalid argument) while the scheduler starts; every start dies",
          also=("kv-transfer-failure", "router-no-healthy-workers"), must_not=("role-down", "cuda-oom"))
def _register_memory():
    p, d, r = roles("0.4.6", "mini_lb")
    crashloop(d, raw([
        "I0605 10:48:27.542429 10134 rdma_context.cpp:125] RDMA device: mlx5_0, LID: 1698, GID: (GID_Index 0) fe:80:00:00:00:00:00:00:00:15:5d:ff:fd:34:02:2b",
        "E0605 10:48:27.885119 10136 rdma_context.cpp:203] Failed to register memory 0x7b375b400000: Invalid argument [22]",
        "[2025-06-05 10:48:27 TP7] Mooncake memory registration failed.",
        "[2025-06-05 10:48:27 TP7] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2297, in run_scheduler_process',
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, pp_rank, dp_rank)",
    ]), restarts=5)
    return [p, d, r], {}


@scenario("mooncake-qp-rtr-timeout", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/6548",
          "PD over RoCE: the Mooncake RDMA handshake cannot bring queue pairs to RTR (connection timed out); transfers fail",
          must_not=("healthy", "prefill-queue-saturation", "role-down"))
def _qp_rtr():
    p, d, r = roles("0.4.6", "mini_lb")
    line = ("E0523 06:18:19.101030  {tid} rdma_endpoint.cpp:408] [Handshake] Failed to modify QP to RTR, check mtu, gid, "
            "peer lid, peer qp num: Connection timed out [110]")
    p.logs += raw([line.format(tid=t) for t in (2659, 2658, 2663, 2657)])
    p.counters["num_transfer_failed_reqs"] = (3, 4)
    return [p, d, r], {}


@scenario("bootstrap-parallel-info-no-gdr", "kv-transfer-failure", "https://github.com/kvcache-ai/Mooncake/issues/1207",
          "Kubernetes PD without RDMA devices (no GDR): the server says it is ready, but every request fails with "
          "'Could not fetch prefill parallel info from bootstrap_addr'", must_not=("healthy", "role-down"))
def _no_gdr():
    p, d, r = roles("0.5.3", "sgl-router")
    p.logs += raw(["[2025-12-12 12:06:32] The server is fired up and ready to roll!"])
    d.logs += raw(["KVTransferError(bootstrap_room=6677116944225248479): Could not fetch prefill parallel info from "
                   "bootstrap_addr: sglang-prefill-svc:30000"])
    d.counters["num_bootstrap_failed_reqs"] = (1, 1)
    return [p, d, r], {}


@scenario("router-failed-select-pd-pair", "router-no-healthy-workers", "https://github.com/sgl-project/sglang/issues/8557",
          "sgl-router 0.1.x with Kubernetes discovery adds both workers, then answers 'Failed to select PD pair'",
          must_not=("role-down", "kv-transfer-failure"))
def _select_pair():
    p, d, r = roles("0.4.6", "sgl-router")
    r.logs = raw([
        "2025-07-30 00:09:38  INFO sglang_router_rs::routers::pd_router: src/routers/pd_router.rs:105: Added decode server: http://192.168.0.179:30000",
        "2025-07-30 00:09:38  INFO sglang_router_rs::service_discovery: src/service_discovery.rs:413: Successfully added worker: "
        "Successfully added decode server: http://192.168.0.179:30000",
        "2025-07-30 00:09:38  INFO sglang_router_rs::routers::router: src/routers/router.rs:156: All workers are healthy",
    ])
    r.counters["sgl_router_pd_errors{error_type=server_selection}"] = (2, 3)
    return [p, d, r], canary(500, "Failed to select PD pair: Failed to select worker pair P/D")


@scenario("router-no-prefill-worker-cache-aware", "router-no-healthy-workers", "https://github.com/vllm-project/aibrix/issues/1351",
          "sglang-router 0.1.7 in PD mode answers 'No available servers: Failed to select prefill worker' although the pods run",
          must_not=("role-down", "prefill-wedged"))
def _no_prefill_worker():
    p, d, r = roles("0.4.6", "sgl-router")
    r.logs = raw([
        "2025-07-31 21:42:47  INFO http_request{method=GET uri=/v1/models version=HTTP/1.1}:http_request{method=GET uri=/v1/models "
        "version=HTTP/1.1 request_id=req-HtJYjwQPvsuGoOFcxjmrQz83 status=200 OK latency=1.489607ms}: sglang_router_rs::response: "
        "src/middleware.rs:169: finished processing request",
    ])
    r.counters["sgl_router_pd_errors{error_type=no_prefill_server}"] = (0, 4)
    return [p, d, r], canary(503, "No available servers: Failed to select prefill worker")


@scenario("arch-qwen2-not-supported", "config-crashloop", "https://github.com/sgl-project/sglang/issues/2356",
          "an old SGLang started on Qwen2: 'Model architectures [...] are not supported for now' at scheduler start",
          also=("router-no-healthy-workers",), must_not=("role-down",))
def _qwen2():
    p, d, r = roles("0.4.3", "mini_lb")
    crashloop(p, raw([
        "[2024-12-05 11:18:19 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.10/site-packages/sglang/srt/managers/scheduler.py", line 1489, in run_scheduler_process',
        "ValueError: Model architectures ['Qwen2ForCausalLM'] are not supported for now. Supported architectures: "
        "dict_keys(['CohereForCausalLM', 'DbrxForCausalLM', 'GPT2LMHeadModel', 'GPTBigCodeForCausa",
    ]))
    return [p, d, r], {}


@scenario("arch-glm4-not-supported", "config-crashloop", "https://github.com/sgl-project/sglang/issues/5441",
          "0.4.5 with GLM-4-0414: Glm4ForCausalLM is not a supported architecture yet; the decode unit restarts forever",
          also=("router-no-healthy-workers",), must_not=("role-down",))
def _glm4():
    p, d, r = roles("0.4.6", "mini_lb")
    crashloop(d, ["ValueError: Model architectures ['Glm4ForCausalLM'] are not supported for now. Supported architectures: "
                  "dict_keys(['BaichuanForCausalLM', 'ChatGLMModel', 'CLIPModel', 'CohereForCausalLM', 'Cohere2ForCausalLM', "
                  "'DbrxForCausalLM', 'DeepseekForCausalLM', 'MultiModalityCausalLM', 'DeepseekV3ForCausalLMNextN', "
                  "'DeepseekV2ForCausalLM', 'DeepseekV3ForCausalLM', 'DeepseekVL2ForCausalLM', 'ExaoneForCausalLM', "
                  "'GemmaForCausalLM', 'Gemma2ForCausalLM', 'Gemma2ForSequenceClassification', 'Gemma3ForCausalLM', "
                  "'Gemma3ForConditionalGeneration', 'GPT2LMHeadMode"], restarts=14)
    return [p, d, r], {}


@scenario("sgl-kernel-undefined-symbol-rtx5080", "config-crashloop", "https://github.com/sgl-project/sglang/issues/8373",
          "0.4.9.post2 with a torch nightly: sgl_kernel's common_ops cannot load (undefined symbol) and the server never starts",
          also=("router-no-healthy-workers",), must_not=("role-down", "gpu-fault"))
def _undefined_symbol():
    p, d, r = roles("0.4.6", "sgl-router")
    crashloop(p, raw(["ImportError: /home/devuser/.local/lib/python3.10/site-packages/sgl_kernel/common_ops.abi3.so: "
                      "undefined symbol: _ZN3c104cuda9SetDeviceEa"]), restarts=8)
    return [p, d, r], {}


@scenario("sgl-kernel-undefined-symbol-listtype", "config-crashloop", "https://github.com/Alibaba-NLP/DeepResearch/issues/83",
          "sglang 0.4.10.post2 with sgl-kernel 0.2.5 built against another torch: ImportError at launch, every time",
          also=("router-no-healthy-workers",), must_not=("role-down",))
def _listtype():
    p, d, r = roles("0.5.3", "sgl-router")
    crashloop(d, raw(["ImportError: /home/miniconda3/envs/webdancer/lib/python3.12/site-packages/sgl_kernel/common_ops.abi3.so: "
                      "undefined symbol: _ZN3c108ListType3getERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEENS_4Type24"
                      "SingletonOrSharedTypePtrIS9_EE"]), restarts=3)
    return [p, d, r], {}


@scenario("sgl-kernel-no-common-ops", "config-crashloop", "https://github.com/sgl-project/sglang/pull/13948",
          "an sm100-only sgl_kernel wheel on an SM86 GPU: 'Could not load any common_ops library!' at import",
          also=("router-no-healthy-workers",), must_not=("role-down", "gpu-fault"))
def _no_common_ops():
    p, d, r = roles()
    crashloop(d, raw([
        "ImportError: ",
        "[sgl_kernel] CRITICAL: Could not load any common_ops library!",
        "Attempted locations:",
        "1. Architecture-specific pattern: /usr/local/lib/python3.10/dist-packages/sgl_kernel/sm100/common_ops.* - found files: "
        "['/usr/local/lib/python3.10/dist-packages/sgl_kernel/sm100/common_ops.abi3.so']",
        "- Compute capability: 86",
        "- ImportError: /usr/local/lib/python3.10/dist-packages/sgl_kernel/sm100/common_ops.abi3.so: undefined symbol: _ZNK3c106SymInt6sym_neERKS0_",
    ]), restarts=21)
    return [p, d, r], {}


@scenario("not-enough-memory-mem-fraction", "cuda-oom", "https://github.com/sgl-project/sglang/issues/4330",
          "0.4.3.post2 with speculative decoding on one L40S: 0.85 gives CUDA OOM, 0.84 'Not enough memory. Please try to "
          "increase --mem-fraction-static'; the unit never serves", also=("config-crashloop", "router-no-healthy-workers"),
          must_not=("role-down",))
def _not_enough_memory():
    p, d, r = roles("0.4.3", "mini_lb")
    crashloop(d, ["RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."], restarts=6)
    return [p, d, r], {}


@scenario("retract-no-space-long-context", "kv-cache-exhausted", "https://github.com/sgl-project/sglang/pull/14948",
          "PD decode with a 128K-token request: pre-allocated and transferring requests hold the pool, the one running request "
          "exhausts it and retraction is impossible: AssertionError 'No space left for only one request'",
          also=("role-down", "router-no-healthy-workers"), must_not=("cuda-oom", "config-crashloop"))
def _no_space():
    p, d, r = roles()
    died(d, [
        "Decode batch, #running-req: 1, #full token: 131072, full token usage: 0.99, #swa token: 2048, swa token usage: 0.02, "
        "pre-allocated usage: 0.61, #prealloc-req: 3, #transfer-req: 2, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 38.10, #queue-req: 0",
        "raw:AssertionError: No space left for only one request, self.token_to_kv_pool_allocator.available_size()=0",
        'raw:  File "/sgl-workspace/sglang/python/sglang/srt/managers/schedule_batch.py", line 1627, in retract_decode',
    ])
    return [p, d, r], {}


@scenario("near-xid31-operator-bug", "role-down", "https://github.com/sgl-project/sglang/issues/29160",
          "GLM-5.2: an MoE kernel bug makes an illegal memory access; dmesg has Xid 31 (MMU fault) from python3, the "
          "scheduler dies and the unit stays down: a software fault, not a bad GPU", must_not=("gpu-fault",))
def _xid31():
    p, d, r = roles()
    failed(d, ["Scheduler hit an exception: Traceback (most recent call last):",
               "raw:scheduler.py:4076  run_scheduler_process", "raw:    scheduler.py:3039  run_batch"])
    kernel = ("2026-11-29T09:59:10+0000 node2 kernel: NVRM: Xid (PCI:0000:70:00): 31, pid=684430, name=python3, channel 0x00000002, "
              "intr 00000000. MMU Fault: ENGINE GRAPHICS GPC1 UNRECOGNIZED_CLIENT faulted @ 0x1827f9_000b4bc0. Fault is of type "
              "UNRECOGNIZED_FAULT UNRECOGNIZED_ACCESS_TYPE\n")
    return [p, d, r], {"kernel": {"node2": kernel}}


@scenario("healthy-low-load-0.5.1", "healthy", "https://github.com/sgl-project/sglang/issues/10053",
          "one user chatting: short prefills with cache hits and decode at ~80 token/s; the first interval's 1.06 token/s "
          "is the idle gap, not a stall", must_not=("decode-wedged", "prefill-wedged"))
def _low_load():
    p, d, r = roles("0.5.3", "sgl-router")
    d.logs = raw([
        "[2025-09-03 18:33:18 TP0] Prefill batch. #new-seq: 1, #new-token: 103, #cached-token: 1, token usage: 0.00, #running-req: 0, #queue-req: 0, ",
        "[2025-09-03 18:33:19 TP0] Decode batch. #running-req: 1, #token: 137, token usage: 0.00, cuda graph: True, gen throughput (token/s): 1.06, #queue-req: 0, ",
        "[2025-09-03 18:33:19 TP0] Decode batch. #running-req: 1, #token: 177, token usage: 0.00, cuda graph: True, gen throughput (token/s): 84.20, #queue-req: 0, ",
        '[2025-09-03 18:33:31] INFO:     192.168.30.81:35262 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        "[2025-09-03 18:33:32 TP0] Decode batch. #running-req: 1, #token: 274, token usage: 0.00, cuda graph: True, gen throughput (token/s): 81.97, #queue-req: 0, ",
    ])
    d.gauges.update(num_running_reqs=1, token_usage=0.0, gen_throughput=81.97)
    d.counters["generation_tokens"] = (40_000, 240)
    return [p, d, r], {}


# --- batch 3 ---------------------------------------------------------------------------------------

@scenario("prefill-queue-growing-chunked", "prefill-queue-saturation", "https://github.com/sgl-project/sglang/issues/6901",
          "1024 requests of 5000 tokens: each prefill batch takes 3 requests (15000 tokens) and the queue grows 40 -> 56 -> ...",
          must_not=("prefill-wedged", "kv-transfer-failure"))
def _queue_growing():
    p, d, r = roles("0.4.6", "sgl-router")
    p.logs = raw([
        "sglang  | [2025-06-05 15:08:56 TP0] Prefill batch. #new-seq: 3, #new-token: 15000, #cached-token: 0, token usage: 0.06, #running-req: 7, #queue-req: 40",
        "sglang  | [2025-06-05 15:08:57 TP0] Prefill batch. #new-seq: 3, #new-token: 15000, #cached-token: 0, token usage: 0.09, #running-req: 10, #queue-req: 56",
    ])
    p.gauges.update(num_queue_reqs=56, num_running_reqs=10, token_usage=0.09)
    p.counters["prompt_tokens"] = (5_000_000, 0)  # prompt_tokens counts finished requests only
    return [p, d, r], {}


@scenario("detokenizer-health-check-exit", "scheduler-watchdog", "https://github.com/sgl-project/sglang/issues/10856",
          "the HTTP server's health check got no answer from the detokenizer for 20 s, marked itself unhealthy and exited "
          "(also seen in PD with 0.5.11 and sglang-router 0.3.2)", also=("role-down", "router-no-healthy-workers"),
          must_not=("config-crashloop",))
def _detok_health():
    p, d, r = roles("0.5.3", "sgl-router")
    died(d, ["Health check failed. Server couldn't get a response from detokenizer for last 20 seconds. tic start time: 05:49:14. "
             "last_heartbeat time: 05:42:53"], status="9/KILL", code="killed", restarts=3)
    return [p, d, r], {}


@scenario("detokenizer-health-glm5-pd-decode", "scheduler-watchdog", "https://github.com/sgl-project/sglang/issues/22511",
          "GLM-5.1 PD decode (H20, TP16 DP16) serves normally, then after a few hours the detokenizer health check fails and "
          "the decode exits, with or without traffic", also=("role-down", "router-no-healthy-workers"),
          must_not=("config-crashloop", "decode-wedged"))
def _detok_glm5():
    p, d, r = roles()
    died(d, raw([
        "[2026-05-16 12:44:55 DP2 TP2] Decode batch, #running-req: 1, #token: 31936, token usage: 0.22, accept len: 2.10, accept rate: 0.37, "
        "pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 0.39, #queue-req: 0",
        "[2026-05-16 12:44:57 DP2 TP2] Decode batch, #running-req: 1, #token: 32000, token usage: 0.22, accept len: 2.60, accept rate: 0.53, "
        "pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 43.98, #queue-req: 0",
    ]) + ["Health check failed. Server couldn't get a response from detokenizer for last 20 seconds."],  # SGLang's wording of the title
         status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("detokenizer-health-glm5-two-node", "scheduler-watchdog", "https://github.com/zai-org/GLM-5/issues/52",
          "sglang 0.5.10 GLM-5-FP8 over two nodes (RoCE): after a while the master reports the detokenizer health check "
          "failure and the sglang process exits", also=("role-down", "router-no-healthy-workers"), must_not=("config-crashloop",))
def _detok_glm5_two_node():
    p, d, r = roles()
    died(p, ["Health check failed. Server couldn't get a response from detokenizer for last 20 seconds."],
         status="9/KILL", code="killed", restarts=2)
    return [p, d, r], {}


@scenario("nccl-init-unhandled-system-error", "nccl-failure", "https://github.com/sgl-project/sglang/issues/4289",
          "0.4.3 TP start-up: ncclCommInitRank fails with 'unhandled system error'; the parent gets SIGQUIT and exits; "
          "systemd restarts it into the same error", also=("router-no-healthy-workers",), must_not=("config-crashloop", "role-down"))
def _nccl_init():
    p, d, r = roles("0.4.3", "mini_lb")
    crashloop(d, raw([
        '  File "/home/clouduser/miniconda3/envs/sglang/lib/python3.10/site-packages/sglang/srt/distributed/device_communicators/pynccl.py", line 108, in __init__',
        "    self.comm: ncclComm_t = self.nccl.ncclCommInitRank(",
        '  File "/home/clouduser/miniconda3/envs/sglang/lib/python3.10/site-packages/sglang/srt/distributed/device_communicators/pynccl_wrapper.py", line 329, in NCCL_CHECK',
        '    raise RuntimeError(f"NCCL error: {error_str}")',
        "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
        "",
        "[2025-03-11 15:02:53] Received sigquit from a child process. It usually means the child failed.",
    ]), restarts=7)
    return [p, d, r], {}


@scenario("nccl-init-system-error-docker", "nccl-failure", "https://github.com/sgl-project/sglang/issues/3460",
          "in the sglang image the scheduler's model runner cannot start NCCL: 'RuntimeError: NCCL error: unhandled system error'",
          also=("router-no-healthy-workers",), must_not=("config-crashloop", "role-down"))
def _nccl_init_docker():
    p, d, r = roles("0.4.3", "mini_lb")
    crashloop(p, raw([
        'File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1787, in run_scheduler_process',
        "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)",
        'File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 178, in init',
        "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
    ]), restarts=4)
    return [p, d, r], {}


# --- batch 4 ---------------------------------------------------------------------------------------

@scenario("mooncake-retry-counter-exceeded", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/6854",
          "PD over RDMA: Mooncake's worker pool fails slices with 'transport retry counter exceeded' towards one decode NIC",
          must_not=("healthy", "prefill-queue-saturation", "role-down"))
def _retry_counter():
    p, d, r = roles("0.4.6", "sgl-router")
    p.logs += raw([
        "E0603 20:16:59.104586 27322 worker_pool.cpp:271] Worker: Process failed for slice (opcode: 1, source_addr: 0x7f20fe0f1680, "
        "length: 65536, dest_addr: 0x7f3d820f3a80, local_nic: mlx5_7, peer_nic: 10.93.81.13:15729@mlx5_0, dest_rkey: 2116517, "
        "retry_cnt: 0): transport retry counter exceeded",
        "E0603 20:16:59.104656 27522 worker_pool.cpp:271] Worker: Process failed for slice (opcode: 1, source_addr: 0x7f9b1c011680, "
        "length: 65536, dest_addr: 0x7f5b30013a80, local_nic: mlx5_7, peer_nic: 10.93.81.13:15695@mlx5_0, dest_rkey: 2123199, "
        "retry_cnt: 0): transport retry counter exceeded",
        "E0603 20:16:59.145802 27418 worker_pool.cpp:271] Worker: Process failed for slice (opcode: 1, source_addr: 0x7f7250181680, "
        "length: 65536, dest_addr: 0x7f9bb4183a80, local_nic: mlx5_2, peer_nic: 10.93.81.13:16842@mlx5_0, dest_rkey: 2115489, "
        "retry_cnt: 0): transport retry counter exceeded",
    ])
    p.counters["num_transfer_failed_reqs"] = (12, 9)
    return [p, d, r], {}


@scenario("mooncake-retry-counter-intermittent", "kv-transfer-failure", "https://github.com/kvcache-ai/Mooncake/issues/1450",
          "the transfer engine used by SGLang fails slices intermittently with 'transport retry counter exceeded' (RDMA, mlx5)",
          must_not=("healthy", "role-down"))
def _retry_counter_intermittent():
    p, d, r = roles()
    p.logs += raw(["Worker: Process failed for slice (opcode: 1, source_addr: 0x14c97801f040, length: 65536, dest_addr: 0x1474af020000, "
                   "local_nic: mlx5_7, peer_nic: 172.16.37.132:14127@mlx5_4, dest_rkey: 2359727, retry_cnt: 0): transport retry counter exceeded."])
    p.counters["num_transfer_failed_reqs"] = (40, 1)
    d.counters["num_transfer_failed_reqs"] = (40, 1)
    return [p, d, r], {}


@scenario("mooncake-metadata-404", "kv-transfer-failure", "https://github.com/sgl-project/sglang/pull/4880",
          "early PD with Mooncake (April 2025): the decode's segment metadata is not found on the bootstrap server (404), "
          "so the prefill cannot retrieve the segment descriptor and the transfer returns an error", must_not=("healthy",))
def _metadata_404():
    p, d, r = roles("0.4.6", "mini_lb")
    p.logs = raw([
        "[2025-04-14 03:56:38 TP0] Prefill batch. #new-seq: 1, #new-token: 10, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, ",
        '[2025-04-14 03:56:41] 10.6.131.5 [14/Apr/2025:03:56:41 +0000] "GET /metadata?key=mooncake%2Fram%2F10.6.131.6_58f33e4e-7c3e-443f-97b8-ec267c066c4f HTTP/1.1" 404 185 "-" "-"',
        "E0414 03:56:41.856248 77969 transfer_metadata_plugin.cpp:173] Unexpected code in http response, GET "
        "http://10.6.131.5:8998/metadata?key=mooncake%2Fram%2F10.6.131.6_58f33e4e-7c3e-443f-97b8-ec267c066c4f response code: 404 "
        "response body: metadata not found",
        "W0414 03:56:41.856264 77969 transfer_metadata.cpp:153] Failed to retrieve segment descriptor, name 10.6.131.6_58f33e4e-7c3e-443f-97b8-ec267c066c4f",
    ])
    return [p, d, r], {}


@scenario("hicache-mooncake-store-startup", "config-crashloop", "https://github.com/kvcache-ai/Mooncake/issues/1088",
          "HiCache with a Mooncake store: the store warmup's transfers time out after 60 s and the scheduler dies while building "
          "HiRadixCache; the unit restarts into the same failure", also=("router-no-healthy-workers",),
          must_not=("role-down", "cuda-oom"))
def _hicache_store():
    p, d, r = roles("0.5.3", "sgl-router")
    crashloop(p, raw([
        "[ TP0] Mooncake store warmup successfully.  ",
        "E1120 11:10:27.133715 203020 transfer_task.cpp:305] Failed to complete transfers after 60 seconds for batch 2586731328  ",
        "[ TP2] An error occurred while loading the configuration:   ",
        "[ TP2] Scheduler hit an exception: Traceback (most recent call last):  ",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 736, in init_memory_pool_and_cache  ',
        "    self.tree_cache = HiRadixCache(",
    ]), restarts=4)
    return [p, d, r], {}


@scenario("pp-prefill-warmup-hang-watchdog", "scheduler-watchdog", "https://github.com/sgl-project/sglang/issues/12121",
          "DeepSeek-V2-Lite on H20 with TP+DP+EP+PP+DP-attention: the PD prefill hangs in warmup in a PP send; the watchdog "
          "fires and dumps the stack, then the prefill exits", also=("prefill-wedged", "role-down", "router-no-healthy-workers"),
          must_not=("config-crashloop", "nccl-failure"))
def _pp_hang():
    p, d, r = roles("0.5.3", "sgl-router")
    died(p, raw([
        "Process 3438121: sglang::scheduler_DP1_TP1_EP1_PP0",
        "Python v3.12.11 (/usr/bin/python3.12)",
        'Thread 3438121 (idle): "MainThread"',
        "    send (torch/distributed/distributed_c10d.py:2487)",
        "    send_tensor_dict (distributed/parallel_state.py:1050)",
        "    event_loop_pp_disagg_prefill (prefill.py:819)",
        "    run_scheduler_process (scheduler.py:2618)",
    ]) + ["Watchdog timeout (self.watchdog_timeout=300)"], status="9/KILL", code="killed")
    p.started = T0 - timedelta(minutes=7)
    return [p, d, r], {}


@scenario("deepep-decode-combine-hang", "decode-wedged", "https://github.com/deepseek-ai/DeepEP/issues/398",
          "2 H800 prefill + 4 H800 decode: decode occasionally hangs inside DeepEP's low-latency combine kernel; GPUs busy, "
          "no token comes out", also=("scheduler-watchdog",), must_not=("healthy", "kv-transfer-failure"))
def _deepep_hang():
    p, d, r = roles("0.5.3", "sgl-router")
    d.gauges.update(num_running_reqs=48, token_usage=0.31, gen_throughput=0.0)
    d.counters["generation_tokens"] = (7_200_000, 0)
    d.logs = []
    d.health, d.health_error = None, "timeout after 5.0 s"
    return [p, d, r], {"gpus": {"node2": gpu_csv(4)}}


@scenario("ep-prefill-rank-idle-stuck", "prefill-wedged", "https://github.com/sgl-project/sglang/issues/9787",
          "DeepSeek V3 with PD and large-scale EP (4P6D): under load one prefill rank's GPU utilisation drops to zero and the "
          "prefill stops making progress (later all its processes crash)", also=("scheduler-watchdog",),
          must_not=("healthy", "prefill-queue-saturation"))
def _ep_prefill_stuck():
    p, d, r = roles("0.4.6", "sgl-router")
    p.gauges.update(num_queue_reqs=37, num_running_reqs=6, num_prefill_prealloc_queue_reqs=12)
    p.counters["prompt_tokens"] = (9_000_000, 0)
    p.logs = []
    rows = gpu_csv(4).splitlines()
    rows[3] = "3, GPU-00003-aaaa, NVIDIA H200, 120000, 143771, 0, 41, 118.2"
    return [p, d, r], {"gpus": {"node1": "\n".join(rows) + "\n"}}


@scenario("prefill-oom-large-page", "cuda-oom", "https://github.com/sgl-project/sglang/issues/7353",
          "PD prefill with a large page size: ~1000 requests transferring, token usage 0.95, then 'Prefill out of memory'",
          also=("role-down", "router-no-healthy-workers"), must_not=("prefill-queue-saturation", "config-crashloop"))
def _prefill_oom_page():
    p, d, r = roles("0.4.6", "sgl-router")
    died(p, raw([
        "[2025-06-18 18:11:03] Prefill batch. #new-seq: 14, #new-token: 8192, #cached-token: 0, token usage: 0.92, #unbootstrapped-req: 0, "
        "#queue-req: 105, #transferring-req: 990, input throughput (token/s): 96875.08 ",
        "[2025-06-18 18:11:03] Prefill batch. #new-seq: 13, #new-token: 8192, #cached-token: 0, token usage: 0.95, #unbootstrapped-req: 0, "
        "#queue-req: 76, #transferring-req: 1015, input throughput (token/s): 85849.56 ",
    ]) + ["Prefill out of memory. Try to lower your batch size."])
    return [p, d, r], {}


# --- batch 5 ---------------------------------------------------------------------------------------

@scenario("router-startup-timeout-torch-compile", "config-crashloop", "https://github.com/sgl-project/sglang/issues/4208",
          "router co-launched with workers using torch.compile: workers need more than the router's 300 s start-up timeout, "
          "so the router exits before they are healthy, at every start", also=("router-no-healthy-workers",),
          must_not=("role-down", "prefill-wedged", "decode-wedged"))
def _router_startup_timeout():
    p, d, r = roles("0.4.3", "sgl-router")
    for w in (p, d):  # still compiling: not answering yet
        w.started = T0 - timedelta(minutes=4)
        w.health, w.health_error, w.nulls = None, "connection refused", True
        w.metrics_error = "connection refused"
        w.logs = ["raw:SingleProcess AUTOTUNE benchmarking takes 1.3427 seconds and 8.8429 seconds precompiling"]
    crashloop(r, raw([
        "[Router (Rust)] 2025-03-08 02:33:09 - INFO - Worker http://0.0.0.0:31000 health check is pending with error: error sending "
        "request for url (http://0.0.0.0:31000/health)",
        "[Router (Rust)] 2025-03-08 02:33:09 - INFO - Worker http://0.0.0.0:31778 health check is pending with error: error sending "
        "request for url (http://0.0.0.0:31778/health)",
    ]), restarts=3)
    r.started = T0 - timedelta(minutes=5)
    return [p, d, r], {}


@scenario("router-grpc-worker-as-http", "router-no-healthy-workers", "https://github.com/sgl-project/sglang/issues/12630",
          "a gRPC worker registered with the router is detected as HTTP; its /health check fails with BadScheme and the "
          "worker is never healthy, although it runs fine", must_not=("role-down", "decode-wedged"))
def _grpc_as_http():
    p, d, r = roles("0.5.3", "sgl-router")
    r.logs = raw(['WARN sglang_router_rs::core::worker: src/core/worker.rs:615: HTTP health check failed for grpc://192.168.1.200:31001: '
                  'reqwest::Error { kind: Builder, url: "grpc://192.168.1.200:31001/health", source: BadScheme }'] * 3)
    r.gauges["sgl_router_worker_health{worker=http://10.0.0.2:30001}"] = 0
    r.gauges["sgl_router_active_workers"] = 1
    r.counters["sgl_router_pd_errors{error_type=no_decode_server}"] = (10, 6)
    d.gauges.update(num_running_reqs=0)
    return [p, d, r], {}


@scenario("smg-failed-worker-never-reprobed", "router-no-healthy-workers", "https://github.com/smg-project/smg/pull/2468",
          "a decode worker stopped, went Ready -> NotReady -> Failed in the gateway, was restarted and is healthy on its port, "
          "but the gateway never probes a Failed worker again: no decode in rotation until the gateway restarts",
          must_not=("role-down", "decode-wedged", "kv-transfer-failure"))
def _never_reprobed():
    p, d, r = roles()
    d.restarts, d.started = 1, T0 - timedelta(minutes=8)
    d.gauges.update(num_running_reqs=0)
    d.counters["realtime_tokens{mode=decode}"] = (1_000, 0)
    p.gauges.update(num_running_reqs=0, num_queue_reqs=0)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (9_000_000, 0)
    r.gauges.update({"smg_worker_health": 0, "smg_worker_pool_size": 1})
    r.counters["smg_router_request_errors{error_type=no_workers}"] = (120, 30)
    return [p, d, r], {}


@scenario("ecc-uncorrectable-a100", "gpu-fault", "https://github.com/sgl-project/sglang/issues/3204",
          "DeepSeek on A100s: 'CUDA error: uncorrectable ECC error encountered'; the role dies and restarts fail the same way "
          "until the GPU is reset", also=("role-down", "router-no-healthy-workers"), must_not=("config-crashloop", "cuda-oom"))
def _ecc():
    p, d, r = roles("0.4.3", "mini_lb")
    died(d, raw([
        "[2025-01-29 08:52:44 TP3] Using default MoE config. Performance might be sub-optimal! Config file not found at "
        "/home/ubuntu/.local/lib/python3.10/site-packages/sglang/srt/layers/moe/fused_moe_triton/configs/E=160,N=192,device_name=NVIDIA_A100-SXM4-80GB.json",
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    ]), restarts=3)
    return [p, d, r], {}


@scenario("ecc-uncorrectable-hicache-2p2d", "gpu-fault", "https://github.com/sgl-project/sglang/issues/9151",
          "2P2D with HiCache at 512 concurrent requests: 'CUDA error: uncorrectable ECC error encountered' blocks the GPU; the "
          "node has to be restarted", also=("role-down", "router-no-healthy-workers"), must_not=("config-crashloop", "cuda-oom"))
def _ecc_hicache():
    p, d, r = roles("0.4.6", "sgl-router")
    died(p, raw([
        "[2025-08-13 02:01:54 TP0] Prefill batch. #new-seq: 3, #new-token: 8192, #cached-token: 32, token usage: 0.03, "
        "#unbootstrapped-req: 155, #queue-req: 10",
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    ]), status="6/ABRT", code="dumped")
    return [p, d, r], {}


@scenario("retract-overlap-alloc-fail", "kv-cache-exhausted", "https://github.com/sgl-project/sglang/issues/14972",
          "token usage 0.94 with 5 queued: retraction under the overlap scheduler fails to allocate and decode stops producing",
          also=("role-down",), must_not=("cuda-oom", "decode-wedged"))
def _retract_overlap():
    p, d, r = roles()
    d.gauges.update(token_usage=0.94, num_running_reqs=6, num_queue_reqs=5, num_retracted_reqs=1)
    d.counters["num_retracted_requests"] = (30, 3)
    d.counters["realtime_tokens{mode=decode}"] = (3_000_000, 40)
    d.logs = raw(["[2025-12-12 08:43:59 TP0] Decode batch, #running-req: 6, #token: 1920, token usage: 0.94, cuda graph: True, "
                  "gen throughput (token/s): 446.45, #queue-req: 5,"] * 3)
    return [p, d, r], {}


# --- batch 6 ---------------------------------------------------------------------------------------

@scenario("smg-decode-500-metadata-collision", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/22716",
          "PD under high concurrency: a metadata buffer index collision corrupts the context on decode; SMG logs the decode "
          "answering 500 while other requests finish", must_not=("healthy", "router-no-healthy-workers", "decode-wedged"))
def _metadata_collision():
    p, d, r = roles()
    r.logs = raw([
        '2026-04-13 16:12:39 ERROR http_request{method=POST uri=/generate version=HTTP/1.1 module="smg" request_id="gnt-TqJna3sWKf0DntoKbIWZriY9"}: '
        "smg::routers::http::pd_router: /home/runner/work/sglang/sglang/src/routers/http/pd_router.rs:590: Decode server returned error "
        "status decode_url=http://127.0.0.1:30000 status=500 Internal Server Error",
        '2026-04-13 16:12:39  INFO http_request{method=POST uri=/generate version=HTTP/1.1 module="smg" request_id="gnt-1HFv8hcEUqESnJs9FNprtMET" '
        "status_code=200 latency=2207784}: smg::response: /home/runner/work/sglang/sglang/src/middleware.rs:359: finished processing request",
    ])
    r.counters["smg_router_request_errors{error_type=backend_error}"] = (30, 7)
    return [p, d, r], {}


@scenario("nixl-ucx-wrong-nic-transfer-hang", "kv-transfer-failure", "https://github.com/sgl-project/sglang/pull/28737",
          "NIXL ignores --disaggregation-ib-device: without UCX_NET_DEVICES pinned, every KV transfer hangs until the 300 s "
          "timeout; decode holds requests in its transfer queue while prefill is idle", must_not=("healthy", "decode-wedged",
          "prefill-queue-saturation"))
def _nixl_wrong_nic():
    p, d, r = roles()
    p.gauges.update(num_running_reqs=0, num_queue_reqs=0)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (2_000_000, 0)
    d.gauges.update(num_running_reqs=0, num_decode_transfer_queue_reqs=8)
    d.counters["realtime_tokens{mode=decode}"] = (400_000, 0)
    d.counters["num_transfer_failed_reqs"] = (16, 2)
    d.logs = []
    return [p, d, r], {}


@scenario("healthy-pd-no-gain-h200", "healthy", "https://github.com/sgl-project/sglang/issues/24488",
          "GLM-5.1 PD on H200 at 32k input / 512 output gives no throughput gain over one node: a tuning question, "
          "every role busy and progressing", must_not=("prefill-queue-saturation", "decode-wedged", "kv-transfer-failure"))
def _pd_no_gain():
    p, d, r = roles()
    p.gauges.update(num_queue_reqs=6, num_running_reqs=2, token_usage=0.41)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (40_000_000, 180_000)
    d.gauges.update(num_running_reqs=32, token_usage=0.38)
    return [p, d, r], {}


@scenario("router-no-prefill-high-rate-ep", "router-no-healthy-workers", "https://github.com/sgl-project/sglang/issues/12355",
          "2P+6D large-scale EP benchmark with 12288 requests: the router fails PD pair selection with 'No available prefill "
          "workers (all circuits open or unhealthy)' while the prefills are busy", also=("prefill-queue-saturation",),
          must_not=("role-down", "kv-transfer-failure"))
def _router_high_rate():
    p, d, r = roles("0.5.3", "sgl-router")
    p.gauges.update(num_queue_reqs=48, num_running_reqs=16, num_prefill_prealloc_queue_reqs=96)
    r.logs = raw(['2025-10-29 21:49:19 ERROR http_request{method=POST uri=/generate version=HTTP/1.1 request_id="gnt-T1DkMPsWX1SOfuePNC4g04oV"}: '
                  "sglang_router_rs::routers::http::pd_router: src/routers/http/pd_router.rs:142: Failed to select PD pair "
                  "error=No available prefill workers (all circuits open or unhealthy)"] * 3)
    r.gauges.update({"sgl_router_cb_state{worker=http://10.0.0.1:30000}": 1, "sgl_router_cb_state{worker=http://10.0.0.3:30000}": 1})
    return [p, d, r], {}


@scenario("mooncake-receivers-stuck-transferring", "kv-transfer-failure", "https://github.com/sgl-project/sglang/pull/31800",
          "DeepSeek-V4 PD (8 prefill / 16 decode): receivers stuck in KVPoll.Transferring never time out and leak decode "
          "slots; #transfer-req frozen, #running-req ~1, KV usage ~0.04, throughput collapses",
          must_not=("kv-cache-exhausted", "decode-wedged", "healthy"))
def _stuck_transferring():
    p, d, r = roles()
    d.gauges.update(num_running_reqs=1, token_usage=0.04, num_decode_transfer_queue_reqs=127)
    d.counters["realtime_tokens{mode=decode}"] = (9_100_000, 120)
    d.logs = ["Decode batch, #running-req: 1, #full token: 4800, full token usage: 0.04, #swa token: 1200, swa token usage: 0.01, "
              "pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 127, #retracted-req: 0, cuda graph: True, "
              "gen throughput (token/s): 41.20, #queue-req: 0"] * 2
    return [p, d, r], {}


@scenario("decode-waiting-timeout-600s", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/11648",
          "DeepSeek R1 PD on 6x8 H20 at concurrency 128: decode requests never get the transfer-done signal and time out "
          "after 600 s in KVPoll.WaitingForInput", must_not=("healthy", "role-down"))
def _waiting_timeout():
    p, d, r = roles("0.5.3", "sgl-router")
    d.logs = raw([
        "[2025-10-15 11:03:35 DP6 TP6 EP6] Some requests fail to receive KV Cache transfer done signal after bootstrapping. If a greater "
        "mean TTFT is acceptable, you can 'export SGLANG_DISAGGREGATION_WAITING_TIMEOUT=600' (10 minutes) to relax the timeout condition. ",
        "[2025-10-15 11:03:35 DP6 TP6 EP6] Decode transfer failed for request rank=6 decode_req.req.rid='cd00baf7d2fc4dcf8535c3a25f0288a3' "
        "decode_req.req.bootstrap_room=8360203925601259718 with exception KVTransferError(bootstrap_room=8360203925601259718): Request "
        "8360203925601259718 timed out after 600.0s in KVPoll.WaitingForInput",
        "[2025-10-15 11:03:35 DP6 TP6 EP6] Decode transfer failed for request rank=6 decode_req.req.rid='de2b8335632d474fb24b2eed0658e1e7' "
        "decode_req.req.bootstrap_room=4699239566385471430 with exception KVTransferError(bootstrap_room=4699239566385471430): Request "
        "4699239566385471430 timed out after 600.0s in KVPoll.WaitingForInput",
    ])
    d.counters["num_transfer_failed_reqs"] = (20, 14)
    return [p, d, r], {}


@scenario("c10d-store-timeout-dsv32-prefill", "nccl-failure", "https://github.com/sgl-project/sglang/issues/21292",
          "DeepSeek-V3.2 PD with DeepEP on v0.5.8: a prefill rank's c10d store socket times out after 600000 ms and the "
          "scheduler dies", also=("role-down", "router-no-healthy-workers"), must_not=("config-crashloop",))
def _c10d_timeout():
    p, d, r = roles()
    died(p, raw([
        "[rank1]:[W324 12:06:11.712348372 socket.cpp:472] [c10d] waitForInput: poll for socket SocketImpl(fd=149, "
        "addr=[ds32-prefill-sgl059-efza-sysv1-inbi-head-0]:45532, remote=[ds32-prefill-sgl059-efza-sysv1-inbi-head-0]:6379) returned 0, likely a timeout",
        "[rank1]:[W324 12:06:11.712424651 socket.cpp:497] [c10d] waitForInput: socket SocketImpl(fd=149, "
        "addr=[ds32-prefill-sgl059-efza-sysv1-inbi-head-0]:45532, remote=[ds32-prefill-sgl059-efza-sysv1-inbi-head-0]:6379) timed out after 600000ms",
        "[2026-03-24 12:06:11 DP1 TP1 EP1] Scheduler hit an exception: Traceback (most recent call last):",
    ]))
    return [p, d, r], {}


@scenario("bootstrap-unreachable-under-load", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/9266",
          "GLM-4.5 PD behind sgl-router at high concurrency: decode cannot reach the prefill's bootstrap server "
          "('Error fetching prefill parallel info from bootstrap ... ConnectTimeoutError') and many transfers fail",
          also=("prefill-queue-saturation", "scheduler-watchdog"), must_not=("healthy", "role-down"))
def _bootstrap_unreachable():
    p, d, r = roles("0.5.3", "sgl-router")
    d.logs = raw([
        "[2025-08-29 11:56:28] Health check failed. Server couldn't get a response from detokenizer for last 20 seconds. tic start time: "
        "11:56:08. last_heartbeat time: 11:54:35",
        "[2025-08-29 11:56:51 TP0 EP0] Error fetching prefill parallel info from bootstrap: HTTPConnectionPool(host='sglang-deploy-glm-4-5-prefill', "
        "port=30089): Max retries exceeded with url: /route?engine_rank=-1&target_dp_group=-1&target_pp_rank=-1 (Caused by "
        "ConnectTimeoutError(<urllib3.connection.HTTPConnection object at 0x79c38b357230>, 'Connection to sglang-deploy-glm-4-5-prefill "
        "timed out. (connect timeout=None)'))",
    ])
    d.counters["num_bootstrap_failed_reqs"] = (40, 12)
    return [p, d, r], {}


# --- batch 7 ---------------------------------------------------------------------------------------

@scenario("prefill-kv-pool-exhaustion-sigquit", "cuda-oom", "https://github.com/sgl-project/sglang/issues/26265",
          "a transient exhaustion of the prefill KV pool raises in alloc_paged_token_slots_extend; the scheduler dies and "
          "the server exits on SIGQUIT instead of waiting for memory", also=("role-down", "kv-cache-exhausted",
          "router-no-healthy-workers"), must_not=("config-crashloop",))
def _prefill_pool_sigquit():
    p, d, r = roles()
    died(p, raw([
        "[TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File ".../sglang/srt/managers/scheduler.py", line 3249, in _get_new_batch_prefill_raw',
        "    new_batch.prepare_for_extend()",
        '  File ".../sglang/srt/mem_cache/common.py", line 486, in alloc_for_extend',
        "    out_cache_loc = alloc_paged_token_slots_extend(...)",
        '  File ".../sglang/srt/mem_cache/common.py", line 412, in alloc_paged_token_slots_extend',
    ]) + ["Prefill out of memory. Try to lower your batch size.", "SIGQUIT received. signum=None, frame=None. It usually means one child failed."])
    return [p, d, r], {}


@scenario("speculative-with-hicache-startup", "config-crashloop", "https://github.com/sgl-project/sglang/issues/12076",
          "--speculative-algorithm together with --enable-hierarchical-cache: a child fails at start, the server gets SIGQUIT "
          "from each rank and exits; the container restarts into the same error", also=("router-no-healthy-workers",),
          must_not=("role-down", "scheduler-watchdog"))
def _spec_hicache():
    p, d, r = roles("0.5.3", "sgl-router")
    crashloop(d, raw([
        "sglang-1  | [2025-10-29 11:26:03] SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
        "sglang-1  | [2025-10-29 11:26:04] SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
        "sglang-1  | [2025-10-29 11:26:04] ERROR:    Traceback (most recent call last):",
        'sglang-1  |   File "/usr/lib/python3.12/asyncio/runners.py", line 195, in run',
        "sglang-1  |     return runner.run(main)",
    ]), restarts=5)
    return [p, d, r], {}


@scenario("warmup-403-through-proxy", "config-crashloop", "https://github.com/sgl-project/sglang/issues/3623",
          "the warmup request goes through an HTTP proxy from the environment and gets 403: 'Initialization failed. warmup "
          "error', then the server kills itself; every restart does the same", also=("router-no-healthy-workers",),
          must_not=("role-down",))
def _warmup_403():
    p, d, r = roles("0.4.3", "mini_lb")
    crashloop(p, raw([
        "2025-02-17 11:56:43] Initialization failed. warmup error: Traceback (most recent call last):",
        '  File "xxx/python3.11/site-packages/sglang/srt/entrypoints/http_server.py", line 548, in _wait_and_warmup',
        '    assert res.status_code == 200, f"{res=}, {res.text=}"',
        "AssertionError: res=<Response [403]>, res.text='<html>\\n<head><title>403 Forbidden</title></head>\\n<body>\\n<div "
        "style=\"text-align: center;\"><h1>403 Forbidden</h1></div>\\n</body>\\n</html>'",
        "Killed",
    ]), status="9/KILL", code="killed", restarts=4)
    return [p, d, r], {}


@scenario("healthy-decode-draining", "healthy", "https://github.com/sgl-project/sglang/pull/13023",
          "end of a benchmark: running requests drain 46 -> 11 and gen throughput falls with them; nothing is stuck",
          must_not=("decode-wedged", "kv-cache-exhausted"))
def _draining():
    p, d, r = roles("0.5.3", "sgl-router")
    d.logs = raw([
        "[2025-11-11 04:06:27] Decode batch, #running-req: 46, #token: 34901, token usage: 0.19, cuda graph: False, gen throughput (token/s): 1447.08, #queue-req: 0, ",
        "[2025-11-11 04:06:29] Decode batch, #running-req: 36, #token: 28419, token usage: 0.16, cuda graph: False, gen throughput (token/s): 1262.64, #queue-req: 0, ",
        "[2025-11-11 04:06:31] Decode batch, #running-req: 22, #token: 20033, token usage: 0.11, cuda graph: True, gen throughput (token/s): 895.36, #queue-req: 0, ",
        "[2025-11-11 04:06:35] Decode batch, #running-req: 11, #token: 13642, token usage: 0.07, cuda graph: True, gen throughput (token/s): 475.19, #queue-req: 0, ",
    ])
    d.gauges.update(num_running_reqs=11, token_usage=0.07, gen_throughput=475.19)
    d.counters["generation_tokens"] = (3_000_000, 9_000)
    return [p, d, r], {}


@scenario("healthy-mixed-prefill-decode-2026", "healthy", "https://github.com/sgl-project/sglang/pull/22166",
          "a benchmark run after a sampling change: prefill and decode batches interleave, 32 running, ~1600 token/s",
          must_not=("decode-wedged", "prefill-queue-saturation"))
def _mixed():
    p, d, r = roles()
    d.logs = raw([
        "[2026-04-05 20:02:51] Decode batch, #running-req: 32, #token: 11179, token usage: 0.08, cuda graph: True, gen throughput (token/s): 1635.11, #queue-req: 0",
        '[2026-04-05 20:02:51] INFO:     127.0.0.1:40052 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    ])
    p.logs = raw([
        "[2026-04-05 20:02:51] Prefill batch, #new-seq: 1, #new-token: 158, #cached-token: 0, token usage: 0.08, #running-req: 31, #queue-req: 0, "
        "cuda graph: True, input throughput (token/s): 559.53",
        "[2026-04-05 20:02:52] Prefill batch, #new-seq: 1, #new-token: 290, #cached-token: 0, token usage: 0.08, #running-req: 31, #queue-req: 0, "
        "cuda graph: True, input throughput (token/s): 1670.03",
    ])
    return [p, d, r], {}


@scenario("near-hisparse-flat-token-count", "healthy", "https://github.com/sgl-project/sglang/pull/22331",
          "HiSparse decode logs '#token: 20800, token usage: 0.29' on every line while 5 requests decode at ~140 token/s: "
          "a flat token count is a logging artefact, not a stall", must_not=("decode-wedged", "kv-cache-exhausted"))
def _hisparse_flat():
    p, d, r = roles()
    d.logs = raw([
        "[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, gen throughput (token/s): 144.95, #queue-req: 0",
        "[2026-04-08 14:05:22 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, gen throughput (token/s): 140.27, #queue-req: 0",
        "[2026-04-08 14:05:24 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, gen throughput (token/s): 136.39, #queue-req: 0",
        "[2026-04-08 14:05:25 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, gen throughput (token/s): 139.89, #queue-req: 0",
    ])
    d.gauges.update(num_running_reqs=5, token_usage=0.29)
    d.counters["realtime_tokens{mode=decode}"] = (7_000_000, 420)
    return [p, d, r], {}


# --- batch 8 ---------------------------------------------------------------------------------------

@scenario("dsv3-long-output-decode-oom-retract", "kv-cache-exhausted", "https://github.com/sgl-project/sglang/issues/2746",
          "DeepSeek-V3 with very long outputs: token usage 1.00, ~11 token/s, then 'Decode out of memory happened' retracts "
          "requests on every rank", must_not=("cuda-oom", "decode-wedged", "role-down"))
def _dsv3_long_output():
    p, d, r = roles("0.4.3", "mini_lb")
    d.logs = raw([
        "[2025-01-06 02:58:11 TP0] Decode batch. #running-req: 2, #token: 307481, token usage: 1.00, gen throughput (token/s): 10.92, #queue-req: 0",
        "[2025-01-06 02:58:19 TP0] Decode batch. #running-req: 2, #token: 307561, token usage: 1.00, gen throughput (token/s): 10.92, #queue-req: 0",
        "[2025-01-06 02:58:41 TP0] Decode batch. #running-req: 2, #token: 307801, token usage: 1.00, gen throughput (token/s): 10.93, #queue-req: 0",
        "[2025-01-06 02:58:44 TP0] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.9446",
        "[2025-01-06 02:58:44 TP5] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.9446",
        "[2025-01-06 02:58:44 TP7] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.9446",
    ])
    d.gauges.update(num_running_reqs=1, num_queue_reqs=1, token_usage=1.0, gen_throughput=10.93)
    return [p, d, r], {}


@scenario("dsv3-stops-after-few-requests", "decode-wedged", "https://github.com/sgl-project/sglang/issues/2741",
          "DeepSeek V3 with 99 running requests stops without any error: GPUs at 100% but low power, as if in an infinite "
          "loop; nothing comes back", also=("prefill-wedged",), must_not=("healthy", "kv-cache-exhausted"))
def _dsv3_stops():
    p, d, r = roles("0.4.3", "mini_lb")
    d.logs = raw(["[2025-01-05 19:17:01 TP0] Prefill batch. #new-seq: 1, #new-token: 105, #cached-token: 112, cache hit rate: 12.33%, "
                  "token usage: 0.32, #running-req: 99, #queue-req:"])
    d.gauges.update(num_running_reqs=99, token_usage=0.32, gen_throughput=0.0)
    d.counters["generation_tokens"] = (1_500_000, 0)
    d.health, d.health_error = None, "timeout after 5.0 s"
    return [p, d, r], {}


@scenario("healthy-bench-draining-largest-len", "healthy", "https://github.com/sgl-project/sglang/issues/4407",
          "0.4.4: the benchmark client fails on a JSON decode error while the server drains 509 -> 151 running requests at "
          "~5-9k token/s; the server is fine", must_not=("decode-wedged", "kv-cache-exhausted"))
def _largest_len():
    p, d, r = roles("0.4.3", "mini_lb")
    d.logs = raw([
        "[2025-03-14 02:16:14 TP0] Decode batch. #running-req: 509, #token: 180776, token usage: 0.43, gen throughput (token/s): 7897.87, largest-len: 0, #queue-req: 0, ",
        "[2025-03-14 02:16:18 TP0] Decode batch. #running-req: 397, #token: 171204, token usage: 0.41, gen throughput (token/s): 7980.04, largest-len: 0, #queue-req: 0, ",
        "[2025-03-14 02:16:24 TP0] Decode batch. #running-req: 235, #token: 135338, token usage: 0.32, gen throughput (token/s): 5805.50, largest-len: 0, #queue-req: 0, ",
        "[2025-03-14 02:16:27 TP0] Decode batch. #running-req: 151, #token: 100226, token usage: 0.24, gen throughput (token/s): 4726.37, largest-len: 0, #queue-req: 0, ",
    ])
    d.gauges.update(num_running_reqs=151, token_usage=0.24, gen_throughput=4726.37)
    d.counters["generation_tokens"] = (9_000_000, 15_000)
    return [p, d, r], {}


@scenario("near-running-pinned-below-max", "healthy", "https://github.com/sgl-project/sglang/issues/30294",
          "GLM-5-FP8 with DP attention: every rank holds at 15 running requests (max 16) with one request queued; a "
          "scheduling inefficiency, while tokens flow", must_not=("prefill-queue-saturation", "decode-wedged", "kv-cache-exhausted"))
def _pinned():
    p, d, r = roles()
    d.gauges.update(num_running_reqs=15, num_queue_reqs=1, token_usage=0.45)
    return [p, d, r], {}


@scenario("after-sigkill-restart-silent-hang", "decode-wedged", "https://github.com/sgl-project/sglang/issues/22779",
          "the server was SIGKILLed and relaunched on the same port: /health answers 200, about a hundred requests complete, "
          "then every request hangs with zero tokens", must_not=("healthy", "role-down"))
def _sigkill_restart():
    p, d, r = roles()
    d.restarts, d.started = 1, T0 - timedelta(minutes=3)
    d.gauges.update(num_running_reqs=18, token_usage=0.05)
    d.counters["realtime_tokens{mode=decode}"] = (60_000, 0)
    d.history = ["systemd: sglang-dsv4-decode.service: Main process exited, code=killed, status=9/KILL",
                 "systemd: sglang-dsv4-decode.service: Scheduled restart job, restart counter is at 1."]
    d.logs = []
    return [p, d, r], {}


@scenario("warmup-503-killed", "config-crashloop", "https://github.com/sgl-project/sglang/issues/4094",
          "Qwen2.5-7B with --api-key: the warmup request is answered 503 and the process is killed about two minutes after "
          "every start", also=("router-no-healthy-workers",), must_not=("role-down", "cuda-oom"))
def _warmup_503():
    p, d, r = roles("0.4.3", "mini_lb")
    crashloop(d, ["AssertionError: res=<Response [503]>", "raw:Killed"], status="9/KILL", code="killed", restarts=6)
    d.started = T0 - timedelta(minutes=2)
    return [p, d, r], {}


# --- batch 9 ---------------------------------------------------------------------------------------

@scenario("mooncake-tcp-unreachable-address-rocm", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/23342",
          "PD on MI300x with Mooncake over TCP: chat completions hang forever, all processes alive with GPU at 0%; Mooncake "
          "advertised an address the other side cannot reach (the bootstrap port alone answers)",
          also=("decode-wedged",), must_not=("healthy", "prefill-queue-saturation"))
def _tcp_unreachable():
    p, d, r = roles()
    p.gauges.update(num_running_reqs=0, num_queue_reqs=0, num_prefill_inflight_queue_reqs=3)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (30_000, 0)
    d.gauges.update(num_running_reqs=0, num_decode_transfer_queue_reqs=3)
    d.counters["realtime_tokens{mode=decode}"] = (200, 0)
    return [p, d, r], {"gpus": {"node1": gpu_csv(4).replace(", 87, ", ", 0, "), "node2": gpu_csv(4).replace(", 87, ", ", 0, ")}}


@scenario("bootstrap-wrong-prefill-ip-decode-freeze", "kv-transfer-failure", "https://github.com/sgl-project/sglang/pull/19900",
          "PD with a wrong prefill address: decode retries the bootstrap's parallel info for every pending request and its "
          "engine freezes; requests pile up in the prealloc queue", also=("decode-wedged",),
          must_not=("healthy", "role-down"))
def _wrong_prefill_ip():
    p, d, r = roles()
    p.gauges.update(num_running_reqs=0, num_queue_reqs=0)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (10_000, 0)
    d.gauges.update(num_running_reqs=0, num_decode_prealloc_queue_reqs=24)
    d.counters["realtime_tokens{mode=decode}"] = (90_000, 0)
    d.counters["num_bootstrap_failed_reqs"] = (0, 0)
    return [p, d, r], {}


@scenario("nccl-socket-connect-abort-init", "nccl-failure", "https://github.com/sgl-project/sglang/issues/5594",
          "two H100 nodes: NCCL's bootstrap cannot connect to the peer ('Software caused connection abort') while the "
          "scheduler initializes; every start fails the same way", also=("router-no-healthy-workers",),
          must_not=("config-crashloop", "role-down"))
def _nccl_connect_abort():
    p, d, r = roles("0.4.6", "mini_lb")
    crashloop(p, raw([
        "h100-15:139:1092 [7] socket.c:485 NCCL WARN socketStartConnect: Connect to 10.0.0.82<38455> failed : Software caused connection abort",
        "h100-15:139:1092 [7] NCCL INFO transport/net.cc:687 -> 2",
        "h100-15:132:132 [0] NCCL INFO init.cc:1837 -> 2",
        "[2025-04-21 07:28:41 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1714, in run_scheduler_process',
    ]), restarts=5)
    return [p, d, r], {}


@scenario("nccl-no-route-to-host-init", "nccl-failure", "https://github.com/sgl-project/sglang/issues/3820",
          "multi-node start-up: NCCL cannot reach 10.0.0.4 ('No route to host') and TP14's scheduler dies in its constructor",
          also=("router-no-healthy-workers",), must_not=("config-crashloop", "role-down"))
def _nccl_no_route():
    p, d, r = roles("0.4.3", "mini_lb")
    crashloop(d, raw([
        "node5:240:240 [6] misc/socket.cc:533 NCCL WARN socketPollConnect: Connect to 10.0.0.4<56849> returned 113(No route to host) "
        "errno 115(Operation now in progress)",
        "node5:240:240 [6] NCCL INFO bootstrap.cc:285 -> 2",
        "node5:240:240 [6] NCCL INFO init.cc:1837 -> 2",
        "[2025-02-24 14:09:34 TP14] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1816, in run_scheduler_process',
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)",
    ]), restarts=8)
    return [p, d, r], {}


# --- batch 10: NIXL and Mooncake transfer failures ----------------------------------------------

@scenario("nixl-efa-remote-disconnect-new-decode", "kv-transfer-failure", "https://github.com/ai-dynamo/nixl/issues/1983",
          "SGLang PD over NIXL/UCX SRD (EFA) on B200: a prefill's first connection to a freshly started decode fails with "
          "NIXL_ERR_REMOTE_DISCONNECT, the remote agent is deregistered and every later transfer to that decode fails",
          must_not=("healthy", "role-down", "decode-wedged"))
def _nixl_efa():
    p, d, r = roles()
    d.restarts, d.started = 1, T0 - timedelta(minutes=6)
    p.counters["num_transfer_failed_reqs"] = (0, 9)
    d.counters["num_transfer_failed_reqs"] = (0, 9)
    d.gauges.update(num_running_reqs=0, num_decode_transfer_queue_reqs=9)
    d.counters["realtime_tokens{mode=decode}"] = (3_000, 0)
    return [p, d, r], {}


@scenario("nixl-backend-error-first-request", "kv-transfer-failure", "https://github.com/ai-dynamo/nixl/issues/492",
          "sglang 0.4.7.post1 PD on one H200 with NIXL from pip: the first request raises "
          "nixl._bindings.nixlBackendError: NIXL_ERR_BACKEND on the prefill (UCX of the wheel conflicts with the system's)",
          must_not=("healthy", "config-crashloop"))
def _nixl_backend_first():
    p, d, r = roles("0.4.6", "mini_lb")
    p.logs += ["nixl._bindings.nixlBackendError: NIXL_ERR_BACKEND"]
    p.counters["num_transfer_failed_reqs"] = (0, 1)
    return [p, d, r], {}


@scenario("nixl-backend-error-decode-qwen3", "kv-transfer-failure", "https://github.com/ai-dynamo/nixl/issues/503",
          "SGLang PD with the NIXL backend: the servers warm up (fake transfers), then the decode side fails real "
          "transfers with NIXL_ERR_BACKEND", must_not=("healthy", "config-crashloop"))
def _nixl_backend_decode():
    p, d, r = roles("0.4.6", "mini_lb")
    d.logs = raw([
        "[2025-06-26 02:04:08] max_total_num_tokens=510299, chunked_prefill_size=16384, max_prefill_tokens=16384, max_running_requests=4096, "
        "context_len=40960, available_gpu_mem=8.59 GB",
        "[2025-06-26 02:04:09] Start of prefill warmup ...",
        "[2025-06-26 02:04:09] Prefill batch. #new-seq: 1, #new-token: 4, #cached-token: 0, token usage: 0.00, #running-req: 0, "
        "#unbootstrapped-req: 0, #queue-req: 0, #transferring-req: 0, time: 1.70",
    ]) + ["nixl._bindings.nixlBackendError: NIXL_ERR_BACKEND"]
    d.counters["num_transfer_failed_reqs"] = (0, 2)
    return [p, d, r], {}


@scenario("nixl-source-build-transfer-blocked", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/5709",
          "NIXL built from source against the system UCX: no more NIXL_ERR_BACKEND, but the KV transmission blocks; "
          "requests wait in the prefill's transferring queue and decode never gets them", also=("prefill-wedged",),
          must_not=("healthy", "prefill-queue-saturation"))
def _nixl_blocked():
    p, d, r = roles("0.4.6", "mini_lb")
    p.logs = raw(["Cuda graph is disabled for prefill server"])
    p.gauges.update(num_running_reqs=0, num_queue_reqs=0, num_prefill_infight_queue_reqs=4)
    d.gauges.update(num_running_reqs=0, num_decode_transfer_queue_reqs=4)
    d.counters["generation_tokens"] = (0, 0)
    d.gauges["gen_throughput"] = 0.0
    return [p, d, r], {}


@scenario("nixl-remote-disconnect-stale-peer", "kv-transfer-failure", "https://github.com/sgl-project/sglang/pull/40108",
          "after a NIXL remote disconnect the peer's memory metadata is invalid while SGLang still treats it as "
          "registered: transfers fail indefinitely although both engines stay up", must_not=("healthy", "role-down"))
def _nixl_stale_peer():
    p, d, r = roles()
    p.counters["num_transfer_failed_reqs"] = (200, 14)
    d.counters["num_transfer_failed_reqs"] = (200, 14)
    d.counters["realtime_tokens{mode=decode}"] = (5_000_000, 300)
    return [p, d, r], {}


@scenario("mooncake-failed-to-send-kv-chunk", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/7118",
          "the simplest 1P1D with Mooncake fails every request with 'Failed to send kv chunk'; fixed by a newer Mooncake",
          must_not=("healthy", "prefill-queue-saturation"))
def _send_kv_chunk():
    p, d, r = roles("0.4.6", "mini_lb")
    p.counters["num_transfer_failed_reqs"] = (5, 6)
    d.counters["num_transfer_failed_reqs"] = (5, 6)
    return [p, d, r], {}


@scenario("oom-not-crashing-k8s", "cuda-oom", "https://github.com/sgl-project/sglang/issues/4730",
          "0.4.1.post7 serving DeepSeek-R1-Distill-Qwen-7B at 1800 concurrent requests: torch.OutOfMemoryError early in "
          "the run, and the process stays up without serving instead of crashing", also=("decode-wedged",),
          must_not=("config-crashloop", "role-down", "kv-cache-exhausted"))
def _oom_alive():
    p, d, r = roles("0.4.3", "mini_lb")
    d.logs = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 616.00 MiB. GPU 0 has a total capaci"]
    d.gauges.update(num_running_reqs=0, num_queue_reqs=640, gen_throughput=0.0)
    d.counters["generation_tokens"] = (40_000, 0)
    d.health, d.health_error = None, "timeout after 5.0 s"
    return [p, d, r], {}


@scenario("warmup-403-api-key-proxy", "config-crashloop", "https://github.com/NVlabs/DiffusionNFT/issues/21",
          "an SGLang reward server with --api-key never comes up: its own warmup request gets 403 Forbidden through the "
          "environment's proxy and start-up fails, every time", also=("router-no-healthy-workers",), must_not=("role-down",))
def _warmup_403_api_key():
    p, d, r = roles("0.5.3", "sgl-router")
    crashloop(d, raw([
        "[2025-10-22 10:27:27] INFO:     Uvicorn running on http://127.0.0.1:9316 (Press CTRL+C to quit)",
        "[2025-10-22 10:29:28] Initialization failed. warmup error: Traceback (most recent call last):",
        '  File "/home/donkey/.local/lib/python3.11/site-packages/sglang/srt/entrypoints/http_server.py", line 1407, in _execute_server_warmup',
        '    assert res.status_code == 200, f"{res=}, {res.text=}"',
        "AssertionError: res=<Response [403]>, res.text='<html>\\n<head><title>403 Forbidden</title></head>\\n<body>\\n<div "
        "style=\"text-align: center;\"><h1>403 Forbidden</h1></div>\\n</body>\\n</html>'",
    ]), restarts=3)
    d.started = T0 - timedelta(minutes=2, seconds=5)
    return [p, d, r], {}


@scenario("healthy-first-request-jit-gap", "healthy", "https://github.com/sgl-project/sglang/pull/3699",
          "0.4.3 serving a first multimodal request: flashinfer JIT-compiles its cascade ops for 20 s between the prefill "
          "and the first decode batch; a one-off warm-up gap, then decoding proceeds", must_not=("decode-wedged", "prefill-wedged"))
def _jit_gap():
    p, d, r = roles("0.4.3", "mini_lb")
    d.logs = raw([
        "[2025-02-26 15:44:36 TP0] Prefill batch. #new-seq: 1, #new-token: 11, #cached-token: 24, cache hit rate: 26.67%, token usage: 0.00, "
        "#running-req: 0, #queue-req: 0",
        "2025-02-26 15:44:36,973 - INFO - flashinfer.jit: Loading JIT ops: cascade",
        "2025-02-26 15:44:57,375 - INFO - flashinfer.jit: Finished loading JIT ops: cascade",
        "[2025-02-26 15:44:57 TP0] Decode batch. #running-req: 1,",
    ])
    d.gauges.update(num_running_reqs=1, token_usage=0.0, gen_throughput=38.5)
    d.counters["generation_tokens"] = (0, 40)
    return [p, d, r], {}


@scenario("router-startup-panic-runtime-drop", "config-crashloop", "https://github.com/sgl-project/sglang/pull/7619",
          "sgl-router (Rust, 2025) panics during start-up in some environments, before it serves: a tokio runtime "
          "dropped inside an async context; every start panics the same way until the router is upgraded",
          must_not=("role-down", "healthy", "router-no-healthy-workers"))
def _router_panic():
    p, d, r = roles("0.4.6", "sgl-router")
    crashloop(r, raw([
        "2025-06-25 15:01:45  INFO sglang_router_rs::server: src/server.rs:312: 🚧 Initializing Prometheus metrics on 127.0.0.1:29000",
        "2025-06-25 15:01:45  INFO sglang_router_rs::server: src/server.rs:321: 🚧 Initializing router on 0.0.0.0:30000",
        "2025-06-25 15:01:45  INFO sglang_router_rs::server: src/server.rs:322: 🚧 Initializing workers on "
        "[\"http://10.0.0.1:30000\", \"http://10.0.0.2:30000\", \"http://10.0.0.3:30000\"]",
        "2025-06-25 15:01:45  INFO sglang_router_rs::server: src/server.rs:334: 🚧 Service discovery disabled",
        "",
        "thread '<unnamed>' panicked at /home/router/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/tokio-1.45.1/src/runtime/"
        "blocking/shutdown.rs:51:21:",
        "Cannot drop a runtime in a context where blocking is not allowed. This happens when a runtime is dropped from within an "
        "asynchronous context.",
    ]), status="101/n/a", restarts=7)
    return [p, d, r], {}


@scenario("nccl-socket-abort-large-pd-decode", "nccl-failure", "https://github.com/sgl-project/sglang/issues/6017",
          "large-scale PD with EP (DeepSeek): the prefill node serves, the decode node's ranks fail NCCL bootstrap at "
          "start-up (socketStartConnect to a link-local address: the wrong interface) and decode never comes up",
          also=("role-down", "router-no-healthy-workers"), must_not=("config-crashloop", "healthy"))
def _nccl_large_pd():
    p, d, r = roles("0.4.6", "mini_lb")
    crashloop(d, raw([
        "hd03-gpu2-0031:14135:14135 [2] NCCL INFO Using non-device net plugin version 0",
        "hd03-gpu2-0031:14135:14135 [2] NCCL INFO Using network IBext_v8",
        "hd03-gpu2-0031:14133:14133 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 169.254.20.10<43369> failed : "
        "Software caused connection abort",
        "hd03-gpu2-0031:14133:14133 [0] NCCL INFO misc/socket.cc:567 -> 2",
        "hd03-gpu2-0031:14133:14133 [0] NCCL INFO misc/socket.cc:621 -> 2",
        "hd03-gpu2-0031:14133:14133 [0] NCCL INFO bootstrap.cc:285 -> 2",
        "hd03-gpu2-0031:14133:14133 [0] NCCL INFO init.cc:1534 -> 2",
        "hd03-gpu2-0031:14133:14133 [0] NCCL INFO init.cc:1799 -> 2",
        "hd03-gpu2-0031:14134:14134 [1] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 169.254.20.10<43369> failed : "
        "Software caused connection abort",
    ]), restarts=4)
    return [p, d, r], {}


@scenario("nccl-watchdog-terminate-cpp", "nccl-failure", "https://github.com/sgl-project/sglang/issues/1693",
          "2024 SGLang with TP: after serving, an all-gather never completes; PyTorch's NCCL watchdog ends the process "
          "with an uncaught c10::DistBackendError (terminate/what(), abort)", also=("role-down",),
          must_not=("config-crashloop", "healthy", "scheduler-watchdog"))
def _nccl_terminate():
    p, d, r = roles("0.4.3", "mini_lb")
    died(d, raw([
        "frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x10c (0x7f3b6e7236fc in /usr/local/lib/python3.10/dist-packages/"
        "torch/lib/libtorch_cuda.so)",
        "frame #4: <unknown function> + 0xd6df4 (0x7f3bca9d5df4 in /usr/lib/x86_64-linux-gnu/libstdc++.so.6)",
        "frame #5: <unknown function> + 0x8609 (0x7f3c74f76609 in /usr/lib/x86_64-linux-gnu/libpthread.so.0)",
        "frame #6: clone + 0x43 (0x7f3c750b0353 in /usr/lib/x86_64-linux-gnu/libc.so.6)",
        "",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "  what():  [PG 3 Rank 5] Process group watchdog thread terminated with exception: [Rank 5] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=9141, OpType=_ALLGATHER_BASE, NumelIn=19008, NumelOut=152064, Timeout(ms)=600000) "
        "ran for 600020 milliseconds before timing out.",
        "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:609 (most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f3b6d41df86 in /usr/local/lib/python3.10/"
        "dist-packages/torch/lib/libc10.so)",
    ]), status="6/ABRT", code="dumped")
    return [p, d, r], {}


# --- batch 11: threads added to widen test/ (the part each lands in is the hash's, see split.py) ---

@scenario("mooncake-multi-nic-packet-mismatch", "kv-transfer-failure", "https://github.com/kvcache-ai/Mooncake/issues/1151",
          "SGLang 0.5.5.post1 + mooncake 0.3.7.post2 on k8s with two IB devices: the RDMA handshake gets a packet mismatch and "
          "the endpoint is marked inactive; one device works", must_not=("healthy", "config-crashloop"))
def _mooncake_multi_nic():
    p, d, r = roles("0.5.3", "sgl-router")
    p.logs += raw([
        '[2025-12-01 11:24:33] 10.244.1.107 [01/Dec/2025:11:24:33 +0000] "GET /health HTTP/1.1" 200 154 "-" "python-requests/2.32.5"',
        "E1201 11:24:34.169920  3894 rdma_endpoint.cpp:157] Invalid argument: received packet mismatch, local.local_nic_path: "
        "10.244.1.96:15233@mlx5_1, local.peer_nic_path: 10.244.1.107:16339@mlx5_3, peer.local_nic_path: , peer.peer_nic_path:",
        "E1201 11:24:34.169943  3894 worker_pool.cpp:242] Worker: Cannot make connection for endpoint: 10.244.1.107:16339@mlx5_3, mark it inactive",
    ])
    p.counters["num_transfer_failed_reqs"] = (3, 2)
    return [p, d, r], {}


@scenario("nixl-prep-xfer-dlist-not-found", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/31295",
          "2026 nightly, NIXL/UCX: prefill with DP attention (attention TP1) to a TP4 decode; the first request fails in the "
          "prefill's bootstrap thread at prepXferDlist (NIXL_ERR_NOT_FOUND) and nothing completes",
          must_not=("healthy", "config-crashloop", "prefill-queue-saturation"))
def _nixl_prep_dlist():
    p, d, r = roles()
    p.logs += raw(["E0713 23:29:03.494601 nixl_agent.cpp:631] prepXferDlist: failed to prepare",
                   "the descriptors for any of the specified or potential backends for agent ''"])
    p.gauges.update(num_running_reqs=0, num_queue_reqs=0)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (9_000, 0)
    d.gauges.update(num_running_reqs=0, num_decode_transfer_queue_reqs=2)
    d.counters["realtime_tokens{mode=decode}"] = (0, 0)
    d.logs = []
    return [p, d, r], {}


@scenario("nixl-bootstrap-thread-indexerror", "kv-transfer-failure", "https://github.com/sgl-project/sglang/pull/6720",
          "NIXL backend with a decode TP smaller than the prefill's: the prefill's bootstrap thread dies on a dummy request "
          "(IndexError in nixl/conn.py) and transfers stop", must_not=("healthy", "config-crashloop"))
def _nixl_indexerror():
    p, d, r = roles("0.4.6", "mini_lb")
    p.logs += raw([
        "Exception in thread Thread-5 (bootstrap_thread):",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.10/threading.py", line 1016, in _bootstrap_inner',
        "    self.run()",
        '  File "/usr/lib/python3.10/threading.py", line 953, in run',
        "    self._target(*self._args, **self._kwargs)",
        '  File "/sgl-workspace/sglang_deepep/python/sglang/srt/disaggregation/nixl/conn.py", line 351, in bootstrap_thread',
        '    required_dst_info_num = int(waiting_req_bytes[10].decode("ascii"))',
        "IndexError: list index out of range",
    ])
    d.gauges.update(num_running_reqs=0, gen_throughput=0.0, num_decode_transfer_queue_reqs=3)
    d.counters["generation_tokens"] = (900_000, 0)
    return [p, d, r], {}


@scenario("decode-oom-retract-tp16", "kv-cache-exhausted", "https://github.com/sgl-project/sglang/issues/4184",
          "DeepSeek-R1 on TP16 (0.4.3): every TP rank logs 'Decode out of memory happened' and retracts requests, the new-token "
          "ratio climbing each time", must_not=("cuda-oom", "role-down", "config-crashloop"))
def _decode_oom_retract():
    p, d, r = roles("0.4.3", "mini_lb")
    d.logs = raw([
        "[2025-03-07 21:49:33 TP13] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.1474 -> 0.1845",
        "[2025-03-07 21:49:33 TP12] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.1474 -> 0.1845",
        "[2025-03-07 21:49:33 TP10] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.1474 -> 0.1845",
        "[2025-03-07 21:49:45 TP9] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.1919",
        "[2025-03-07 21:49:45 TP11] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.1919",
        "[2025-03-07 21:49:45 TP8] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.1919",
        "[2025-03-07 21:49:45 TP12] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.0980 -> 0.1919",
    ])
    d.gauges.update(token_usage=0.97)
    return [p, d, r], {}


@scenario("decode-oom-page-size-crash", "cuda-oom", "https://github.com/sgl-project/sglang/issues/4602",
          "0.4.3 DeepSeek with --page-size 64: the KV allocator refuses 148 tokens with 2048 free and the scheduler dies "
          "('Decode out of memory. Try to lower your batch size.', an allocator error that crashes the role, as "
          "prefill-oom-large-page); --page-size 1 avoids it",
          also=("role-down", "kv-cache-exhausted"), must_not=("config-crashloop",))
def _decode_oom_page_size():
    p, d, r = roles("0.4.3", "mini_lb")
    died(d, raw([
        "RuntimeError: Decode out of memory. Try to lower your batch size.",
        "Try to allocate 148 tokens.",
        "Avaliable tokens: 2048",
        "self.token_to_kv_pool_allocator.available_size()=2048",
        "self.tree_cache.evictable_size()=0",
    ]))
    return [p, d, r], {}


@scenario("nixl-pd-tp-mismatch-transfer-worker", "kv-transfer-failure", "https://github.com/llm-d/llm-d/issues/2433",
          "llm-d guide on SGLang 0.5.16, gpt-oss-120b with prefill TP1 and decode TP4 over NIXL: the prefill's transfer worker "
          "raises for every room and the client sees a hang", must_not=("healthy", "prefill-queue-saturation", "config-crashloop"))
def _nixl_tp_mismatch():
    p, d, _ = roles()
    p.logs += raw([
        "Unexpected transfer worker error for room 1788380104266545413",
        "Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/nixl/conn.py", line 1153, in transfer_worker',
        "    state_xfer_handles = self.maybe_send_extra(",
        '  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/nixl/conn.py", line 2062, in maybe_send_extra',
        "    raise RuntimeError(",
    ])
    p.counters["num_transfer_failed_reqs"] = (1, 1)
    d.gauges.update(num_running_reqs=0, num_decode_transfer_queue_reqs=1)
    d.counters["realtime_tokens{mode=decode}"] = (5_000_000, 0)
    d.logs = []
    return [p, d], {}  # llm-d routes through its own sidecar and EPP: no SGLang router in this deployment


@scenario("bootstrap-query-dp-ranks-errno99", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/19271",
          "Qwen3.5 1P1D on GB200: the decode cannot reach the prefill's bootstrap server (/query_dp_ranks, Errno 99 Cannot "
          "assign requested address) in every disaggregation config", must_not=("healthy", "config-crashloop"))
def _bootstrap_dp_ranks():
    p, d, r = roles()
    d.logs += raw([
        "Error querying dp_ranks from bootstrap: HTTPConnectionPool(host='10.66.4.40', port=38711): Max retries exceeded "
        "with url: /query_dp_ranks (Caused by NewConnectionError(\"HTTPConnection(host='10.66.4.40', port=38711): Failed to "
        "establish a new connection: [Errno 99] Cannot assign requested address\"))",
    ])
    d.counters["num_bootstrap_failed_reqs"] = (6, 2)
    return [p, d, r], {}


@scenario("bootstrap-port-in-use", "config-crashloop", "https://github.com/sgl-project/sglang/pull/21268",
          "two PD deployments on one host share the default bootstrap port 8998: the second prefill cannot bind it "
          "(OSError: [Errno 98] address already in use); a distinct --disaggregation-bootstrap-port fixes it",
          must_not=("kv-transfer-failure", "role-down"))
def _bootstrap_port_in_use():
    p, d, r = roles()
    crashloop(p, raw(["OSError: [Errno 98] address already in use"]), restarts=9)
    return [p, d, r], {}


@scenario("router-breaker-open-on-4xx", "router-no-healthy-workers", "https://github.com/sgl-project/sglang/issues/25811",
          "the router counts a healthy worker's HTTP 400 (prompt over the context length) as a failure, opens the circuits, "
          "and later requests fail with no_available_workers while the workers idle",
          must_not=("kv-transfer-failure", "decode-wedged", "prefill-wedged", "role-down"))
def _breaker_4xx():
    p, d, r = roles()
    p.gauges.update(num_running_reqs=0, num_queue_reqs=0)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (1_200_000, 0)
    p.counters["realtime_tokens{mode=prefill_cache}"] = (300_000, 0)
    d.gauges.update(num_running_reqs=0, num_decode_transfer_queue_reqs=0)
    d.counters["realtime_tokens{mode=decode}"] = (5_000_000, 0)
    p.logs, d.logs = [], []
    r.gauges.update({"smg_worker_cb_state{worker=http://10.0.0.1:30000}": 1, "smg_worker_cb_state{worker=http://10.0.0.2:30001}": 1})
    r.counters["smg_router_request_errors{error_type=no_workers}"] = (40, 30)
    return [p, d, r], {}


@scenario("decode-grpc-deadlock", "decode-wedged", "https://github.com/sgl-project/sglang/issues/29957",
          "GLM-5.1 1P1D with --grpc-mode under sustained load: the decode scheduler deadlocks and never recovers; the unit "
          "and its HTTP server stay up", must_not=("healthy", "role-down", "config-crashloop"))
def _grpc_deadlock():
    p, d, r = roles()
    d.gauges.update(num_running_reqs=12, num_queue_reqs=4, token_usage=0.18)
    d.counters["realtime_tokens{mode=decode}"] = (5_000_000, 0)
    d.logs = []
    return [p, d, r], {}


@scenario("mori-transfer-stalled-tail-request", "kv-transfer-failure", "https://github.com/sgl-project/sglang/pull/33920",
          "MI355X PD nightly: 1023 of 1024 requests finish, the last stays in the prefill's inflight queue for two hours while "
          "the decode is healthy and waits (MORI polls IN_PROGRESS forever)", must_not=("healthy", "prefill-queue-saturation"))
def _mori_stall():
    p, d, r = roles()
    p.gauges.update(num_running_reqs=0, num_queue_reqs=0, num_prefill_inflight_queue_reqs=1)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (1_200_000, 0)
    p.counters["realtime_tokens{mode=prefill_cache}"] = (300_000, 0)
    d.gauges.update(num_running_reqs=0, num_decode_transfer_queue_reqs=1)
    d.counters["realtime_tokens{mode=decode}"] = (5_000_000, 0)
    p.logs, d.logs = [], []
    return [p, d, r], {}


@scenario("nccl-dump-signal-two-node-dsv3", "nccl-failure", "https://github.com/sgl-project/sglang/issues/10216",
          "DeepSeek-V3 over two 8xH100 nodes: decode batches stop, GPUs sit at 100%, then PyTorch's NCCL watchdog reports a "
          "collective timeout, dumps debug info and takes the process down",
          also=("role-down", "router-no-healthy-workers"), must_not=("config-crashloop", "scheduler-watchdog"))
def _nccl_dump_signal():
    p, d, r = roles("0.5.3", "sgl-router")
    died(d, raw([
        "[2025-09-09 08:32:09 TP0 EP0] Decode batch. #running-req: 1, #token: 2625, token usage: 0.01, cuda graph: True, "
        "gen throughput (token/s): 40.49, #queue-req: 0, ",
        "[2025-09-09 08:32:10 TP0 EP0] Decode batch. #running-req: 1, #token: 2665, token usage: 0.01, cuda graph: True, "
        "gen throughput (token/s): 38.75, #queue-req: 0, ",
        '[2025-09-09 08:35:30] INFO:     172.17.160.41:57164 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        "[rank2]:[E909 08:45:31.916910323 ProcessGroupNCCL.cpp:1589] [PG ID 0 PG GUID 0 Rank 2] ProcessGroupNCCL preparing to "
        "dump debug info. Include stack trace: 1",
        "[rank6]:[E909 08:45:31.970959174 ProcessGroupNCCL.cpp:1870] [PG ID 0 PG GUID 0 Rank 6] Received a dump signal due to a "
        "collective timeout from this local rank and we will try our best to dump the debug info. Last enqueued NCCL work: -1, "
        "last completed NCCL work: -1.This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used "
        "across ranks, the order of collectives is not same for all ranks or the scheduled collective, for some reason, didn't "
        "run. Additionally, this can be caused by GIL deadlock or other reasons such as network errors or bugs in the "
        "communications library (e.g. NCCL), etc. ",
    ]), status="6/ABRT", code="dumped")
    return [p, d, r], {}


@scenario("nccl-watchdog-terminate-loading-multinode", "nccl-failure", "https://github.com/sgl-project/sglang/issues/3254",
          "DeepSeek R1 over several nodes: on the worker node a collective times out while the weights load and PyTorch's NCCL "
          "watchdog terminates the process (c10::DistBackendError); every start ends the same way",
          also=("router-no-healthy-workers",), must_not=("healthy", "scheduler-watchdog", "cuda-oom"))
def _nccl_loading_multinode():
    p, d, r = roles("0.4.3", "mini_lb")
    crashloop(d, raw([
        "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:618 (most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7ea82996c446 in "
        "/opt/conda/envs/sglang/lib/python3.10/site-packages/torch/lib/libc10.so)",
        "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, std::ratio<1l, "
        "1000l> > >) + 0x282 (0x7ea78d3cc772 in /opt/conda/envs/sglang/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so)",
        "frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x7ea78d3d3bb3 in "
        "/opt/conda/envs/sglang/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so)",
        "frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x14d (0x7ea78d3d561d in "
        "/opt/conda/envs/sglang/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so)",
        "frame #4: <unknown function> + 0x145c0 (0x7ea87843e5c0 in /opt/conda/envs/sglang/lib/python3.10/site-packages/torch/lib/libtorch.so)",
        "frame #5: <unknown function> + 0x94ac3 (0x7ea882494ac3 in /lib/x86_64-linux-gnu/libc.so.6)",
        "frame #6: <unknown function> + 0x126850 (0x7ea882526850 in /lib/x86_64-linux-gnu/libc.so.6)",
        "",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
    ]), status="6/ABRT", code="dumped", restarts=4)
    return [p, d, r], {}


@scenario("watchdog-decode-hang-dp-attention", "scheduler-watchdog", "https://github.com/sgl-project/sglang/issues/7553",
          "DeepSeek-R1-0528 PD with DP attention under 5000 concurrent requests: the decode hangs, py-spy is missing, the "
          "watchdog fires after 300 s and the server exits",
          also=("role-down", "decode-wedged"), must_not=("config-crashloop", "nccl-failure"))
def _watchdog_dp_attention():
    p, d, r = roles("0.4.6", "mini_lb")
    died(d, raw([
        "[2025-06-26 07:25:31 DP4 TP4] Pyspy failed to dump PID 113688. Error: /bin/bash: line 1: py-spy: command not found",
        "",
        "[2025-06-26 07:25:31 DP4 TP4] Watchdog timeout (self.watchdog_timeout=300)",
    ]), status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("smg-keepalive-connection-reset", "router-no-healthy-workers", "https://github.com/sgl-project/sglang/issues/20851",
          "SMG pools connections for 50 s but SGLang closes idle ones after 5 s (SGLANG_TIMEOUT_KEEP_ALIVE): under fluctuating "
          "load the router's requests fail with IncompleteMessage / connection reset while the workers are fine",
          must_not=("role-down", "kv-transfer-failure", "decode-wedged", "prefill-wedged"))
def _smg_keepalive():
    p, d, r = roles()
    r.logs = raw(["hyper::Error(IncompleteMessage)",
                  'hyper::Error(Io, Os { code: 104, kind: ConnectionReset, message: \\"Connection reset by peer\\" })'])
    return [p, d, r], {}


@scenario("decode-stuck-after-prefill-died", "decode-wedged", "https://github.com/sgl-project/sglang/pull/31144",
          "the prefill died (CUDA OOM) and was restarted; the decode's scheduler stays blocked in a ZMQ send to the dead peer, "
          "stops making progress and fails its health checks even after the prefill is back",
          also=("kv-transfer-failure",), must_not=("healthy", "role-down", "cuda-oom", "config-crashloop"))
def _decode_stuck_prefill_died():
    p, d, r = roles()
    p.restarts = 1
    p.started = T0 - timedelta(minutes=5)
    d.gauges.update(num_running_reqs=16, num_decode_prealloc_queue_reqs=8, token_usage=0.22)
    d.counters["realtime_tokens{mode=decode}"] = (5_000_000, 0)
    d.logs = []
    d.health, d.health_body = 503, "Service Unavailable"
    return [p, d, r], {}


@scenario("reasoning-parser-think-token", "config-crashloop", "https://github.com/sgl-project/sglang/issues/24843",
          "DeepSeek-V3-0324 with --reasoning-parser deepseek-v3 on main (May 2026): scheduler init fails because '</think>' "
          "is not one token for constrained reasoning; drop the flag or use a fixed build",
          also=("router-no-healthy-workers",), must_not=("role-down",))
def _think_token():
    p, d, r = roles()
    crashloop(d, raw(["ValueError: think_end_token '</think>' must encode to exactly one token for constrained reasoning."]),
              restarts=7)
    return [p, d, r], {}


@scenario("healthy-pd-l40-slower-than-tp", "healthy", "https://github.com/sgl-project/sglang/issues/7141",
          "1P1D on two L40 servers (0.4.6) serves 100/100 benchmark requests; it is only slower than a plain deployment, "
          "which is a sizing question, not a fault", must_not=("prefill-queue-saturation", "prefill-wedged", "decode-wedged"))
def _l40_slower():
    p, d, r = roles("0.4.6", "mini_lb")
    return [p, d, r], {}


def _node_kernel(lines: list[str], node: str) -> dict:
    """Kernel lines as ``journalctl -k`` shows them on ``node``, each message kept verbatim, a second apart."""
    stamped = [f"{(T0 - timedelta(seconds=50 - i)).strftime('%Y-%m-%dT%H:%M:%S')}+0000 {node} kernel: {line}"
               for i, line in enumerate(lines)]
    return {"kernel": {node: "\n".join(stamped) + "\n"}}


@scenario("gsp-heartbeat-timeout-gh100", "gpu-fault", "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1230",
          "driver 595.71.05 on a GH100: the GSP heartbeat times out, a sysmembar times out with a memory subsystem error and "
          "the GSP RPCs time out; the decode on that GPU stops making progress",
          also=("decode-wedged",), must_not=("healthy", "nccl-failure"))
def _gsp_gh100():
    p, d, r = roles()
    d.gauges.update(num_running_reqs=18)
    d.counters["realtime_tokens{mode=decode}"] = (5_000_000, 0)
    d.logs = []
    return [p, d, r], _node_kernel([
        "NVRM: GPU6 _kgspIsHeartbeatTimedOut: Heartbeat timed out, currentTimeMs 812751949 heartbeat 1899482 "
        "heartbeatWithOffsetMs 812745879 diff 6070 timeout 5200",
        "NVRM: GPU6 _threadNodeCheckTimeout: _threadNodeCheckTimeout: Timeout was set to: 4000 msecs!",
        "NVRM: GPU6 kbusSendSysmembarSingle_GH100: - timeout error waiting for startToken = 0x3 cnt=24105122",
        "NVRM: GPU6 kgmmuCheckMemSubsysError_IMPL: Memory Subsystem Error detected. kbusSendSysmembarSingle failed.",
        "NVRM: GPU6 _kgspLogRpcTimeout: ********************************* GSP Timeout **********************************",
    ], "node2")


@scenario("xid154-gpu-reset-required", "gpu-fault", "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1200",
          "sustained LLM inference for about an hour, then the GSP-RM heartbeat dies and Xid 154 asks for a GPU reset; the "
          "serving process on that GPU is stuck", also=("prefill-wedged",), must_not=("healthy", "config-crashloop"))
def _xid154():
    p, d, r = roles()
    p.gauges.update(num_running_reqs=3, num_queue_reqs=9)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (1_200_000, 0)
    p.counters["realtime_tokens{mode=prefill_cache}"] = (300_000, 0)
    p.logs = []
    return [p, d, r], _node_kernel([
        "NVRM: _kgspRpcRecvPoll: GSP RM heartbeat timed out",
        "NVRM: _kgspIsHeartbeatTimedOut: Heartbeat timed out, currentTimeMs 3175895033 heartbeat 19834604 "
        "heartbeatWithOffsetMs 3175815351 diff 79682 timeout 5200",
        "NVRM: _kgspRpcRecvPoll: LibOS heartbeat timed out",
        "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
    ], "node1")


@scenario("xid119-gsp-rpc-timeout", "gpu-fault", "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1111",
          "LLM inference on an RTX Pro 6000: GSP RPCs time out (Xid 119) and the engine hangs silently",
          also=("decode-wedged",), must_not=("healthy", "nccl-failure"))
def _xid119():
    p, d, r = roles()
    d.gauges.update(num_running_reqs=7)
    d.counters["realtime_tokens{mode=decode}"] = (5_000_000, 0)
    d.logs = []
    return [p, d, r], _node_kernel([
        "NVRM: Xid (PCI:0000:01:00): 119, pid=6211, name=nvidia-smi, Timeout after 45s of waiting for RPC response from GPU0 "
        "GSP! Expected function 103 (GSP_RM_ALLOC) sequence 15421 (0x0 0x78).",
        "NVRM: Xid (PCI:0000:01:00): 119, pid=6211, name=nvidia-smi, Timeout after 45s of waiting for RPC response from GPU0 "
        "GSP! Expected function 103 (GSP_RM_ALLOC) sequence 15422 (0x80 0x38).",
    ], "node2")


@scenario("nixl-not-found-prefill-event-loop", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/23551",
          "0.5.10 MiMo-V2-Flash PD with nixl-cu13: the prefill's disaggregation event loop raises (NIXL_ERR_NOT_FOUND) and "
          "the prefill goes down", also=("role-down", "router-no-healthy-workers"), must_not=("config-crashloop", "cuda-oom"))
def _nixl_not_found_prefill():
    p, d, r = roles()
    died(p, raw([
        "[2026-04-23 08:06:43 DP0 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3616, in run_scheduler_process',
        "    scheduler.run_event_loop()",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1300, in run_event_loop',
        "    dispatch_event_loop(self)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3504, in dispatch_event_loop',
        "    scheduler.event_loop_overlap_disagg_prefill()",
        '  File "/usr/local/lib/python3.12/dist-packages/torch/utils/_contextlib.py", line 120, in decorate_context',
        "    return func(*args, **kwargs)",
        "           ^^^^^^^^^^^^^^^^^^^^^",
        '  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/prefill.py", line 443, in event_loop_overlap_disagg_prefill',
    ]))
    return [p, d, r], {}


@scenario("illegal-memory-access-pg-watchdog", "role-down", "https://github.com/sgl-project/sglang/issues/13308",
          "Kimi-K2-Thinking on 8xB200 (0.5.5.post2): a kernel makes an illegal memory access, PyTorch's process-group watchdog "
          "reports it and the server stays down: a software fault, not a bad GPU", must_not=("gpu-fault", "config-crashloop"))
def _ima_pg_watchdog():
    p, d, r = roles("0.5.3", "sgl-router")
    failed(d, raw(["Process group watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered"]),
           status="6/ABRT")
    return [p, d, r], {}


@scenario("nixl-prefill-segv-decode-restarted", "kv-transfer-failure", "https://github.com/smg-project/smg/issues/2503",
          "SGLang 0.5.18 over NIXL/UCX: the decode is restarted on the same address; the prefill's bootstrap thread adds the "
          "new NIXL agent, UCX fails to bring the endpoint up and the prefill segfaults",
          also=("role-down", "router-no-healthy-workers"), must_not=("config-crashloop", "cuda-oom", "healthy"))
def _nixl_prefill_segv():
    p, d, r = roles()
    died(p, raw([
        "ib_mlx5_dv.c:433  UCX  ERROR   mlx5dv_devx_obj_modify(opcode=0x503) failed, syndrome 0x5d668c: Remote I/O error",
        "Fatal Python error: Segmentation fault",
        "",
        "Current thread (most recent call first):",
    ]), status="11/SEGV", code="dumped")
    d.restarts, d.started = 1, T0 - timedelta(minutes=3)
    return [p, d, r], {}


@scenario("nixl-pair-stalls-after-prefill-replaced", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/33789",
          "SGLang 0.5.16 with NIXL over UCX: the prefill is replaced; both roles report ready, but requests time out until "
          "both are restarted", must_not=("healthy", "prefill-wedged", "decode-wedged"))
def _nixl_pair_stalls():
    p, d, r = roles()
    p.restarts, p.started = 1, T0 - timedelta(minutes=6)
    p.gauges.update(num_running_reqs=0, num_queue_reqs=0, num_prefill_inflight_queue_reqs=2)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (4_000, 0)
    p.counters["realtime_tokens{mode=prefill_cache}"] = (0, 0)
    d.gauges.update(num_running_reqs=0, num_decode_transfer_queue_reqs=2)
    d.counters["realtime_tokens{mode=decode}"] = (5_000_000, 0)
    p.logs, d.logs = [], []
    return [p, d, r], {}


@scenario("router-breakers-open-high-concurrency", "router-no-healthy-workers", "https://github.com/sgl-project/sglang/issues/13894",
          "2048 concurrent requests through sgl-router: its circuit breakers open and clients get 503s within ~400 ms while "
          "the workers stay alive and busy", must_not=("role-down", "kv-transfer-failure", "prefill-queue-saturation"))
def _breakers_high_concurrency():
    p, d, r = roles("0.5.3", "sgl-router")
    r.counters["sgl_router_pd_errors{error_type=no_workers}"] = (1_500, 600)
    return [p, d, r], {}


# --- the same crash loops once systemd gave up (StartLimitBurst hit): failed, no restart pending ----

def variant(base: str, suffix: str, note: str, edit: Callable[[RoleSpec], None], role: str | None = None, *,
            expected: str | None = None, also: tuple[str, ...] | None = None, must_not: tuple[str, ...] | None = None,
            kw: Callable[[dict], dict] | None = None) -> None:
    """Register ``<base>-<suffix>``: the incident of ``base`` (its thread, label and note) with ``edit`` applied to
    ``role``'s spec (every role when None), its label changed where given, and its other arguments through ``kw``."""
    fn, source = RAW[base]
    lab = SCENARIOS[base]()["label"]

    @scenario(f"{base}-{suffix}", expected or lab["expected"], source, note,
              also=tuple(lab["also"]) if also is None else also,
              must_not=tuple(lab["must_not"]) if must_not is None else must_not)
    def _varied():
        specs, extra = fn()
        for spec in specs:
            if role is None or spec.role == role:
                edit(spec)
        return specs, kw(extra) if kw is not None else extra


def start_limit(base: str, role: str) -> None:
    """Register ``<base>-start-limit``: the crash loop of ``base`` after systemd stopped restarting."""
    lab = SCENARIOS[base]()["label"]

    def limited(spec: RoleSpec) -> None:
        spec.active, spec.sub, spec.restarts = "failed", "failed", 5
        unit = spec.logs[-1].split(":")[1].strip()
        spec.logs = spec.logs[:-1] + [f"systemd: {unit}: Start request repeated too quickly.",
                                      f"systemd: {unit}: Failed with result '{spec.result}'.",
                                      f"systemd: Failed to start {unit}."]

    variant(base, "start-limit", lab["note"] + "; systemd hit its start limit and left the unit failed", limited, role,
            also=tuple(lab["also"]) + ("role-down",),  # down for good now, which the crash loop explains
            must_not=tuple(c for c in lab["must_not"] if c != "role-down"))


# --- the same threads after the fix: the failure's lines precede the current run -----------------

def after_fix(base: str, role: str, note: str, must_not: tuple[str, ...]) -> None:
    """Register ``<base>-after-fix``: the incident of ``base`` with ``role`` fixed and restarted."""

    def fixed(spec: RoleSpec) -> None:
        if spec.role == role or spec.active != "active":  # co-failing roles came back too
            recovered(spec)

    variant(base, "after-fix", note, fixed, expected="healthy", also=(), must_not=must_not,
            kw=lambda kw: {k: v for k, v in kw.items() if k != "extra"})


# --- the same threads with the role dead for good (Restart=no): failed, NRestarts=0 ----------------

def stayed_down(base: str, role: str, note: str) -> None:
    """Register ``<base>-stayed-down``: ``role`` of ``base`` died while serving and systemd does not restart
    it (failed, no restart pending). What killed it is still the class; the role being down is its effect."""
    lab = SCENARIOS[base]()["label"]

    def down(spec: RoleSpec) -> None:
        failed(spec, [line for line in spec.logs if not line.startswith("systemd:")])
        spec.started = T0 - timedelta(hours=3)

    variant(base, "stayed-down", f"{lab['note']}; {note}", down, role,
            also=tuple(dict.fromkeys((*lab["also"], "role-down", "router-no-healthy-workers"))),
            must_not=tuple(dict.fromkeys((*(c for c in lab["must_not"] if c != "role-down"), "config-crashloop"))))


stayed_down("mooncake-retry-counter-exceeded", "prefill", "the prefill exited after the transfer engine's errors, with no "
            "crash dump, and the unit has no Restart=")
stayed_down("mooncake-segment-descriptor", "prefill", "the prefill exited after Mooncake's metadata errors and stays failed")
stayed_down("nccl-timeout-under-perf-test", "decode", "the decode exited after the watchdog's abort and stays failed")
stayed_down("nccl-watchdog-terminate-cpp", "decode", "no Restart=: the decode stays failed after the abort")


# --- the router's no-worker answer seen only by the canary ----------------------------------------

@scenario("router-no-prefill-worker-canary-only", "router-no-healthy-workers", "https://github.com/vllm-project/aibrix/issues/1351",
          "the same router refusing for want of a prefill worker, probed without its Prometheus port: only the "
          "canary's 503 and the router's own answer show it", must_not=("role-down", "prefill-wedged", "healthy"))
def _no_prefill_canary_only():
    specs, kw = RAW["router-no-prefill-worker-cache-aware"][0]()
    for spec in specs:
        if spec.role == "router":
            spec.drop = ("metrics",)
    return specs, kw


# --- a single exit without a restart: not a crash loop ------------------------------------------

@scenario("near-xid31-operator-bug-no-kernel-log", "role-down", "https://github.com/sgl-project/sglang/issues/29160",
          "the same scheduler death with the node's kernel log rotated past the Xid: one exit, no Restart=, NRestarts=0, "
          "and a traceback that names no class: role-down, not a crash loop", must_not=("config-crashloop", "gpu-fault"))
def _xid31_no_kernel():
    specs, _ = RAW["near-xid31-operator-bug"][0]()
    return specs, {}


CRASH = ("config-crashloop", "role-down")
after_fix("argparse-enable-reasoning", "prefill", "the flag was removed from the unit file; the argparse error of the "
          "previous runs is still in the window, before the current run's start", CRASH)
after_fix("argparse-reasoning-parser-underscore", "prefill", "fixed to --reasoning-parser; old argparse lines remain in "
          "the journal window", CRASH)
after_fix("arch-glm4-not-supported", "decode", "upgraded to a release that knows Glm4ForCausalLM; the ValueError lines "
          "are from the runs before", CRASH)
after_fix("sgl-kernel-no-common-ops", "decode", "the matching sgl_kernel wheel was installed; the ImportError is history",
          CRASH + ("gpu-fault",))
after_fix("sgl-kernel-undefined-symbol-rtx5080", "prefill", "torch and sgl-kernel versions aligned; it serves again",
          CRASH)
after_fix("mooncake-register-memory-einval", "decode", "nvidia_peermem loaded and the unit restarted: registration "
          "works; the failed registrations precede this run", CRASH + ("kv-transfer-failure",))
after_fix("hicache-mooncake-store-startup", "prefill", "the Mooncake store came back; the start-up failures are "
          "history", CRASH + ("kv-transfer-failure",))
after_fix("not-enough-memory-mem-fraction", "decode", "speculative decoding turned off; the memory error of the earlier "
          "starts stays in the window", CRASH + ("cuda-oom",))
after_fix("nccl-init-unhandled-system-error", "decode", "NCCL_SOCKET_IFNAME fixed; the NCCL init error is from the "
          "previous runs", CRASH + ("nccl-failure",))
after_fix("watchdog-pyspy-missing", "decode", "systemd restarted the decode after the watchdog kill; it serves again "
          "and the watchdog lines precede the current run", CRASH + ("scheduler-watchdog", "decode-wedged"))
after_fix("detokenizer-health-check-exit", "decode", "restarted after the detokenizer health-check exit; serving "
          "normally since", CRASH + ("scheduler-watchdog",))
after_fix("nccl-timeout-under-perf-test", "decode", "restarted with --dist-timeout 3600 after the NCCL timeout; "
          "serving since", CRASH + ("nccl-failure",))
after_fix("prefill-oom-large-page", "prefill", "restarted with a smaller page size; the out-of-memory lines belong "
          "to the run before", CRASH + ("cuda-oom",))
after_fix("nixl-ucx-segfault", "prefill", "switched the transfer backend and restarted; the UCX segfault is history",
          CRASH + ("kv-transfer-failure",))


start_limit("argparse-enable-metrics-underscore", "decode")
start_limit("sgl-kernel-no-common-ops", "decode")
start_limit("nccl-no-route-to-host-init", "decode")
start_limit("warmup-403-through-proxy", "prefill")
start_limit("hicache-mooncake-store-startup", "prefill")
start_limit("router-startup-panic-runtime-drop", "router")
start_limit("nccl-socket-abort-large-pd-decode", "decode")


start_limit("bootstrap-port-in-use", "prefill")
start_limit("reasoning-parser-think-token", "decode")
start_limit("nccl-watchdog-terminate-loading-multinode", "decode")
after_fix("bootstrap-port-in-use", "prefill", "each deployment got its own --disaggregation-bootstrap-port; the bind errors "
          "precede this run", CRASH + ("kv-transfer-failure",))
after_fix("reasoning-parser-think-token", "decode", "started without --reasoning-parser deepseek-v3; the ValueError is from "
          "the runs before", CRASH)
after_fix("decode-oom-page-size-crash", "decode", "restarted with --page-size 1; the allocator error is from the run before",
          CRASH + ("kv-cache-exhausted", "cuda-oom"))
after_fix("watchdog-decode-hang-dp-attention", "decode", "systemd restarted the decode after the watchdog exit; it serves "
          "again", CRASH + ("scheduler-watchdog", "decode-wedged"))
after_fix("nccl-dump-signal-two-node-dsv3", "decode", "restarted with a longer --dist-timeout; the NCCL dump lines belong "
          "to the run before", CRASH + ("nccl-failure",))
after_fix("illegal-memory-access-pg-watchdog", "decode", "restarted by hand; the watchdog's CUDA error precedes this run",
          CRASH + ("gpu-fault", "nccl-failure"))
after_fix("nixl-not-found-prefill-event-loop", "prefill", "restarted on a fixed nixl build; the traceback is from the run "
          "before", CRASH + ("kv-transfer-failure",))


# -- router, wedge, saturation, KV-exhaustion and start-up threads (2026-12-02) --------------------

@scenario("router-pd-requires-prefill", "config-crashloop", "https://github.com/sgl-project/sglang/issues/12535",
          "sgl-router (Nov 2025) launched in PD mode with no --prefill/--decode, meant to take workers later through "
          "/workers: the launcher refuses the configuration and exits at every start; the workers themselves are fine",
          also=("router-no-healthy-workers",), must_not=("role-down", "healthy", "prefill-wedged", "decode-wedged"))
def _router_pd_requires_prefill():
    p, d, r = roles("0.5.3", "sgl-router")
    crashloop(r, raw(["Error starting router: PD disaggregation mode requires --prefill",
                      "Traceback (most recent call last):"]), restarts=8)
    return [p, d, r], {}


@scenario("router-python-worker-urls-none", "config-crashloop", "https://github.com/sgl-project/sglang/issues/2796",
          "sglang-router 0.1.1 started without --worker-urls (workers to register later through /add_worker): the "
          "Python launcher cannot convert None and exits at every start; fixed in 0.1.2",
          also=("router-no-healthy-workers",), must_not=("role-down", "healthy"))
def _router_worker_urls_none():
    p, d, r = roles("0.4.3", "sgl-router")
    crashloop(r, raw(["[Router (Python)] 2025-01-09 00:28:10 - ERROR - Error starting router: argument 'worker_urls': "
                      "'NoneType' object cannot be converted to 'Sequence'"]), restarts=5)
    return [p, d, r], {}


@scenario("smg-pd-service-discovery-validation", "config-crashloop", "https://github.com/smg-project/smg/pull/2372",
          "SMG built after 2026-08-30 forces IGW whenever --service-discovery is set, also with --pd-disaggregation; "
          "the PD router then fails validation and crash-loops in every OME-style PD deployment; the workers are fine",
          also=("router-no-healthy-workers",), must_not=("role-down", "healthy", "kv-transfer-failure"))
def _smg_pd_discovery():
    p, d, r = roles()
    crashloop(r, raw(["Error starting router: Configuration error: Validation failed: Regular mode with service discovery "
                      "requires a non-empty selector"]), restarts=11)
    return [p, d, r], {}


@scenario("router-started-without-workers", "router-no-healthy-workers", "https://github.com/sgl-project/sglang/issues/12621",
          "sglang-router (Nov 2025) drops the workers given with --worker-urls: it starts with 'worker_urls: []' and has "
          "no worker to send requests to, while the SGLang workers run and answer", must_not=("role-down", "healthy",
          "prefill-wedged", "decode-wedged", "config-crashloop"))
def _router_without_workers():
    p, d, r = roles("0.5.3", "sgl-router")
    r.logs = raw([
        "2025-11-04 10:05:37  INFO sglang_router_rs::server: src/server.rs:830: Starting router on 0.0.0.0:port | mode: Regular "
        "{ worker_urls: [] } | policy: CacheAware { cache_threshold: 0.5, balance_abs_threshold: 16, balance_rel_threshold: 1.5, "
        "eviction_interval_secs: 60, max_tree_size: 67108864 } | max_payload: 512MB",
        "2025-11-04 10:05:37  INFO sglang_router_rs::server: src/server.rs:928: Initializing data connector: Memory",
        "2025-11-04 10:05:37  INFO sglang_router_rs::server: src/server.rs:1031: Initializing workers for routing mode: Regular "
        "{ worker_urls: [] }",
        "2025-11-04 10:05:37 DEBUG sglang_router_rs::core::job_queue: src/core/job_queue.rs:249: Worker 0 processing job: "
        "type=InitializeWorkers",
    ])
    # sgl-router's metrics.rs: sgl_router_active_workers is the number of workers it routes to; no per-worker health
    r.gauges = {"sgl_router_active_workers": 0}
    r.counters = {"sgl_router_requests{route=/v1/chat/completions}": (40, 6)}
    for w in (p, d):  # nothing reaches the workers
        w.gauges.update(num_running_reqs=0, num_queue_reqs=0)
    p.counters["prompt_tokens"] = (1_200_000, 0)
    d.counters["generation_tokens"] = (900_000, 0)
    return [p, d, r], {}


@scenario("decode-hang-health-ok-generate-503", "decode-wedged", "https://github.com/sgl-project/sglang/issues/4191",
          "DeepSeek-R1 (early 2025) serves some requests, then every chat completion and get_server_info hangs for 10+ "
          "minutes while /health and get_model_info answer 200 (health_generate 503); no error line is written",
          also=("prefill-wedged",), must_not=("healthy", "role-down", "config-crashloop"))
def _hang_health_ok():
    p, d, r = roles("0.4.3", "mini_lb")
    d.gauges.update(num_running_reqs=4, token_usage=0.02, gen_throughput=0.0)
    d.counters["generation_tokens"] = (310_000, 0)
    d.counters["num_requests"] = (1_200, 0)
    d.logs = []
    return [p, d, r], {}


@scenario("decode-hang-after-few-requests-gb10", "decode-wedged", "https://github.com/sgl-project/sglang/issues/27949",
          "0.5.12.post1, Qwen3.5-397B NVFP4 with TP=4 across four DGX Spark nodes (--max-running-requests 1): after 2-3 "
          "normal completions every request, /health included, times out; reproduced 3/3",
          also=("nccl-failure", "scheduler-watchdog"), must_not=("healthy", "role-down", "kv-cache-exhausted"))
def _hang_gb10():
    p, d, r = roles()
    d.gauges.update(num_running_reqs=1, num_queue_reqs=2, token_usage=0.03)
    d.counters["realtime_tokens{mode=decode}"] = (620, 0)
    d.logs = []
    d.health, d.health_error, d.nulls = None, "timeout after 5.0 s", True
    return [p, d, r], {}


@scenario("pd-decode-oom-prealloc-stuck", "kv-cache-exhausted", "https://github.com/sgl-project/sglang/issues/6857",
          "0.4.6.post5 1P1D benchmark hangs: decode ran out of KV ('Decode out of memory happened'), retracted requests whose "
          "KV had already arrived went back to the pre-allocation queue and are never popped; reserving decode tokens "
          "(SGLANG_NUM_RESERVED_DECODE_TOKENS) avoids it", also=("decode-wedged",),
          must_not=("healthy", "cuda-oom", "kv-transfer-failure", "role-down"))
def _prealloc_stuck():
    p, d, r = roles("0.4.6", "mini_lb")
    d.gauges.update(num_running_reqs=0, num_queue_reqs=0, token_usage=0.97, gen_throughput=0.0,
                    num_decode_prealloc_queue_reqs=11, num_decode_transfer_queue_reqs=0)
    d.counters["generation_tokens"] = (900_000, 0)
    d.logs = []  # the thread names the message but quotes no line of it
    p.gauges.update(num_running_reqs=0, num_queue_reqs=0)
    p.counters["prompt_tokens"] = (1_200_000, 0)
    return [p, d, r], {}


@scenario("near-radix-cache-token-usage-high", "healthy", "https://github.com/sgl-project/sglang/issues/6778",
          "RAG load: token usage sits at 0.96 after requests finish; a maintainer explains the finished requests' KV stays in "
          "the radix cache as evictable slots and is reclaimed when needed; requests keep completing",
          must_not=("kv-cache-exhausted", "decode-wedged", "cuda-oom"))
def _radix_usage():
    p, d, r = roles("0.4.6", "mini_lb")
    d.logs = raw(["[TP0] Decode batch. #running-req: 36, #token: 958017, token usage: 0.96",
                  '[INFO] "POST /v1/chat/completions" 200 OK',
                  "[TP0] Decode batch. #running-req: 35, #token: 959430, token usage: 0.96"])
    d.gauges.update(num_running_reqs=35, token_usage=0.96)
    return [p, d, r], {}


@scenario("import-error-kvcache-offload-manager", "config-crashloop", "https://github.com/sgl-project/sglang/pull/11007",
          "main of late September 2025: scheduler.py imports the decode KV-offload manager, which does 'from sglang import "
          "ServerArgs'; the import fails and no server starts until the fix (#11325)",
          also=("router-no-healthy-workers",), must_not=("role-down", "kv-transfer-failure"))
def _offload_import():
    p, d, r = roles("0.5.3", "sgl-router")
    lines = [
        "    from sglang.srt.entrypoints.engine import _launch_subprocesses",
        '  File "/work/sjy/sglang/python/sglang/srt/entrypoints/engine.py", line 45, in <module>',
        "    from sglang.srt.managers.data_parallel_controller import (",
        '  File "/work/sjy/sglang/python/sglang/srt/managers/data_parallel_controller.py", line 41, in <module>',
        "    from sglang.srt.managers.scheduler import run_scheduler_process",
        '  File "/work/sjy/sglang/python/sglang/srt/managers/scheduler.py", line 47, in <module>',
        "    from sglang.srt.disaggregation.decode_kvcache_offload_manager import (",
        '  File "/work/sjy/sglang/python/sglang/srt/disaggregation/decode_kvcache_offload_manager.py", line 7, in <module>',
        "    from sglang import ServerArgs",
    ]
    crashloop(p, raw(lines), restarts=9)
    crashloop(d, raw(lines), restarts=9)
    return [p, d, r], {}


@scenario("modulenotfound-pybase64", "config-crashloop", "https://github.com/sgl-project/sglang/issues/13276",
          "sglang installed into a Python 3.14 environment without its dependency pybase64: 'import sglang' fails before "
          "any argument is read, at every start", also=("router-no-healthy-workers",), must_not=("role-down", "gpu-fault"))
def _pybase64():
    p, d, r = roles("0.5.3", "sgl-router")
    crashloop(p, raw([
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 189, in _run_module_as_main',
        '  File "<frozen runpy>", line 112, in _get_module_details',
        '  File "/ceph/sharedfs/work/yutienchanglab/benjamin920101/miniconda3/envs/sglang_env/lib/python3.14/site-packages/'
        'sglang/__init__.py", line 5, in <module>',
        "    from sglang.lang.api import (",
        "ModuleNotFoundError: No module named 'pybase64'",  # the thread's title
    ]), restarts=6)
    return [p, d, r], {}


@scenario("rocm-dsv4-deep-gemm-missing", "config-crashloop", "https://github.com/sgl-project/sglang/issues/28141",
          "DeepSeek-V4-Flash on one MI350X with the SGLang ROCm image: the V4 loader imports deep_gemm while loading weights; "
          "it is not installed (and its wheel is CUDA-only), so the scheduler dies at every start",
          also=("router-no-healthy-workers",), must_not=("role-down", "cuda-oom", "gpu-fault"))
def _deep_gemm_missing():
    p, d, r = roles()
    crashloop(d, raw(["from deep_gemm import transform_sf_into_required_layout",
                      "ModuleNotFoundError: No module named 'deep_gemm'"]), restarts=4)
    d.started = T0 - timedelta(minutes=4)  # the weights load for minutes before the import fails
    return [p, d, r], {}


@scenario("transformers-backend-no-tp-size", "config-crashloop", "https://github.com/sgl-project/sglang/pull/9614",
          "Gemma 3 launched with the transformers model implementation (Aug 2025): CUDA graph capture reads tp_size, which "
          "TransformersForCausalLM lacks; the scheduler dies during start-up every time",
          also=("router-no-healthy-workers",), must_not=("role-down", "cuda-oom"))
def _transformers_tp_size():
    p, d, r = roles("0.5.3", "sgl-router")
    crashloop(p, raw([
        '  File "/root/sglang/python/sglang/srt/managers/scheduler.py", line 2609, in run_scheduler_process',
        "    scheduler = Scheduler(",
        "                ^^^^^^^^^^",
        '  File "/root/sglang/python/sglang/srt/managers/scheduler.py", line 325, in __init__',
        "    self.tp_worker = TpWorkerClass(",
        "                     ^^^^^^^^^^^^^^",
        '  File "/root/sglang/python/sglang/srt/model_executor/model_runner.py", line 350, in initialize',
        "    self.init_device_graphs()",
        '  File "/root/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 384, in __init__',
        "    self.capture()",
        "AttributeError: 'TransformersForCausalLM' object has no attribute 'tp_size'",  # the PR's title
    ]), restarts=5)
    return [p, d, r], {}


@scenario("long-prefill-monopolises-batch", "prefill-queue-saturation", "https://github.com/sgl-project/sglang/pull/34554",
          "Kimi-K3 on 8xB300 (--chunked-prefill-size 8192): one tenant's 642K-912K-token prompts keep a long prefill in flight "
          "for 50 minutes; each pass holds the whole chunk budget, every other request waits behind it and p99 TTFT climbs",
          must_not=("prefill-wedged", "kv-transfer-failure", "healthy"))
def _long_prefill():
    p, d, r = roles()
    p.gauges.update(num_running_reqs=1, num_queue_reqs=46, token_usage=0.71)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (48_000_000, 24_576)  # three 8192-token passes in the window
    p.counters["realtime_tokens{mode=prefill_cache}"] = (9_000_000, 0)
    p.logs = []
    d.gauges.update(num_running_reqs=9)
    return [p, d, r], {}


@scenario("near-prefill-serial-long-prompt", "healthy", "https://github.com/sgl-project/sglang/issues/4265",
          "0.4.3-post2 DeepSeek R1 on 2x8 H800: a short request sent right after a 60K-token one waits ~10 s for that "
          "prefill to finish; maintainers confirm prefill runs requests one after another: expected, not a fault",
          must_not=("prefill-queue-saturation", "prefill-wedged", "decode-wedged"))
def _prefill_serial():
    p, d, r = roles("0.4.3", "mini_lb")
    p.gauges.update(num_running_reqs=1, num_queue_reqs=1, token_usage=0.04)
    p.counters["prompt_tokens"] = (2_400_000, 60_000)  # the long prompt finished inside the window
    p.counters["num_requests"] = (900, 1)
    return [p, d, r], {}



@scenario("router-startup-timeout-300s", "config-crashloop", "https://github.com/sgl-project/sglang/issues/2778",
          "sglang-router 0.1.x waits at most 300 s for its workers at start-up; workers loading a large model take longer, "
          "so the router gives up and exits at every start (0.1.3 made the timeout configurable)",
          also=("router-no-healthy-workers",), must_not=("role-down", "prefill-wedged", "decode-wedged", "healthy"))
def _router_timeout_300():
    p, d, r = roles("0.4.3", "sgl-router")
    for w in (p, d):  # still loading weights: not answering yet
        w.started = T0 - timedelta(minutes=4)
        w.health, w.health_error, w.nulls = None, "connection refused", True
        w.metrics_error = "connection refused"
        w.logs = []
    crashloop(r, raw(["Failed to create router: Timeout 300s waiting for workers to become healthy"]),  # the thread's title
              restarts=3)
    r.started = T0 - timedelta(seconds=360)  # exits ~300 s after it started
    return [p, d, r], {}


@scenario("prefill-hang-dp-reduce-scatter", "prefill-wedged", "https://github.com/sgl-project/sglang/issues/10124",
          "DeepSeek with TP+DP+EP in PD (Sept 2025): the prefill ranks hang inside dp_reduce_scatter_tensor under load; "
          "nothing is prefilled and the decode waits for KV; ten minutes later PyTorch's NCCL watchdog would kill them "
          "(this is the probe during the hang, before that)", also=("nccl-failure",),
          must_not=("healthy", "prefill-queue-saturation", "kv-transfer-failure", "role-down"))
def _prefill_reduce_scatter_hang():
    p, d, r = roles("0.5.3", "sgl-router")
    p.gauges.update(num_running_reqs=8, num_queue_reqs=31, token_usage=0.18, num_prefill_prealloc_queue_reqs=0,
                    num_prefill_inflight_queue_reqs=0)
    p.counters["prompt_tokens"] = (6_400_000, 0)
    p.counters["num_requests"] = (3_100, 0)
    p.logs = []
    p.health, p.health_error, p.nulls = None, "timeout after 5.0 s", True
    d.gauges.update(num_running_reqs=0, num_decode_prealloc_queue_reqs=8, num_decode_transfer_queue_reqs=8, gen_throughput=0.0)
    d.counters["generation_tokens"] = (2_000_000, 0)
    d.logs = []
    return [p, d, r], {}

start_limit("router-pd-requires-prefill", "router")
after_fix("modulenotfound-pybase64", "prefill", "pybase64 installed into the environment; the ModuleNotFoundError lines "
          "are from the runs before", CRASH)
# -- KV-transfer failures and PD-pair wedges threads (2026-12-02) --

@scenario("mooncake-efa-create-qp-segfault", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/24838",
          "AWS p5en (EFA, rdmap88s0) with mooncake-transfer-engine-cuda13 0.3.10.post2: SGLang initialises Mooncake with a "
          "hard-coded 'rdma' protocol, ibverbs QP creation fails on EFA and the prefill segfaults at the first KV transfer",
          also=("role-down", "router-no-healthy-workers"), must_not=("config-crashloop", "cuda-oom", "gpu-fault", "healthy"))
def _mooncake_efa_qp():
    p, d, r = roles()
    died(p, raw(["E0509 rdma_endpoint.cpp:76] Failed to create QP: Operation not supported [95]",
                 "Fatal Python error: Segmentation fault",
                 '  File ".../sglang/srt/disaggregation/mooncake/conn.py", line 687 in _send_kvcache_generic']),
         status="11/SEGV", code="dumped")
    p.started = T0 - timedelta(minutes=9)  # it served its warm-up, then died at the first real transfer
    return [p, d, r], {}


@scenario("mooncake-rnic-retry-exceeded-inactive", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/21395",
          "2026-03 PD with Mooncake (HiCache on a Mooncake store): a KV write to the decode exceeds the RDMA transport retry "
          "counter, Mooncake marks the local RNIC mlx5_9 inactive and the session to the decode fails; the prefill stays up",
          must_not=("healthy", "prefill-queue-saturation", "config-crashloop", "role-down"))
def _mooncake_rnic_inactive():
    p, d, r = roles()
    p.logs += raw([
        "E0325 09:33:41.551047  8274 worker_pool.cpp:294] Worker: Process failed for slice (opcode: 1, source_addr: 0x7ef798060000, "
        "length: 65536, dest_addr: 0x7f3056060000, local_nic: mlx5_9, peer_nic: 10.121.129.7:15867@mlx5_9, dest_rkey: 2491916, "
        "retry_cnt: 0): transport retry counter exceeded",
        "W0325 09:33:41.554718  8274 worker_pool.cpp:308] Too many errors found in local RNIC 10.121.129.5:16077@mlx5_9, mark it inactive",
        "E0325 09:33:41.563210  8274 rdma_context.cpp:319] Context is not active: mlx5_9",
        "E0325 09:33:41.565863  8274 rdma_context.cpp:319] Context is not active: mlx5_9",
        "E0325 09:33:41.568619  8274 rdma_context.cpp:319] Context is not active: mlx5_9",
        "E0325 09:33:41.584282  8497 rdma_transport.cpp:389] Device 0 is not active",
        "[2026-03-25 09:33:41] Session 10.121.129.7:15867 failed.",
    ])
    p.counters["num_transfer_failed_reqs"] = (0, 1)
    d.counters["num_transfer_failed_reqs"] = (0, 1)
    return [p, d, r], {}


@scenario("mooncake-bond-rnic-inactive-h20", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/8324",
          "DeepSeek-R1 1P1D on two H20 nodes with bonded RoCE NICs (0.4.9, Mooncake): KV writes fail with local protection "
          "errors, the RNIC is marked inactive and the outputs come back wrong; the NIXL backend works on the same hosts",
          must_not=("healthy", "prefill-queue-saturation", "config-crashloop"))
def _mooncake_bond_h20():
    p, d, r = roles("0.4.6", "mini_lb")
    p.logs += raw([
        "W0724 03:14:20.702893 104002 worker_pool.cpp:303] Too many errors found in local RNIC 10.0.2.69:15858@mlx5_bond_2, mark it inactive",
        "E0724 03:14:20.707079 104002 rdma_context.cpp:261] Context is not active: mlx5_bond_2",
    ])
    p.counters["num_transfer_failed_reqs"] = (0, 2)
    return [p, d, r], {}


@scenario("nixl-ucx-segfault-cueventquery-dsr1", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/23499",
          "DeepSeek-R1 FP8, 2 prefill + 2 decode nodes over NIXL/UCX: two minutes into a benchmark the prefill segfaults in "
          "NIXL's UCX progress thread (nixlUcxSharedThread -> ucp_worker_arm -> cuEventQuery) while sending KV chunks",
          also=("role-down", "router-no-healthy-workers"), must_not=("config-crashloop", "cuda-oom", "gpu-fault", "healthy"))
def _nixl_cueventquery_dsr1():
    p, d, r = roles()
    died(p, raw([
        "!!!!!!! Segfault encountered !!!!!!!",
        '  File "<unknown>", line 0, in gsignal',
        '  File "<unknown>", line 0, in cuEventQuery',
        '  File "<unknown>", line 0, in uct_cuda_base_iface_event_fd_arm',
        '  File "<unknown>", line 0, in ucp_worker_arm',
        '  File "<unknown>", line 0, in nixlUcxSharedThread::run()',
        '  File "<unknown>", line 0, in 0xffffffffffffffff',
    ]), status="11/SEGV", code="dumped")
    return [p, d, r], {}


@scenario("nixl-ucx-segfault-gb200-send-kvcache", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/23489",
          "GB200 (ARM) PD over NIXL: the prefill worker segfaults in the NIXL/UCX layer during an active KV transfer to decode "
          "(send_kv_chunk -> nixl conn.py), taking the job down", also=("role-down", "router-no-healthy-workers"),
          must_not=("config-crashloop", "cuda-oom", "gpu-fault", "nccl-failure", "healthy"))
def _nixl_gb200_segv():
    p, d, r = roles()
    died(p, raw([
        "Fatal Python error: Segmentation fault",
        "",
        "Thread 0x0000e6b496d046a0 (most recent call first):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/nixl/conn.py", line 452 in _send_kvcache_generic',
        '  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/nixl/conn.py", line 466 in send_kvcache',
        '  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/nixl/conn.py", line 892 in add_transfer_request',
        '  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/nixl/conn.py", line 1065 in send',
        '  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/prefill.py", line 828 in send_kv_chunk',
        '  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/prefill.py", line 540 in process_batch_result_disagg_prefill',
        "",
        "!!!!!!! Segfault encountered !!!!!!",
        '  File "<unknown>", line 0, in gsignal',
        '  File "<unknown>", line 0, in cuEventQuery',
        '  File "<unknown>", line 0, in uct_cuda_base_iface_event_fd_arm',
        '  File "<unknown>", line 0, in ucp_worker_arm',
        '  File "<unknown>", line 0, in nixlUcxWorker::arm() const',
        '  File "<unknown>", line 0, in nixlUcxSharedThread::run()',
    ]), status="11/SEGV", code="dumped")
    return [p, d, r], {}


@scenario("nixl-ucx-progress-thread-segv-recurring", "kv-transfer-failure", "https://github.com/ai-dynamo/nixl/issues/2102",
          "a production PD deployment on 8xB200 over NIXL/UCX (SGLang v0.5.17 and NIXL 1.3.2 per the twin report "
          "sgl-project/sglang#35189): the prefill segfaults in cuEventQuery from NIXL's UCX progress thread (no CUDA context "
          "on it) about every 4.8 h, 9 times in 43 h; it is restarted each time",
          also=("role-down", "router-no-healthy-workers"), must_not=("config-crashloop", "cuda-oom", "gpu-fault", "healthy"))
def _nixl_progress_thread():
    p, d, r = roles()
    died(p, raw([
        "Fatal Python error: Segmentation fault",
        "",
        '  File "<unknown>", line 0, in pthread_kill',
        '  File "<unknown>", line 0, in gsignal',
        '  File "<unknown>", line 0, in cuEventQuery',
        '  File "<unknown>", line 0, in uct_cuda_base_iface_event_fd_arm',
        '  File "<unknown>", line 0, in ucp_worker_arm',
        '  File "<unknown>", line 0, in nixlUcxWorker::arm() const',
        '  File "<unknown>", line 0, in nixlUcxSharedThread::run()',
        '  File "<unknown>", line 0, in __clone',
        '  File "<unknown>", line 0, in 0xffffffffffffffff',
    ]), restarts=9, status="11/SEGV", code="dumped")
    return [p, d, r], {}


@scenario("mooncake-tcp-readbody-eof-multinode", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/10001",
          "PD across two nodes with Mooncake over TCP and sgl-router: the decode's transfer sessions end with 'readBody failed. "
          "Error: End of file', the decode answers 500 and the router reports 'Decode server returned error status'",
          must_not=("healthy", "router-no-healthy-workers", "role-down", "config-crashloop"))
def _tcp_readbody_eof():
    p, d, r = roles("0.5.3", "sgl-router")
    d.logs += raw([
        "E0904 07:15:26.325699  5796 tcp_transport.cpp:172] Session::readBody failed. Error: End of file (value: 2), total_transferred_byt",
        '[2025-09-04 07:15:26] INFO:     10.160.1.23:42180 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error',
        "E0904 07:15:26.325783  5796 tcp_transport.cpp:172] Session::readBody failed. Error: End of file (value: 2), total_transferred_byt",
    ])
    d.counters["num_transfer_failed_reqs"] = (0, 2)
    r.logs = raw([
        "2025-09-04 07:15:26 ERROR http_request{method=POST uri=/v1/completions version=HTTP/1.1}: sglang_router_rs::routers::pd_router: "
        "src/routers/pd_router.rs:565: Decode server returned error status decode_url=http://10.160.1.22:50000 status=500 Internal Server Error",
        "2025-09-04 07:15:26 ERROR http_request{method=POST uri=/v1/completions version=HTTP/1.1}:http_request{method=POST "
        "uri=/v1/completions version=HTTP/1.1 request_id=cmpl-hvNcVSx9FaPb13dmSHtom1fF status=500 Internal Server Error "
        "latency=2.041450065s}: sglang_router_rs::response: src/middleware.rs:159: request failed with server error",
    ])
    return [p, d, r], {}


@scenario("mooncake-tcp-writebody-bad-address-same-node", "kv-transfer-failure", "https://github.com/kvcache-ai/Mooncake/issues/383",
          "SGLang PD on one machine following Mooncake's guide, without RoCE: Mooncake falls back to TCP, which cannot send the "
          "KV held in GPU memory, and every transfer fails with 'Session::writeBody failed. Error: Bad address'",
          must_not=("healthy", "config-crashloop", "prefill-queue-saturation"))
def _tcp_writebody_same_node():
    p, d, r = roles("0.4.6", "mini_lb")
    p.logs += raw([
        f"E0520 06:53:47.{us} 18592 tcp_transport.cpp:136] Session::writeBody failed. Error: Bad address (value: 14), "
        "total_transferred_bytes_: 0, current transferred_bytes: 0" for us in ("272128", "272198", "272285", "272302", "272325", "272337")
    ])
    p.counters["num_transfer_failed_reqs"] = (0, 3)
    d.counters["num_transfer_failed_reqs"] = (0, 3)
    return [p, d, r], {}


@scenario("mooncake-rocm-packet-mismatch-qp-rtr-timeout", "kv-transfer-failure", "https://github.com/sgl-project/sglang/pull/27730",
          "ROCm 7.0 single-node 1P1D pinned to rdma0..rdma7: the Mooncake P2P handshake gets a packet mismatch with an empty "
          "peer NIC path, the QP never reaches RTR, the batch transfer times out after 30 s and the decode gives up on the prefill",
          must_not=("healthy", "config-crashloop", "role-down", "prefill-queue-saturation"))
def _rocm_packet_mismatch():
    p, d, r = roles()
    p.logs += raw([
        "transfer_engine_impl.cpp:389] installTransport, type=rdma",
        "rdma_endpoint.cpp:472] Invalid argument: received packet mismatch,",
        "  local.local_nic_path: 10.42.21.26:15806@rdma0, local.peer_nic_path: 10.42.21.26:16416@rdma2,",
        "  peer.local_nic_path: (empty), peer.peer_nic_path: (empty)",
        "rdma_endpoint.cpp:1033] [Handshake] Failed to modify QP to RTR ... Connection timed out [110]",
        "transfer_engine_py.cpp:614] Sync batch data transfer timeout after 30000001699ns",
    ])
    d.logs += raw(["KVTransferError: Failed to get kvcache from prefill instance, it might be dead"])
    p.counters["num_transfer_failed_reqs"] = (0, 1)
    d.counters["num_transfer_failed_reqs"] = (0, 1)
    return [p, d, r], {}


@scenario("decode-health-fails-after-prefill-died", "decode-wedged", "https://github.com/sgl-project/sglang/issues/12779",
          "0.5.3-0.5.5 PD (DeepSeek-V3.1 on H20, Mooncake): the prefill died while requests were in KV transmission and was "
          "restarted; the decode keeps them, makes no progress and fails its health checks until k8s kills it (fine in 0.5.2)",
          also=("kv-transfer-failure",), must_not=("healthy", "role-down", "config-crashloop", "cuda-oom"))
def _decode_health_after_prefill_died():
    p, d, r = roles("0.5.3", "sgl-router")
    p.restarts, p.started = 1, T0 - timedelta(minutes=4)
    d.gauges.update(num_running_reqs=12, num_decode_transfer_queue_reqs=6, gen_throughput=0.0)
    d.counters["generation_tokens"] = (900_000, 0)
    d.counters["num_requests"] = (590, 0)
    d.logs = []
    d.health, d.health_error = None, "timeout after 5.0 s"
    return [p, d, r], {}


@scenario("nixl-no-heartbeat-restarted-prefill", "kv-transfer-failure", "https://github.com/ai-dynamo/nixl/issues/795",
          "SGLang PD over NIXL (Sept 2025): a prefill died (OOM) and was restarted; without Mooncake's heartbeat checker the "
          "restarted prefill cannot pair with the running decodes and every request waits until all instances are restarted",
          must_not=("healthy", "role-down", "config-crashloop", "prefill-wedged"))
def _nixl_no_heartbeat():
    p, d, r = roles("0.5.3", "sgl-router")
    p.restarts, p.started = 1, T0 - timedelta(minutes=6)
    p.gauges.update(num_running_reqs=0, num_queue_reqs=0, num_prefill_inflight_queue_reqs=3)
    p.counters["prompt_tokens"] = (4_000, 0)
    p.counters["num_requests"] = (3, 0)
    d.gauges.update(num_running_reqs=0, num_decode_transfer_queue_reqs=3, gen_throughput=0.0)
    d.counters["generation_tokens"] = (900_000, 0)
    d.counters["num_requests"] = (590, 0)
    p.logs, d.logs = [], []
    return [p, d, r], {}


@scenario("near-mooncake-startup-info-lines", "healthy", "https://github.com/sgl-project/sglang/issues/6836",
          "SGLang with DP attention and Mooncake (June 2025), started a minute ago and serving: Mooncake's glog start-up "
          "lines as the thread prints them ('Logging before InitGoogleLogging() is written to STDERR', metrics thread, P2P "
          "handshake listener) are info, not errors",
          must_not=("kv-transfer-failure", "config-crashloop", "role-down"))
def _mooncake_startup_info():
    p, d, r = roles("0.4.6", "mini_lb")
    p.started = T0 - timedelta(seconds=90)
    p.logs = raw([
        "WARNING: Logging before InitGoogleLogging() is written to STDERR",
        "I0616 07:25:02.232740 43138 transfer_engine.cpp:361] Metrics reporting thread started (interval: 5s)",
        "[2025-06-16 07:25:02 DP2 TP2] Mooncake Configuration loaded successfully.",
        "[2025-06-16 07:25:02 DP0 TP0] Mooncake Configuration loaded successfully.",
        "[2025-06-16 07:25:02 DP1 TP1] Mooncake Configuration loaded successfully.",
        "I0616 07:25:02.233919 40410 transfer_engine.cpp:44] Transfer Engine starting. Server: localhost:12981, Metadata: "
        "P2PHANDSHAKE, ip_or_host_name: localhost, rpc_port: 12981",
        "WARNING: Logging before InitGoogleLogging() is written to STDERR",
        "I0616 07:25:02.233950 40410 transfer_engine.cpp:100] Transfer Engine RPC using P2P handshake, listening on localhost:12981",
    ]) + p.logs
    return [p, d, r], {}


@scenario("near-mooncake-te-latency-stats", "healthy", "https://github.com/sgl-project/sglang/issues/29955",
          "a 2026 PD prefill with Mooncake HiCache serving chunked prefills: the transfer engine's 5 s '[Metrics] Transfer "
          "Engine Stats' line with its latency distribution is routine reporting, not a transfer error",
          must_not=("kv-transfer-failure", "prefill-queue-saturation", "prefill-wedged"))
def _mooncake_te_stats():
    p, d, r = roles()
    p.logs = raw([
        "I0702 14:16:19.742280 188260 transfer_engine_impl.cpp:1009] [Metrics] Transfer Engine Stats (over last 5s): Throughput: "
        "75.31 MB/s | Latency Distribution (count=1923): 50-100μs:0.3%, 100-200μs:0.3%, 200-500μs:0.1%, 1000-2000μs:0.3%, "
        "2000-5000μs:1.1%, 5000-10000μs:2.4%, 10000-20000μs:3.1%, 20000-50000μs:9.7%, 50000-100000μs:15.2%, "
        "100000-200000μs:23.7%, 200000-500000μs:40.9%, 500000-1000000μs:2.8%",
        "[2026-07-02 14:16:20 TP0] Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 85248, full token usage: 0.18, "
        "mamba usage: 0.54, #running-req: 8, #queue-req: 0, #pending-token: 13654, cuda graph: False, input throughput (token/s): 5797.58",
    ])
    return [p, d, r], {}


@scenario("bootstrap-parallel-info-none-decode-crash", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/6413",
          "0.4.6.post4 DeepSeek-V3 decode on H20: the decode cannot fetch the prefill's parallel info from the bootstrap "
          "server, unpacks None and its scheduler dies on the first request (a /health_generate)",
          also=("role-down", "router-no-healthy-workers"), must_not=("config-crashloop", "cuda-oom", "healthy"))
def _bootstrap_info_none():
    p, d, r = roles("0.4.6", "mini_lb")
    died(d, raw([
        "    self.prefill_tp_size, self.prefill_dp_size = (",
        "    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "TypeError: cannot unpack non-iterable NoneType object",
        "",
        "[2025-05-19 14:37:28 TP3] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/media/nvme/josef/sglang/python/sglang/srt/managers/scheduler.py", line 2279, in run_scheduler_process',
        "    scheduler.event_loop_overlap_disagg_decode()",
        '  File "/media/nvme/anaconda3/envs/josef/lib/python3.12/site-packages/torch/utils/_contextlib.py", line 116, in decorate_context',
        "    return func(*args, **kwargs)",
        "           ^^^^^^^^^^^^^^^^^^^^^",
        '  File "/media/nvme/josef/sglang/python/sglang/srt/disaggregation/decode.py", line 521, in event_loop_overlap_disagg_decode',
        "    self.process_input_requests(recv_reqs)",
        '  File "/media/nvme/josef/sglang/python/sglang/srt/managers/scheduler.py", line 882, in process_input_requests',
        "    output = self._request_dispatcher(recv_req)",
        "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '  File "/media/nvme/josef/sglang/python/sglang/utils.py", line 471, in __call__',
        "    return fn(obj)",
        "           ^^^^^^^",
        '  File "/media/nvme/josef/sglang/python/sglang/srt/managers/scheduler.py", line 1038, in handle_generate_request',
        "    self._add_request_to_queue(req)",
    ]))
    d.started = T0 - timedelta(minutes=10)  # up and answering until its first request
    return [p, d, r], {}


@scenario("bootstrap-port-mismatch-decode-crash", "kv-transfer-failure", "https://github.com/sgl-project/sglang/pull/11747",
          "0.5.3 PD: the prefill's bootstrap port and the router's disagree; the decode's fetch of the prefill's parallel info "
          "is refused ([Errno 111]) and its disaggregation event loop dies with the exception",
          also=("role-down", "router-no-healthy-workers"), must_not=("config-crashloop", "cuda-oom", "healthy"))
def _bootstrap_port_mismatch():
    p, d, r = roles("0.5.3", "sgl-router")
    died(d, raw([
        "[2025-10-29 11:00:44] Error fetching prefill parallel info from bootstrap: HTTPConnectionPool(host='127.0.0.1', port=8998): "
        "Max retries exceeded with url: /route?engine_rank=-1&target_dp_group=-1&target_pp_rank=-1 (Caused by "
        "NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7fedda7b95d0>: Failed to establish a new connection: "
        "[Errno 111] Connection refused'))",
        "[2025-10-29 11:00:44] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "sglang-deepep-venv-0.5.3/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py", line 2883, in run_scheduler_process',
        "    scheduler.event_loop_overlap_disagg_decode()",
        '  File "sglang-deepep-venv-0.5.3/lib/python3.11/site-packages/torch/utils/_contextlib.py", line 120, in decorate_context',
        "    return func(*args, **kwargs)",
        "           ^^^^^^^^^^^^^^^^^^^^^",
    ]))
    d.started = T0 - timedelta(minutes=10)  # up and answering until its first request
    return [p, d, r], {}


@scenario("near-unexpected-polling-state-warning", "healthy", "https://github.com/sgl-project/sglang/issues/25063",
          "2026 PD with Mooncake: the prefill occasionally warns of an unexpected KVPoll.Bootstrapping state in its inflight "
          "queue and treats the request as undone; it completes normally later and the pair keeps serving",
          must_not=("kv-transfer-failure", "prefill-wedged", "prefill-queue-saturation"))
def _unexpected_polling_state():
    p, d, r = roles()
    p.logs += ["Unexpected polling state 1 for rid <rid> in inflight queue; treating as undone"]
    return [p, d, r], {}


@scenario("mooncake-tcp-cannot-assign-address-sustained", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/23272",
          "2026 Qwen3-32B 2P2D on H200 with Mooncake over TCP under sustained load: the prefill's TCP transport cannot connect "
          "('Cannot assign requested address'), the session to the decode fails and KV chunks are not sent; NIXL works",
          must_not=("healthy", "config-crashloop", "role-down", "prefill-queue-saturation"))
def _tcp_cannot_assign():
    p, d, r = roles()
    p.logs = raw([
        "qwen3-32b-sglang-2p2d-prefill-0-1  | [2026-04-30 16:02:25] Prefill batch, #new-seq: 1, #new-token: 276, #cached-token: 8657, "
        "token usage: 0.25, #running-req: 0, #queue-req: 8, #prealloc-req: 24, #inflight-req: 8, cuda graph: False, input "
        "throughput (token/s): 47.86",
        "qwen3-32b-sglang-2p2d-prefill-0-1  | E0430 16:02:26.014493   391 tcp_transport.cpp:542] TcpTransport::startTransfer "
        "encountered an ASIO exception. Slice details - source_addr: 0x3da7e4c800, length: 569344, opcode: 1, target_id: 2. "
        "Exception: connect: Cannot assign requested address",
        "qwen3-32b-sglang-2p2d-prefill-0-1  | [2026-04-30 16:02:26] Session 172.20.0.9:15004 failed.",
    ])
    p.gauges.update(num_running_reqs=0, num_queue_reqs=8, token_usage=0.25, num_prefill_prealloc_queue_reqs=24,
                    num_prefill_inflight_queue_reqs=8)
    p.counters["num_transfer_failed_reqs"] = (0, 1)
    d.logs = raw([
        "qwen3-32b-sglang-2p2d-decode-0-1   | [2026-04-30 16:02:25] Decode batch, #running-req: 1, #token: 240492, token usage: 0.92, "
        "pre-allocated usage: 0.88, #prealloc-req: 6, #transfer-req: 26, #retracted-req: 0, cuda graph: True, gen throughput "
        "(token/s): 51.45, #queue-req: 0",
    ])
    d.gauges.update(num_running_reqs=1, token_usage=0.92, num_decode_transfer_queue_reqs=26, num_decode_prealloc_queue_reqs=6)
    d.counters["realtime_tokens{mode=decode}"] = (5_000_000, 150)
    d.counters["num_transfer_failed_reqs"] = (0, 1)
    return [p, d, r], {}


@scenario("nixl-swa-state-never-sent-decode-waits", "kv-transfer-failure", "https://github.com/sgl-project/sglang/pull/18939",
          "2026-02 NIXL PD of a hybrid-attention model (DeepSeek V3.2, Wide EP): the NIXL connector never transfers the SWA/NSA "
          "state, so the decode waits for a state notification that never comes while the prefill has moved on",
          also=("decode-wedged",), must_not=("healthy", "prefill-wedged", "prefill-queue-saturation", "role-down"))
def _nixl_swa_state():
    p, d, r = roles()
    p.gauges.update(num_running_reqs=0, num_queue_reqs=0)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (1_200_000, 0)
    p.counters["realtime_tokens{mode=prefill_cache}"] = (300_000, 0)
    d.gauges.update(num_running_reqs=0, num_decode_transfer_queue_reqs=4)
    d.counters["realtime_tokens{mode=decode}"] = (5_000_000, 0)
    p.logs, d.logs = [], []
    return [p, d, r], {}


stayed_down("nixl-ucx-segfault-cueventquery-dsr1", "prefill", "the benchmark job's prefill stays dead after the segfault (no "
            "restart)")
after_fix("mooncake-efa-create-qp-segfault", "prefill", "MOONCAKE_PROTOCOL=efa with a Mooncake wheel built with USE_EFA=ON; "
          "restarted, it serves and the segfault precedes this run", CRASH + ("kv-transfer-failure",))


# -- NCCL, GPU, OOM, watchdog and role-down threads (2026-12-02) --------------------------------

def _kernel_from(lines: list[str], node: str, first: timedelta) -> dict:
    """Kernel lines as ``journalctl -k`` shows them on ``node``, verbatim, a second apart from ``T0 - first``."""
    stamped = [f"{(T0 - first + timedelta(seconds=i)).strftime('%Y-%m-%dT%H:%M:%S')}+0000 {node} kernel: {line}"
               for i, line in enumerate(lines)]
    return {"kernel": {node: "\n".join(stamped) + "\n"}}


@scenario("deepep-low-latency-cuda-graph-oom", "cuda-oom", "https://github.com/sgl-project/sglang/issues/5285",
          "DeepSeek with DeepEP low-latency over two 8xH20 nodes: CUDA graph capture runs out of GPU memory (448 MiB on GPU 7) "
          "while the scheduler starts; every start dies the same way",
          also=("config-crashloop", "router-no-healthy-workers"), must_not=("role-down", "nccl-failure", "gpu-fault"))
def _deepep_ll_graph_oom():
    p, d, r = roles("0.4.6", "mini_lb")
    crashloop(d, raw([
        "Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2009, in run_scheduler_process',
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 259, in __init__',
        "    self.tp_worker = TpWorkerClass(",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker_overlap_thread.py", line 63, in __init__',
        "    self.worker = TpModelWorker(server_args, gpu_id, tp_rank, dp_rank, nccl_port)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker.py", line 74, in __init__',
        "    self.model_runner = ModelRunner(",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 178, in __init__',
        "    self.initialize(min_per_gpu_memory)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 216, in initialize',
        "    self.init_cuda_graphs()",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 934, in init_cuda_graphs',
        "    self.cuda_graph_runner = CudaGraphRunner(self)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 269, in __init__',
        "    raise Exception(",
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB. GPU 7 has a total capacity of 95.00",
    ]), restarts=5)
    return [p, d, r], {}


@scenario("gpu-dropped-rtx-pro-6000", "gpu-fault", "https://github.com/ormandj/sglang-glm53-flash-sm120/issues/11",
          "GLM on RTX PRO 6000 (sm120) with HiCache: one GPU drops out during inference; the scheduler dies on 'CUDA error: "
          "unspecified launch failure' and aborts; nvidia-smi no longer reaches that GPU (a hardware problem, per the thread)",
          also=("role-down", "router-no-healthy-workers"), must_not=("cuda-oom", "config-crashloop", "kv-cache-exhausted"))
def _gpu_dropped_rtx6000():
    p, d, r = roles()
    died(p, raw([
        "[2026-09-21 05:21:24 TP0] Prefill batch, #new-seq: 1, #new-token: 4096, #cached-token: 0,",
        "  full token usage: 0.66, mamba usage: 0.14, #queue-req: 1, #pending-token: 183287, ...",
        "[2026-09-21 05:21:24 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "  ...",
        '  File ".../sglang/srt/mem_cache/memory_pool.py", line 1463, in alloc',
        "    self.req_index_to_mamba_index_mapping[select_index] = mamba_index_tensor",
        "    ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~^^^^^^^^^^^^^^",
        "torch.AcceleratorError: CUDA error: unspecified launch failure",
        "Search for `cudaErrorLaunchFailure' in ...",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "",
        "[rank0]:[W921 05:21:24 CachingHostAllocator.cpp:26] Warning: Exception in pinned allocator free(), rethrowing",
        "terminate called after throwing an instance of 'c10::AcceleratorError'",
        "  what():  CUDA error: unspecified launch failure",
        "...",
        "Fatal Python error: Aborted",
    ]), status="6/ABRT", code="dumped")
    return [p, d, r], {"gpus": {"node1": gpu_csv(4, lost=(0,))}}


XID13_KIMI = [
    "NVRM: Xid (PCI:0000:9a:00): 13, Graphics SM Cga Exception on (GPC 1, TPC 3, SM 1): CTA Not Present",
    "NVRM: Xid (PCI:0000:9a:00): 13, Graphics Exception: ESR 0x54a7b0=0x0 0x54a7b4=0x20 0x54a7a8=0x1f81fb60 0x54a7ac=0x1174",
    "NVRM: Xid (PCI:0000:9a:00): 13, Graphics SM Cga Exception on (GPC 4, TPC 5, SM 1): CTA Not Present",
    "NVRM: Xid (PCI:0000:9a:00): 13, Graphics Exception: ESR 0x54e730=0x0 0x54e734=0x20 0x54e728=0x1f81fb60 0x54e72c=0x1174",
    "NVRM: Xid (PCI:0000:9a:00): 13, Graphics Exception: ESR 0x54e7b0=0x0 0x54e7b4=0x20 0x54e7a8=0x1f81fb60 0x54e7ac=0x1174",
]


@scenario("near-xid13-kimi-k3-restarted", "healthy", "https://github.com/sgl-project/sglang/issues/34260",
          "Kimi-K3 on 8 GPUs: one rank hits Xid 13 (CTA Not Present), PyTorch's NCCL watchdog terminates the process and it is "
          "restarted; the fault moved between two physical GPUs (a kernel bug, not bad silicon) and the restarted decode serves",
          must_not=("gpu-fault", "role-down", "nccl-failure", "config-crashloop"))
def _xid13_restarted():
    p, d, r = roles()
    recovered(died(d, [], status="3/QUIT", code="dumped"))
    return [p, d, r], _kernel_from(XID13_KIMI, "node2", timedelta(minutes=14, seconds=10))


@scenario("dspark-long-context-crash-xid13", "role-down", "https://github.com/sgl-project/sglang/issues/32855",
          "Kimi-K3 with DSPARK speculative decoding on B300: the decode's scheduler dies at ~218k tokens of context (Xid 13, "
          "CTA Not Present: a kernel bug at that length) and the unit stays down", also=("router-no-healthy-workers",),
          must_not=("gpu-fault", "config-crashloop"))
def _dspark_long_context():
    p, d, r = roles()
    failed(d, raw([
        "[2026-07-30 01:58:54 TP6] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 4735, in run_scheduler_process',
        "    scheduler.run_event_loop()",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1540, in run_event_loop',
        "    dispatch_event_loop(self)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 4586, in dispatch_event_loop',
        "    scheduler.event_loop_overlap()",
        '  File "/usr/local/lib/python3.12/dist-packages/torch/utils/_contextlib.py", line 124, in decorate_context',
        "    return func(*args, **kwargs)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1641, in event_loop_overlap',
        "    batch_result = self.run_batch(batch)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/utils/nvtx_utils.py", line 109, in wrapper',
        "    return func(*args, **kwargs)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 3416, in run_batch',
        "    batch_result = self.model_worker.forward_batch_generation(",
        '  File "/sgl-workspace/sglang/python/sglang/srt/speculative/dspark_components/dspark_worker_v2.py", line 396, in forward_batch_generation',
        "    return self._forward_decode(batch, on_publish, grammar_barrier)",
    ]))
    d.started = T0 - timedelta(hours=3)
    return [p, d, r], {}


@scenario("near-xid31-b300-operator-fault", "role-down", "https://github.com/sgl-project/sglang/issues/27520",
          "B200/B300 pods crash at random with Xid 31 (MMU fault from python3); the reporter traces it to operators (GLM5, "
          "DeepSeek and Kimi alike), not a GPU: the decode died once and stays down", also=("router-no-healthy-workers",),
          must_not=("gpu-fault", "config-crashloop"))
def _xid31_b300():
    p, d, r = roles()
    failed(d, [])
    d.started = T0 - timedelta(hours=3)
    return [p, d, r], _node_kernel([
        "NVRM: GPU at PCI:0000:10:00: GPU-f1xxx7cc-ecb2-0exc-faxe-8cxxb8ad1fdef",
        "NVRM: GPU Board Serial Number: 165042xxxx29",
        "NVRM: Xid (PCI:0000:10:00): 31, pid=1958081, name=python3, channel 0x00000009, intr 00000000. MMU Fault: ENGINE "
        "GRAPHICS GPC1 GPCCLIENT_T1_11 faulted @ 0x7f0b_27600000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    ], "node2")


@scenario("nccl-init-child-node-torch-distributed", "nccl-failure", "https://github.com/sgl-project/sglang/issues/4766",
          "DeepSeek-V3 over two H100 nodes: the child node's ranks die in init_torch_distributed (initialize_model_parallel), an "
          "NCCL problem between the nodes although NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME are set; every start fails",
          also=("config-crashloop", "router-no-healthy-workers"), must_not=("role-down", "cuda-oom"))
def _nccl_child_node():
    p, d, r = roles("0.4.3", "mini_lb")
    crashloop(d, raw([
        "[2025-03-25 14:34:11 TP10] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1748, in run_scheduler_process',
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 218, in __init__',
        "    self.tp_worker = TpWorkerClass(",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker_overlap_thread.py", line 63, in __init__',
        "    self.worker = TpModelWorker(server_args, gpu_id, tp_rank, dp_rank, nccl_port)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker.py", line 74, in __init__',
        "    self.model_runner = ModelRunner(",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 163, in __init__',
        "    min_per_gpu_memory = self.init_torch_distributed()",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 298, in init_torch_distributed',
        "    initialize_model_parallel(tensor_model_parallel_size=self.tp_size)",
    ]), restarts=5)
    return [p, d, r], {}


@scenario("c10d-waitforinput-timeout-h20-multinode", "nccl-failure", "https://github.com/sgl-project/sglang/issues/3398",
          "DeepSeek-V3 over two H20 nodes (NCCL over sockets): the c10d store connection to the first node times out after "
          "30 min and the schedulers die in init_torch_distributed; it never comes up",
          also=("config-crashloop", "router-no-healthy-workers"), must_not=("role-down", "cuda-oom", "healthy"))
def _c10d_wait_h20():
    p, d, r = roles("0.4.3", "mini_lb")
    crashloop(p, raw([
        "[rank3]:[W208 00:55:32.444220068 socket.cpp:487] [c10d] waitForInput: socket SocketImpl(fd=103, "
        "addr=[::ffff:11.130.1.53]:52362, remote=[::ffff:11.130.1.53]:5000) timed out after 1800000ms",
        "[rank4]:[W208 00:55:32.444221339 socket.cpp:487] [c10d] waitForInput: socket SocketImpl(fd=103, "
        "addr=[::ffff:11.130.1.53]:52372, remote=[::ffff:11.130.1.53]:5000) timed out after 1800000ms",
        "[2025-02-08 00:55:32 TP5] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 1787, in run_scheduler_process',
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)",
        '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 240, in __init__',
        "    self.tp_worker = TpWorkerClass(",
        '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/tp_worker_overlap_thread.py", line 63, in __init__',
        "    self.worker = TpModelWorker(server_args, gpu_id, tp_rank, dp_rank, nccl_port)",
        '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/tp_worker.py", line 68, in __init__',
        "    self.model_runner = ModelRunner(",
        '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_executor/model_runner.py", line 178, in __init__',
        "    min_per_gpu_memory = self.init_torch_distributed()",
    ]), restarts=2)
    p.started = T0 - timedelta(minutes=31)  # one start: the store connection waits 30 min before it gives up
    return [p, d, r], {}


@scenario("custom-allreduce-peer-access-4090", "config-crashloop", "https://github.com/sgl-project/sglang/issues/4814",
          "0.4.4 on RTX 4090s with --tensor-parallel-size=2: custom all-reduce needs peer access the cards lack and the "
          "server dies at start-up; --disable-custom-all-reduce is the fix (a configuration, not NCCL or a bad GPU)",
          also=("router-no-healthy-workers",), must_not=("nccl-failure", "gpu-fault", "role-down"))
def _custom_ar_4090():
    p, d, r = roles("0.4.3", "mini_lb")
    crashloop(p, raw(["RuntimeError: CUDART error: peer access is not supported between these two devices"]), restarts=6)
    return [p, d, r], {}


@scenario("faulthandler-enomem-h20-startup", "config-crashloop", "https://github.com/sgl-project/sglang/issues/5762",
          "DeepSeek-R1 TP8 on H20 with --context-length 131072: the scheduler processes cannot even enable faulthandler "
          "('OSError: [Errno 12] Cannot allocate memory'): host memory, not the GPU, at every start",
          also=("cuda-oom", "router-no-healthy-workers"), must_not=("role-down", "gpu-fault", "nccl-failure"))
def _enomem_h20():
    p, d, r = roles("0.4.6", "mini_lb")
    crashloop(p, raw([
        "Process Process-6:",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.10/multiprocessing/process.py", line 314, in _bootstrap',
        "    self.run()",
        '  File "/usr/lib/python3.10/multiprocessing/process.py", line 108, in run',
        "    self._target(*self._args, **self._kwargs)",
        '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 1984, in run_scheduler_process',
        "    faulthandler.enable()",
        "OSError: [Errno 12] Cannot allocate memory",
    ]), restarts=4)
    return [p, d, r], {}


@scenario("faulthandler-enomem-0.4.6-post4", "config-crashloop", "https://github.com/sgl-project/sglang/issues/6418",
          "0.4.6.post4 running DeepSeek-V3-0324: every scheduler process fails 'faulthandler.enable()' with Errno 12 (host "
          "memory) and the decode never comes up", also=("cuda-oom", "router-no-healthy-workers"),
          must_not=("role-down", "gpu-fault", "nccl-failure"))
def _enomem_046():
    p, d, r = roles("0.4.6", "sgl-router")
    crashloop(d, raw([
        "    self.run()",
        '  File "/usr/lib/python3.10/multiprocessing/process.py", line 108, in run',
        "    self._target(*self._args, **self._kwargs)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2238, in run_scheduler_process',
        "    faulthandler.enable()",
        "OSError: [Errno 12] Cannot allocate memory",
        "Process Process-1:",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.10/multiprocessing/process.py", line 314, in _bootstrap',
        "    self.run()",
        '  File "/usr/lib/python3.10/multiprocessing/process.py", line 108, in run',
        "    self._target(*self._args, **self._kwargs)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2238, in run_scheduler_process',
        "    faulthandler.enable()",
        "OSError: [Errno 12] Cannot allocate memory",
    ]), restarts=7)
    return [p, d, r], {}


@scenario("scheduler-rss-leak-oom-killed", "role-down", "https://github.com/sgl-project/sglang/issues/6914",
          "the scheduler's resident memory grows with every (embeddings) request until the kernel's OOM killer kills it "
          "(host memory, ~60 GB); the unit is down with result 'oom-kill' and nothing restarts it",
          also=("router-no-healthy-workers",), must_not=("cuda-oom", "config-crashloop", "kv-cache-exhausted"))
def _rss_leak_oom_killed():
    p, d, r = roles("0.4.6", "sgl-router")
    failed(p, [], status="9/KILL")
    unit = p.logs[-1].split(":")[1].strip()
    p.result, p.main_code, p.started = "oom-kill", 2, T0 - timedelta(hours=9)
    p.logs = [f"systemd: {unit}: A process of this unit has been killed by the OOM killer.",  # systemd's wording (unit.c)
              f"systemd: {unit}: Main process exited, code=killed, status=9/KILL",
              f"systemd: {unit}: Failed with result 'oom-kill'."]
    return [p, d, r], {}


@scenario("alloc-req-slots-oom-serving", "cuda-oom", "https://github.com/sgl-project/sglang/issues/10408",
          "Qwen 7B FP8 on 4x L4 serves for a few minutes, then the scheduler dies: 'alloc_req_slots runs out of memory' with "
          "token usage at 0.01; even --max-running-requests 1 does not help",
          also=("role-down", "router-no-healthy-workers"), must_not=("config-crashloop", "gpu-fault"))
def _alloc_req_slots():
    p, d, r = roles("0.5.3", "sgl-router")
    died(d, raw(["RuntimeError: alloc_req_slots runs out of memory. Please set a smaller number for `--max-running-requests`. "
                 "self.req_to_token_pool.available_size()=1, num_reqs=2,"]))
    d.started = T0 - timedelta(minutes=8)  # "runs fine for a few minutes"
    return [p, d, r], {}


@scenario("dsv4-watchdog-timeout-0.5.16", "scheduler-watchdog", "https://github.com/sgl-project/sglang/issues/33393",
          "DeepSeek-V4-Flash-0731 on one 8xH200 node (0.5.16, DP2 TP4, DSPARK, HiCache): after serving a while the scheduler "
          "watchdog fires (300 s) and the server exits", also=("role-down", "decode-wedged", "router-no-healthy-workers"),
          must_not=("config-crashloop", "nccl-failure"))
def _dsv4_watchdog():
    p, d, r = roles()
    died(d, ["Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"], status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("pp-gloo-recv-hang-watchdog", "scheduler-watchdog", "https://github.com/sgl-project/sglang/issues/17941",
          "DeepSeek-V3.2 with pipeline parallelism hangs: a stage waits in a Gloo recv for proxy tensors, the scheduler "
          "watchdog fires after 300 s, dumps the stacks and the server exits",
          also=("role-down", "prefill-wedged", "nccl-failure", "router-no-healthy-workers"), must_not=("config-crashloop",))
def _pp_gloo_hang():
    p, d, r = roles()
    died(p, raw([
        'Thread 90522 (idle): "Thread-2 (_watchdog_thread)"',
        "    poll (libc.so.6)",
        "    select (selectors.py:415)",
        "    _communicate (subprocess.py:2115)",
        "    communicate (subprocess.py:1209)",
        "    run (subprocess.py:550)",
        "    pyspy_dump_schedulers (utils/common.py:2317)",
        "    _watchdog_once (utils/watchdog.py:150)",
        "    _watchdog_thread (utils/watchdog.py:125)",
        "    run (threading.py:1010)",
        "    _bootstrap_inner (threading.py:1073)",
        "    _bootstrap (threading.py:1030)",
        "    0x7f259f405aa4 (libc.so.6)",
        "    0x7f259f492c6c (libc.so.6)",
        "",
        "[2026-01-29 13:12:37 PP1 TP1] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
        "",
        "",
        "[2026-01-29 13:12:37 PP2 TP1] Pyspy dump for PID 88693:",
        "Process 88693: sglang::scheduler_PP2_TP1",
        "Python v3.12.3 (/usr/bin/python3.12)",
        "",
        'Thread 88693 (idle): "MainThread"',
        "    0x7fa2d1487d71 (libc.so.6)",
        "    pthread_cond_timedwait (libc.so.6)",
        "    gloo::transport::tcp::UnboundBuffer::waitRecv (libtorch_cpu.so)",
        "    c10d::ProcessGroupGloo::RecvWork::wait (libtorch_cpu.so)",
    ]), status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("nccl-comm-init-a3-ultra-recipe", "nccl-failure", "https://github.com/AI-Hypercomputer/gpu-recipes/issues/5",
          "DeepSeek on A3 Ultra (H200) following a recipe: with DP attention every scheduler dies creating its NCCL "
          "communicator (PyNcclCommunicator -> ncclCommInitRank) in init_torch_distributed; the server never comes up",
          also=("config-crashloop", "router-no-healthy-workers"), must_not=("role-down", "cuda-oom"))
def _nccl_a3_ultra():
    p, d, r = roles("0.4.6", "mini_lb")
    crashloop(p, raw([
        "[2025-04-12 09:01:07 DP1 TP1] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1787, in run_scheduler_process',
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 240, in __init__',
        "    self.tp_worker = TpWorkerClass(",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker_overlap_thread.py", line 63, in __init__',
        "    self.worker = TpModelWorker(server_args, gpu_id, tp_rank, dp_rank, nccl_port)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker.py", line 68, in __init__',
        "    self.model_runner = ModelRunner(",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 177, in __init__',
        "    min_per_gpu_memory = self.init_torch_distributed()",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 252, in init_torch_distributed',
        "    initialize_model_parallel(tensor_model_parallel_size=self.tp_size)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/distributed/parallel_state.py", line 1055, in initialize_model_parallel',
        "    _TP = init_model_parallel_group(",
        '  File "/sgl-workspace/sglang/python/sglang/srt/distributed/parallel_state.py", line 890, in init_model_parallel_group',
        "    return GroupCoordinator(",
        '  File "/sgl-workspace/sglang/python/sglang/srt/distributed/parallel_state.py", line 233, in __init__',
        "    self.pynccl_comm = PyNcclCommunicator(",
        '  File "/sgl-workspace/sglang/python/sglang/srt/distributed/device_communicators/pynccl.py", line 108, in __init__',
        "    self.comm: ncclComm_t = self.nccl.ncclCommInitRank(",
    ]), restarts=6)
    return [p, d, r], {}


@scenario("nccl-init-world-group-k8s", "nccl-failure", "https://github.com/sgl-project/sglang/issues/11959",
          "SGLang in Kubernetes: NCCL init fails while the scheduler builds its world group (init_distributed_environment -> "
          "init_world_group -> GroupCoordinator); every start of the decode dies there",
          also=("config-crashloop", "router-no-healthy-workers"), must_not=("role-down", "cuda-oom", "healthy"))
def _nccl_world_group_k8s():
    p, d, r = roles("0.5.3", "sgl-router")
    crashloop(d, raw([
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2937, in run_scheduler_process',
        "    scheduler = Scheduler(",
        "                ^^^^^^^^^^",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 446, in __init__',
        "    self.tp_worker = TpModelWorker(",
        "                     ^^^^^^^^^^^^^^",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker.py", line 95, in __init__',
        "    self.model_runner = ModelRunner(",
        "                        ^^^^^^^^^^^^",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 286, in __init__',
        "    min_per_gpu_memory = self.init_torch_distributed()",
        "                         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 682, in init_torch_distributed',
        "    init_distributed_environment(",
        '  File "/sgl-workspace/sglang/python/sglang/srt/distributed/parallel_state.py", line 1429, in init_distributed_environment',
        "    _WORLD = init_world_group(ranks, local_rank, backend)",
        "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '  File "/sgl-workspace/sglang/python/sglang/srt/distributed/parallel_state.py", line 1239, in init_world_group',
        "    return GroupCoordinator(",
        "           ^^^^^^^^^^^^^^^^^",
        '  File "/sgl-workspace/sglang/python/sglang/srt/distributed/parallel_state.py", line 261, in __init__',
    ]), restarts=9)
    return [p, d, r], {}


@scenario("near-nccl-init-complete-ranks-did-not-load", "config-crashloop", "https://github.com/sgl-project/sglang/issues/4503",
          "v0.4.4.post1 over two nodes (TP16): NCCL initialises fine (Init COMPLETE), then loading fails because other ranks "
          "did not finish loading (SGLang names OOM or a slow node): a start-up failure, not NCCL",
          also=("cuda-oom", "router-no-healthy-workers"), must_not=("nccl-failure", "role-down"))
def _ranks_did_not_load():
    p, d, r = roles("0.4.3", "mini_lb")
    crashloop(p, raw([
        "sglang-0:100:1012 [1] NCCL INFO ncclCommInitRank comm 0x55c8b7ed9050 rank 1 nranks 16 cudaDev 1 nvmlDev 1 busId 3a000 "
        "commId 0x11e35ff62bc85e0d - Init COMPLETE",
        "[2025-03-17 17:15:55 TP1] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1748, in run_scheduler_process',
        "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 218, in __init__',
        "    self.tp_worker = TpWorkerClass(",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker_overlap_thread.py", line 63, in __init__',
        "    self.worker = TpModelWorker(server_args, gpu_id, tp_rank, dp_rank, nccl_port)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/tp_worker.py", line 74, in __init__',
        "    self.model_runner = ModelRunner(",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 166, in __init__',
        "    self.initialize(min_per_gpu_memory)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 176, in initialize',
        "    self.load_model()",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 417, in load_model',
        "    raise ValueError(",
        "ValueError: TP rank 1 could finish the model loading, but there are other ranks th",
    ]), restarts=3)
    return [p, d, r], {}


@scenario("weight-update-group-nccl-unique-id", "nccl-failure", "https://github.com/sgl-project/sglang/issues/4096",
          "an SGLang rollout server asked to join a weight-update process group: every rank hangs setting up the NCCL "
          "communicator (ncclUniqueId from the c10d store: 'failed to format addr, unknown family=0') until the scheduler "
          "raises DistBackendError and the server dies", also=("role-down", "router-no-healthy-workers"),
          must_not=("config-crashloop", "gpu-fault"))
def _weight_update_group():
    p, d, r = roles("0.4.3", "mini_lb")
    died(d, raw([
        "0: [rank0]:[W305 03:55:35.235035264 socket.cpp:462] [c10d]",
        "0: [rank3]:[W305 03:55:35.242042106 socket.cpp:462] [c10d]",
        "0: [rank4]:[W305 03:55:35.248035369 socket.cpp:462] [c10d]",
        "0: [rank1]:[W305 03:55:35.254027455 socket.cpp:462] [c10d]",
        "0: [2025-03-05 03:55:55 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '0:   File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 463, in init_weights_update_group',
        "0:     dist.barrier(group=self._model_update_group, device_ids=[self.gpu_id])",
        '0:   File "/usr/local/lib/python3.10/dist-packages/torch/distributed/c10d_logger.py", line 83, in wrapper',
        "0:     return func(*args, **kwargs)",
        '0:   File "/usr/local/lib/python3.10/dist-packages/torch/distributed/distributed_c10d.py", line 4159, in barrier',
        "0:     work = group.barrier(opts=opts)",
        "0: torch.distributed.DistBackendError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via "
        "c10d key-value store by key '0', but store->get('0') got error: failed to format addr, unknown family=0",
    ]))
    return [p, d, r], {}


start_limit("deepep-low-latency-cuda-graph-oom", "decode")
after_fix("custom-allreduce-peer-access-4090", "prefill", "restarted with --disable-custom-all-reduce; the CUDART error "
          "is from the runs before", CRASH + ("nccl-failure", "gpu-fault"))
after_fix("dsv4-watchdog-timeout-0.5.16", "decode", "systemd restarted the decode after the watchdog exit; it serves again "
          "and the watchdog line precedes the current run", CRASH + ("scheduler-watchdog", "decode-wedged"))


# -- era variants of dev threads (2026-12-02) --------------------------------------------------------

@scenario("ep-prefill-rank-idle-stuck-0.5.3-gpus-spinning", "prefill-wedged", "https://github.com/sgl-project/sglang/issues/9787",
          "the stuck EP prefill as SGLang 0.5.3 shows it (no realtime_tokens_total, prompt_tokens_total moves only as "
          "requests finish): its ranks spin in the collective, so every GPU reads busy; the queue grew because nothing "
          "drains, and no Prefill batch line was written in the window", also=("scheduler-watchdog",),
          must_not=("healthy", "prefill-queue-saturation"))
def _ep_prefill_stuck_053():
    p, d, r = roles("0.5.3", "sgl-router")
    p.gauges.update(num_queue_reqs=37, num_running_reqs=6, num_prefill_prealloc_queue_reqs=12, gen_throughput=0.0)
    p.counters["prompt_tokens"] = (9_000_000, 0)
    p.counters["num_requests"] = (4_100, 0)
    p.logs = []
    return [p, d, r], {}


@scenario("ep-prefill-rank-idle-stuck-0.5.3-metrics-only", "prefill-wedged", "https://github.com/sgl-project/sglang/issues/9787",
          "the stuck EP prefill on SGLang 0.5.3 with its journal not collected: the metrics and the one idle GPU are "
          "all there is", also=("scheduler-watchdog",), must_not=("healthy", "prefill-queue-saturation"))
def _ep_prefill_stuck_metrics_only():
    p, d, r = roles("0.5.3", "sgl-router")
    p.gauges.update(num_queue_reqs=37, num_running_reqs=6, num_prefill_prealloc_queue_reqs=12)
    p.counters["prompt_tokens"] = (9_000_000, 0)
    p.counters["num_requests"] = (4_100, 0)
    p.drop = ("logs",)
    _specs, kw = RAW["ep-prefill-rank-idle-stuck"][0]()  # the thread's GPU rows: one rank at 0 %
    return [p, d, r], kw


@scenario("prefill-pp-bootstrap-divergence-0.5.3", "prefill-wedged", "https://github.com/sgl-project/sglang/issues/34572",
          "the PP prefill deadlock as a 0.5.3 prefill shows it: no realtime_tokens_total, no request finishes, the queue "
          "grew to 23 because nothing drains, only the abort lines in the journal",
          must_not=("healthy", "prefill-queue-saturation"))
def _pp_divergence_053():
    p, d, r = roles("0.5.3", "sgl-router")
    p.gauges.update(num_queue_reqs=23, num_running_reqs=4, num_prefill_prealloc_queue_reqs=6)
    p.counters["prompt_tokens"] = (7_700_000, 0)
    p.counters["num_requests"] = (3_900, 0)
    p.logs = [f"Prefill bootstrap failed for request rank=0 req.rid='x{i}' req.bootstrap_room={90 + i} "
              f"with exception KVTransferError(bootstrap_room={90 + i}): Aborted by AbortReq." for i in range(3)]
    return [p, d, r], {}


@scenario("prefill-queue-growing-chunked-0.5.3", "prefill-queue-saturation", "https://github.com/sgl-project/sglang/issues/6901",
          "the growing queue of long prompts on a 0.5.3 prefill: no request finished in the window, but a Prefill batch "
          "line per batch shows it still computes", must_not=("prefill-wedged", "kv-transfer-failure"))
def _queue_growing_053():
    p, d, r = roles("0.5.3", "sgl-router")
    p.logs = [
        "Prefill batch. #new-seq: 3, #new-token: 15000, #cached-token: 0, token usage: 0.06, #running-req: 7, #queue-req: 40, "
        "#prealloc-req: 0, #inflight-req: 7, ",
        "Prefill batch. #new-seq: 3, #new-token: 15000, #cached-token: 0, token usage: 0.09, #running-req: 10, #queue-req: 56, "
        "#prealloc-req: 0, #inflight-req: 10, ",
    ]
    p.gauges.update(num_queue_reqs=56, num_running_reqs=10, token_usage=0.09)
    p.counters["prompt_tokens"] = (5_000_000, 0)
    return [p, d, r], {}


def relayed(base: str, role: str, prefix: str, suffix: str, how: str) -> None:
    """Register ``<base>-<suffix>``: the dead ``role`` of ``base`` with its journal relayed by a launcher that
    puts ``prefix`` before every line the process wrote (docker compose's ``service-1  | ``, srun/torchrun's
    ``0: ``): the same incident, the same class."""
    stamp = (T0 - timedelta(seconds=60)).strftime("%Y-%m-%d %H:%M:%S")

    def relay(spec: RoleSpec) -> None:
        spec.logs = [line if line.startswith("systemd:") else
                     f"raw:{prefix}{line[4:]}" if line.startswith("raw:") else f"raw:{prefix}[{stamp} TP0] {line}"
                     for line in spec.logs]

    variant(base, suffix, f"{SCENARIOS[base]()['label']['note']}; {how}", relay, role)


for _base, _role in (("mooncake-transfer-sync-segfault", "prefill"), ("nixl-ucx-segfault", "prefill"),
                     ("mooncake-retry-counter-exceeded-stayed-down", "prefill"),
                     ("nccl-allreduce-timeout-after-idle", "prefill"), ("nccl-timeout-under-perf-test", "decode"),
                     ("nccl-watchdog-terminate-cpp", "decode")):
    relayed(_base, _role, f"sglang-{_role}-1  | ", "compose-logs", "the unit runs `docker compose up`, which prefixes "
            "every line with the service's name")
    relayed(_base, _role, "0: ", "srun-label", "launched by `srun --label`, which prefixes every line with the task's rank")



def torch21(base: str, role: str) -> None:
    """Register ``<base>-torch2.1``: the dead ``role`` of ``base`` with its NCCL watchdog lines as PyTorch before
    2.3 writes them (``[E ProcessGroupNCCL.cpp:N] ...``: no rank prefix, no glog time; torch 2.1
    torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp WorkNCCL::handleException and ncclCommWatchdog)."""

    def old_torch(spec: RoleSpec) -> None:
        work = next(m[1] for line in spec.logs if (m := re.search(r"(WorkNCCL\(.*?\) ran for \d+ milliseconds)", line)))
        spec.logs = [line for line in spec.logs if line.startswith("systemd:")] + [
            f"raw:[E ProcessGroupNCCL.cpp:475] [Rank 4] Watchdog caught collective operation timeout: {work} before timing out.",
            "raw:[E ProcessGroupNCCL.cpp:489] Some NCCL operations have failed or timed out. Due to the asynchronous "
            "nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
            "raw:[E ProcessGroupNCCL.cpp:495] To avoid data inconsistency, we are taking the entire process down.",
            f"raw:[E ProcessGroupNCCL.cpp:916] [Rank 4] NCCL watchdog thread terminated with exception: [Rank 4] Watchdog "
            f"caught collective operation timeout: {work} before timing out.",
            "raw:terminate called after throwing an instance of 'std::runtime_error'",
            f"raw:  what():  [Rank 4] NCCL watchdog thread terminated with exception: [Rank 4] Watchdog caught collective "
            f"operation timeout: {work} before timing out.",
        ]

    variant(base, "torch2.1", f"{SCENARIOS[base]()['label']['note']}; as PyTorch 2.1 (SGLang 0.3) prints the watchdog's "
            "lines", old_torch, role)


torch21("nccl-timeout-under-perf-test", "decode")
torch21("nccl-allreduce-timeout-after-idle", "prefill")



def router_metrics_only(base: str, how: str) -> None:
    """Register ``<base>-router-metrics-only``: the router incident of ``base`` seen only through the router's own
    metrics of that generation (its journal not collected, no canary in the probe)."""
    lab = SCENARIOS[base]()["label"]

    def no_journal(spec: RoleSpec) -> None:
        spec.drop = (*spec.drop, "logs")

    def no_canary(kw: dict) -> dict:
        extra = {k: v for k, v in kw.get("extra", {}).items() if k != "canary"}
        return {k: v for k, v in kw.items() if k != "extra"} | ({"extra": extra} if extra else {})

    variant(base, "router-metrics-only", f"{lab['note']}; {how}", no_journal, "router",
            must_not=tuple(dict.fromkeys((*lab["must_not"], "healthy"))), kw=no_canary)


router_metrics_only("router-no-prefill-high-rate-ep", "only sgl_router_cb_state of the open prefill breakers shows it")
router_metrics_only("router-breaker-fake-dead-prefill", "only smg_worker_cb_state of the prefill's open breaker shows it")
router_metrics_only("router-no-prefill-worker-cache-aware", "only sgl_router_pd_errors_total{error_type=no_prefill_server} "
                    "shows it")
router_metrics_only("router-failed-select-pd-pair", "only sgl_router_pd_errors_total{error_type=server_selection} shows it")
router_metrics_only("router-started-without-workers", "only sgl_router_active_workers at 0 shows it")



@scenario("router-no-prefill-worker-cache-aware-smg-pool-only", "router-no-healthy-workers",
          "https://github.com/vllm-project/aibrix/issues/1351",
          "the router without a prefill worker as SMG shows it: smg_worker_pool_size is set per (worker_type, "
          "connection_mode, model) of the workers it registered (smg model_gateway/src/core/steps/worker/shared/"
          "register.rs), so only the decode series is there; no request came in the window, no canary, no router journal",
          must_not=("role-down", "prefill-wedged", "healthy"))
def _no_prefill_worker_smg_pool():
    p, d, r = roles("0.4.6", "smg")
    r.gauges = {"smg_worker_pool_size{connection_mode=http,model=qwen3-8b,worker_type=decode}": 1,
                "smg_worker_health{worker=http://10.0.0.2:30001}": 1}
    r.counters = {"smg_router_requests{endpoint=chat}": (5000, 0)}
    r.drop = ("logs",)
    return [p, d, r], {}


if __name__ == "__main__":
    for path in write(SCENARIOS):
        print(path)
