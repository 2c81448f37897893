"""Write ``holdout/`` (issue 24): bundles from public threads opened on or after 2026-06-01
(``split.CUTOFF``), none cited anywhere else in the corpus, written by writers who write no rules.
No rule is checked against them before the issue closes; they are read once, then reported.

Each label carries ``opened``, the day the thread was opened as its page shows it (estimated from
the thread's number between two dated neighbours where the page showed only later comments; the
note says so). Too few threads after the cut-off were found for 30 bundles, so the latest threads
before it fill the part; their labels carry ``holdout_reason: "pre-cutoff fill"`` (in the note too)
and ``split.write`` puts them in ``holdout/`` whatever their date. Lines are the threads' own, kept
verbatim; the rest (unit state, metrics, /health) is written as that SGLang version and systemd
would show it, and a line the stored thread did not quote is marked as SGLang's own format in the
note. Run ``python -m tests.scenarios.holdout`` to rewrite them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from tests.scenarios.compose import RoleSpec, T0, Writer, gpu_csv, register
from tests.scenarios.deployments import crashloop, died, raw, roles
from tests.scenarios.split import write
from tests.scenarios.unclaimed import ANY, RESTARTING, canary, gpus_named

SCENARIOS: dict[str, Callable[[], dict]] = {}
FILL = "pre-cutoff fill"


def scenario(name: str, expected: str, source: str, opened: str, note: str, also: tuple[str, ...] = (),
             must_not: tuple[str, ...] = (), fill: bool = False) -> Callable[[Writer], Callable[[], dict]]:
    """Register a holdout bundle; ``fill`` marks a thread opened before the cut-off (``holdout_reason``)."""
    return register(SCENARIOS, "holdout", name, held_out_label(expected, source, opened, note, also, must_not, fill))


def held_out_label(expected: str, source: str, opened: str, note: str, also: tuple[str, ...],
                   must_not: tuple[str, ...], fill: bool) -> dict:
    """A held-out part's label: ``fill`` says (in the note too) the thread was opened before the cut-off."""
    label = {"expected": expected, "also": list(also), "must_not": list(must_not), "source": source,
             "note": f"{note} (holdout_reason: {FILL})" if fill else note, "opened": opened}
    if fill:
        label["holdout_reason"] = FILL
    return label


def stalled(spec: RoleSpec, mode: str) -> RoleSpec:
    """The role's own progress counter stops between the two samples."""
    key = f"realtime_tokens{{mode={mode}}}"
    spec.counters[key] = (spec.counters[key][0], 0)
    return spec


def start_limited(spec: RoleSpec) -> RoleSpec:
    """A crash-looping unit after systemd hit StartLimitBurst: failed, no restart pending."""
    spec.active, spec.sub, spec.restarts = "failed", "failed", 5
    unit = spec.logs[-1].split(":")[1].strip()
    spec.logs = spec.logs[:-1] + [f"systemd: {unit}: Start request repeated too quickly.",
                                  f"systemd: {unit}: Failed with result '{spec.result}'.",
                                  f"systemd: Failed to start {unit}."]
    return spec


# === known classes, threads opened after the cut-off ============================================

@scenario("dsv4-decode-forward-hang-245k-watchdog", "scheduler-watchdog", "https://github.com/sgl-project/sglang/issues/33549",
          "2026-08-04",
          "DeepSeek-V4-Flash-0731 with DSPARK, TP8 on 8xH20: after 5.7 h of agentic traffic a decode forward at ~245K "
          "context hangs, all GPUs spin at 100% util and low power, and the scheduler watchdog kills the server. Opened "
          "between #33385 (2026-08-03) and #33693 (2026-08-05); the stored thread quotes no log line, so the watchdog line "
          "is SGLang 0.5.2x's own format (utils/watchdog.py)", also=("role-down", "decode-wedged"),
          must_not=("config-crashloop", "gpu-fault", "cuda-oom"))
def _dsv4_245k_watchdog():
    p, d, r = roles()
    died(d, ["Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"], status="9/KILL", code="killed")
    hot = gpu_csv(8, 128000).replace("NVIDIA H200", "NVIDIA H20").replace("143771", "97871").replace(", 87, 54, 412.5", ", 100, 61, 118.0")
    return [p, d, r], {"gpus": {"node1": gpu_csv(8, 90000).replace("NVIDIA H200", "NVIDIA H20").replace("143771", "97871"),
                                "node2": hot}}


@scenario("router-breaker-opens-on-engine-503-backpressure", "router-no-healthy-workers",
          "https://github.com/sgl-project/sglang/pull/39464", "2026-09-14",
          "a saturated engine answers its own queue-full 503s; the router counts each as a worker fault and opens the "
          "breaker, and with one worker behind it sheds every request for the whole cool-down, even after the engine has "
          "drained and gone idle", must_not=("prefill-queue-saturation", "role-down", "decode-wedged"))
def _breaker_on_backpressure():
    p, d, r = roles()
    for spec, mode in ((p, "prefill_compute"), (d, "decode")):
        spec.gauges.update(num_running_reqs=0, num_queue_reqs=0)
        stalled(spec, mode)
        spec.logs = []
    p.counters["realtime_tokens{mode=prefill_cache}"] = (300_000, 0)
    r.gauges.update({"smg_worker_cb_state{worker=http://10.0.0.2:30001}": 1})
    r.counters["smg_router_request_errors{error_type=no_workers}"] = (900, 30)
    return [p, d, r], canary(503, "No available workers (all circuits open or unhealthy)")


@scenario("mooncake-sync-batch-timeout-long-context", "kv-transfer-failure", "https://github.com/sgl-project/sglang/pull/32758",
          "2026-07-29",
          "GLM-5.2-NVFP4 PD: a very long-context KV transfer goes to Mooncake as one synchronous batch that times out; the "
          "session fails, the prefill cannot send its KV chunks and the decode cannot get them; a longer PD timeout does "
          "not help", must_not=("prefill-queue-saturation", "healthy", "config-crashloop"))
def _mooncake_sync_batch_timeout():
    p, d, r = roles()
    p.logs = raw(["Sync batch data transfer timeout", "Session <decode-endpoint> failed",
                  "Prefill transfer failed ... Failed to send kv chunk"]) + p.logs
    d.logs = raw(["Decode transfer failed ... Failed to get kvcache from prefill instance"])
    p.counters["num_transfer_failed_reqs"] = (3, 2)
    d.counters["num_transfer_failed_reqs"] = (3, 2)
    return [p, d, r], {}


@scenario("pd-decode-warmup-crash-ep32-dp-attention", "config-crashloop", "https://github.com/sgl-project/sglang/issues/32182",
          "2026-07-23",
          "main branch, PD decode with EP32 and DP attention: the server crashes in the disaggregation warmup at every "
          "start (the scheduler hits an exception in event_loop_overlap_disagg_decode); the lines keep the log viewer's "
          "line numbers", also=("role-down",), must_not=("kv-transfer-failure", "decode-wedged", "nccl-failure"))
def _warmup_crash_ep32():
    p, d, r = roles()
    crashloop(d, raw([
        "16433 [2026-07-23 15:23:26 DP2 TP2 EP2] Scheduler hit an exception: Traceback (most recent call last):",
        '16434   File "/usr/local/src/sglang/python/sglang/srt/managers/scheduler.py", line 4656, in run_scheduler_process',
        "16435     scheduler.run_event_loop()",
        '16436   File "/usr/local/src/sglang/python/sglang/srt/managers/scheduler.py", line 1500, in run_event_loop',
        "16437     dispatch_event_loop(self)",
        '16438   File "/usr/local/src/sglang/python/sglang/srt/managers/scheduler.py", line 4521, in dispatch_event_loop',
        "16439     scheduler.event_loop_overlap_disagg_decode()",
        "16442            ^^^^^^^^^^^^^^^^^^^^^",
        '16443   File "/usr/local/src/sglang/python/sglang/srt/disaggregation/decode.py", line 2057, in event_loop_overlap_disagg_decode',
    ]), restarts=5, status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("pd-dp-attention-rank-kv-full-lockstep-freeze", "kv-cache-exhausted", "https://github.com/sgl-project/sglang/issues/30033",
          "2026-07-03",
          "GLM-5.2-FP8 3P2D, decode TP8 DP8 with DP attention (v0.5.13.post1): one DP rank fills its KV pool with running "
          "plus pre-allocated requests and every rank of the node freezes in lockstep; no admission control accounts for "
          "the pre-allocated KV", also=("decode-wedged", "dp-rank-wedged"),
          must_not=("kv-transfer-failure", "config-crashloop", "healthy"))
def _dp_rank_lockstep():
    p, d, r = roles()
    stalled(d, "decode")
    d.gauges.update(num_running_reqs=16, token_usage=0.99, num_decode_prealloc_queue_reqs=12, num_decode_transfer_queue_reqs=0)
    d.logs = ["Decode batch, #running-req: 16, #full token: 1038000, full token usage: 0.99, #swa token: 3000, swa token usage: "
              "0.12, pre-allocated usage: 0.31, #prealloc-req: 12, #transfer-req: 0, #retracted-req: 0, cuda graph: True, "
              "gen throughput (token/s): 0.00, #queue-req: 0"]
    return [p, d, r], {}



@scenario("pd-dcp-dspark-bootstrap-thread-dies-kv-geometry", "kv-transfer-failure", "https://github.com/sgl-project/sglang/pull/33043",
          "2026-07-31",
          "Kimi-K3 branch, PD with DCP on the decode and DSPARK on both sides: the draft KV buffers share kv_indices with "
          "the target, the prefill's DCP relayout check raises inside bootstrap_thread, which has no handler, so the "
          "thread dies and every later bootstrap message goes unprocessed; requests hang until the client times out",
          also=("decode-wedged",), must_not=("prefill-queue-saturation", "config-crashloop", "healthy"))
def _dcp_dspark_geometry():
    p, d, r = roles()
    p.logs = raw(["RuntimeError: PD DCP source/destination KV geometry differs:", "  src=[1152 x24, 256, 256, ...]"]) + p.logs
    stalled(d, "decode")
    d.gauges.update(num_running_reqs=0, num_decode_prealloc_queue_reqs=6, num_decode_transfer_queue_reqs=0)
    d.logs = []
    return [p, d, r], gpus_named("NVIDIA B300", 275040, 240000)


@scenario("kimi-k3-pd-dcp-dspark-silent-hang-b300", "kv-transfer-failure", "https://github.com/sgl-project/sglang/pull/32541",
          "2026-07-27",
          "Kimi-K3 PD on B300 (prefill TP8, decode TP8 with DCP 8, DSPARK on both, Mooncake over RoCE, fp8 KV): after "
          "re-pulling the kimi-k3 image, requests hang with no error to the client; the prefill logs the DCP KV geometry "
          "mismatch (quoted in a comment of 2026-08-03; the PR opened at the day-0 image of 2026-07-27)",
          also=("decode-wedged",), must_not=("prefill-queue-saturation", "config-crashloop", "healthy"))
def _kimi_k3_dcp_hang():
    p, d, r = roles()
    p.logs = raw(["RuntimeError: PD DCP source/destination KV geometry differs:", "  src=[576 x24, 128 x10], dst=[576 x34]"]) + p.logs
    stalled(d, "decode")
    d.gauges.update(num_running_reqs=0, num_decode_prealloc_queue_reqs=4, num_decode_transfer_queue_reqs=0)
    d.logs = []
    return [p, d, r], gpus_named("NVIDIA B300", 275040, 240000)


@scenario("decode-waits-for-kv-after-prefill-failed", "decode-wedged", "https://github.com/sgl-project/sglang/pull/40606",
          "2026-09-21",
          "sgl-router in PD: a prefill that fails (transport or server error) leaves its decode half waiting for KV that "
          "will never arrive; the router only watched the decode's answer, so those requests sit on the decode until "
          "they time out", also=("kv-transfer-failure",), must_not=("prefill-queue-saturation", "config-crashloop", "healthy"))
def _decode_waits_after_prefill_failed():
    p, d, r = roles()
    stalled(d, "decode")
    d.gauges.update(num_running_reqs=0, num_decode_prealloc_queue_reqs=0, num_decode_transfer_queue_reqs=9)
    d.logs = []
    p.counters["num_bootstrap_failed_reqs"] = (2, 9)
    r.counters["smg_router_upstream_responses{status_code=500}"] = (20, 9)
    return [p, d, r], {}


@scenario("smg-grpc-decode-notready-answers-404", "router-no-healthy-workers", "https://github.com/smg-project/smg/pull/2465",
          "2026-09-08",
          "SMG on the gRPC path in PD: with the decode worker NotReady the router answers 404 (model not found) instead of "
          "503, so clients see a missing model while the router simply has no available decode worker",
          must_not=("config-crashloop", "healthy"))
def _smg_grpc_404():
    p, d, r = roles()
    d.active, d.sub, d.result = "active", "running", "success"
    d.health, d.health_error, d.nulls = None, "timeout after 5.0s", True
    stalled(d, "decode")
    d.logs = []
    r.gauges = {"smg_worker_pool_size{connection_mode=grpc,model=qwen3-8b,worker_type=prefill}": 1,
                "smg_worker_pool_size{connection_mode=grpc,model=qwen3-8b,worker_type=decode}": 1,
                "smg_worker_health{worker=grpc://10.0.0.1:30000}": 1, "smg_worker_health{worker=grpc://10.0.0.2:30001}": 0}
    r.counters["smg_http_responses{status_code=404}"] = (30, 12)
    return [p, d, r], canary(404, '{"error": {"message": "model not found", "code": 404}}')

# === failures no class claims, threads opened after the cut-off ==================================

@scenario("top-logprobs-over-vocab-kills-scheduler", ANY, "https://github.com/sgl-project/sglang/issues/40076", "2026-09-18",
          "one /v1/chat/completions request with top_logprobs larger than the vocabulary kills the scheduler (topk "
          "'selected index k out of range'); the server is gone for everyone, follow-up requests get connection refused",
          also=("role-down",), must_not=("config-crashloop", "cuda-oom", *RESTARTING))
def _top_logprobs():
    p, d, r = roles()
    died(d, raw([
        "Scheduler hit an exception: Traceback (most recent call last):", "  ...",
        '  File ".../sglang/srt/layers/sampler.py", line 265, in forward',
        "    logprob_result = self.output_logprob_processor.compute_logprobs(",
        '  File ".../sglang/srt/layers/logprob_processor.py", line 802, in compute_logprobs',
    ]), status="9/KILL", code="killed")
    return [p, d, r], canary(None, None, "connection refused")


@scenario("token-ids-logprob-mixed-batch-attributeerror", ANY, "https://github.com/sgl-project/sglang/issues/34719", "2026-08-13",
          "v0.5.14-v0.5.17: a request using token_ids_logprob batched with one that does not makes the scheduler die with "
          "AttributeError ('list' object has no attribute 'tolist'); one scoring client takes the whole server down",
          also=("role-down",), must_not=("config-crashloop", "cuda-oom", *RESTARTING))
def _token_ids_logprob():
    p, d, r = roles()
    died(d, raw(["AttributeError: 'list' object has no attribute 'tolist'"]), status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("hicache-file-backend-enospc-flat-dir", ANY, "https://github.com/sgl-project/sglang/issues/28653", "2026-06-18",
          "--hicache-storage-backend file writes every page into one flat directory; at ~7.5M files ext4's directory index "
          "is full and writes fail with ENOSPC (~8.3k an hour) although 24 TB and 456M inodes are free; the L3 tier stops "
          "persisting silently and restarted sessions re-prefill; serving continues",
          must_not=("config-crashloop", "role-down", "cuda-oom", *RESTARTING))
def _hicache_enospc():
    p, d, r = roles()
    p.logs = raw(["OSError: [Errno 28] No space left on device: '.../<hash>.bin.tmp...'"] * 3) + p.logs
    return [p, d, r], {}


@scenario("kimi-k3-tool-call-parser-errors", ANY, "https://github.com/sgl-project/sglang/issues/34604", "2026-08-12",
          "Kimi-K3 with --tool-call-parser kimi_k3 (0.5.17 on MI350X): ~190 parser failures a day; each request falls back "
          "to raw text without tool_calls and the agent loop degrades; the server itself is healthy",
          must_not=("config-crashloop", "role-down", *RESTARTING))
def _kimi_k3_parser():
    p, d, r = roles()
    d.logs = raw(["Tool call parsing error: string indices must be integers",
                  "Tool call parsing error: unexpected character: line 1 column 1 (char 0)",
                  "Tool call parsing error: string indices must be integers",
                  "Tool call parsing error: Input is a zero-length, empty document"]) + d.logs
    return [p, d, r], {}


@scenario("pd-eagle-grammar-double-accept-abort", ANY, "https://github.com/sgl-project/sglang/issues/29110", "2026-06-24",
          "GLM-5.2-FP8 PD with EAGLE on the decode (nightly 2026-06-07): every grammar-constrained request (tool_choice "
          "required, JSON response_format) is aborted because the decode accepts a token the grammar already accepted "
          "('Tokens not accepted'); plain requests are served", must_not=("kv-transfer-failure", "config-crashloop", *RESTARTING))
def _pd_eagle_grammar():
    p, d, r = roles()
    d.logs = raw(["ValueError: Tokens not accepted: <tok>"]) + d.logs
    d.counters["num_aborted_requests"] = (40, 8)
    return [p, d, r], canary(200, '{"choices": [{"finish_reason": "abort"}]}')


@scenario("streaming-session-disconnect-kills-scheduler", ANY, "https://github.com/sgl-project/sglang/issues/36475", "2026-08-26",
          "SGLang 0.5.18 with --enable-streaming-session: a client closing the stream mid-turn corrupts the session and the "
          "leaked KV trips the idle pool check, which kills the scheduler (ValueError, then SIGQUIT); the scheduler line "
          "is SGLang's own format, the stored thread quotes none", also=("role-down",),
          must_not=("config-crashloop", "kv-cache-exhausted", *RESTARTING))
def _streaming_session():
    p, d, r = roles()
    died(d, ["Scheduler hit an exception: Traceback (most recent call last):"], status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("client-disconnect-cancellederror-kills-engine", ANY, "https://github.com/sgl-project/sglang/issues/39216", "2026-09-12",
          "a client timing out during a ~200K-token prefill: uvicorn cancels the disconnect poll, asyncio.CancelledError "
          "(a BaseException) passes every 'except Exception' and kills the whole process; opened with its fix, #39217 "
          "(2026-09-12); the stored thread quotes no line", also=("role-down",),
          must_not=("config-crashloop", "prefill-wedged", *RESTARTING))
def _cancelled_error():
    p, d, r = roles()
    died(p, [], status="9/KILL", code="killed")
    return [p, d, r], canary(None, None, "connection refused")


@scenario("detokenizer-tiktoken-no-all-special-ids", ANY, "https://github.com/sgl-project/sglang/pull/29853", "2026-07-01",
          "Grok2 on NPU with the detokenizer: 'TiktokenTokenizer' object has no attribute 'all_special_ids', the "
          "DetokenizerManager hits an exception on the first batch and the server dies (lines of #25309, 2026-05-29, "
          "quoted in this PR); nvidia-smi cannot run on an NPU host", also=("role-down",),
          must_not=("config-crashloop", "scheduler-watchdog", "cuda-oom"))
def _tiktoken_detokenizer():
    p, d, r = roles()
    died(d, raw([
        "[2026-05-29 12:21:03] DetokenizerManager hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/detokenizer_manager.py", line 440, in run_detokenizer_process',
        "    manager.event_loop()",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/detokenizer_manager.py", line 150, in event_loop',
        "    output = self._request_dispatcher(recv_obj)",
        "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '  File "/sgl-workspace/sglang/python/sglang/utils.py", line 649, in __call__',
        "    return fn(obj)",
        "           ^^^^^^^",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/detokenizer_manager.py", line 358, in handle_batch_token_id_out',
        "    self._decode_batch_token_id_output(recv_obj)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/detokenizer_manager.py", line 261, in _decode_batch_token_id_output',
        "    surr_texts = self._grouped_batch_decode(",
        "                 ^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/detokenizer_manager.py", line 195, in _grouped_batch_decode',
        "    return [",
        "           ^",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/detokenizer_manager.py", line 196, in <listcomp>',
    ]), status="9/KILL", code="killed")
    return [p, d, r], {"gpu_error": {"node1": "nvidia-smi: command not found", "node2": "nvidia-smi: command not found"}}


@scenario("responses-endpoint-without-pd-fields", ANY, "https://github.com/sgl-project/sglang/issues/35497", "2026-08-19",
          "DeepSeek-V4-Flash-0731 PD: /v1/responses carries no bootstrap or DP routing fields, so every /v1/responses "
          "request fails in the PD deployment while /v1/chat/completions works; the access lines are SGLang's format",
          must_not=("kv-transfer-failure", "config-crashloop", "role-down", *RESTARTING))
def _responses_endpoint():
    p, d, r = roles()
    d.logs = raw(['INFO:     10.0.0.1:41822 - "POST /v1/responses HTTP/1.1" 400 Bad Request'] * 3) + d.logs
    return [p, d, r], {}


@scenario("dsv4-nvfp4-disagg-decode-scheduler-exception", ANY, "https://github.com/sgl-project/sglang/issues/30242", "2026-07-06",
          "DeepSeek-V4-Pro NVFP4 behind Dynamo, disaggregated: four minutes after the model registered, the decode's "
          "scheduler hits an exception on DP1 and the decode node fails", also=("role-down",),
          must_not=("config-crashloop", *RESTARTING))
def _dsv4_nvfp4_decode():
    p, d, r = roles()
    died(d, raw([
        "2026-07-06T02:45:29.923854Z  INFO _core: Registered base model 'deepseek-ai/DeepSeek-V4-Pro' MDC",
        "[2026-07-05 19:45:29.924] Successfully registered LLM with runtime config",
        "[2026-07-05 19:45:29.924] Model registration succeeded; processing queued requests",
        "[2026-07-05 19:49:44.257 DP1 TP1 EP1] Scheduler hit an exception: Traceback (most recent call last):",
    ]), status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("dsv4-decode-retract-get-cpu-copy-not-implemented", ANY, "https://github.com/sgl-project/sglang/issues/33385",
          "2026-08-03",
          "DeepSeek-V4 PD decode: when the KV pool fills and a request is retracted, release_req offloads its KV to CPU "
          "unconditionally and DeepSeekV4TokenToKVPool has no get_cpu_copy(), so the decode crashes with "
          "NotImplementedError; the KV pool filling is the trigger, the missing method the fault (the retract line is "
          "SGLang's own format)",
          also=("role-down", "kv-cache-exhausted"), must_not=("config-crashloop", "cuda-oom", "kv-transfer-failure"))
def _dsv4_retract_crash():
    p, d, r = roles()
    died(d, ["KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 4096, #new_token_ratio: "
             "0.4000 -> 0.6000", "NotImplementedError"], status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("glm53-disagg-decode-dp-attention-spec-crash", ANY, "https://github.com/sgl-project/sglang/issues/39072", "2026-09-11",
          "GLM-5.3 on a disaggregated decode with DP attention and speculative decoding crashes while serving; the "
          "stored thread quotes no line", also=("role-down",), must_not=("config-crashloop", *RESTARTING))
def _glm53_crash():
    p, d, r = roles()
    died(d, [], status="9/KILL", code="killed")
    return [p, d, r], {}



# === healthy roles with alarming signs, threads opened after the cut-off =========================

@scenario("near-detokenizer-soft-watchdog-every-interval", "healthy", "https://github.com/sgl-project/sglang/pull/31392",
          "2026-07-16",
          "--tokenizer-worker-num > 1 with --soft-watchdog-timeout: the detokenizer's multi-worker loop never feeds its "
          "soft watchdog, which 'times out' every interval on a healthy pod and dumps py-spy; nothing is hung, decoding "
          "goes on. The lines are SGLang's soft-watchdog format (utils/watchdog.py)",
          must_not=("scheduler-watchdog", "decode-wedged", "unexplained"))
def _soft_watchdog_every_interval():
    p, d, r = roles()
    warn = "DetokenizerManager watchdog timeout (self.watchdog_timeout=60, self.soft=True)"
    d.logs = [warn, d.logs[0], warn, d.logs[0]]
    return [p, d, r], {}


@scenario("near-idle-scheduler-busy-spin-gb10", "healthy", "https://github.com/MiaAI-Lab/Qwen3.8-27B-SGLang-DGX-Spark/issues/4",
          "2026-08-20",
          "DGX Spark (GB10), Qwen3.8 27B idle: the scheduler busy-polls at ~97% of a core (11,778 ppoll calls a second) "
          "with the GPU at 0% and ~11 W; idle and healthy, --sleep-on-idle removes the spin",
          must_not=("decode-wedged", "prefill-wedged", "unexplained"))
def _idle_spin_gb10():
    p, d, r = roles()
    for spec in (p, d):
        spec.gauges.update(num_running_reqs=0, num_queue_reqs=0, token_usage=0.0)
        spec.counters = {k: (v[0], 0) for k, v in spec.counters.items()}
        spec.logs = []
    r.counters = {k: (v[0], 0) for k, v in r.counters.items()}
    idle = gpu_csv(1, 100000).replace("NVIDIA H200", "NVIDIA GB10").replace(", 87, 54, 412.5", ", 0, 41, 11.1")
    p.gpus = d.gpus = (0,)
    return [p, d, r], {"gpus": {"node1": idle, "node2": idle}}


@scenario("near-idle-cpu-101pct-sleep-on-idle", "healthy", "https://github.com/hasso5703/dgx-spark-qwen38/pull/4", "2026-08-21",
          "DGX Spark: an idle server's scheduler at 101% CPU and 12.1 W until --sleep-on-idle (then 1.7% CPU, TTFT "
          "unchanged); nothing runs or waits", must_not=("decode-wedged", "unexplained"))
def _idle_cpu_101():
    p, d, r = roles()
    for spec in (p, d):
        spec.gauges.update(num_running_reqs=0, num_queue_reqs=0, token_usage=0.0)
        spec.counters = {k: (v[0], 0) for k, v in spec.counters.items()}
        spec.logs = []
    return [p, d, r], {}


@scenario("near-idle-dsv41-flash-sparks-cpu", "healthy", "https://github.com/MiaAI-Lab/DeepSeek-v4.1-Flash-DGX-Sparks/pull/16",
          "2026-09-12",
          "DeepSeek-V4.1-Flash on DGX Sparks (TP4): the idle scheduler's CPU use, reduced with --sleep-on-idle; the "
          "server serves normally before and after", must_not=("unexplained",))
def _dsv41_idle_cpu():
    p, d, r = roles()
    return [p, d, r], {}


@scenario("near-deepgemm-jit-every-startup", "healthy", "https://github.com/sgl-project/sglang/issues/29170", "2026-06-24",
          "Qwen3.6-27B-FP8 in the latest-cu130 image: DeepGEMM JIT-compiles at every start-up (a long start), then the "
          "server is up and serves; the unit started a few minutes ago without a failed run",
          must_not=("config-crashloop", "role-down", "unexplained"))
def _deepgemm_every_start():
    p, d, r = roles()
    d.started = T0 - timedelta(minutes=6)
    d.logs = raw(["[sglang]     | [2026-06-24 11:53:25] INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)"]) + d.logs
    return [p, d, r], {}


@scenario("near-client-cancel-499", "healthy", "https://github.com/sgl-project/sglang/pull/32456", "2026-07-26",
          "clients cancelling or disconnecting: those requests finish as aborts (status 499, client_cancel) instead of "
          "looking like completions; the server is fine and everything else is served",
          must_not=("kv-transfer-failure", "decode-wedged", "unexplained"))
def _client_cancel_499():
    p, d, r = roles()
    d.counters["num_aborted_requests"] = (120, 3)
    return [p, d, r], {}


@scenario("near-router-client-400s-breaker-closed", "healthy", "https://github.com/smg-project/smg/pull/2565", "2026-09-17",
          "SMG maps engine validation errors to 4xx: a client's malformed requests answer 400 and leave the breaker "
          "closed; the workers are healthy and serve everyone else", must_not=("router-no-healthy-workers", "unexplained"))
def _router_client_400s():
    p, d, r = roles()
    r.counters["smg_http_responses{status_code=400}"] = (40, 10)
    r.gauges.update({"smg_worker_cb_state{worker=http://10.0.0.2:30001}": 0})
    return [p, d, r], {}


# === pre-cutoff fill: the latest threads before 2026-06-01 ======================================

@scenario("dsv4-pro-h20-hang-after-warmup", "decode-wedged", "https://github.com/sgl-project/sglang/issues/26783", "2026-05-30",
          "DeepSeek V4 Pro on 8xH20-3e: after warmup, requests are received and never answered; the running request does "
          "not progress", must_not=("config-crashloop", "healthy"), fill=True)
def _dsv4_pro_hang():
    p, d, r = roles()
    stalled(d, "decode")
    d.gauges.update(num_running_reqs=1, num_decode_transfer_queue_reqs=0)
    d.logs = raw([
        "[2026-05-30 18:57:08] Receive: obj=GenerateReqInput(rid='8eb9f6fd8c2d4d749657d26d20e8fe10', http_worker_ipc=None, "
        "use_audio_in_video=False, sampling_params={'temperature': 1.0, 'max_new_tokens': 4096, 'min_new_tokens': 0, 'stop': "
        "None, 'stop_token_ids': None, 'stop_regex': None, 'top_p': 1.0, 'top_k': -1, 'min_p': 0.0, 'presence_penalty': 0.0, "
        "'frequency_penalty': 0.0, 'repetition_penalty': 1.0, 'regex': None, 'ebnf': None, 'n': 1, 'no_stop_trim': False, "
        "'ignore_eos': False, 'skip_special_tokens': True, 'logit_bias': None, 'custom_params': None, 'sampling_seed': None, "
        "'spaces_between_special_tokens': True}, return_logprob=False, logprob_start_len=-1, top_logprobs_num=0, "
        "token_ids_logprob=None, return_text_in_logprobs=True, stream=True, log_metrics=True, return_hidden_states=False, "
        "return_routed_experts=False, return_indexer_topk=False, routed_experts_start_len=0, modalities=[], session_params=None, "
        "lora_id=None, custom_logit_processor=None, positional_embed_overrides=None, bootstrap_ho",
    ])
    return [p, d, r], gpus_named("NVIDIA H20-3e", 143771, 130000)


@scenario("hisparse-mooncake-swa-transfer-hang", "kv-transfer-failure", "https://github.com/sgl-project/sglang/issues/26475",
          "2026-05-27",
          "DeepSeek V4 PD decode with HiSparse: the Mooncake transfer of the SWA extra state hangs, so requests wait in "
          "the decode's transfer queue and never start decoding", also=("decode-wedged",),
          must_not=("prefill-queue-saturation", "healthy"), fill=True)
def _hisparse_swa_hang():
    p, d, r = roles()
    stalled(d, "decode")
    d.gauges.update(num_running_reqs=0, num_decode_transfer_queue_reqs=8)
    d.logs = []
    return [p, d, r], {}


@scenario("glm5-two-host-mooncake-decode-wedge", "decode-wedged", "https://github.com/sgl-project/sglang/issues/25937", "2026-05-21",
          "GLM-5-FP8 two-host PD with Mooncake (v0.5.12): the decode passes its warmup, the first real request times out, "
          "then decode /health times out and the router reports no decode worker; NIXL in the same setup works",
          also=("kv-transfer-failure", "router-no-healthy-workers"), must_not=("config-crashloop", "healthy"), fill=True)
def _glm5_decode_wedge():
    p, d, r = roles()
    stalled(d, "decode")
    d.gauges.update(num_running_reqs=1)
    d.health, d.health_error, d.nulls = None, "timeout after 5.0s", True
    d.logs = []
    r.gauges.update({"smg_worker_health{worker=http://10.0.0.2:30001}": 0})
    return [p, d, r], canary(503, "No available decode workers (all circuits open or unhealthy)")


@scenario("eagle-response-format-xgrammar-typeerror", ANY, "https://github.com/sgl-project/sglang/issues/24283", "2026-05-03",
          "EAGLE/NEXTN with a response_format request: generate_token_bitmask hands xgrammar a tensor where it expects an "
          "int, the scheduler dies with a TypeError and takes every in-flight request with it",
          also=("role-down",), must_not=("config-crashloop", "cuda-oom", *RESTARTING), fill=True)
def _eagle_response_format():
    p, d, r = roles()
    died(d, raw([
        "[2026-05-02 23:26:04 TP1] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/opt/sglang/python/sglang/srt/managers/scheduler.py", line 3934, in run_scheduler_process',
        "    scheduler.run_event_loop()",
    ]), status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("gemma4-lora-missing-lora-a-at-start", "config-crashloop", "https://github.com/sgl-project/sglang/issues/25913",
          "2026-05-20",
          "SGLang 0.5.12 with --lora-paths: a PEFT adapter trained on Gemma 4 E2B's language-tower names fails to load "
          "before readiness with a missing-weight RuntimeError for lora_A keys; the unit restarts and fails again",
          also=("role-down",), must_not=("cuda-oom", "healthy"), fill=True)
def _gemma4_lora_start():
    p, d, r = roles()
    crashloop(d, [], restarts=4)
    return [p, d, r], {}


@scenario("rccl-comm-init-unhandled-cuda-error-mi300", "nccl-failure", "https://github.com/sgl-project/sglang/issues/25216",
          "2026-05-14",
          "2-GPU MI300 runners: init_torch_distributed fails at ncclCommInitRank with 'unhandled cuda error' before any "
          "weight is allocated; both retries fail and the supervisor kills the worker (-9); nvidia-smi cannot run on an "
          "AMD host", also=("config-crashloop", "role-down"), must_not=("gpu-fault", "healthy"), fill=True)
def _rccl_init():
    p, d, r = roles()
    crashloop(p, ["RuntimeError: NCCL error: unhandled cuda error"], restarts=2, status="9/KILL", code="killed")
    return [p, d, r], {"gpu_error": {"node1": "nvidia-smi: command not found", "node2": "nvidia-smi: command not found"}}


if __name__ == "__main__":
    for path in write(SCENARIOS):
        print(path)
