"""Write the bundles no incident class claims (issue 24): real failures that fit none of the classes of
``spec/incidents.md`` (labelled ``any-finding``: any finding is right, "healthy" is a false all-clear),
and healthy roles that print lines which look alarming (labelled ``healthy``).

Written by writers who write no rules, from public threads opened before 2026-06-01 (the threads
opened after that day go to ``holdout/``, see ``holdout.py``). Each bundle keeps its thread's lines
verbatim; what the thread does not quote (unit state, metrics, /health) is written as that
SGLang version and systemd would show it (``deployments.py``), null where it could not have been
collected. ``label.opened`` is the day the thread was opened, as its page shows it. Run
``python -m tests.scenarios.unclaimed`` to rewrite them into their part (``split.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from tests.scenarios.compose import RoleSpec, T0, Writer, gpu_csv, register
from tests.scenarios.deployments import died, raw, roles
from tests.scenarios.split import write

SCENARIOS: dict[str, Callable[[], dict]] = {}
ANY = "any-finding"  # the label of a failure no class claims: any finding is right, none is a false all-clear
# Classes that advise a restart or a drain: wrong and unsafe on a failure that a request or a parser caused.
RESTARTING = ("decode-wedged", "prefill-wedged", "scheduler-watchdog", "nccl-failure", "gpu-fault", "kv-transfer-failure")


def scenario(name: str, expected: str, source: str, opened: str, note: str, also: tuple[str, ...] = (),
             must_not: tuple[str, ...] = ()) -> Callable[[Writer], Callable[[], dict]]:
    """Register a bundle; ``opened`` (ISO date) is when the thread was opened, which fixes its part."""
    return register(SCENARIOS, "unclaimed", name, {"expected": expected, "also": list(also), "must_not": list(must_not),
                                                   "source": source, "note": note, "opened": opened})


def canary(status: int | None, body: str | None, error: str | None = None) -> dict:
    """One short completion through the router, as the probe records it."""
    return {"extra": {"canary": {"ok": error is None and status == 200, "error": error, "elapsed_ms": 40.0,
                       "endpoint": "http://node1:8000/v1/chat/completions", "model": "qwen3-8b", "status": status,
                       "ttft_ms": None, "total_ms": 40.0, "tokens": 0, "body": body}}}


def gpus(name: str, total_mib: int, used_mib: int, n: int = 4, idle: bool = False) -> dict[str, str]:
    """nvidia-smi's rows on both nodes for the thread's GPU model (compose writes H200s by default); ``idle``: 0%
    utilisation, low power."""
    rows = gpu_csv(n, used_mib).replace("NVIDIA H200", name).replace("143771", str(total_mib))
    if idle:
        rows = rows.replace(", 87, 54, 412.5", ", 0, 36, 118.0")
    return {"node1": rows, "node2": rows}


def gpus_named(name: str, total_mib: int, used_mib: int) -> dict[str, dict[str, str]]:
    """``gpus`` as a node's ``gpus`` entry."""
    return {"gpus": gpus(name, total_mib, used_mib)}


def serving_errors(spec: RoleSpec, lines: list[str], tokens: str = "generation_tokens") -> RoleSpec:
    """A role that stays up and answers /health while its requests fail: no token moves, nothing runs."""
    spec.logs = lines
    spec.gauges.update(num_running_reqs=0, num_queue_reqs=0)
    first, _ = spec.counters.get(tokens, (900_000, 0))
    spec.counters[tokens] = (first, 0)
    return spec


# === failures no class claims ====================================================================

@scenario("xgrammar-recursion-crash", ANY, "https://github.com/sgl-project/sglang/issues/7903", "2025-07-09",
          "0.4.9, TP8: an error raised by xgrammar (its recursion limit) on a structured-output request is not caught; "
          "4 of 600 requests kept running with their token counts growing, then the scheduler crashed and took the "
          "server down (a request's grammar, not the GPU, the network or a hang)",
          also=("role-down",), must_not=("config-crashloop", "cuda-oom", *RESTARTING))
def _xgrammar_recursion():
    p, d, r = roles("0.4.6", "sgl-router")
    died(d, raw([
        '  File "~/miniconda3/envs/sglang/lib/python3.10/site-packages/sglang/srt/managers/scheduler.py", line 2747, in run_scheduler_process',
        "    scheduler.event_loop_overlap()",
    ]), status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("recursive-grammar-pd-decode-crash", ANY, "https://github.com/sgl-project/sglang/issues/7639", "2025-06-29",
          "structured outputs with a recursive JSON schema crash the deployment: on a PD decode with DP attention the "
          "scheduler hits an exception in the grammar path (stack overflow by recursion depth) and the decode dies; "
          "only llguidance survives it", also=("role-down", "router-no-healthy-workers"),
          must_not=("config-crashloop", "cuda-oom", *RESTARTING))
def _recursive_grammar_pd():
    p, d, r = roles("0.4.6", "sgl-router")
    died(d, raw([  # the thread's log viewer shows the newest line first; kept in its order
        '2025-07-01T00:57:53+08:00\t  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 1645, in prepare_dp_attn_batch',
        "2025-07-01T00:57:53+08:00\t    batch, _ = self.prepare_dp_attn_batch(batch)",
        '2025-07-01T00:57:53+08:00\t  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/disaggregation/decode.py", line 592, in _prepare_idle_batch_and_run',
        "2025-07-01T00:57:53+08:00\t    batch, result = self._prepare_idle_batch_and_run(",
        '2025-07-01T00:57:53+08:00\t  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/disaggregation/decode.py", line 691, in event_loop_overlap_disagg_decode',
        "2025-07-01T00:57:53+08:00\t    return func(*args, **kwargs)",
        '2025-07-01T00:57:53+08:00\t  File "/usr/local/lib/python3.10/dist-packages/torch/utils/_contextlib.py", line 116, in decorate_context',
        "2025-07-01T00:57:53+08:00\t    scheduler.event_loop_overlap_disagg_decode()",
        '2025-07-01T00:57:53+08:00\t  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/managers/scheduler.py", line 2311, in run_scheduler_process',
        "2025-07-01T00:57:53+08:00\t[2025-06-30 16:57:53 DP7 TP7] Scheduler hit an exception: Traceback (most recent call last):",
        "2025-07-01T00:57:49+08:00\tExtension modules: numpy._core._multiarray_umath, numpy.linalg._umath_linalg, charset_normalizer.md, "
        "requests.packages.charset_normalizer.md, requests.packa",
    ]), status="9/KILL", code="killed")
    r.gauges.update({"sgl_router_active_workers": 1, "sgl_router_worker_health{worker=http://10.0.0.2:30001}": 0})
    return [p, d, r], {}


@scenario("detokenizer-exception-interns1", ANY, "https://github.com/sgl-project/sglang/issues/9329", "2025-08-19",
          "serving the InternS1 series, the DetokenizerManager hits an exception while decoding a batch's token ids "
          "(the model's tokenizer), which ends the server: a tokenizer fault, not a scheduler hang",
          also=("role-down",), must_not=("config-crashloop", "cuda-oom", *RESTARTING))
def _detokenizer_interns1():
    p, d, r = roles("0.4.6", "sgl-router")
    died(d, raw([
        "2025-08-15 14:25:48] DetokenizerManager hit an exception: Traceback (most recent call last):",
        '  File "/nvme1/zhouxinyu/miniconda3/envs/sglang-intern/lib/python3.10/site-packages/sglang/srt/managers/detokenizer_manager.py", line 275, in run_detokenizer_process',
        "    manager.event_loop()",
        '  File "/nvme1/zhouxinyu/miniconda3/envs/sglang-intern/lib/python3.10/site-packages/sglang/srt/managers/detokenizer_manager.py", line 110, in event_loop',
        "    output = self._request_dispatcher(recv_obj)",
        '  File "/nvme1/zhouxinyu/miniconda3/envs/sglang-intern/lib/python3.10/site-packages/sglang/utils.py", line 479, in __call__',
        "    return fn(obj)",
    ]), status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("eagle3-index-assert-crash", ANY, "https://github.com/sgl-project/sglang/issues/7139", "2025-06-13",
          "0.4.7 with EAGLE3 speculative decoding: a draft-token index out of range trips a device-side assert "
          "(indexSelectSmallIndex) and the scheduler hits an exception; a speculative-decoding bug, not a GPU fault",
          also=("role-down",), must_not=("config-crashloop", "cuda-oom", *RESTARTING))
def _eagle3_assert():
    p, d, r = roles("0.4.6", "sgl-router")
    died(d, raw([
        "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1500: indexSelectSmallIndex: block: [32,0,0], thread: [63,0,0] "
        "Assertion `srcIndex < srcSelectDimSize` failed.",
        "[2025-06-13 09:59:00] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/hy-tmp/sglang-0.4.7/python/sglang/srt/managers/scheduler.py", line 2506, in run_scheduler_process',
        "    scheduler.event_loop_normal()",
        '  File "/usr/local/lib/python3.11/dist-packages/torch/utils/_contextlib.py", line 116, in decorate_context',
        "    return func(*args, **kwargs)",
        "           ^^^^^^^^^^^^^^^^^^^^^",
        '  File "/hy-tmp/sglang-0.4.7/python/sglang/srt/managers/scheduler.py", line 664, in event_loop_normal',
        "    result = self.run_batch(",
    ]), status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("speculative-decoding-scheduler-exception", ANY, "https://github.com/sgl-project/sglang/issues/9521", "2025-08-22",
          "speculative decoding (a SpecForge-trained draft) makes the scheduler hit an exception in run_batch while "
          "serving; the server goes down", also=("role-down",), must_not=("config-crashloop", "cuda-oom", *RESTARTING))
def _spec_decoding_exception():
    p, d, r = roles("0.4.6", "sgl-router")
    died(d, raw([
        "[2025-08-22 21:41:04] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/workspace/output/SpecForge/.venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 2769, in run_scheduler_process',
        "    scheduler.event_loop_normal()",
        '  File "/workspace/output/SpecForge/.venv/lib/python3.12/site-packages/torch/utils/_contextlib.py", line 116, in decorate_context',
        "    return func(*args, **kwargs)",
        "           ^^^^^^^^^^^^^^^^^^^^^",
        '  File "/workspace/output/SpecForge/.venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 772, in event_loop_normal',
        "    result = self.run_batch(batch)",
        "             ^^^^^^^^^^^^^^^^^^^^^",
    ]), status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("missing-chat-template-every-chat-500", ANY, "https://github.com/sgl-project/sglang/issues/2431", "2024-12-10",
          "0.3.6 serving Llama-3.2-1B (a base model without a chat template): every /v1/chat/completions request "
          "fails in apply_chat_template with a ValueError and a 500, while the server stays up and /health answers",
          must_not=("config-crashloop", "role-down", "cuda-oom", *RESTARTING))
def _missing_chat_template():
    p, d, r = roles("0.4.3", "mini_lb")
    serving_errors(d, raw([
        '  File "/home/mi/.cache/pypoetry/virtualenvs/camel-ai-34ULexV3-py3.10/lib/python3.10/site-packages/sglang/srt/openai_api/adapter.py", line 885, in v1_chat_generate_request',
        "    prompt_ids = tokenizer_manager.tokenizer.apply_chat_template(",
        '  File "/home/mi/.cache/pypoetry/virtualenvs/camel-ai-34ULexV3-py3.10/lib/python3.10/site-packages/transformers/tokenization_utils_base.py", line 1617, in apply_chat_template',
        "    chat_template = self.get_chat_template(chat_template, tools)",
        '  File "/home/mi/.cache/pypoetry/virtualenvs/camel-ai-34ULexV3-py3.10/lib/python3.10/site-packages/transformers/tokenization_utils_base.py", line 1785, in get_chat_template',
        "    raise ValueError(",
        "ValueError: Cannot use chat template functions because tokenizer.chat_template is not set and no template argument "
        "was passed! For information about writing templates and setting the tokenizer.chat_template attribute, please "
        "see the documentation at https://huggingface.co/docs/transformers/main/en/chat_templating",
    ]))
    d.gauges.pop("num_decode_transfer_queue_reqs", None)
    return [p, d, r], canary(500, "Internal Server Error")


@scenario("gemma2-system-role-500", ANY, "https://github.com/sgl-project/sglang/issues/892", "2024-08-02",
          "gemma-2-2b behind the OpenAI API (SGLang 0.2.x): a request with a system message fails in the chat template "
          "('System role not supported') and answers 500 Internal Server Error; the server keeps running. SGLang "
          "0.2 serves no /metrics", must_not=("config-crashloop", "role-down", *RESTARTING))
def _gemma_system_role():
    p, d, r = roles("0.4.3", "mini_lb")
    d.logs = raw([
        'INFO:     192.168.137.9:50376 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error',
        "ERROR:    Exception in ASGI application",
        "Traceback (most recent call last):",
        '  File "/home/gtlm/anaconda3/envs/llama_factory/lib/python3.11/site-packages/uvicorn/protocols/http/httptools_impl.py", line 399, in run_asgi',
        "    result = await app(  # type: ignore[func-returns-value]",
        "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '  File "/home/gtlm/anaconda3/envs/llama_factory/lib/python3.11/site-packages/uvicorn/middleware/proxy_headers.py", line 70, in __call__',
        "    return await self.app(scope, receive, send)",
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '  File "/home/gtlm/anaconda3/envs/llama_factory/lib/python3.11/site-packages/fastapi/applications.py", line 1054, in __call__',
        "    await super().__call__(scope, receive, send)",
    ])
    for spec in (p, d):  # SGLang 0.2 has no Prometheus endpoint
        spec.metrics_error, spec.nulls = "HTTP 404 Not Found", True
    return [p, d, r], canary(500, "Internal Server Error")


@scenario("qwen25-vl-image-request-crash", ANY, "https://github.com/sgl-project/sglang/issues/5674", "2025-04-23",
          "Qwen2.5-VL: an image+text request makes the scheduler fail in run_batch and the SGLang process closes "
          "(a multimodal input path, not memory, not the network)", also=("role-down",),
          must_not=("config-crashloop", "cuda-oom", *RESTARTING))
def _qwen25_vl_crash():
    p, d, r = roles("0.4.3", "sgl-router")
    died(d, raw([
        'File "/mnt/new_pfs/liming_team/wyq/sglang/python/sglang/srt/managers/scheduler.py", line 2071, in run_scheduler_process',
        "    scheduler.event_loop_normal()",
        '  File "/root/anaconda3/envs/sglang/lib/python3.10/site-packages/torch/utils/_contextlib.py", line 116, in decorate_context',
        "    return func(*args, **kwargs)",
        '  File "/mnt/new_pfs/liming_team/wyq/sglang/python/sglang/srt/managers/scheduler.py", line 617, in event_loop_normal',
        "    result = self.run_batch(batch)",
    ]), status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("lora-name-from-served-model-colon", ANY, "https://github.com/sgl-project/sglang/issues/12745", "2025-11-06",
          "a served model name with a colon (gpt-oss:120b) is read as model:adapter; every request answers 400 'The "
          "following requested LoRA adapters are not loaded: 120b' while the server itself is fine",
          must_not=("config-crashloop", "role-down", "router-no-healthy-workers", *RESTARTING))
def _lora_colon():
    p, d, r = roles("0.5.3", "smg")
    for spec in (p, d):
        spec.gauges.update(num_running_reqs=0, num_queue_reqs=0)
        spec.counters.update(prompt_tokens=(spec.counters["prompt_tokens"][0], 0),
                             generation_tokens=(spec.counters["generation_tokens"][0], 0))
    d.logs = []
    r.counters.update({"smg_router_requests": (5000, 30), "smg_http_responses{status_code=400}": (120, 30)})
    return [p, d, r], canary(400, "{'object': 'error', 'message': 'The following requested LoRA adapters are not loaded: "
                                  "120b\\nLoaded adapters: dict_keys([]).', 'type': 'BadRequestError', 'param': None, 'code': 400}")


@scenario("stream-disconnect-false-positive-500", ANY, "https://github.com/sgl-project/sglang/issues/17031", "2026-01-13",
          "high-concurrency streaming: the server takes live clients for disconnected ('Request is disconnected from "
          "the client side (type 1)'), aborts their requests and answers 500, while decoding goes on for the rest",
          must_not=("config-crashloop", "role-down", *RESTARTING))
def _stream_disconnect_500():
    p, d, r = roles()
    d.logs = raw([
        "[2026-01-12 21:03:30] Task exception was never retrieved",
        "future: <Task finished name='Task-993871' coro=<<async_generator_asend without __name__>()> exception=ValueError"
        "(\"Request is disconnected from the client side (type 1). Abort request obj.rid='f2ea4cfe82f6489a91e72145abd6db25'\")>",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.12/asyncio/tasks.py", line 520, in wait_for',
        "    return await fut",
        "           ^^^^^^^^^",
        '  File "/usr/lib/python3.12/asyncio/locks.py", line 212, in wait',
        "    await fut",
        "asyncio.exceptions.CancelledError",
    ]) + d.logs
    d.counters["num_aborted_requests"] = (40, 12)
    r.counters["smg_http_responses{status_code=500}"] = (200, 12)
    return [p, d, r], {}


# === healthy roles with alarming lines ===========================================================

@scenario("near-default-moe-kernel-config-warning", "healthy", "https://github.com/kvcache-ai/ktransformers/issues/2008",
          "2026-05-16",
          "SGLang with kt-kernel warns at every start-up that it uses the default MoE kernel config ('Performance might "
          "be sub-optimal! Config file not found'); expected and harmless (kt-kernel replaces the MoE path); serving",
          must_not=("config-crashloop", "unexplained"))
def _moe_config_warning():
    p, d, r = roles()
    for spec in (p, d):
        spec.logs = raw([
            "[2026-05-15 20:31:38] Using default MoE kernel config. Performance might be sub-optimal! Config file not "
            "found at /.../.venv/lib/python3.12/site-packages/sglang/srt/layers/moe/fused_moe_triton/configs/triton_3_5_1/"
            "E=384,N=14336,device_name=NVIDIA_RTX_PRO_6000_Blackwell_Max-Q_Workstation_Edition.json, you can create them "
            "with https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton",
        ]) + spec.logs
    return [p, d, r], gpus_named("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 97887, 88000)


@scenario("near-moe-config-fallback-triton-version", "healthy", "https://github.com/sgl-project/sglang/pull/19003",
          "2026-02-21",
          "at start-up every TP rank says its MoE kernel config is missing for this Triton version and falls back "
          "('Performance might be sub-optimal!'); the server then serves normally", must_not=("config-crashloop", "unexplained"))
def _moe_config_fallback():
    p, d, r = roles()
    d.logs = raw([
        "[2026-02-21 10:48:17 TP3] Using MoE kernel config with down_moe=False. Performance might be sub-optimal! Config "
        "file not found at /sgl-workspace/sglang_dev2/python/sglang/srt/layers/moe/fused_moe_triton/configs/triton_3_5_1/"
        "E=128,N=192,device_name=NVIDIA_H200_down.json, you can create them with "
        "https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton",
        "[2026-02-21 10:48:18 TP2] Config file not found at /sgl-workspace/sglang_dev2/python/sglang/srt/layers/moe/"
        "fused_moe_triton/configs/triton_3_5_1/E=128,N=192,device_name=NVIDIA_H200.json. Fallback to triton version 3.2.0 "
        "and use MoE kernel config from /sgl-workspace/sglang_dev2/python/sglang/srt/layers/moe/fused_moe_triton/configs/"
        "triton_3_2_0/E=128,N=192,device_name=NVIDIA_H200.json. Performance might be sub-optimal!",
    ]) + d.logs
    return [p, d, r], {}


@scenario("near-no-decode-batch-lines", "healthy", "https://github.com/sgl-project/sglang/issues/9099", "2025-08-12",
          "after an upgrade the server logs no 'Decode batch' lines any more, only its access lines with 200 OK; "
          "requests are served and the token counters move (the batch lines are logged at another interval)",
          must_not=("decode-wedged", "unexplained"))
def _no_decode_batch_lines():
    p, d, r = roles("0.5.3", "sgl-router")
    d.logs = raw([
        '[2025-08-11 21:13:51] INFO:     10.0.0.2:55254 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        '[2025-08-11 21:13:55] INFO:     10.0.0.2:55236 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        '[2025-08-11 21:13:56] INFO:     10.0.0.2:55222 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        '[2025-08-11 21:13:58] INFO:     10.0.0.2:55228 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        '[2025-08-11 21:14:03] INFO:     10.0.0.2:55238 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        '[2025-08-11 21:14:04] INFO:     10.0.0.2:55230 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    ])
    return [p, d, r], {}


@scenario("near-client-disconnect-abort-type3", "healthy", "https://github.com/sgl-project/sglang/issues/13419", "2025-11-17",
          "behind the sglang router, '[http_server] Error: Request is disconnected from the client side (type 3). Abort "
          "request' now and then; a maintainer: caused by the user closing the connection, safe, it frees the request's "
          "resources", must_not=("decode-wedged", "kv-transfer-failure", "unexplained"))
def _client_disconnect_type3():
    p, d, r = roles("0.5.3", "sgl-router")
    d.logs = d.logs + raw([  # quoted without its stamp in the thread
        "[http_server] Error: Request is disconnected from the client side (type 3). Abort request "
        "obj.rid='61165a643f00435ca1112901a78071f7'",
    ]) + d.logs
    d.counters["num_aborted_requests"] = (14, 1)
    return [p, d, r], {}


@scenario("near-log-requests-finish-lines", "healthy", "https://github.com/sgl-project/sglang/pull/11177", "2025-10-02",
          "with --log-requests the server prints a long 'Finish: obj=GenerateReqInput(...)' line per request (a dump "
          "with None fields and a retraction count of 0); verbose, not an error", must_not=("unexplained", "kv-cache-exhausted"))
def _finish_lines():
    p, d, r = roles("0.5.3", "sgl-router")
    d.logs = raw([
        "[2025-10-02 18:49:22] Finish: obj=GenerateReqInput(video_data=None, rid='ad65f5a5c1134fc08ce95cbad9285e71', "
        "return_logprob=False, logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, return_text_in_logprobs=False, "
        "stream=False, log_metrics=True, return_hidden_states=False, modalities=None, session_params=None, lora_id=None, "
        "custom_logit_processor=None, bootstrap_host=None, bootstrap_port=None, bootstrap_room=None, bootstrap_pair_key=None, "
        "data_parallel_rank=None, background=False, conversation_id=None, priority=None, extra_key=None, no_logs=False, "
        "custom_labels=None, label=None, return_bytes=False), out={'meta_info': {'id': 'ad65f5a5c1134fc08ce95cbad9285e71', "
        "'finish_reason': {'type': 'length', 'length': 82}, 'prompt_tokens': 24, 'weight_version': 'default', "
        "'completion_tokens': 82, 'cached_tokens': 14, 'total_retractions': 0, 'e2e_latency': 0.5854864120483398}}",
    ]) + d.logs
    return [p, d, r], {}


@scenario("near-running-gauge-frozen-after-idle", "healthy", "https://github.com/sgl-project/sglang/pull/26495", "2026-05-27",
          "disaggregated DeepSeek-V4-Flash: the last 'Decode batch' line said 24 running, then the scheduler went idle; "
          "sglang:num_running_reqs stays at 24 for up to 30 s (the idle path's throttle) while no token moves, because "
          "nothing runs. Idle, not wedged: /health answers, the batch lines stopped with the requests",
          must_not=("decode-wedged", "scheduler-watchdog", "unexplained"))
def _running_gauge_frozen():
    p, d, r = roles()
    d.gauges.update(num_running_reqs=24, num_decode_transfer_queue_reqs=0)
    d.counters["realtime_tokens{mode=decode}"] = (5_000_000, 0)
    p.gauges.update(num_running_reqs=0, num_queue_reqs=0)
    p.counters["realtime_tokens{mode=prefill_compute}"] = (1_200_000, 0)
    p.counters["realtime_tokens{mode=prefill_cache}"] = (300_000, 0)
    p.logs = []
    # decoding until 21 s before the probe (one line a second), then idle: the gauge keeps the last batch's 24
    d.logs = [f"Decode batch, #running-req: 24, #full token: {41000 + 24 * 40 * i}, full token usage: 0.34, #swa token: 3000, "
              "swa token usage: 0.12, pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, "
              "cuda graph: True, gen throughput (token/s): 960.00, #queue-req: 0" for i in range(40)]
    d.started = T0 - timedelta(hours=2)
    r.counters["smg_router_requests"] = (5000, 0)
    return [p, d, r], {}


# === test/: failures no class claims ==============================================================

@scenario("standalone-spec-merge-batch-size-mismatch", ANY, "https://github.com/sgl-project/sglang/pull/10090", "2025-09-05",
          "standalone speculative decoding under 50 parallel requests: between 1000 and 2000 requests the scheduler "
          "crashes merging the draft state of two batches ('Sizes of tensors' mismatch); opened in early September "
          "2025 (the crash is quoted in a comment of 2025-11-03)", also=("role-down",),
          must_not=("config-crashloop", "cuda-oom", *RESTARTING))
def _standalone_spec_merge():
    p, d, r = roles("0.5.3", "sgl-router")
    died(d, raw([
        "[2025-11-03 11:56:54] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/home/ubuntu/miniconda3/lib/python3.10/site-packages/sglang/srt/managers/scheduler.py", line 2612, in run_scheduler_process',
        "    scheduler.event_loop_normal()",
        '  File "/home/ubuntu/miniconda3/lib/python3.10/site-packages/torch/utils/_contextlib.py", line 120, in decorate_context',
        "    return func(*args, **kwargs)",
        '  File "/home/ubuntu/miniconda3/lib/python3.10/site-packages/sglang/srt/managers/scheduler.py", line 814, in event_loop_normal',
        "    batch = self.get_next_batch_to_run()",
        '  File "/home/ubuntu/miniconda3/lib/python3.10/site-packages/sglang/srt/managers/scheduler.py", line 1570, in get_next_batch_to_run',
        "    self.running_batch.merge_batch(self.last_batch)",
        '  File "/home/ubuntu/miniconda3/lib/python3.10/site-packages/sglang/srt/managers/schedule_batch.py", line 1692, in merge_batch',
        "    self.spec_info.merge_batch(other.spec_info)",
        '  File "/home/ubuntu/miniconda3/lib/python3.10/site-packages/sglang/srt/speculative/eagle_utils.py", line 210, in merge_batch',
        "    self.hidden_states = torch.cat(",
        "RuntimeError: Sizes of tensors",
    ]), status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("nextn-grammar-finish-scheduler-exception", ANY, "https://github.com/sgl-project/sglang/pull/21475", "2026-03-26",
          "NEXTN speculative decoding (3 steps, topk 1, 4 draft tokens): a batch of requests makes the scheduler hit an "
          "exception because a grammar-based finish is missed on the speculative path; the server dies while serving",
          also=("role-down",), must_not=("config-crashloop", "cuda-oom", *RESTARTING))
def _nextn_grammar_finish():
    p, d, r = roles()
    died(d, raw([
        "2026-03-18 11:22:05.874 INFO 120984 [ TP0 scheduler_metrics_mixin.py:415] Decode batch, #running-req: 2, #full token: "
        "5046, full token usage: 0.01, mamba num: 2, mamba usage: 0.08, accept len: 2.64, accept rate: 0.66, cuda graph: True, "
        "gen throughput (token/s): 242.08, #queue-req: 0",
        "2026-03-18 11:22:06.729 INFO 120984 [ TP0 schedule_batch.py:1159] Req Time Stats(rid=c53621d5522744e8ad48bc18d668786f, "
        "input len=2212, output len=419, type=unified): queue_duration=0.31ms, forward_duration=5247.75ms, start_time=11390760.469",
        "2026-03-18 11:22:06.731 ERROR 120984 [ TP0 scheduler.py:3190] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 3171, in run_scheduler_process',
        "    scheduler.event_loop_normal()",
        '  File "/opt/conda/lib/python3.12/site-packages/torch/utils/_contextlib.py", line 120, in decorate_context',
        "    return func(*args, **kwargs)",
        "           ^^^^^^^^^^^^^^^^^^^^^",
        '  File "/opt/conda/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 1118, in event_loop_normal',
    ]), status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("xgrammar-special-token-crash", ANY, "https://github.com/sgl-project/sglang/issues/3108", "2025-01-23",
          "a structured-output grammar with a <think> block crashes the scheduler about once in 30 000 requests (once a "
          "day); with xgrammar 0.1.15 still 'Scheduler hit an exception' (quoted 2025-03-26)", also=("role-down",),
          must_not=("config-crashloop", "cuda-oom", *RESTARTING))
def _xgrammar_special_token():
    p, d, r = roles("0.4.3", "sgl-router")
    died(d, raw(["[2025-03-26 16:49:51 TP0] Scheduler hit an exception: Traceback (most recent call last):"]),
         status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("eagle-decode-crash-after-some-requests", ANY, "https://github.com/sgl-project/sglang/issues/5491", "2025-04-17",
          "EAGLE speculative decoding: after some requests finished successfully the server crashes in run_batch",
          also=("role-down",), must_not=("config-crashloop", "cuda-oom", *RESTARTING))
def _eagle_crash_after_requests():
    p, d, r = roles("0.4.3", "sgl-router")
    died(d, raw([
        "[2025-04-17 16:15:33 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.10/site-packages/sglang/srt/managers/scheduler.py", line 2070, in run_scheduler_process',
        "    scheduler.event_loop_normal()",
        '  File "/opt/conda/lib/python3.10/site-packages/torch/utils/_contextlib.py", line 116, in decorate_context',
        "    return func(*args, **kwargs)",
        '  File "/opt/conda/lib/python3.10/site-packages/sglang/srt/managers/scheduler.py", line 618, in event_loop_normal',
        "    result = self.run_batch(batch)",
        '  File "/opt/conda/lib/python3.10/site-packages/sglang/srt/managers/scheduler.py", line 1430, in run_batch',
    ]), status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("vision-image-prompt-offline-crash", ANY, "https://github.com/sgl-project/sglang/issues/2263", "2024-11-29",
          "Llama-3.2-90B-Vision on 8 A100 without internet access: text prompts work, an image prompt stalls for minutes "
          "then fails with an exception in the ASGI application and the server crashes (the image path needs the hub)",
          also=("role-down",), must_not=("config-crashloop", "cuda-oom", *RESTARTING))
def _vision_offline_crash():
    p, d, r = roles("0.4.3", "mini_lb")
    died(d, raw(["[2024-11-27 12:08:03] ERROR:    Exception in ASGI application"]), status="9/KILL", code="killed")
    return [p, d, r], gpus_named("NVIDIA A100-SXM4-80GB", 81920, 76000)


@scenario("pd-decode-grammar-rejects-first-token", ANY, "https://github.com/sgl-project/sglang/pull/21964", "2026-04-02",
          "PD with a JSON schema: the decode compiles its own grammar, which rejects the first token the prefill sampled "
          "(no grammar state crosses the transfer), so structured requests abort at their first decode step; the pair "
          "stays up and the transfer itself succeeds", must_not=("kv-transfer-failure", "config-crashloop", *RESTARTING))
def _pd_grammar_first_token():
    p, d, r = roles()
    d.counters["num_aborted_requests"] = (30, 9)
    return [p, d, r], canary(200, '{"choices": [{"finish_reason": "abort"}]}')


@scenario("lora-run-crash-after-prefills", ANY, "https://github.com/sgl-project/sglang/issues/3713", "2025-02-20",
          "serving with LoRA adapters: after a run of one-request prefill batches the server crashes (the thread quotes "
          "the batch lines before the death)", also=("role-down",), must_not=("config-crashloop", "cuda-oom", *RESTARTING))
def _lora_crash():
    p, d, r = roles("0.4.3", "sgl-router")
    died(d, raw(["[2025-02-22 00:51:13 TP0] Prefill batch. #new-seq: 1, #new-token: 64, #cached-token: 0, cache hit rate: 0.00%, "
                 "token usage: 0.02, #running-req: 0, #queue-req: 1"] * 6 +
                ["[2025-02-22 00:51:13 TP0] Prefill batch. #new-seq: 1, #new-token: 64, #cached-token: 0, cache hit rate: 0.00%, "
                 "token usage: 0.03, #running-req: 0, #queue-req: 1"] * 2), status="9/KILL", code="killed")
    return [p, d, r], {}


@scenario("npu-eagle3-json-schema-intermittent-crash", ANY, "https://github.com/sgl-project/sglang/issues/20148", "2026-03-09",
          "Ascend NPU, EAGLE3 with xgrammar: after several consecutive json_schema requests the service crashes "
          "intermittently (worse with many draft tokens); the thread quotes no line, and nvidia-smi cannot run on an NPU "
          "host", also=("role-down",), must_not=("config-crashloop", "cuda-oom", *RESTARTING))
def _npu_eagle3_json():
    p, d, r = roles()
    died(d, [], status="9/KILL", code="killed")
    return [p, d, r], {"gpu_error": {"node1": "nvidia-smi: command not found", "node2": "nvidia-smi: command not found"}}


# === test/: healthy roles with alarming signs ======================================================

@scenario("near-idle-gen-throughput-last-value-0.4", "healthy", "https://github.com/sgl-project/sglang/issues/4244", "2025-03-10",
          "SGLang 0.4.3 with no request: sglang:gen_throughput keeps the last computed value (a gauge, not reset when idle); "
          "nothing runs or waits and no counter moves. Idle, not wedged", must_not=("decode-wedged", "prefill-wedged", "unexplained"))
def _idle_gauge_04():
    p, d, r = roles("0.4.3", "sgl-router")
    for spec in (p, d):
        spec.gauges.update(num_running_reqs=0, num_queue_reqs=0)
        spec.counters = {k: (v[0], 0) for k, v in spec.counters.items()}
        spec.logs = []
    d.gauges["gen_throughput"] = 186.64
    r.counters = {k: (v[0], 0) for k, v in r.counters.items()}
    return [p, d, r], {}


@scenario("near-slow-request-finish-log", "healthy", "https://github.com/sgl-project/sglang/pull/15759", "2025-12-24",
          "with SGLANG_LOG_REQUEST_EXCEEDED_MS=20000 the server logs a 'Finish: obj=GenerateReqInput(...)' dump only for "
          "requests slower than 20 s; a slow request finished, nothing is wrong", must_not=("unexplained", "decode-wedged"))
def _slow_request_log():
    p, d, r = roles()
    d.logs = raw([
        "[2025-12-24 21:05:35] Finish: obj=GenerateReqInput(validation_time=2.386048436164856e-05, received_time=1766581510.102859, "
        "received_time_perf=13744958.705178814, rid='request_id-test', http_worker_ipc=None, video_data=None, return_logprob=False, "
        "logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, return_text_in_logprobs=True, stream=False, "
        "log_metrics=True, return_hidden_states=False, return_routed_experts=False, modalities=['image'], session_params=None, "
        "lora_id=None, custom_logit_processor=None, bootstrap_host=None, bootstrap_port=None, bootstrap_room=None, "
        "bootstrap_pair_key=None, decode_tp_size=None, require_reasoning=False, data_parallel_rank=None, background=False, "
        "conversation_id=None, priority=None, extra_key=None, no_logs=False, custom_labels=None, return_bytes=False,",
    ]) + d.logs
    return [p, d, r], {}


@scenario("near-client-invalid-grammar-rejected", "healthy", "https://github.com/sgl-project/sglang/pull/20467", "2026-03-12",
          "a client sends a JSON schema with a typo ('strng'); the grammar fails to compile and that request is aborted with "
          "'Invalid grammar request'; the server and every other request are fine", must_not=("unexplained", "config-crashloop"))
def _client_invalid_grammar():
    p, d, r = roles()
    p.logs = raw(["Invalid grammar request: req.grammar_key=('json', '{\"type\": \"strng\"}')"]) + p.logs
    p.counters["num_aborted_requests"] = (2, 1)
    return [p, d, r], {}


@scenario("near-busy-0.4.6-slower-than-vllm", "healthy", "https://github.com/sgl-project/sglang/issues/6291", "2025-05-14",
          "SGLang 0.4.6 under a benchmark: prefill batches with high cache hits and a stream of 200 OK; the thread finds it "
          "slower than vLLM 0.8.5, a performance comparison, not a fault", must_not=("prefill-queue-saturation", "unexplained"))
def _busy_046():
    p, d, r = roles("0.4.6", "sgl-router")
    p.logs = raw([
        "[2025-05-14 09:31:43] Prefill batch. #new-seq: 2, #new-token: 2, #cached-token: 8027, token usage: 0.26, #running-req: 28, #queue-req: 0",
        '[2025-05-14 09:31:43] INFO:     127.0.0.1:20504 - "POST /v1/completions HTTP/1.1" 200 OK',
        '[2025-05-14 09:31:43] INFO:     127.0.0.1:20520 - "POST /v1/completions HTTP/1.1" 200 OK',
        '[2025-05-14 09:31:43] INFO:     127.0.0.1:20534 - "POST /v1/completions HTTP/1.1" 200 OK',
        '[2025-05-14 09:31:43] INFO:     127.0.0.1:20546 - "POST /v1/completions HTTP/1.1" 200 OK',
        '[2025-05-14 09:31:43] INFO:     127.0.0.1:20554 - "POST /v1/completions HTTP/1.1" 200 OK',
        "[2025-05-14 09:31:43] Prefill batch. #new-seq: 4, #new-token: 4, #cached-token: 16030, token usage: 0.30, #running-req: 30, #queue-req: 0",
        '[2025-05-14 09:31:43] INFO:     127.0.0.1:20562 - "POST /v1/completions HTTP/1.1" 200 OK',
        '[2025-05-14 09:31:43] INFO:     127.0.0.1:20572 - "POST /v1/completions HTTP/1.1" 200 OK',
        '[2025-05-14 09:31:43] INFO:     127.0.0.1:20586 - "POST /v1/completions HTTP/1.1" 200 OK',
        "[2025-05-14 09:31:43] Prefill batch. #new-seq: 5, #new-token: 5, #cached-token: 20050, token usage: 0.34, #running-req: 34, #queue-req: 0",
    ])
    p.gauges.update(num_running_reqs=34, num_queue_reqs=0, token_usage=0.34)
    return [p, d, r], {}


@scenario("near-dp-attention-benchmark-metrics-only", "healthy", "https://github.com/sgl-project/sglang/pull/5740", "2025-04-25",
          "DeepSeek-V3 with DP attention (TP8, DP8) under a random 1k-10k benchmark at 10 req/s, serving normally; the "
          "thread quotes only its commands and a throughput chart, so the bundle has the metrics and no journal lines",
          must_not=("prefill-queue-saturation", "unexplained"))
def _dp_attention_benchmark():
    p, d, r = roles("0.4.6", "sgl-router")
    p.logs, d.logs = [], []
    p.gauges.update(num_running_reqs=8, num_queue_reqs=2)
    d.gauges.update(num_running_reqs=90, token_usage=0.41)
    return [p, d, r], {}


@scenario("near-dynamic-lora-load-unload", "healthy", "https://github.com/sgl-project/sglang/pull/7446", "2025-06-22",
          "LoRA adapters loaded and unloaded at run time through /load_lora_adapter and /unload_lora_adapter while the "
          "server keeps serving: routine operations, not a restart or a failure", must_not=("unexplained", "role-down"))
def _dynamic_lora():
    p, d, r = roles("0.4.6", "sgl-router")
    d.logs = raw(['INFO:     127.0.0.1:51234 - "POST /load_lora_adapter HTTP/1.1" 200 OK',
                  'INFO:     127.0.0.1:51240 - "POST /unload_lora_adapter HTTP/1.1" 200 OK']) + d.logs
    return [p, d, r], {}



@scenario("near-deepgemm-jit-codegen-first-prefills", "healthy", "https://github.com/sgl-project/sglang/issues/5031", "2025-04-02",
          "DeepSeek with MLA on TP8: the first long prefills after start-up pause while every rank generates DeepGEMM JIT "
          "code ('Please wait.'); slow once per shape, then normal speed; the prefill keeps progressing",
          must_not=("prefill-wedged", "scheduler-watchdog", "unexplained"))
def _deepgemm_jit_codegen():
    p, d, r = roles("0.4.3", "sgl-router")
    p.logs = raw([
        "[2025-04-16 08:13:11 TP0] Prefill batch. #new-seq: 1, #new-token: 8192, #cached-token: 0, token usage: 0.10, #running-req: 0, #queue-req: 0, ",
        "[2025-04-16 08:13:13 TP0] Prefill batch. #new-seq: 1, #new-token: 7857, #cached-token: 0, token usage: 0.12, #running-req: 0, #queue-req: 0, ",
    ] + [f"[2025-04-16 08:13:14 TP{i}] DeepGEMM JIT code generation <gemm_fp8_fp8_bf16_nt>: M=7857, N=576, K=7168. Please wait."
         for i in (3, 4, 5, 2, 6, 7)])
    return [p, d, r], {}



# === issue 24, second round (2026-12-03): written by the rule helper from threads not used before, dev/ only ======
# Three kinds of miss, each with failures and healthy near misses: (a) a role that keeps serving while it answers
# requests with server errors (5xx access lines, an error report in SGLang's level-less format), against a client's
# own 4xx; (b) an idle server whose scheduler busy-polls a CPU core, against nothing (it is healthy); (c) a router
# that cannot reach its workers (its transport errors and failed health checks, no metrics), against a router that
# only sees its clients go away.

def access(status: str, path: str = "/v1/chat/completions", port: int = 40106, stamp: str | None = None) -> str:
    """uvicorn's access line as SGLang's HTTP server writes it (``INFO:`` then the client, request and status)."""
    head = f"[{stamp}] " if stamp else ""
    return f'{head}INFO:     172.20.0.1:{port} - "POST {path} HTTP/1.1" {status}'


@scenario("chat-completions-500-asgi-exception", ANY, "https://github.com/sgl-project/sglang/issues/7083", "2025-06-11",
          "SGLang 0.4.6-era server: a chat completion answers 500 Internal Server Error and uvicorn logs 'Exception in "
          "ASGI application' with its traceback; the server stays up and serves the other requests",
          must_not=("config-crashloop", "role-down", *RESTARTING))
def _chat_500_asgi():
    p, d, r = roles("0.4.6", "sgl-router")
    d.logs = d.logs + raw([
        '[2025-06-11 06:19:30] INFO:     172.20.0.1:40106 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error',
        "[2025-06-11 06:19:30] ERROR:    Exception in ASGI application",
        "Traceback (most recent call last):",
        '  File "/root/anaconda3/envs/sglang/lib/python3.12/site-packages/uvicorn/protocols/http/h11_impl.py", line 403, in run_asgi',
        "    result = await app(  # type: ignore[func-returns-value]",
        "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '  File "/root/anaconda3/envs/sglang/lib/python3.12/site-packages/uvicorn/middleware/proxy_headers.py", line 60, in __call__',
        "    return await self.app(scope, receive, send)",
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    ]) + d.logs
    return [p, d, r], {}


@scenario("chat-completions-500-access-lines-only", ANY, "https://github.com/sgl-project/sglang/issues/7083", "2025-06-11",
          "the same server as the thread shows it once its traceback has left the journal window (or the probe's filter "
          "kept only the access lines): chat completions answered 500 Internal Server Error between 200s, the server "
          "up and decoding", must_not=("config-crashloop", "role-down", *RESTARTING))
def _chat_500_access_only():
    p, d, r = roles("0.4.6", "sgl-router")
    d.logs = d.logs + raw([
        '[2025-06-11 06:19:30] INFO:     172.20.0.1:40106 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error',
    ]) + d.logs
    return [p, d, r], {}


@scenario("chat-completions-500-asgi-exception-pd", ANY, "https://github.com/sgl-project/sglang/issues/7083", "2025-06-11",
          "the same failure in a PD deployment: the decode answers the chat completion with 500 and its own journal has "
          "uvicorn's 'Exception in ASGI application' traceback; the router logs 'Decode server returned error status' "
          "for it. A request's exception, not a KV transfer: nothing to restart",
          must_not=("config-crashloop", "role-down", *RESTARTING))
def _chat_500_asgi_pd():
    p, d, r = roles("0.4.6", "sgl-router")
    d.logs = d.logs + raw([
        '[2025-06-11 06:19:30] INFO:     172.20.0.1:40106 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error',
        "[2025-06-11 06:19:30] ERROR:    Exception in ASGI application",
        "Traceback (most recent call last):",
        '  File "/root/anaconda3/envs/sglang/lib/python3.12/site-packages/uvicorn/protocols/http/h11_impl.py", line 403, in run_asgi',
        "    result = await app(  # type: ignore[func-returns-value]",
        "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    ]) + d.logs
    r.logs = raw([
        "2025-06-11 06:19:30 ERROR http_request{method=POST uri=/v1/chat/completions version=HTTP/1.1}: "
        "sglang_router_rs::routers::pd_router: src/routers/pd_router.rs:565: Decode server returned error status "
        "decode_url=http://10.0.0.2:30001 status=500 Internal Server Error",
    ])
    return [p, d, r], {}


@scenario("batch-api-single-request-error-line", ANY, "https://github.com/sgl-project/sglang/pull/6170", "2025-05-10",
          "the OpenAI-compatible batch API fails on a batch of one request: SGLang logs 'error: 'NoneType' object is not "
          "iterable' (its level-less format, no traceback) and the batch fails, while the server keeps serving",
          must_not=("config-crashloop", "role-down", *RESTARTING))
def _batch_api_error():
    p, d, r = roles("0.4.6", "sgl-router")
    d.logs = d.logs + raw(["[2025-05-11 16:51:15] error: 'NoneType' object is not iterable"]) + d.logs
    return [p, d, r], {}


@scenario("tool-call-streaming-parse-errors", ANY, "https://github.com/sgl-project/sglang/pull/7479", "2025-06-23",
          "Qwen2.5 tool calls streamed with several calls in one answer: the tool-call parser fails on the model's output "
          "again and again ('Error in parse_streaming_increment: Expecting value'), so the calls after the first are lost; "
          "the server keeps serving and every request answers 200", must_not=("config-crashloop", "role-down", *RESTARTING))
def _tool_call_stream_errors():
    p, d, r = roles("0.4.6", "sgl-router")
    d.logs = d.logs + raw(["[2025-06-23 07:22:00] Error in parse_streaming_increment: Expecting value: line 1 column 1 (char 0)"] * 4
                          + [access("200 OK", port=40222, stamp="2025-06-23 07:22:00")]) + d.logs
    return [p, d, r], {}


@scenario("near-client-400-validation", "healthy", "https://github.com/sgl-project/sglang/pull/21959", "2026-04-02",
          "clients send malformed payloads and get 400 Bad Request (the PR logs the validation detail because the server "
          "only showed the status); a client's own bad request, the server serves everyone else",
          must_not=("unexplained", "config-crashloop"))
def _client_400():
    p, d, r = roles()
    d.logs = d.logs + raw([access("400 Bad Request", port=52344), access("200 OK", port=52350),
                           access("400 Bad Request", port=52362)]) + d.logs
    return [p, d, r], {}


def _idle(version: str, router: str) -> tuple[RoleSpec, RoleSpec, RoleSpec]:
    """No request for minutes: nothing runs or waits, no counter moves, no batch line; every gauge else as last read."""
    p, d, r = roles(version, router)
    for spec in (p, d):
        spec.gauges.update(num_running_reqs=0, num_queue_reqs=0)
        spec.counters = {k: (v[0], 0) for k, v in spec.counters.items()}
        spec.logs = []
    r.counters = {k: (v[0], 0) for k, v in r.counters.items()}
    return p, d, r


@scenario("near-idle-scheduler-100pct-cpu", "healthy", "https://github.com/sgl-project/sglang/issues/9863", "2025-09-01",
          "sglang::scheduler runs at 100% on two cores without any incoming request (it polls its sockets without "
          "sleeping); the GPUs idle, nothing pending: an idle server, not a fault, and nothing to restart",
          must_not=("kv-transfer-failure", "decode-wedged", "prefill-wedged", "unexplained"))
def _idle_cpu_9863():
    p, d, r = _idle("0.5.3", "sgl-router")
    return [p, d, r], gpus_named("NVIDIA H200", 143771, 120000)


@scenario("near-idle-scheduler-100pct-cpu-0.5.23", "healthy", "https://github.com/sgl-project/sglang/issues/9863", "2025-09-01",
          "the same idle server as SGLang 0.5.23 exposes it (sleep_on_idle is still off by default): realtime token "
          "counters flat on both roles, the decode's transfer-queue gauge holding the last value it published, nothing "
          "running or queued; the scheduler's busy CPU core is no transfer failure",
          must_not=("kv-transfer-failure", "decode-wedged", "prefill-wedged", "unexplained"))
def _idle_cpu_9863_current():
    p, d, r = _idle("0.5.23", "smg")
    return [p, d, r], {}


@scenario("near-idle-scheduler-thread-0.4.3", "healthy", "https://github.com/sgl-project/sglang/issues/3708", "2025-02-19",
          "SGLang 0.4.3.post2 serving Llama 3.1 8B: the sglang::scheduler process hogs 100% of one core while nothing "
          "is queued (a loop without back-off); idle and healthy", must_not=("decode-wedged", "prefill-wedged", "unexplained"))
def _idle_cpu_3708():
    p, d, r = _idle("0.4.3", "sgl-router")
    return [p, d, r], {}


@scenario("router-grpc-workers-unreachable", "router-no-healthy-workers", "https://github.com/sgl-project/sglang/pull/11310",
          "2025-10-07",
          "the router's health checker cannot connect to its gRPC workers (nothing listens at the registered "
          "grpc:// ports): 'Failed to connect gRPC client for worker ... transport error' and 'health check failed: "
          "Connection failed'; the engines themselves are up on their HTTP ports; the router's metrics were not collected",
          must_not=("healthy", "kv-transfer-failure", "config-crashloop"))
def _router_grpc_unreachable():
    p, d, _ = roles()
    r = RoleSpec("router", proc="sglang-router", drop=("metrics",), logs=raw([
        "2025-10-07 23:31:33 DEBUG sglang_router_rs::grpc_client::sglang_scheduler: src/grpc_client/sglang_scheduler.rs:28: "
        "Connecting to SGLang scheduler at grpc://localhost:20001",
        "2025-10-07 23:31:33 ERROR sglang_router_rs::core::worker: src/core/worker.rs:517: Failed to connect gRPC client for "
        "worker grpc://localhost:20000: transport error",
        "2025-10-07 23:31:33 DEBUG sglang_router_rs::core::worker_manager: src/core/worker_manager.rs:1031: Worker "
        "grpc://localhost:20000 health check failed: Connection failed for worker grpc://localhost:20000: Failed to connect "
        "to gRPC server: transport error",
        "2025-10-07 23:31:33 ERROR sglang_router_rs::core::worker: src/core/worker.rs:517: Failed to connect gRPC client for "
        "worker grpc://localhost:20001: transport error",
        "2025-10-07 23:31:33 DEBUG sglang_router_rs::core::worker_manager: src/core/worker_manager.rs:1031: Worker "
        "grpc://localhost:20001 health check failed: Connection failed for worker grpc://localhost:20001: Failed to connect "
        "to gRPC server: transport error",
    ]))
    return [p, d, r], {}


@scenario("router-grpc-workers-unreachable-debug-only", "router-no-healthy-workers",
          "https://github.com/sgl-project/sglang/pull/11310", "2025-10-07",
          "the same router with only its health checker's lines in the window (DEBUG: 'Worker ... health check "
          "failed: Connection failed'): no line at ERROR, no metrics; the router still cannot reach a worker",
          must_not=("healthy", "kv-transfer-failure", "config-crashloop"))
def _router_grpc_unreachable_debug():
    p, d, _ = roles()
    r = RoleSpec("router", proc="sglang-router", drop=("metrics",), logs=raw([
        "2025-10-07 23:31:33 DEBUG sglang_router_rs::core::worker_manager: src/core/worker_manager.rs:1031: Worker "
        "grpc://localhost:20000 health check failed: Connection failed for worker grpc://localhost:20000: Failed to connect "
        "to gRPC server: transport error",
        "2025-10-07 23:31:33 DEBUG sglang_router_rs::core::worker_manager: src/core/worker_manager.rs:1031: Worker "
        "grpc://localhost:20001 health check failed: Connection failed for worker grpc://localhost:20001: Failed to connect "
        "to gRPC server: transport error",
    ]))
    return [p, d, r], {}


if __name__ == "__main__":
    for path in write(SCENARIOS):
        print(path)
