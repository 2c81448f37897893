"""Write ``holdout3/``: a third held-out part, from public threads that no other part cites, written
(2026-12-03) by a writer who writes no rules and ran no diagnosis on them. Nobody has read it with opsbot yet;
the lead reads it once and wires it into ``tests/test_scenarios.py``.

Shaped like ``holdout2.py``: 30 bundles from 25 threads. 23 bundles (18 threads) come from threads opened on or
after 2026-06-01 (2026-06-23 to 2026-09-15); the search index held too few unused incident threads after the
cut-off, so 7 bundles (7 threads, 2026-04-23 to 2026-05-26) are the latest unused threads before it, labelled
``holdout_reason: "pre-cutoff fill"`` (in the note too). Each label carries ``opened``, the day the thread was
opened as its page shows it, or estimated from the thread's number between two dated neighbours where the stored
page showed only later comments (the note says so). Lines are the threads' own, kept verbatim (``raw:``); where
the stored thread quoted no line, a line in SGLang's (or PyTorch's) own format is used and the note says so, or
the bundle carries only the unit state and metrics. The rest (unit state, metrics, /health) is written as that
SGLang version and systemd would show it; where an operator's words are all a probe would have had, they are the
trigger's text. Run ``python -m tests.scenarios.holdout3`` to rewrite them (always into ``holdout3/``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from tests.scenarios.compose import RoleSpec, T0, Writer, gpu_csv, register
from tests.scenarios.deployments import crashloop, died, raw, recovered, roles
from tests.scenarios.holdout import held_out_label, stalled, start_limited
from tests.scenarios.split import ROOT
from tests.scenarios.unclaimed import ANY, gpus, canary

HOLDOUT3 = ROOT / "holdout3"
SCENARIOS: dict[str, Callable[[], dict]] = {}
# Classes that advise a restart or drain of the transfer path or hardware: wrong for a software bug that a
# request, a parser or a router causes (a restart of the crashed role itself is what systemd already does).
NOT_INFRA = ("config-crashloop", "cuda-oom", "kv-transfer-failure", "nccl-failure", "gpu-fault")


def scenario(name: str, expected: str, source: str, opened: str, note: str, also: tuple[str, ...] = (),
             must_not: tuple[str, ...] = (), fill: bool = False) -> Callable[[Writer], Callable[[], dict]]:
    """Register a holdout3 bundle; ``fill`` marks a thread opened before the cut-off (``holdout_reason``)."""
    return register(SCENARIOS, "holdout3", name, held_out_label(expected, source, opened, note, also, must_not, fill))


def fidelity(cases: list[dict], model: str) -> dict:
    """The output-fidelity probe's run (``spec/probe-bundle-v1.md``), against the baseline of the last good deploy."""
    base = {"id": "9a41c07e2d55", "recorded_at": "2026-11-27T18:02:11.402Z", "model": model, "tokenizer": model}
    return {"fidelity": {"baseline": base, "cases": cases}}


def case(prompt_id: str, tokens: list[int], first_divergence: int | None, distance: float) -> dict:
    return {"prompt_id": prompt_id, "instance": "decode", "dp_rank": 0, "tokens": tokens,
            "first_divergence": first_divergence, "logprob_distance": distance,
            "diverged": first_divergence is not None, "error": None}


H20 = ("NVIDIA H20", 97871, 90000)
H100 = ("NVIDIA H100 80GB HBM3", 81559, 76000)
B200 = ("NVIDIA B200", 183359, 168000)
B300 = ("NVIDIA B300 SXM6 AC", 275040, 240000)
GB300 = ("NVIDIA GB300", 275040, 240000)  # written with B300's memory total (same HBM); the thread gives none
PRO6000 = ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, 92000)
KIMI = "/data/hub/models--moonshotai--Kimi-K3"


# === scheduler-watchdog, output-corruption ========================================================

@scenario("dsv4-flash-hicache-eagle-eviction-deadlock-watchdog", "scheduler-watchdog",
          "https://github.com/sgl-project/sglang/issues/30532", "2026-07-08",
          "v0.5.14, DeepSeek-V4-Flash-FP8 with EAGLE and HiCache (write_through): under load the scheduler deadlocks in "
          "eviction with the KV pool exhausted while almost all of it is marked evictable, and the watchdog kills the "
          "server after 300 s. The three lines are the thread's memory snapshot and watchdog line",
          also=("kv-cache-exhausted", "decode-wedged", "role-down"),
          must_not=("cuda-oom", "config-crashloop", "nccl-failure", "gpu-fault", "kv-transfer-failure"))
def _dsv4_eviction_deadlock():
    p, d, r = roles()
    died(d, raw([
        "[full] total=1939712, available=256, evictable=1935360, protected=0, session_held=0, uncached=0",
        "[swa]  total=193792,  available=768, evictable=188928,  protected=0, session_held=0, uncached=0",
        "[TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
    ]), status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("dsv4-fp8-h20-hicache-dspark-sparse-prefill-watchdog-0517", "scheduler-watchdog",
          "https://github.com/sgl-project/sglang/issues/34235", "2026-08-10",
          "sglang 0.5.17, DeepSeek-V4 FP8 TP8 on H20 with HiCache (ratio 3, write_through, page_first), chunked prefill "
          "16K and DSPARK: the scheduler hangs in the DSV4 sparse prefill and the watchdog aborts the server (0.5.15.post1 "
          "runs stably, a commenter says). The stored excerpt quotes the launch arguments and the init line only; the "
          "watchdog line is SGLang's own format (utils/watchdog.py)",
          also=("role-down", "prefill-wedged", "decode-wedged"),
          must_not=("cuda-oom", "config-crashloop", "nccl-failure", "gpu-fault", "kv-transfer-failure"))
def _dsv4_sparse_prefill_hang():
    p, d, r = roles()
    died(d, ["Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"], status="9/KILL", code="killed")
    return [p, d, r], {"gpus": gpus(*H20, n=8)}


@scenario("kimi-k3-reasoning-leaks-across-requests-b300", "output-corruption",
          "https://github.com/sgl-project/sglang/issues/34259", "2026-08-10",
          "sglang 0.5.17, Kimi-K3 on 8xB300: at random, a request's reasoning is plainly another request's; nothing "
          "crashes and every request answers 200. No line is quoted; the fidelity run (fixed greedy prompts against the "
          "last good deploy's baseline) is what a probe would record: one prompt's output wanders off mid-answer",
          must_not=("config-crashloop", "role-down", "kv-transfer-failure", "cuda-oom", "healthy"))
def _kimi_leak():
    p, d, r = roles()
    cases = [case("capital", [785, 6722, 315, 9625, 374, 12095, 13, 163586], None, 0.0018),
             case("count", [16, 11, 220, 17, 11, 220, 18, 11, 220, 19, 13, 163586], None, 0.0031),
             case("recipe", [1249, 1281, 264, 43373, 30425, 2038, 11050, 88214, 3090, 25011, 9112], 5, 3.94)]
    return [p, d, r], {"gpus": gpus(*B300, n=8), "extra": fidelity(cases, KIMI)}


@scenario("kimi-k3-sanitized-nan-logits-garbage-200", "output-corruption",
          "https://github.com/sgl-project/sglang/issues/33187", "2026-08-01",
          "Kimi-K3 in production with SGLANG_SANITIZE_NAN_LOGITS=1 (to stop the device-side asserts of #32968): a fully "
          "NaN logits row becomes a uniform draw over the vocabulary, so the response turns into multilingual token salad "
          "that runs to max_tokens, streamed as a healthy 200; a reserved token appeared as literal text. The canary body "
          "keeps the thread's reserved token; the fidelity run is what a probe would record",
          must_not=("config-crashloop", "role-down", "cuda-oom", "kv-transfer-failure", "healthy"))
def _kimi_nan_garbage():
    p, d, r = roles()
    cases = [case("capital", [785, 6722, 315, 9625, 374, 12095, 13, 163586], None, 0.0022),
             case("count", [16, 11, 220, 17, 11, 48213, 117020, 9981, 163672, 70211, 3321, 131877], 5, 7.41)]
    body = '{"choices": [{"message": {"content": "1, 2, 3 складаระ并被 <|reserved_token_163672|> Keg治愈"}, "finish_reason": "length"}]}'
    return [p, d, r], {"gpus": gpus(*B300, n=8), "extra": {**canary(200, body)["extra"], **fidelity(cases, KIMI)}}


# === config-crashloop (and the same deployments after the fix) ====================================

def _kvcacheio_specs() -> tuple[list[RoleSpec], dict]:
    p, d, r = roles()
    crashloop(p, raw(["ImportError: cannot import name 'get_device_accessible_ptr' from 'sgl_kernel.kvcacheio'"]),
              restarts=4)
    return [p, d, r], {"gpus": gpus(*B200, n=8)}


@scenario("hicache-start-importerror-kvcacheio-nightly-0915", "config-crashloop",
          "https://github.com/SemiAnalysisAI/InferenceX/pull/3142", "2026-09-15",
          "lmsysorg/sglang:nightly-dev-cu13-20260915 with HiCache (DRAM KV offload), Qwen3.5-397B FP8 on B200: every "
          "HiCache point dies at start-up because sglang#35233 added a kernel op and its caller while the image still "
          "ships sglang-kernel 0.4.7; the line is the PR's own quote",
          also=("role-down",), must_not=("cuda-oom", "kv-transfer-failure", "healthy"))
def _kvcacheio():
    return _kvcacheio_specs()


@scenario("hicache-start-importerror-kvcacheio-nightly-0915-start-limit", "config-crashloop",
          "https://github.com/SemiAnalysisAI/InferenceX/pull/3142", "2026-09-15",
          "the start-up ImportError of hicache-start-importerror-kvcacheio-nightly-0915 (nightly 2026-09-15 image, "
          "sglang-kernel 0.4.7) after systemd hit its start limit and left the prefill failed",
          also=("role-down",), must_not=("cuda-oom", "kv-transfer-failure", "healthy"))
def _kvcacheio_limit():
    specs, kw = _kvcacheio_specs()
    start_limited(specs[0])
    return specs, kw


@scenario("hicache-start-importerror-kvcacheio-after-pin-0914", "healthy",
          "https://github.com/SemiAnalysisAI/InferenceX/pull/3142", "2026-09-15",
          "the prefill of hicache-start-importerror-kvcacheio-nightly-0915 after the operator pinned the 2026-09-14 "
          "nightly (the newest before the regression, as the PR does): it restarted five minutes ago and serves; the "
          "failed runs' ImportError is still in the journal window, before the current run's start",
          must_not=("config-crashloop", "role-down", "unexplained"))
def _kvcacheio_fixed():
    specs, kw = _kvcacheio_specs()
    recovered(specs[0])
    specs[0].logs = ["Prefill batch, #new-seq: 2, #new-token: 8192, #cached-token: 6144, full token usage: 0.19, "
                     "#running-req: 2, #queue-req: 0, #pending-token: 0, #bootstrap-req: 0, #inflight-req: 1, "
                     "cuda graph: False, input throughput (token/s): 14200.00"]
    return specs, kw


def _deepep_nvfp4_specs() -> tuple[list[RoleSpec], dict]:
    p, d, r = roles()
    crashloop(p, raw([
        'File "sglang/srt/layers/moe/moe_runner/flashinfer_cutedsl.py", line 476,',
        "  in fused_experts_deepep_to_flashinfer_cutedsl_fp4",
        "    hidden_states, hidden_states_scale, _, _, masked_m, _ = dispatch_output",
        "ValueError: not enough values to unpack (expected 6, got 5)",
    ]), restarts=3)
    return [p, d, r], {"gpus": gpus(*GB300)}


@scenario("glm52-nvfp4-gb300-deepep-prefill-unpack-valueerror", "config-crashloop",
          "https://github.com/SemiAnalysisAI/InferenceX/pull/2299", "2026-07-22",
          "GLM-5.2 NVFP4 disaggregated recipe on GB300 (dynamo-sglang, deepep MoE, attention-DP prefill): every prefill "
          "worker dies on its first forward because DeepEP's normal-mode dispatch yields 5 fields where the NVFP4 "
          "flashinfer_cutedsl path wants the low-latency 6; a recipe bug, not an image bug, per the PR (comment of "
          "2026-07-25). Lines are the PR's quote; the GPU memory total is written as B300's",
          also=("role-down",), must_not=("cuda-oom", "kv-transfer-failure", "nccl-failure", "healthy"))
def _deepep_nvfp4():
    return _deepep_nvfp4_specs()


@scenario("glm52-nvfp4-gb300-deepep-prefill-after-recipe-fix", "healthy",
          "https://github.com/SemiAnalysisAI/InferenceX/pull/2299", "2026-07-22",
          "the prefill of glm52-nvfp4-gb300-deepep-prefill-unpack-valueerror after the recipe was fixed and the image "
          "moved to SGLang v0.5.16 (the PR's update): it restarted five minutes ago and serves; the failed runs' "
          "ValueError is still in the journal window, before the current run's start",
          must_not=("config-crashloop", "role-down", "unexplained"))
def _deepep_nvfp4_fixed():
    specs, kw = _deepep_nvfp4_specs()
    recovered(specs[0])
    specs[0].logs = ["Prefill batch, #new-seq: 4, #new-token: 16384, #cached-token: 20480, full token usage: 0.27, "
                     "#running-req: 4, #queue-req: 1, #pending-token: 8192, #bootstrap-req: 0, #inflight-req: 2, "
                     "cuda graph: False, input throughput (token/s): 31000.00"]
    return specs, kw


def _sm120_specs() -> tuple[list[RoleSpec], dict]:
    p, d, r = roles()
    crashloop(d, raw([
        '  File "/sgl-workspace/sglang/python/sglang/kernels/ops/layernorm/mhc.py", line 1021, in mhc_pre',
        "    tf32_hc_prenorm_gemm(",
        '  File "/sgl-workspace/sglang/python/sglang/srt/layers/deep_gemm_wrapper/entrypoint.py", line 244, in tf32_hc_prenorm_gemm',
        "    deep_gemm.tf32_hc_prenorm_gemm(x, fn, out, sqrsum, num_splits=num_splits)",
        "    ^^^^^^^^^",
        "NameError: name 'deep_gemm' is not defined",
        "",
        "[2026-09-21 06:49:24] Received sigquit from a child process. It usually means the child failed.",
        "[2026-09-21 06:49:24] kill_process_tree called: parent_pid=1, include_parent=True, pid=1",
    ]), restarts=5)
    return [p, d, r], {"gpus": gpus(*PRO6000, n=8)}


@scenario("glm53-flash-sm120-deep-gemm-nameerror-warmup", "config-crashloop",
          "https://github.com/sgl-project/sglang/issues/37105", "2026-08-30",
          "GLM-5.3-Flash (lmsysorg/sglang:glm-5.3-flash) on 8x RTX PRO 6000 Blackwell (sm_120): the model loads, then the "
          "warmup forward dies because the mHC prenorm calls DeepGEMM, which is gated off on SM120; every start ends "
          "the same way. Lines from a comment of 2026-09-21 on the thread; the issue was opened after #37024 "
          "(2026-08-29) and before its own 'resolved' comment of 2026-08-31, estimated 2026-08-30",
          also=("role-down",), must_not=("cuda-oom", "gpu-fault", "kv-transfer-failure", "healthy"))
def _sm120():
    return _sm120_specs()


@scenario("glm53-flash-sm120-deep-gemm-nameerror-start-limit", "config-crashloop",
          "https://github.com/sgl-project/sglang/issues/37105", "2026-08-30",
          "the start-up failure of glm53-flash-sm120-deep-gemm-nameerror-warmup (GLM-5.3-Flash on SM120, DeepGEMM "
          "NameError in the warmup forward) after systemd hit its start limit and left the decode failed",
          also=("role-down",), must_not=("cuda-oom", "gpu-fault", "kv-transfer-failure", "healthy"))
def _sm120_limit():
    specs, kw = _sm120_specs()
    start_limited(specs[1])
    return specs, kw


@scenario("glm53-flash-sm120-after-working-config", "healthy",
          "https://github.com/sgl-project/sglang/issues/37105", "2026-08-30",
          "the decode of glm53-flash-sm120-deep-gemm-nameerror-warmup after the thread's working configuration "
          "(SGLANG_OPT_DEEPGEMM_HC_PRENORM=0, tilelang DSA backends, bf16 KV cache): it restarted five minutes ago and "
          "'serves correctly'; the failed runs' NameError is still in the journal window, before the current run's start",
          must_not=("config-crashloop", "role-down", "unexplained"))
def _sm120_fixed():
    specs, kw = _sm120_specs()
    recovered(specs[1])
    specs[1].logs = ["Decode batch, #running-req: 6, #full token: 30500, full token usage: 0.02, #swa token: 0, "
                     "swa token usage: 0.00, pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, "
                     "#retracted-req: 0, cuda graph: True, gen throughput (token/s): 310.00, #queue-req: 0"]
    return specs, kw


@scenario("glm52-nvfp4-pro6000-prefill-graph-compile-crash", "config-crashloop",
          "https://github.com/sgl-project/sglang/issues/29562", "2026-06-28",
          "GLM-5.2-NVFP4 on RTX PRO 6000 (SM120): the scheduler dies at start-up while the prefill CUDA graph runner "
          "compiles its piecewise backend; a fix PR (#29580, SM120 routes for the DSA path) followed. The lines are a "
          "comment's of 2026-06-28 (the stored excerpt ends inside the traceback); the issue was opened next to them, "
          "estimated 2026-06-28",
          also=("role-down",), must_not=("cuda-oom", "gpu-fault", "kv-transfer-failure", "healthy"))
def _glm52_pro6000():
    p, d, r = roles()
    crashloop(d, raw([
        "[2026-06-28 14:02:26 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/runner/prefill_cuda_graph_runner.py", line 223, in __init__',
        "    self.backend = resolve_prefill_backend(self)",
        "                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/runner_backend/utils.py", line 109, in resolve_prefill_backend',
        "    return TcPiecewiseCudaGraphBackend(cuda_graph_runner)",
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/runner_backend/tc_piecewise_cuda_graph_backend.py", line 98, in __init__',
        "    self._run_compile_pass(cuda_graph_runner)",
    ]), restarts=3)
    return [p, d, r], {"gpus": gpus(*PRO6000, n=8)}


# === failures no class claims, threads opened after the cut-off ==================================

@scenario("hicache-l3-prefetch-nonleaf-evict-assert", ANY, "https://github.com/sgl-project/sglang/pull/30106",
          "2026-07-04",
          "HiCache with an L3 storage backend and write_through: a prefetch refill attaches a host-only child under a "
          "device-only node, which later enters the evictable leaves and trips the non-leaf assert; the scheduler "
          "crashes intermittently and the server goes down. The lines are the PR's quote (its own ellipses kept)",
          also=("role-down",), must_not=NOT_INFRA)
def _nonleaf_assert():
    p, d, r = roles()
    died(d, raw([
        'File ".../srt/mem_cache/hiradix_cache.py", in _evict_regular',
        '    assert len(node.children) == 0, f"non-leaf, {node.id=}"',
        "AssertionError: non-leaf, node.id=...",
    ]), status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("glm53-tool-call-null-name-mangled-until-restart", ANY,
          "https://github.com/ormandj/sglang-glm53-flash-sm120/issues/5", "2026-09-03",
          "GLM 5.3 on a custom SGLang image behind Open WebUI: a tool call comes back with a null function name "
          "('Tool \"None\" not found'), then every tool call comes back mangled (name fused with XML-style arguments), "
          "on fresh chats too, until the backend is restarted; the same client on another backend is fine. Everything "
          "else answers 200 and tokens move; the server logs nothing of it, so the operator's words are the trigger",
          must_not=NOT_INFRA)
def _tool_mangle():
    p, d, r = roles()
    text = ('tool calls from glm 5.3 are mangled: Error: Tool "None" not found, then '
            '"run_command<tool_call>command</arg_key><arg_value>..." on every new chat; only a restart clears it')
    return [p, d, r], {"gpus": gpus(*PRO6000), "text": text}


@scenario("pd-prefill-400-decode-holds-slot-300s", ANY, "https://github.com/sgl-project/sglang/pull/29017",
          "2026-06-23",
          "PD behind the model gateway: the router waits for both legs with tokio::join!, so when the prefill answers a "
          "non-2xx (here 400 for prompts over the context, the case a commenter added) the paired decode request sits in "
          "KVPoll.WaitingForInput until SGLANG_DISAGGREGATION_WAITING_TIMEOUT (300 s), holding a decode slot, and the "
          "client waits. The access and decode lines are SGLang's own formats, room and rid elided",
          must_not=("kv-transfer-failure", "decode-wedged", "config-crashloop", "role-down", "prefill-queue-saturation"))
def _prefill_400_decode_wait():
    p, d, r = roles()
    bad = 'INFO:     10.0.0.3:51812 - "POST /generate HTTP/1.1" 400 Bad Request'
    p.logs = raw([bad, bad]) + p.logs
    d.logs = ["Decode transfer failed for request rank=0 decode_req.req.rid='<rid>' decode_req.req.bootstrap_room=<room> "
              "with exception KVTransferError(bootstrap_room=<room>): Request <room> timed out after 300.0s in "
              "KVPoll.WaitingForInput"] + d.logs
    d.gauges.update(num_decode_transfer_queue_reqs=7)
    d.counters["num_transfer_failed_reqs"] = (12, 1)
    r.counters["smg_http_responses{status_code=400}"] = (40, 2)
    return [p, d, r], {}


@scenario("pd-decode-leg-transport-error-prefill-bootstrapping-orphan", ANY,
          "https://github.com/sgl-project/sglang/pull/29482", "2026-06-27",
          "PD router under a burst of very long-context requests: the decode HTTP server stalls, some decode legs fail at "
          "the transport level, and the router keeps waiting on their prefill legs, which cannot complete without the "
          "decode's bootstrap handshake; those requests hang for request_timeout_secs (1800 s) with orphaned Bootstrapping "
          "rooms on the prefill and GPU utilisation at 0%. The PR quotes no line: the bundle carries the held bootstrap "
          "queue, the idle prefill and its GPUs",
          must_not=("prefill-wedged", "kv-transfer-failure", "config-crashloop", "role-down", "prefill-queue-saturation"))
def _orphan_bootstrapping():
    p, d, r = roles()
    p.gauges.update(num_prefill_bootstrap_queue_reqs=9, num_running_reqs=0, num_queue_reqs=0)
    stalled(p, "prefill_compute")
    p.counters["realtime_tokens{mode=prefill_cache}"] = (300_000, 0)
    p.logs = []
    d.gauges.update(num_running_reqs=0, num_decode_transfer_queue_reqs=0)
    stalled(d, "decode")
    d.logs = []
    return [p, d, r], {"gpus": gpus("NVIDIA H200", 143771, 120000, idle=True)}


@scenario("pd-prefill-fake-bootstrap-skip-radix-oom-crash", ANY, "https://github.com/sgl-project/sglang/pull/38094",
          "2026-09-05",
          "PD prefill stress-tested with long prompts and the prefix cache on, transfer stubbed: requests carrying the "
          "fake bootstrap host skip the radix cache insert, memory accumulates and the prefill crashes out of memory "
          "after a while (a leak; the PR was reverted three days later, the coupling remains). No line is quoted: the "
          "out-of-memory line is SGLang's own format (mem_cache allocation)",
          also=("cuda-oom", "kv-cache-exhausted", "role-down"),
          must_not=("config-crashloop", "kv-transfer-failure", "nccl-failure", "gpu-fault"))
def _fake_bootstrap_oom():
    p, d, r = roles()
    died(p, ["Prefill out of memory. Try to lower your batch size."], status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("client-fake-bootstrap-host-chunked-prefill-livelock-oom", ANY,
          "https://github.com/sgl-project/sglang/issues/36855", "2026-08-28",
          "any client can set bootstrap_host='2.2.2.2' on /generate, which marks the request skip_radix_cache_insert; "
          "a prompt long enough to be chunked then never advances its prefix, the scheduler refetches the same chunk and "
          "takes unowned KV slots until it is killed. The thread's quoted results are the client's (FAIL on the third "
          "request), so the bundle carries the killed scheduler only. Opened between #36377 (2026-08-25) and its fix "
          "PR #37024 (2026-08-29), estimated 2026-08-28",
          also=("role-down", "cuda-oom"), must_not=("config-crashloop", "kv-transfer-failure", "nccl-failure", "gpu-fault"))
def _bootstrap_host_livelock():
    p, d, r = roles()
    died(d, [], status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("dsv4-flash-dspark-sampling-device-assert-weekly", ANY, "https://github.com/sgl-project/sglang/issues/35324",
          "2026-08-18",
          "sglang 0.5.16, DeepSeek-V4-Flash-0731 with DSPARK on 8xH100: about once a week under production traffic the "
          "sampling check 'probability tensor contains either inf, nan or element < 0' fires in TensorCompare.cu, all "
          "eight TP ranks fail together and the server exits. The assert line is PyTorch's own format (as sglang#13030 "
          "quotes it); the error line is the thread's",
          also=("role-down",), must_not=NOT_INFRA)
def _dspark_assert():
    p, d, r = roles()
    died(d, raw([
        "/pytorch/aten/src/ATen/native/cuda/TensorCompare.cu:112: _assert_async_cuda_kernel: block: [0,0,0], thread: "
        "[0,0,0] Assertion `probability tensor contains either `inf`, `nan` or element < 0` failed.",
        "torch.AcceleratorError: CUDA error: device-side assert triggered",
    ]), status="6/ABRT", code="dumped")
    return [p, d, r], {"gpus": gpus(*H100, n=8)}


@scenario("tokenizer-workers-2-queue-overflow-requests-never-answered", ANY,
          "https://github.com/sgl-project/sglang/issues/33858", "2026-08-06",
          "sglang 0.5.16 serving deepseek-v4-flash-0731 with --tokenizer-worker-num 2, --max-running-requests 128, "
          "--max-queued-requests 96: under 3000 QPM the requests that overflow the queue never get an HTTP response; the "
          "scheduler drained (running 0, queue 0), /health answers 200 and new requests answer 200 while the lost ones "
          "stay ESTABLISHED (with one tokenizer worker the same run completes). The benchmark's stall is the trigger",
          must_not=("decode-wedged", "prefill-wedged", "config-crashloop", "role-down", "kv-transfer-failure", "cuda-oom"))
def _tokenizer_workers():
    p, d, r = roles()
    d.gauges.update(num_running_reqs=0, num_queue_reqs=0, token_usage=0.0, num_decode_transfer_queue_reqs=0)
    stalled(d, "decode")
    d.logs = []
    return [p, d, r], {"gpus": gpus(*H100, n=8),
                       "text": "benchmark stuck at 1309/4096: the remaining requests never get a response"}


# === healthy roles with alarming signs, threads opened after the cut-off =========================

@scenario("near-grafana-dashboard-no-data-metric-names", "healthy", "https://github.com/sgl-project/sglang/pull/33796",
          "2026-08-06",
          "the example Grafana dashboard queries sglang_* while the server exports sglang:*, so every engine panel shows "
          "'No data' for a server that is fine; the operator's words are the trigger",
          must_not=("unexplained", "role-down", "router-no-healthy-workers", "decode-wedged"))
def _grafana_no_data():
    p, d, r = roles()
    return [p, d, r], {"text": "grafana sglang dashboard shows No data on every panel"}


@scenario("near-fp8-kv-no-scaling-factors-warning", "healthy", "https://github.com/sgl-project/sglang/pull/33930",
          "2026-08-07",
          "FP8 KV cache without calibrated scales: every TP rank warns at load that it defaults the scaling factors to "
          "1.0 and 'may lead to less accurate results'; the PR drops the line as noise. The decode restarted two and a "
          "half minutes ago, warmed up and serves. The warning is the text the PR removes, in SGLang's format",
          must_not=("unexplained", "config-crashloop", "output-corruption", "role-down"))
def _fp8_scales_warning():
    p, d, r = roles()
    d.started = T0 - timedelta(seconds=150)
    warn = ("Using FP8 KV cache but no scaling factors provided. Defaulting to scaling factors of 1.0. "
            "This may lead to less accurate results!")
    d.logs = [warn] * 4 + [d.logs[0], d.logs[0]]
    return [p, d, r], {}


# === pre-cutoff fill: the latest unused threads before 2026-06-01 =================================

@scenario("glm51-hicache-evictable-full-one-tp-watchdog", "scheduler-watchdog",
          "https://github.com/sgl-project/sglang/issues/26357", "2026-05-26",
          "GLM-5.1 FP8 TP8 with FP8 KV, HiCache and EAGLE: after hours to days one TP scheduler stops making progress with "
          "the device pool almost entirely evictable and almost nothing available, and the watchdog kills the process; "
          "the lines are the thread's", also=("kv-cache-exhausted", "decode-wedged", "role-down"),
          must_not=("cuda-oom", "config-crashloop", "nccl-failure", "gpu-fault"), fill=True)
def _glm51_hang():
    p, d, r = roles()
    died(d, raw([
        "[full] total=464256, available=768, evictable=432960, protected=30464, session_held=0, uncached=0",
        "[2026-05-26 13:36:14 TP5] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
        "[2026-05-26 13:36:19] SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
    ]), status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("hicache-prefill-hisparse-decode-prefill-hang", "prefill-wedged",
          "https://github.com/sgl-project/sglang/issues/26092", "2026-05-22",
          "PD with HiCache on the prefill and HiSparse on the decode: even at concurrency 4 the prefill scheduler hangs, "
          "its /health times out and the router marks it unhealthy; decode requests time out after 600 s waiting for KV, "
          "siblings cascade, and the prefill shows aborts. The lines are the thread's own summary (its placeholders kept)",
          also=("kv-transfer-failure", "router-no-healthy-workers"),
          must_not=("config-crashloop", "cuda-oom", "healthy"), fill=True)
def _hicache_hisparse():
    p, d, r = roles()
    stalled(p, "prefill_compute")
    p.gauges.update(num_running_reqs=2, num_queue_reqs=3, num_prefill_bootstrap_queue_reqs=2)
    p.health, p.health_error = None, "timeout after 20.0 s"
    p.logs = raw(["Prefill bootstrap failed for request rank=X req.bootstrap_room=<id>",
                  "  with exception KVTransferError: Aborted by AbortReq"])
    d.logs = raw(["KVTransferError(bootstrap_room=<id>): Request <id> timed out after 600.0s in",
                  "KVPoll.WaitingForInput",
                  "KVTransferError: Failed due to an unknown reason from another rank"])
    d.counters["num_transfer_failed_reqs"] = (6, 2)
    r.gauges.update({"smg_worker_health{worker=http://10.0.0.1:30000}": 0})
    return [p, d, r], {}


@scenario("rtx-pro-6000-xid8-gsp-watchdog-sglang-fp8", "gpu-fault",
          "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1159", "2026-05-22",
          "one RTX PRO 6000 Blackwell Workstation Edition (driver 595.71.05) serving a Qwen3 FP8 model with SGLang: under "
          "sustained inference the GPU locks (RC watchdog, Xid 8) and only a reboot recovers it. The kernel lines are the "
          "thread's; the engine's death and nvidia-smi timing out are written as a probe would find that node",
          also=("role-down",), must_not=("config-crashloop", "cuda-oom", "kv-transfer-failure", "healthy"), fill=True)
def _xid8():
    p, d, r = roles()
    p.gpus = d.gpus = (0,)
    died(d, [], status="9/KILL", code="killed")
    kernel = ("2026-11-29T09:58:52+0000 node2 kernel: NVRM: krcWatchdog_IMPL: RC watchdog: GPU is probably locked!  "
              "Notify Timeout Seconds: 7\n"
              "2026-11-29T09:58:52+0000 node2 kernel: NVRM: Xid (PCI:0000:01:00): 8, pid=48694, name=python3, "
              "channel 0x00000008\n")
    one = gpu_csv(1, 12000).replace("NVIDIA H200", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition").replace("143771", "97887")
    return [p, d, r], {"kernel": {"node2": kernel}, "gpus": {"node1": one},
                       "gpu_error": {"node2": "nvidia-smi timed out after 10.0 s"}}


@scenario("glm5-nvfp4-eagle-b300-draft-graph-capture-sm100f", "config-crashloop",
          "https://github.com/sgl-project/sglang/issues/25563", "2026-05-18",
          "v0.5.12-cu130, GLM-5-NVFP4 with EAGLE on B300 (sm_103): the trtllm GEMM dispatcher picks an sm100f kernel and "
          "CUDA graph capture of the draft at bs=128 fails at every start (v0.5.11 works). The lines are the thread's "
          "(a comment of the day it was opened)", also=("role-down",),
          must_not=("cuda-oom", "gpu-fault", "kv-transfer-failure", "healthy"), fill=True)
def _b300_capture():
    p, d, r = roles()
    crashloop(d, raw([
        "Exception: Capture cuda graph failed: Error in function 'run' at",
        "  /workspace/csrc/trtllm_batched_gemm_runner.cu:276:",
        "  Error occurred when running GEMM! (numBatches: 256, GemmMNK: 128 1024 6144,",
        "  Kernel: bmm_Bfloat16_Bfloat16Bfloat16_Fp32_t128x8x128u2_s6_et128x8_m128x8x16",
        "          _c1x1x1_16dp256b_rM_BN_transOut_schPd2x1x2x3_bN_ldgsts_ldgstsSf",
        "          _rgTma_clmp_swiGlu_dynB_sm100f)",
    ]), restarts=4)
    return [p, d, r], {"gpus": gpus(*B300, n=8)}


@scenario("glm51-decode-single-batch-overlap-deepgemm-crash-0512", "config-crashloop",
          "https://github.com/sgl-project/sglang/issues/25491", "2026-05-16",
          "GLM-5.1-FP8 disaggregated decode on H100 (2P4D, EP32, DP attention, MTP, --enable-single-batch-overlap): ready "
          "on v0.5.11, but on v0.5.12 the decode crashes in DeepGEMM's masked overlap path and the container rotates. The "
          "lines are the traceback as the thread captured it (its own ellipses; the excerpt ends at line 410)",
          also=("role-down",), must_not=("cuda-oom", "kv-transfer-failure", "nccl-failure", "healthy"), fill=True)
def _sbo_crash():
    p, d, r = roles()
    crashloop(d, raw([
        "Traceback (most recent call last):",
        "  ...",
        '  File "/sgl-workspace/sglang/python/sglang/srt/layers/moe/moe_runner/deep_gemm.py", line 398, in ...',
        "    deep_gemm_return_value = deep_gemm_wrapper.grouped_gemm_nt_f8f8bf16_masked(...)",
        '  File "/sgl-workspace/sglang/python/sglang/srt/layers/moe/moe_runner/deep_gemm.py", line 410, in ...',
    ]), restarts=3)
    return [p, d, r], {"gpus": gpus(*H100, n=8)}


@scenario("near-dsv4-pd-1p1d-modest-speedup-slow-mooncake", "healthy",
          "https://github.com/sgl-project/sglang/issues/25471", "2026-05-16",
          "DeepSeek-V4 1P1D on B200 with Mooncake: PD gives only 15-20% more throughput than one server (V3.2 doubled) and "
          "the transfer logs show 30-35 MB/s against 150 MB/s for V3.2; a performance question: every request is served, "
          "nothing fails, tokens move", must_not=("kv-transfer-failure", "prefill-queue-saturation", "unexplained"),
          fill=True)
def _dsv4_pd_speed():
    p, d, r = roles()
    p.gauges.update(num_running_reqs=4, num_queue_reqs=6, token_usage=0.31)
    d.gauges.update(num_running_reqs=64, token_usage=0.28, num_decode_transfer_queue_reqs=3)
    d.counters["realtime_tokens{mode=decode}"] = (5_000_000, 6_300)
    return [p, d, r], {"gpus": gpus(*B200, n=8)}


@scenario("qwen36-27b-pd-nixl-decode-index-out-of-bounds", ANY, "https://github.com/sgl-project/sglang/issues/23574",
          "2026-04-23",
          "sglang 0.5.10.post1, Qwen3.6-27B PD with the NIXL backend on H100 behind sglang_router: requests succeed for a "
          "while, then the decode crashes with a CUDA device-side assert in IndexKernel ('index out of bounds'). The logs "
          "are attachments; the assert line is PyTorch's own format for that check, the error line PyTorch's",
          also=("role-down",), must_not=("config-crashloop", "cuda-oom", "nccl-failure", "gpu-fault"), fill=True)
def _qwen36_index():
    p, d, r = roles()
    died(d, raw([
        "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:111: operator(): block: [0,0,0], thread: [0,0,0] Assertion "
        '`-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed.',
        "torch.AcceleratorError: CUDA error: device-side assert triggered",
    ]), status="6/ABRT", code="dumped")
    return [p, d, r], {"gpus": gpus(*H100)}


def write() -> list[Path]:
    """Write every holdout3 bundle as ``holdout3/<name>.json`` (the part is this module's, not ``split.part``)."""
    HOLDOUT3.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, build in SCENARIOS.items():
        path = HOLDOUT3 / f"{name}.json"
        path.write_text(json.dumps(build(), indent=1) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write():
        print(written)
