"""Write ``holdout2/``: a second held-out part, from public threads opened on or after 2026-06-01 that no
other part cites, written (2026-12-03) by a writer who writes no rules and ran no diagnosis on them. Nobody
has read it with opsbot yet; the lead reads it once and wires it into ``tests/test_scenarios.py``.

Shaped like ``holdout.py``: each label carries ``opened``, the day the thread was opened as its page shows it,
or estimated from the thread's number between two dated neighbours where the stored page showed only later
comments (the note says so). Too few incident threads after the cut-off were found, so the latest unused
threads before it fill the part; their labels carry ``holdout_reason: "pre-cutoff fill"`` (in the note too).
Lines are the threads' own, kept verbatim (``raw:``); where the stored thread quoted no line, a line in
SGLang's (or PyTorch's) own format is used and the note says so, or the bundle carries only the unit state and
metrics. The rest (unit state, metrics, /health) is written as that SGLang version and systemd would show it.
Run ``python -m tests.scenarios.holdout2`` to rewrite them (always into ``holdout2/``, whatever the date).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from tests.scenarios.compose import RoleSpec, T0, Writer, gpu_csv, register
from tests.scenarios.holdout import held_out_label, stalled, start_limited
from tests.scenarios.deployments import crashloop, died, raw, recovered, roles
from tests.scenarios.split import ROOT
from tests.scenarios.unclaimed import ANY, gpus, RESTARTING, canary

HOLDOUT2 = ROOT / "holdout2"
SCENARIOS: dict[str, Callable[[], dict]] = {}
FILL = "pre-cutoff fill"


def scenario(name: str, expected: str, source: str, opened: str, note: str, also: tuple[str, ...] = (),
             must_not: tuple[str, ...] = (), fill: bool = False) -> Callable[[Writer], Callable[[], dict]]:
    """Register a holdout2 bundle; ``fill`` marks a thread opened before the cut-off (``holdout_reason``)."""
    return register(SCENARIOS, "holdout2", name, held_out_label(expected, source, opened, note, also, must_not, fill))


H20 = ("NVIDIA H20-3e", 143771, 130000)
B200 = ("NVIDIA B200", 183359, 168000)
B300 = ("NVIDIA B300", 275040, 240000)


# === kv-transfer-failure, threads opened after the cut-off =======================================

@scenario("glm52-pd-mooncake-kvtransfererror-intermittent", "kv-transfer-failure",
          "https://github.com/sgl-project/sglang/issues/30609", "2026-07-09",
          "GLM-5.2 PD (nightly-dev-20260706, Mooncake, PP2 prefill with DP attention): the decode logs KVTransferError "
          "intermittently, 5-6 times an hour, while the prefill keeps working normally and is not saturated. The stored "
          "thread shows the title and the rate, not the lines: the decode line is SGLang's own format "
          "(disaggregation/decode.py) with its default failure reason, rid and room elided",
          must_not=("prefill-queue-saturation", "config-crashloop", "cuda-oom", "healthy"))
def _glm52_kvtransfer():
    p, d, r = roles()
    line = ("Decode transfer failed for request rank=0 decode_req.req.rid='<rid>' decode_req.req.bootstrap_room=<room> "
            "with exception KVTransferError(bootstrap_room=<room>): Failed to get kvcache from prefill instance, it might be dead")
    d.logs = [d.logs[0], line, d.logs[0], d.logs[0], line, d.logs[0]]
    d.counters["num_transfer_failed_reqs"] = (38, 1)
    return [p, d, r], {}


@scenario("b300-nic-mlx5-10-silent-kv-transfer-failure", "kv-transfer-failure",
          "https://github.com/SemiAnalysisAI/InferenceX/pull/1944", "2026-06-26",
          "PD on B300 (slurm): one node's NIC (b300-004, mlx5_10) makes KV transfers fail intermittently; the decode goes "
          "on without valid prefill KV and the frontend still answers HTTP 200 with garbage. The PR excludes the node; the "
          "stored thread quotes no engine line, so the bundle carries the decode's failed-transfer counter and a 200 canary",
          also=("output-corruption",), must_not=("prefill-queue-saturation", "gpu-fault", "config-crashloop", "healthy"))
def _b300_nic():
    p, d, r = roles()
    d.counters["num_transfer_failed_reqs"] = (57, 3)
    return [p, d, r], {"gpus": gpus(*B300), **canary(200, '{"choices": [{"message": {"content": "..."}, "finish_reason": "stop"}]}')}


@scenario("mooncake-tent-nvlink-batchtransfersync-silent", "kv-transfer-failure",
          "https://github.com/kvcache-ai/Mooncake/pull/3676", "2026-08-25",
          "Mooncake's TENT NVLink transport fails the PD transfers and batchTransferSync() returns -1 with nothing in the "
          "transfer engine's log (the PR adds those logs): SGLang sees only an opaque failure. The Mooncake side has no "
          "line by construction; the prefill and decode lines are SGLang's own formats (mooncake/conn.py, prefill.py, "
          "decode.py) with session, rid and room elided",
          must_not=("prefill-queue-saturation", "config-crashloop", "healthy"))
def _tent_nvlink():
    p, d, r = roles()
    p.logs = raw(["Session <decode-session> failed.",
                  "Prefill transfer failed for request rank=0 req.rid='<rid>' req.bootstrap_room=<room> with exception "
                  "KVTransferError(bootstrap_room=<room>): Failed to send kv chunk of <room> to <decode-host:port>"]) + p.logs
    d.logs = ["Decode transfer failed for request rank=0 decode_req.req.rid='<rid>' decode_req.req.bootstrap_room=<room> "
              "with exception KVTransferError(bootstrap_room=<room>): Failed to get kvcache from prefill instance, it might be dead",
              d.logs[0]]
    p.counters["num_transfer_failed_reqs"] = (14, 2)
    d.counters["num_transfer_failed_reqs"] = (14, 2)
    return [p, d, r], {"gpus": gpus(*B200)}


@scenario("nixl-prefill-transfer-worker-failure-decode-waits-300s", "kv-transfer-failure",
          "https://github.com/sgl-project/sglang/pull/36108", "2026-08-23",
          "NIXL backend: the prefill's transfer worker fails a transfer but only records it locally; the decode gets no "
          "terminal signal and its requests wait until SGLANG_DISAGGREGATION_WAITING_TIMEOUT (300 s) before failing "
          "(fixes #36033). The lines are SGLang's own formats (nixl/conn.py, common/conn.py, decode.py), room elided",
          also=("decode-wedged",), must_not=("prefill-queue-saturation", "config-crashloop", "healthy"))
def _nixl_no_notify():
    p, d, r = roles()
    p.logs = ["Unexpected transfer worker error for room <room>"] + p.logs
    d.logs = ["Some requests fail to receive KV Cache transfer done signal after bootstrapping. If a greater mean TTFT is "
              "acceptable, you can 'export SGLANG_DISAGGREGATION_WAITING_TIMEOUT=600' (10 minutes) to relax the timeout condition. ",
              "Decode transfer failed for request rank=0 decode_req.req.rid='<rid>' decode_req.req.bootstrap_room=<room> "
              "with exception KVTransferError(bootstrap_room=<room>): Request <room> timed out after 300.0s in KVPoll.WaitingForInput"]
    stalled(d, "decode")
    d.gauges.update(num_running_reqs=0, num_decode_transfer_queue_reqs=6)
    p.counters["num_transfer_failed_reqs"] = (5, 1)
    d.counters["num_transfer_failed_reqs"] = (5, 1)
    return [p, d, r], {}


@scenario("nixl-ucx-gdaki-cq-create-fails-at-start", "kv-transfer-failure",
          "https://github.com/sgl-project/sglang/pull/27894", "2026-06-11",
          "NIXL PD: UCX cannot create the GDAKI completion queue on mlx5_1 (Remote I/O error), so NIXL's UCX backend "
          "fails during its setup and the role cannot come up; UCX calls it 'Out of memory', which is not GPU memory. "
          "Lines of a failing CI run quoted in a comment of 2026-07-17; the PR was opened between #27520 (2026-06-08) "
          "and #28011 (2026-06-12), estimated 2026-06-11; the unit state is that of a role whose transfer backend "
          "cannot be created", also=("config-crashloop", "role-down"), must_not=("cuda-oom", "gpu-fault", "healthy"))
def _nixl_gdaki():
    return _nixl_gdaki_specs()


@scenario("nixl-ucx-gdaki-cq-create-fails-at-start-start-limit", "kv-transfer-failure",
          "https://github.com/sgl-project/sglang/pull/27894", "2026-06-11",
          "the crash loop of nixl-ucx-gdaki-cq-create-fails-at-start after systemd hit its start limit and left the "
          "prefill failed (UCX cannot create the GDAKI CQ on mlx5_1; 'Out of memory' is UCX's word, not GPU memory)",
          also=("config-crashloop", "role-down"), must_not=("cuda-oom", "gpu-fault", "healthy"))
def _nixl_gdaki_limit():
    specs, kw = _nixl_gdaki_specs()
    start_limited(specs[0])
    return specs, kw


def _nixl_gdaki_specs() -> tuple[list[RoleSpec], dict]:
    p, d, r = roles()
    crashloop(p, raw([
        "[1784273406.684686] [iv-ydzf15rfggbw80bfv8sr:994396:0]      ib_mlx5_dv.c:452  UCX  ERROR   mlx5dv_devx_obj_create(CQ) failed on mlx5_1, syndrome 0x2aac7c: Remote I/O error",
        "[1784273406.719079] [iv-ydzf15rfggbw80bfv8sr:994396:0]           gdaki.c:397  UCX  ERROR   gdaki channel chunk init: create_cq/qp failed (ch=2 ep=4)",
        "[1784273406.719544] [iv-ydzf15rfggbw80bfv8sr:994396:0]           mpool.c:246  UCX  ERROR   Failed to allocate memory pool (name=gdaki_channel_pool) chunk: Input/output error",
        "W0717 07:30:06.719567  994396 ucx_enums.cpp:58] Unexpected UCX error: Out of memory",
        "E0717 07:30:06.719633  994396 ucx_utils.cpp:537] UCX endpoint create failed: failed to create ep",
        "E0717 07:30:06.719655  994396 nixl_agent.cpp:359] createBackend: backend 'UCX' encountered error during intra-agent transfer setup with status NIXL_ERR_BACKEND",
    ]), restarts=4)
    r.gauges.update({"smg_worker_health{worker=http://10.0.0.1:30000}": 0})
    return [p, d, r], {}


# === scheduler-watchdog, nccl-failure, decode-wedged, config-crashloop, output-corruption =========

@scenario("eagle-verify-cumoduleloaddata-hang-pd-decode-watchdog", "scheduler-watchdog",
          "https://github.com/sgl-project/sglang/issues/33642", "2026-08-05",
          "PD decode with DSA attention and EAGLE (spec v2, Mooncake): on the first EAGLE verify every scheduler blocks "
          "in cuModuleLoadData, nothing progresses, and the scheduler watchdog kills the server. Opened between #33549 "
          "(2026-08-04) and #34260 (2026-08-10), estimated 2026-08-05; the stored thread shows the environment and "
          "launch commands, so the watchdog line is SGLang's own format (utils/watchdog.py)",
          also=("decode-wedged", "role-down"), must_not=("config-crashloop", "gpu-fault", "cuda-oom", "kv-transfer-failure"))
def _cumoduleloaddata():
    p, d, r = roles()
    died(d, ["Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"], status="9/KILL", code="killed")
    d.started = T0 - timedelta(minutes=12)
    return [p, d, r], {}


@scenario("spec-v2-verify-dsa-hicache-nccl-hang-h20", "nccl-failure", "https://github.com/sgl-project/sglang/issues/28011",
          "2026-06-12",
          "8xH20-3e, 0.5.12.post2.dev, EAGLE spec v2 with the DSA backend and HiCache: intermittently the TP ranks desync "
          "in a broadcast/allgather during verify and the NCCL collective times out (the thread's crash 1; crash 2 is a "
          "device-side index assert before the same timeout). The dumps are attachments; the lines are PyTorch 2.11's "
          "watchdog format with placeholder sequence numbers",
          also=("role-down",), must_not=("config-crashloop", "gpu-fault", "cuda-oom"))
def _spec_v2_nccl():
    p, d, r = roles()
    died(d, raw([
        "[rank3]:[E612 09:14:52.511203872 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=412907, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600071 milliseconds before timing out.",
        "[rank3]:[E612 09:14:52.511471090 ProcessGroupNCCL.cpp:2268] [PG ID 2 PG GUID 3 Rank 3]  failure detected by watchdog "
        "at work sequence id: 412907 PG status: last enqueued work: 412909, last completed work: 412906",
    ]), status="6/ABRT", code="dumped")
    return [p, d, r], {"gpus": gpus(*H20, n=8)}


@scenario("pd-tp-skew-decode-polling-mooncake-staging-deadlock", "decode-wedged",
          "https://github.com/sgl-project/sglang/pull/36893", "2026-08-28",
          "low-concurrency PD (prefill TP1/DEP4, decode TP8, attention TP gather off, Mooncake with heterogeneous-TP "
          "staging): on longer workloads the decode's KV polling and request broadcast enter different collective "
          "epochs across TP ranks and the staging ring keeps a stale head, so request progress stops for good; the PR "
          "quotes no log line, so the bundle carries the frozen decode counters and queues",
          also=("kv-transfer-failure",), must_not=("prefill-queue-saturation", "config-crashloop", "kv-cache-exhausted", "healthy"))
def _tp_skew_deadlock():
    p, d, r = roles()
    stalled(d, "decode")
    d.gauges.update(num_running_reqs=3, num_queue_reqs=0, token_usage=0.06, num_decode_transfer_queue_reqs=5)
    d.logs = []
    return [p, d, r], {}


@scenario("eagle-mooncake-l3-standalone-register-buffer-startup", "config-crashloop",
          "https://github.com/sgl-project/sglang/issues/28873", "2026-06-21",
          "v0.5.13 regression: EAGLE speculative decoding with a Mooncake L3 HiCache in standalone client mode fails at "
          "start, registering the draft host pool with the Mooncake store (error code -1); 0.5.12 with the same "
          "configuration starts. HiCache storage, not the PD transfer. Opened between #28653 (2026-06-18) and #29110 "
          "(2026-06-24), estimated 2026-06-21", also=("role-down",),
          must_not=("kv-transfer-failure", "cuda-oom", "healthy"))
def _eagle_l3():
    return _eagle_l3_specs()


def _eagle_l3_specs() -> tuple[list[RoleSpec], dict]:
    p, d, r = roles()
    crashloop(p, raw([
        'File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 4046, in run_scheduler_process',
        "    scheduler = Scheduler(",
        'File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 490, in __init__',
        "    kv_cache_builder.maybe_register_hicache_draft(",
        'File "/sgl-workspace/sglang/python/sglang/srt/mem_cache/kv_cache_builder.py", line 127, in maybe_register_hicache_draft',
        "    tree_cache.cache_controller.set_draft_kv_pool(pool, draft_host_pool)",
        'File "/sgl-workspace/sglang/python/sglang/srt/managers/cache_controller.py", line 871, in set_draft_kv_pool',
        "    self._maybe_register_draft_with_storage()",
        'File "/sgl-workspace/sglang/python/sglang/srt/managers/cache_controller.py", line 890, in _maybe_register_draft_with_storage',
        "    self.storage_backend.register_mem_host_pool_v2(",
        'File "/sgl-workspace/sglang/python/sglang/srt/mem_cache/storage/mooncake_store/mooncake_store.py", line 637, in register_mem_host_pool_v2',
        "    super().register_buffer(host_pool.kv_buffer)",
        'File "/sgl-workspace/sglang/python/sglang/srt/mem_cache/storage/mooncake_store/mooncake_store.py", line 297, in register_buffer',
        "    raise RuntimeError(",
        "RuntimeError: Failed to register buffer to Mooncake Store, error code: -1",
    ]), restarts=5)
    return [p, d, r], {}


@scenario("eagle-mooncake-l3-standalone-register-buffer-startup-start-limit", "config-crashloop",
          "https://github.com/sgl-project/sglang/issues/28873", "2026-06-21",
          "the start failure of eagle-mooncake-l3-standalone-register-buffer-startup (0.5.13, EAGLE with a Mooncake L3 "
          "HiCache in standalone client mode) after systemd hit its start limit and left the prefill failed",
          also=("role-down",), must_not=("kv-transfer-failure", "cuda-oom", "healthy"))
def _eagle_l3_limit():
    specs, kw = _eagle_l3_specs()
    start_limited(specs[0])
    return specs, kw


@scenario("eagle-mooncake-l3-standalone-register-buffer-after-fix", "healthy",
          "https://github.com/sgl-project/sglang/issues/28873", "2026-06-21",
          "the prefill of eagle-mooncake-l3-standalone-register-buffer-startup after the operator went back to 0.5.12: it "
          "restarted five minutes ago and serves; the failed runs' traceback is still in the journal window, before the "
          "current run's start", must_not=("config-crashloop", "role-down", "kv-transfer-failure", "unexplained"))
def _eagle_l3_fixed():
    specs, kw = _eagle_l3_specs()
    recovered(specs[0])
    specs[0].logs = ["Prefill batch, #new-seq: 1, #new-token: 2048, #cached-token: 0, full token usage: 0.04, "
                     "#running-req: 1, #queue-req: 0, #pending-token: 0, #bootstrap-req: 0, #inflight-req: 1, "
                     "cuda graph: False, input throughput (token/s): 9800.00"]
    return specs, kw


@scenario("hicache-l3-mooncake-garbled-output", "output-corruption", "https://github.com/sgl-project/sglang/issues/27504",
          "2026-06-08",
          "HiCache with a Mooncake L3 backend: answers are garbled when their prefix is loaded back from L3 (fixed by "
          "#27550); nothing crashes, the server stays up. The stored page shows comments of 2026-06-09 and 2026-06-26 "
          "only; the thread was opened next to #27520 (2026-06-08). The fidelity run (prompts repeated, so their prefix "
          "comes back from L3) is what the probe would record",
          must_not=("config-crashloop", "kv-transfer-failure", "role-down", "healthy"))
def _l3_garbled():
    p, d, r = roles()
    base = {"id": "5e0c2d71a9b4", "recorded_at": "2026-11-28T09:12:40.118Z", "model": "/models/Qwen3-32B",
            "tokenizer": "/models/Qwen3-32B"}
    cases = [
        {"prompt_id": "capital", "instance": "decode", "dp_rank": 0,
         "tokens": [785, 6722, 315, 9625, 374, 12095, 13, 151645], "first_divergence": None,
         "logprob_distance": 0.0021, "diverged": False, "error": None},
        {"prompt_id": "count", "instance": "decode", "dp_rank": 0,
         "tokens": [16, 11, 220, 17, 11, 98712, 44027, 3349, 3349, 3349, 3349, 3349], "first_divergence": 5,
         "logprob_distance": 4.87, "diverged": True, "error": None},
        {"prompt_id": "recipe", "instance": "decode", "dp_rank": 0,
         "tokens": [1249, 1281, 71031, 71031, 88210, 5203, 5203, 5203], "first_divergence": 2,
         "logprob_distance": 6.12, "diverged": True, "error": None},
    ]
    return [p, d, r], {"extra": {"fidelity": {"baseline": base, "cases": cases}}}


@scenario("glm53-flash-dsa-indexer-oom-long-prefill-b300", "cuda-oom", "https://github.com/sgl-project/sglang/issues/37712",
          "2026-09-03",
          "GLM-5.3-Flash on 4xB300 (lmsysorg/sglang:glm-5.3-flash): when several long-context requests with prefix hits "
          "are prefilled together, the DSA indexer asks for one 73.65 GiB buffer in fp8_mqa_logits and every TP rank dies "
          "in the same step; the KV pool is far from full (token usage ~0.35). The lines are the thread's (its own "
          "ellipsis kept)", also=("role-down",), must_not=("kv-cache-exhausted", "config-crashloop", "gpu-fault", "healthy"))
def _dsa_indexer_oom():
    p, d, r = roles()
    died(p, raw([
        "dsa_indexer_kpool.py, line 998, in _get_topk_ragged_kpool_plan",
        "    logits = deep_gemm.fp8_mqa_logits(",
        "tvm.error.InternalError: CUDA out of memory. Tried to allocate 73.65 GiB. GPU 1 ... 50.40 GiB is free.",
    ]), status="9/KILL", code="killed")
    return [p, d, r], {"gpus": gpus(*B300)}


# === failures no class claims, threads opened after the cut-off ==================================

@scenario("kimi-k3-hicache-scheduler-crash", ANY, "https://github.com/sgl-project/sglang/issues/36377", "2026-08-25",
          "Kimi-K3 on nightly-dev-cu13-20260815 with HiCache: the scheduler hits an exception inside the HiCache path "
          "while serving and the server goes down (the stored excerpt ends inside the traceback)",
          also=("role-down",), must_not=("config-crashloop", "cuda-oom", *RESTARTING))
def _kimi_hicache():
    p, d, r = roles()
    died(d, raw([
        "[2026-08-25 08:53:41 TP4 EP4] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 5060, in run_scheduler_process',
        "    scheduler.run_event_loop()",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1694, in run_event_loop',
        "    dispatch_event_loop(self)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 4908, in dispatch_event_loop',
        "    scheduler.event_loop_overlap()",
        '  File "/usr/local/lib/python3.12/dist-packages/torch/utils/_contextlib.py", line 124, in decorate_context',
        "    return func(*args, **kwargs)",
        "           ^^^^^^^^^^^^^^^^^^^^^",
    ]), status="9/KILL", code="killed")
    return [p, d, r], {"gpus": gpus(*B300, n=8)}


@scenario("gemma4-multimodal-embedding-mismatch-crash-b200", ANY, "https://github.com/sgl-project/sglang/issues/40797",
          "2026-09-22",
          "sglang 0.5.17, Gemma-4-31B TP4 on B200 with HiCache (Mooncake L3), in docker compose: a production request "
          "whose multimodal embedding is shorter than its placeholders (279 text tokens, 260 from the embedding) makes "
          "every TP rank's scheduler raise and the server dies; the lines keep compose's service prefix",
          also=("role-down",), must_not=("config-crashloop", "cuda-oom", "kv-transfer-failure", *RESTARTING))
def _gemma4_mm():
    p, d, r = roles()
    mm = ("Number of tokens in multimodal embedding does not match those in the input text. Got 279 tokens in the text "
          "but 260 tokens from multimodal embeddings.")
    died(d, raw([
        f"sglang_service-1  | [2026-09-15 13:53:07 TP2] {mm}",
        f"sglang_service-1  | [2026-09-15 13:53:07 TP0] {mm}",
        f"sglang_service-1  | [2026-09-15 13:53:07 TP3] {mm}",
        f"sglang_service-1  | [2026-09-15 13:53:07 TP1] {mm}",
        "sglang_service-1  | [2026-09-15 13:53:07 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        'sglang_service-1  |   File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 4947, in run_scheduler_process',
        "sglang_service-1  |     scheduler.run_event_loop()",
        'sglang_service-1  |   File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1662, in run_event_loop',
        "sglang_service-1  |     dispatch_event_loop(self)",
    ]), status="9/KILL", code="killed")
    return [p, d, r], {"gpus": gpus(*B200)}


@scenario("glm53-flash-malformed-multimodal-kills-engine", ANY, "https://github.com/sgl-project/sglang/issues/38022",
          "2026-09-04",
          "GLM-5.3-Flash (VLM) with DP attention on 8xH20-3e: one malformed multimodal request (embedding shorter than its "
          "placeholders) raises in the scheduler's forward path, the whole engine exits, and client retries carry the "
          "request node to node (5 engines down in two hours). The stored excerpt wraps the line in two and ends there",
          also=("role-down",), must_not=("config-crashloop", "cuda-oom", *RESTARTING))
def _glm53_mm():
    p, d, r = roles()
    died(d, raw([
        "[12:53:11 DP7 TP7 EP7] Number of tokens in multimodal embedding does not match those in",
        "the input text. Got 1983 tokens in the text but 0 tokens",
    ]), status="9/KILL", code="killed")
    return [p, d, r], {"gpus": gpus(*H20, n=8)}


@scenario("streaming-disconnect-zombie-requests-flood", ANY, "https://github.com/sgl-project/sglang/issues/36333",
          "2026-08-25",
          "streaming clients that disconnect leave zombie requests that decode to max_tokens (regression from the #34160 "
          "revert), each flooding 'state was deleted in TokenizerManager' (~15 lines/s); two zombies held both "
          "--max-running-requests slots for 15+ minutes and new requests waited. The server is up and tokens move",
          must_not=("config-crashloop", "decode-wedged", "kv-transfer-failure", "role-down", "cuda-oom"))
def _zombies():
    p, d, r = roles()
    flood = "Received output for rid='...' but the state was deleted in TokenizerManager."
    d.logs = raw([flood] * 30) + [
        "Decode batch, #running-req: 2, #full token: 61000, full token usage: 0.41, #swa token: 3000, swa token usage: 0.12, "
        "pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, cuda graph: True, "
        "gen throughput (token/s): 96.00, #queue-req: 7"]
    d.gauges.update(num_running_reqs=2, num_queue_reqs=7, num_decode_transfer_queue_reqs=0)
    d.counters["realtime_tokens{mode=decode}"] = (5_000_000, 290)
    return [p, d, r], {}


@scenario("mimo-v25-hicache-mooncake-cudamemcpybatchasync-b300", ANY,
          "https://github.com/sgl-project/sglang/issues/28396", "2026-06-16",
          "MiMo-V2.5-Pro TP8 on B300 with EAGLE and HiCache (Mooncake storage, direct io, page_first_direct): "
          "cudaMemcpyBatchAsync fails with 'invalid argument' in the HiCache copy and the server dies. The line is the "
          "thread's title; the stored excerpt shows the launch command only, so when it struck is not shown (written "
          "as a scheduler that died while serving). Opened between #28011 (2026-06-12) and #28653 (2026-06-18), "
          "estimated 2026-06-16", also=("role-down",), must_not=("cuda-oom", "gpu-fault", "kv-transfer-failure"))
def _mimo_memcpy():
    p, d, r = roles()
    died(d, raw(["RuntimeError: cudaMemcpyBatchAsync failed (invalid argument)"]), status="9/KILL", code="killed")
    return [p, d, r], {"gpus": gpus(*B300, n=8)}


@scenario("qwen36-35b-fp8-tensor-size-mismatch", ANY, "https://github.com/sgl-project/sglang/issues/29516", "2026-06-28",
          "Qwen3.6-35B-A3B-FP8 (MTP): the scheduler raises 'The size of tensor a (96) must match the size of tensor b "
          "(90) at non-singleton dimension 1' and the server dies. The line is the thread's title; the stored page "
          "shows a later comment (2026-07-01) on a fix branch only, so when it struck is not shown (written as a "
          "scheduler that died while serving). Opened between #29170 (2026-06-24) and #29801 (2026-07-01), estimated "
          "2026-06-28", also=("role-down",), must_not=("cuda-oom", "gpu-fault", "kv-transfer-failure", "nccl-failure"))
def _qwen36_size():
    p, d, r = roles()
    died(d, raw(["RuntimeError: The size of tensor a (96) must match the size of tensor b (90) at non-singleton dimension 1"]),
         status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("qwen36-mtp-intermittent-start-crash-0513", ANY, "https://github.com/sgl-project/sglang/issues/28431",
          "2026-06-16",
          "sglang 0.5.13 with MTP (EAGLE) on Qwen3.6 / Qwen3.5-397B-FP8, HiCache with Mooncake storage: about one start "
          "in five crashes (comment of 2026-06-19); the last start failed and systemd is restarting it. The crash log is "
          "an attachment, so only systemd's lines are there. Opened between #28011 (2026-06-12) and #28653 (2026-06-18), "
          "estimated 2026-06-16", also=("role-down", "config-crashloop"), must_not=("cuda-oom", "gpu-fault"))
def _qwen36_mtp_start():
    p, d, r = roles()
    crashloop(d, [], restarts=1, status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("gateway-drops-failed-prefill-leg-decode-holds-slot", ANY, "https://github.com/vllm-project/aibrix/pull/2746",
          "2026-09-18",
          "AIBrix gateway in front of SGLang PD: the prefill leg is fired asynchronously and its failure (dead pod, non-2xx, "
          "timeout, client cancel) is discarded, so the decode pod keeps that bootstrap_room in its bootstrap/prealloc "
          "queue until SGLang's own timeout, holding a decode slot, and the client sees a long hang, then an opaque "
          "decode-side error (#2289). The decode still serves the other requests; no line is quoted, so the bundle "
          "carries the held queue and the gateway-side 5xx",
          must_not=("kv-transfer-failure", "decode-wedged", "config-crashloop", "role-down"))
def _gateway_prefill_leg():
    p, d, r = roles()
    d.gauges.update(num_decode_prealloc_queue_reqs=3, num_decode_transfer_queue_reqs=0)
    p.counters["num_aborted_requests"] = (4, 1)
    r.counters["smg_router_upstream_responses{status_code=500}"] = (9, 1)
    return [p, d, r], {}


# === healthy roles with alarming signs, threads opened after the cut-off =========================

@scenario("near-max-running-reduced-queue-while-cheap", "healthy", "https://github.com/sgl-project/sglang/issues/30160",
          "2026-07-05",
          "Qwen3.6-35B-A3B-FP8 on one H100: SGLang cut --max-running-requests from 128 to 50 at start-up (worst-case KV "
          "per request), so short cache-hit requests wait in the queue while the KV pool has room. A feature request: "
          "the server is busy and fine, tokens move, nothing fails. The start-up line is the thread's; the batch line "
          "is SGLang's format", must_not=("prefill-queue-saturation", "kv-cache-exhausted", "decode-wedged", "unexplained"))
def _reduced_running():
    p, d, r = roles()
    d.started = p.started = T0 - timedelta(minutes=3)
    d.logs = raw(["max_running_requests was reduced from requested 128 to 50"]) + [
        "Decode batch, #running-req: 50, #full token: 412000, full token usage: 0.58, #swa token: 0, swa token usage: 0.00, "
        "pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, cuda graph: True, "
        "gen throughput (token/s): 2950.00, #queue-req: 14"] * 3
    d.gauges.update(num_running_reqs=50, num_queue_reqs=14, token_usage=0.58)
    d.counters["realtime_tokens{mode=decode}"] = (9_000_000, 8850)
    h100 = gpu_csv(1, 72000).replace("NVIDIA H200", "NVIDIA H100 80GB HBM3").replace("143771", "81559")
    p.gpus = d.gpus = (0,)
    return [p, d, r], {"gpus": {"node1": h100, "node2": h100}}


@scenario("near-client-over-length-requests-400", "healthy", "https://github.com/NVIDIA-NeMo/Switchyard/pull/426",
          "2026-08-14",
          "clients send prompts longer than the KV pool admits; SGLang answers 400 ('Input length (700001 tokens) "
          "exceeds the maximum allowed length (536826 tokens). Use a shorter input or enable --allow-auto-truncate.', "
          "quoted in the PR from a live v0.5.15/0.5.17 deployment) and keeps serving everyone else; the access lines are "
          "SGLang's format", must_not=("router-no-healthy-workers", "kv-cache-exhausted", "kv-transfer-failure", "unexplained"))
def _over_length():
    p, d, r = roles()
    bad = 'INFO:     10.0.0.1:52218 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request'
    p.logs = raw([bad, bad]) + p.logs
    r.counters["smg_http_responses{status_code=400}"] = (61, 2)
    return [p, d, r], {}


@scenario("near-deepgemm-allm-warmup-after-cache-restore", "healthy",
          "https://github.com/sgl-project/sglang/issues/32124", "2026-07-22",
          "DeepSeek-V4-Pro TP8: with a restored DeepGEMM JIT cache SGLang still runs the exhaustive all-M warmup at every "
          "start, so starts are slow (a feature request); the decode restarted a minute ago by the operator, warmed up and "
          "serves. The warmup line is SGLang's format", must_not=("config-crashloop", "role-down", "unexplained"))
def _allm_warmup():
    p, d, r = roles()
    d.started = T0 - timedelta(seconds=65)
    d.logs = ["Try DeepGEMM JIT Compiling for <GEMM_NT_F8F8BF16> N=9216, K=2048, num_groups=1 with all Ms. It only takes a "
              "little time (typically 1 sec) if you have run `python3 -m sglang.compile_deep_gemm`. ",
              d.logs[0], d.logs[0]]
    return [p, d, r], {}


@scenario("near-health-1s-answers-probe-timeouts", "healthy",
          "https://github.com/aws-solutions-library-samples/global-capacity-orchestrator-on-aws/pull/387", "2026-09-18",
          "sglang 0.5.19 on one A10G: /health is a generation check that answers in 1.00-1.03 s; a kubelet probe with the "
          "1 s default timeout killed the healthy container once. Under systemd nothing restarts it: the server serves, "
          "/health answers 200 in about a second", must_not=("role-down", "decode-wedged", "scheduler-watchdog", "unexplained"))
def _slow_health():
    p, d, r = roles()
    ok = 'INFO:     10.0.0.9:40112 - "GET /health HTTP/1.1" 200 OK'
    d.logs = raw([ok]) + d.logs + raw([ok])
    a10g = gpu_csv(1, 21500).replace("NVIDIA H200", "NVIDIA A10G").replace("143771", "23028").replace(", 87, 54, 412.5", ", 71, 49, 141.0")
    p.gpus = d.gpus = (0,)

    def slow(data: dict) -> None:
        for role in data["roles"]:
            if role["role"] in ("prefill", "decode"):
                role["health"]["elapsed_ms"] = 1017.0

    return [p, d, r], {"gpus": {"node1": a10g, "node2": a10g}, "post": slow}


@scenario("near-kv-cache-memory-gauge-zero-dsv4", "healthy", "https://github.com/sgl-project/sglang/issues/37852",
          "2026-09-03",
          "DeepSeek-V4-Flash: sglang:kv_cache_memory_usage_gb reports 0.0 on every TP rank because the V4 pools are not "
          "counted; the server serves normally. The metric lines are the thread's, in an exposition of the same "
          "version. Opened between #37833 (commented 2026-09-03) and #38022 (2026-09-04), estimated 2026-09-03",
          must_not=("unexplained", "kv-cache-exhausted", "cuda-oom"))
def _kv_gb_zero():
    p, d, r = roles()

    def zero(data: dict) -> None:
        rows = "".join(
            f'sglang:kv_cache_memory_usage_gb{{engine_type="unified",model_name="/models/DeepSeek-V4-Flash",moe_ep_rank="0",'
            f'pp_rank="0",tp_rank="{tp}"}} 0.0\n' for tp in (6, 0, 3, 5, 2, 1, 7, 4))
        for role in data["roles"]:
            if role["role"] == "decode":
                for sample in role["metrics"]["samples"]:
                    sample["raw"] += "# TYPE sglang:kv_cache_memory_usage_gb gauge\n" + rows

    return [p, d, r], {"post": zero}


# === pre-cutoff fill: the latest unused threads before 2026-06-01 =================================

@scenario("glm51-eagle-verify-kv-near-full-watchdog", "scheduler-watchdog",
          "https://github.com/sgl-project/sglang/issues/26399", "2026-05-26",
          "GLM-5.1 TP8 with EAGLE, no HiCache: with the KV pool ~92% used by running long-context requests, all eight "
          "schedulers block in verify on a device-to-host copy and the watchdog kills the engine after 300 s; the "
          "watchdog line is SGLang's own format", also=("kv-cache-exhausted", "decode-wedged", "role-down"),
          must_not=("cuda-oom", "config-crashloop", "nccl-failure", "gpu-fault"), fill=True)
def _glm51_watchdog():
    p, d, r = roles()
    died(d, ["Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"], status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("near-cache-hit-rate-gauge-zero-mixed-traffic", "healthy", "https://github.com/sgl-project/sglang/issues/26608",
          "2026-05-28",
          "sglang:cache_hit_rate is overwritten by every prefill batch, so under mixed traffic a scrape sees 0 (a health "
          "probe or a fresh prompt was the last batch) while the prefix cache is hitting; the server is fine",
          must_not=("unexplained", "prefill-wedged"), fill=True)
def _hit_rate_gauge():
    p, d, r = roles()
    p.gauges["cache_hit_rate"] = 0.0
    p.counters["realtime_tokens{mode=prefill_cache}"] = (2_300_000, 41_000)
    return [p, d, r], {}


@scenario("hicache-mooncake-memcpy-workerpool-segfault-metrics-flag", ANY,
          "https://github.com/ai-dynamo/dynamo/pull/9934", "2026-05-25",
          "Dynamo's sglang-runtime 1.2.0 image (SGLang 0.5.11-0.5.12 with Mooncake 0.3.10.post2): with both "
          "--enable-metrics and --disable-piecewise-cuda-graph the worker segfaults on the first KV-cache write, inside "
          "mooncake::MemcpyWorkerPool::workerThread() (a race in the transfer engine's thread pool); the PR quotes no "
          "line, so the bundle carries the dumped core systemd reports after each first write",
          also=("role-down",), must_not=("cuda-oom", "gpu-fault"), fill=True)
def _memcpy_pool_segv():
    p, d, r = roles()
    crashloop(p, [], restarts=3, status="11/SEGV", code="dumped")
    p.started = T0 - timedelta(minutes=3)
    return [p, d, r], {}


@scenario("near-client-context-overflow-400-glm", "healthy", "https://github.com/anomalyco/opencode/pull/25230",
          "2026-05-01",
          "a coding client sends 170,941 prompt tokens plus 32,000 for the completion to an SGLang server with a "
          "202,752-token context; SGLang answers 400 ('Requested token count exceeds the model's maximum context length "
          "of 202752 tokens...', the PR's quote) and serves everyone else; the access lines are SGLang's format",
          must_not=("router-no-healthy-workers", "kv-transfer-failure", "unexplained"), fill=True)
def _context_overflow():
    p, d, r = roles()
    bad = 'INFO:     10.0.0.1:40772 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request'
    p.logs = raw([bad]) + p.logs
    d.logs = raw([bad]) + d.logs
    r.counters["smg_http_responses{status_code=400}"] = (12, 1)
    return [p, d, r], {}


def write() -> list[Path]:
    """Write every holdout2 bundle as ``holdout2/<name>.json`` (the part is this module's, not ``split.part``)."""
    HOLDOUT2.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, build in SCENARIOS.items():
        path = HOLDOUT2 / f"{name}.json"
        path.write_text(json.dumps(build(), indent=1) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write():
        print(written)
