"""``python3 -m sglang_emulator.launch_server <sglang.launch_server flags>``: one emulated PD server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from . import greedy, gpu, logfmt, recall
from .control import DEFAULT_CRASH_MESSAGE, control_path, take_up_control
from .flags import dp_attention_ranks, parse_server
from .gpu import TOTAL_MIB
from .scheduler import CONTEXT_LEN, MAX_RUNNING, MAX_TOTAL_TOKENS, STALLED, TICK_S, VERSION, VERSIONS, Scheduler

SITE = "/usr/local/lib/python3.11/dist-packages/sglang/srt"
HICACHE_SIZE_FRAME = (
    f'  File "{SITE}/mem_cache/hybrid_cache/hybrid_pool_assembler.py", line 662, in _deepseek_v4_num_host_pages\n'
    "    raise ValueError("
)
OOM_MESSAGE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
# PyTorch's ProcessGroupNCCL watchdog text (not SGLang's; SGLang then reports the subprocess crash)
NCCL_MESSAGE = (
    "[rank0]:[E ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=48213, OpType=ALLREDUCE, NumelIn=7340032, NumelOut=7340032, Timeout(ms)=600000) "
    "ran for 600043 milliseconds before timing out."
)


def is_dsv4(args) -> bool:
    return "deepseek-v4" in args.model_path.lower() or "deepseek_v4" in args.model_path.lower()


RUNTIME_FRAME = (
    f'  File "{SITE}/managers/scheduler.py", line 6350, in run_scheduler_process\n    scheduler.run_event_loop()'
)


class QuietHTTPServer(ThreadingHTTPServer):
    """A client that hangs up early (a probe deadline) is normal here, not a traceback on stderr."""

    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        return


def crash_text(message: str, frame: str | None = None) -> str:
    """A traceback ending in ``message``; a bare message becomes a RuntimeError, as SGLang raises."""
    head, _, _ = message.partition(":")
    if not (head.endswith(("Error", "Exception")) and " " not in head):
        message = f"RuntimeError: {message}"
    frame = frame or f'  File "{SITE}/managers/scheduler.py", line 6350, in run_scheduler_process\n    scheduler = Scheduler('
    return f"Traceback (most recent call last):\n{frame}\n{message}"


def restarted_by_systemd() -> bool:
    """Whether systemd started this process as an automatic restart (``Restart=``): its unit's ``NRestarts``
    counts it then. A start after ``systemctl stop`` of a live server, or after ``systemctl reset-failed``
    (opsbot's restart does stop, reset-failed, start), finds 0. False outside a systemd unit."""
    try:
        cgroup = Path("/proc/self/cgroup").read_text()
    except OSError:
        return False
    units = [part for line in cgroup.splitlines() for part in line.split("/") if part.endswith(".service")]
    unit = units[-1] if units else None  # the innermost: this process's own unit
    if unit is None:
        return False
    try:
        out = subprocess.run(["systemctl", "show", unit, "--property=NRestarts", "--value"], capture_output=True,
                             text=True, timeout=5, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return False
    return out.isdigit() and int(out) > 0


def crash_at_startup(message: str, frame: str | None = None) -> None:
    logfmt.tp0("Scheduler hit an exception: " + crash_text(message, frame))
    logfmt.log("Received sigquit from a child process. It usually means the child failed.")
    os._exit(1)


def die_running(sched: Scheduler, role: str) -> None:
    """The runtime deaths: log what SGLang logs, then the process tree is killed (SIGKILL)."""
    state = sched.state
    if state == "oom":
        logfmt.log("Scheduler hit an exception: " + crash_text(OOM_MESSAGE, RUNTIME_FRAME), sched.prefix)
    elif state == "watchdog":
        logfmt.log(f"Scheduler debug info:\n#running-req: {len(sched.running)}, #queue-req: {len(sched.queue)}", sched.prefix)
        logfmt.log("No sglang scheduler processes found for py-spy dump.", sched.prefix)
        logfmt.log("Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", sched.prefix)
    elif state == "nccl-timeout":
        print(NCCL_MESSAGE, flush=True)
        logfmt.log(f"Subprocess scheduler_TP0 (pid={os.getpid() + 1}) crashed with exit code -6. "
                   "Triggering SIGQUIT for cleanup...")
    frame = sys._getframe()
    logfmt.log(f"SIGQUIT received. signum={signal.SIGQUIT!r}, frame={frame!r}. It usually means one child failed.")
    gpu.release(role)
    os.kill(os.getpid(), signal.SIGKILL)


PREFILL_TOKENS_PER_S = float(os.getenv("SGLANG_EMULATOR_PREFILL_TOKENS_PER_S", 20_000))
# "0": emulate an SGLang that predates the field, refusing it as a pydantic model with extra="forbid"
# refuses an unknown field (FastAPI's 422). 0.5.12 and 0.5.23 both take it (io_struct.py: 0.5.12 line 212,
# 0.5.23 line 298, with the deprecated alias data_parallel_rank at 303).
ROUTED_DP_RANK = os.getenv("SGLANG_EMULATOR_ROUTED_DP_RANK", "1") != "0"


def _prompt(body: dict) -> str:
    prompt = body.get("prompt") if "prompt" in body else body.get("text")
    if isinstance(prompt, str):
        return prompt
    return json.dumps(body.get("messages") or prompt or "")


class App:
    """The HTTP surface of ``sglang.srt.entrypoints.http_server``, backed by the emulated scheduler."""

    def __init__(self, args, sched: Scheduler, ranks: list[Scheduler] | None = None):
        self.args = args
        self.sched = sched  # DP rank 0: /health and /server_info go through it
        self.ranks = ranks or [sched]
        self.next_rank = 0
        self.status = "Starting"
        self.started = time.time()
        self.health_timeout = int(os.getenv("SGLANG_HEALTH_CHECK_TIMEOUT", 20))
        self.gpu = threading.Lock()  # one prefill forward at a time, as on the GPU
        self.bf16_keys = recall.bf16_index_keys(os.environ)

    def prefill(self, tokens: int) -> None:
        """Prefill time proportional to the prompt, one request at a time; counted in ``/v1/loads``."""
        with self.sched.lock:
            self.sched.http_waiting += 1
        with self.gpu:
            with self.sched.lock:
                self.sched.http_waiting -= 1
            seconds = tokens / PREFILL_TOKENS_PER_S
            time.sleep(seconds)
            self.sched.account_prefill(tokens, seconds)

    def recall_window(self) -> int | None:
        control = self.sched.control
        if control.state == "recall-blind":
            return None
        if control.state == "recall-loss":
            return recall.recall_window(control.beyond, self.bf16_keys, CONTEXT_LEN)
        return CONTEXT_LEN

    def model_info(self) -> dict:
        return {
            "model_path": self.args.model_path, "served_model_name": self.args.served_model_name,
            "tokenizer_path": self.args.tokenizer_path or self.args.model_path, "is_generation": True,
            "weight_version": "default", "disaggregation_mode": self.args.disaggregation_mode,
            "model_type": "deepseek_v4", "architectures": ["DeepseekV4ForCausalLM"],
        }

    def server_info(self) -> dict:
        args = {k: v for k, v in vars(self.args).items()}
        mem = {"weight": 38.2, "kvcache": 78.51, "graph": 2.3, "token_capacity": MAX_TOTAL_TOKENS}
        internal = [{
            "world_size": self.args.tp_size, "effective_max_running_requests_per_dp": MAX_RUNNING,
            "last_gen_throughput": self.sched.reg.get("sglang:gen_throughput"), "memory_usage": mem,
            "disaggregation_mode": self.args.disaggregation_mode,
        }]
        return args | {"internal_states": internal, "startup_time": self.started, "version": self.sched.version,
                       "frontend": "python"}

    def health(self, path: str) -> tuple[int, str]:
        """§2.1: 503 while starting; else wait for any scheduler output, polling every second."""
        if self.status == "Starting":
            return 503, ""
        tic = time.time()
        while time.time() - tic < self.health_timeout:
            time.sleep(1)
            if not self.sched.stalled:
                self.sched.last_progress = time.time()
            if self.sched.last_progress > tic:
                self.status = "Up"
                return 200, ""
        logfmt.log(
            f"Health check failed. Server couldn't get a response from detokenizer for last {self.health_timeout} "
            f"seconds. tic start time: {time.strftime('%H:%M:%S', time.localtime(tic))}. last_heartbeat time: "
            f"{time.strftime('%H:%M:%S', time.localtime(self.sched.last_progress))}"
        )
        self.status = "UnHealthy"
        return 503, ""

    def wait_unstalled(self, limit: float, sched: Scheduler | None = None) -> bool:
        sched = sched or self.sched
        end = time.monotonic() + limit
        while sched.stalled and time.monotonic() < end:
            time.sleep(0.5)
        return not sched.stalled

    def route(self, body: dict) -> tuple[Scheduler, tuple[int, dict] | None]:
        """The rank a request runs on, or the refusal. ``routed_dp_rank`` (or its deprecated alias
        ``data_parallel_rank``, sglang 0.5.23 managers/io_struct.py:298-303, 419-429) pins it; the range check
        is tokenizer_manager.py:915-924 (rank 0 of a server without DP is ignored), its ValueError answered
        400 ``{"error": {"message": ...}}`` by http_server.py:988-990 and 2246-2250. Else the DP controller's
        round robin."""
        field = "routed_dp_rank" if "routed_dp_rank" in body else "data_parallel_rank"
        rank = body.get(field)
        if rank is None:
            self.next_rank = (self.next_rank + 1) % len(self.ranks)
            return self.ranks[self.next_rank], None
        if not ROUTED_DP_RANK:
            return self.sched, (422, {"detail": [{"type": "extra_forbidden", "loc": ["body", field],
                                                  "msg": "Extra inputs are not permitted", "input": rank}]})
        if not isinstance(rank, int) or isinstance(rank, bool):
            return self.sched, (422, {"detail": [{"type": "int_type", "loc": ["body", field],
                                                  "msg": "Input should be a valid integer", "input": rank}]})
        n = len(self.ranks)
        if n <= 1 and rank == 0:
            return self.sched, None
        if not 0 <= rank < n:
            message = f"routed_dp_rank={rank} out of range [0, {n})"
            logfmt.log(f"[http_server] Error: {message}")
            return self.sched, (400, {"error": {"message": message}})
        return self.ranks[rank], None

    def loads(self, query: str) -> tuple[int, str | dict, str]:
        """``/v1/loads``: the shared-memory snapshot, answered without the scheduler (§1.5)."""
        q = parse_qs(query)
        include = set(",".join(q.get("include", ["core"])).split(","))
        if not include <= {"core", "memory", "spec", "lora", "disagg", "queues", "all"}:
            return 400, {"error": f"invalid include: {','.join(sorted(include))}"}, "application/json"
        ranks = [r.load_snapshot() for r in self.ranks]
        if "dp_rank" in q:
            ranks = [r for r in ranks if str(r["dp_rank"]) in q["dp_rank"]]
        for rank in ranks:
            if not include & {"disagg", "all"}:
                rank.pop("disaggregation")
        if q.get("format", ["json"])[0] == "prometheus":
            lines = []
            for rank in ranks:
                for key, val in rank.items():
                    items = val.items() if isinstance(val, dict) else [("", val)]
                    for sub, v in items:
                        if isinstance(v, (int, float)) and key != "dp_rank":
                            name = f"sglang_disagg_{sub}" if sub else f"sglang_{key}"
                            lines.append(f'{name}{{dp_rank="{rank["dp_rank"]}"}} {float(v)}')
            return 200, "\n".join(lines) + "\n", "text/plain; version=0.0.4; charset=utf-8"
        body = {"timestamp": ranks[0]["timestamp"] if ranks else None, "version": self.sched.version,
                "accelerator": "cuda", "num_accelerators": self.args.tp_size, "loads": ranks}
        return 200, body, "application/json"

    def generate(self, body: dict, path: str) -> tuple[int, dict]:
        sched, refused = self.route(body)
        if refused is not None:
            return refused
        sampling = body.get("sampling_params")
        params: dict = sampling if isinstance(sampling, dict) else {}
        max_new = int(body.get("max_tokens") or params.get("max_new_tokens") or 16)
        prompt = _prompt(body)
        tokens = recall.count(prompt) if isinstance(body.get("prompt"), str) else max(1, len(prompt) // 4)
        if tokens + max_new > CONTEXT_LEN:
            return 400, {"object": "error", "message": f"The input ({tokens} tokens) is longer than the model's "
                         f"context length ({CONTEXT_LEN} tokens).", "type": "BadRequestError", "code": 400}
        if not self.wait_unstalled(3600, sched):
            return 503, {"object": "error", "message": "Request running timeout reached.", "type": "503", "code": 503}
        edges = sched.control.state == "recall-edges"
        content = recall.answer(prompt, tokens, self.recall_window(), edges) if sched.mode == "decode" else ""
        out_len = min(max_new, max(1, recall.count(content, False))) if content else max_new
        if path == "/generate":
            out_len = max_new
        if sched.mode == "prefill":
            self.prefill(tokens)
            req = sched.finished_prefill(tokens)
        else:
            req = sched.submit(tokens, out_len)
            while req in sched.running or req in sched.queue:
                if sched.stalled:
                    self.wait_unstalled(3600, sched)
                time.sleep(0.01)
        content = content or recall.EMULATOR_ANSWER
        usage = {"prompt_tokens": req.input_len, "completion_tokens": req.output_len,
                 "total_tokens": req.input_len + req.output_len}
        if path == "/v1/completions":
            return 200, {"id": req.rid, "object": "text_completion", "created": int(time.time()),
                         "model": self.args.served_model_name, "usage": usage, "choices": [{
                             "index": 0, "text": content, "logprobs": None, "finish_reason": "stop"}]}
        if path == "/v1/chat/completions":
            return 200, {"id": req.rid, "object": "chat.completion", "created": int(time.time()),
                         "model": self.args.served_model_name, "usage": usage, "choices": [{
                             "index": 0, "finish_reason": "length",
                             "message": {"role": "assistant", "content": content}}]}
        return 200, self.native_answer(body, params, prompt, content, req, sched)

    def native_answer(self, body: dict, params: dict, prompt: str, content: str, req, sched: Scheduler) -> dict:
        """``/generate``'s answer: text, ``output_ids`` and meta_info, with ``output_token_logprobs`` as
        ``[logprob, token_id, None]`` when ``return_logprob`` (tokenizer_manager.py:2647-2668 and 3098-3110).
        Decode's tokens are greedy's; ``output-corruption`` changes them for the requests it hits."""
        asked = params.get("sampling_seed")
        seed = asked if isinstance(asked, int) else 0
        ids, logprobs = greedy.greedy(prompt, req.output_len, seed)
        if sched.mode == "decode" and sched.state == "output-corruption" and greedy.hit_by_corruption(prompt):
            ids, logprobs = greedy.corrupted(ids, logprobs)
        meta = {"id": req.rid, "prompt_tokens": req.input_len, "completion_tokens": req.output_len,
                "finish_reason": {"type": "length", "length": req.output_len}}
        if body.get("return_logprob"):
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(logprobs, ids)]
        return {"text": content, "output_ids": ids, "meta_info": meta}


def make_handler(app: App) -> type[BaseHTTPRequestHandler]:
    reg = app.sched.reg

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""

        def log_message(self, format: str, *args) -> None:  # access logs off, as SGLang's default
            return

        def _send(self, code: int, body: str | dict, ctype: str = "application/json") -> None:
            data = (json.dumps(body) if isinstance(body, dict) else body).encode()
            self.send_response(code)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            reg.inc("sglang:http_responses_total", 1, {"endpoint": self.endpoint, "method": self.command,
                                                       "status_code": str(code)}, base=False)

        def _route(self) -> None:
            path = urlparse(self.path).path
            self.endpoint = path
            reg.inc("sglang:http_requests_total", 1, {"endpoint": path, "method": self.command}, base=False)
            if path in ("/health", "/health_generate"):
                code, body = app.health(path)
                return self._send(code, body, "text/plain")
            if path == "/metrics" and app.args.enable_metrics:
                return self._send(200, reg.render(), "text/plain; version=0.0.4; charset=utf-8")
            if path in ("/model_info", "/get_model_info"):
                return self._send(200, app.model_info())
            if path in ("/server_info", "/get_server_info"):
                if path == "/get_server_info":
                    logfmt.log("Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
                               "Please use '/server_info' instead.")
                app.wait_unstalled(3600)  # round-trips to the scheduler, no timeout: hangs when it is wedged
                return self._send(200, app.server_info())
            if path == "/v1/loads":
                code, loads, ctype = app.loads(urlparse(self.path).query)
                return self._send(code, loads, ctype)
            if path == "/v1/models":
                return self._send(200, {"object": "list", "data": [{
                    "id": app.args.served_model_name, "object": "model", "created": int(app.started),
                    "owned_by": "sglang", "root": app.args.served_model_name, "max_model_len": CONTEXT_LEN}]})
            old = app.sched.version == "0.5.12"
            if path == "/ping":  # 0.5.12: always 200 (liveness only)
                return self._send(200 if old or app.status == "Up" else 503, "", "text/plain")
            if path == "/ready" and not old:  # 0.5.23 only
                return self._send(200 if app.status == "Up" else 503, "", "text/plain")
            if path in ("/generate", "/v1/chat/completions", "/v1/completions", "/v1/tokenize", "/tokenize") \
                    and self.command == "POST":
                n = int(self.headers.get("content-length") or 0)
                try:
                    body = json.loads(self.rfile.read(n) or b"{}")
                except ValueError:
                    return self._send(400, {"object": "error", "message": "invalid JSON body", "code": 400})
                if not isinstance(body, dict):
                    return self._send(400, {"object": "error", "message": "the body must be a JSON object", "code": 400})
                if path.endswith("tokenize"):
                    return self._send(*recall.tokenize(body, CONTEXT_LEN))
                code, out = app.generate(body, path)
                if code == 200 and body.get("stream") and path.startswith("/v1/"):
                    return self._send(200, stream_events(out), "text/event-stream")
                return self._send(code, out)
            return self._send(404, {"detail": "Not Found"})

        def do_GET(self) -> None:
            self._route()

        def do_POST(self) -> None:
            self._route()

    return Handler


def stream_events(out: dict) -> str:
    """A finished OpenAI answer as server-sent events: one chunk per choice, usage, then ``[DONE]``."""
    chunk = dict(out, object=out["object"] + ".chunk" if out["object"] == "chat.completion" else out["object"])
    choices = []
    for c in out["choices"]:
        piece = {"delta": {"role": "assistant", "content": c["message"]["content"]}} if "message" in c else {
            "text": c["text"]}
        choices.append({"index": c["index"], **piece, "finish_reason": c["finish_reason"]})
    events = [dict(chunk, choices=choices, usage=None), dict(chunk, choices=[], usage=out["usage"])]
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"


class _Bootstrap(BaseHTTPRequestHandler):
    """The prefill bootstrap server's ``/health`` ("OK") and ``/route``."""

    def log_message(self, format: str, *args) -> None:
        return

    def do_GET(self) -> None:
        body = b"OK"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET


def heartbeat(sched: Scheduler, url: str) -> None:
    """Decode side: ping the prefill bootstrap server like SGLang's KV receiver does."""
    interval = float(os.getenv("SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL", 5.0))
    max_failures = int(os.getenv("SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE", 2))
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                ok = resp.status == 200
        except OSError:
            ok = False
        sched.heartbeat(ok, max_failures)
        time.sleep(interval)


def watch_peer(sched: Scheduler, url: str, every_s: float = 0.1) -> None:
    """Decode side, lab only: while a kv-transfer-fail waits for a restart, look at the prefill bootstrap
    server every ``every_s``: a restart closes its port for about a second here, which SGLang's 5 s
    heartbeat misses (seen: at 0.5 s, one prefill restart in two went unseen)."""
    while True:
        time.sleep(every_s)
        if not sched.awaits_peer_restart():
            continue
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                ok = resp.status == 200
        except OSError:
            ok = False
        sched.peer_seen(ok)


def serve(server: ThreadingHTTPServer) -> None:
    threading.Thread(target=server.serve_forever, daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    args = parse_server(sys.argv[1:] if argv is None else argv)
    role = os.environ.get("SGLANG_EMULATOR_ROLE", args.disaggregation_mode)
    control_file = control_path()
    control = take_up_control(control_file, starting=True, automatic=restarted_by_systemd())
    if is_dsv4(args):
        logfmt.log("Setting max_running_requests to 256 for DeepseekV4ForCausalLM.")
        logfmt.log("Setting KV cache dtype to fp8_e4m3 for DeepseekV4ForCausalLM.")
    if control.state == "crash":
        crash_at_startup(control.message or DEFAULT_CRASH_MESSAGE,
                         HICACHE_SIZE_FRAME if not control.message else None)
    if is_dsv4(args) and args.enable_hierarchical_cache and args.hicache_size > 0:
        crash_at_startup(DEFAULT_CRASH_MESSAGE, HICACHE_SIZE_FRAME)
    version = os.environ.get("SGLANG_EMULATOR_VERSION", VERSION)
    if version not in VERSIONS:
        sys.exit(f"SGLANG_EMULATOR_VERSION={version!r}: the emulator speaks {', '.join(VERSIONS)}")
    n_ranks = dp_attention_ranks(args)
    ranks: list[Scheduler] = []
    for dp_rank in range(n_ranks):
        ranks.append(Scheduler(
            args.disaggregation_mode, args.served_model_name, control_file, args.tp_size,
            f"127.0.0.1:{args.disaggregation_bootstrap_port}", args.decode_log_interval, version=version,
            dp_rank=dp_rank if n_ranks > 1 else None, dp_size=n_ranks, registry=ranks[0].reg if ranks else None,
        ))
    sched = ranks[0]
    gpus = gpu.visible_gpus(args.tp_size)
    mib = int(TOTAL_MIB * (args.mem_fraction_static or 0.9)) + 1741
    gpu.hold(role, gpus, mib, busy=True)
    logfmt.log(
        f"max_total_num_tokens={MAX_TOTAL_TOKENS}, chunked_prefill_size={args.chunked_prefill_size or 8192}, "
        f"max_prefill_tokens=16384, max_running_requests={args.max_running_requests or MAX_RUNNING}, "
        f"context_len={CONTEXT_LEN}, available_gpu_mem=17.21 GB", sched.prefix,
    )
    app = App(args, sched, ranks)

    def on_term(signum, frame) -> None:
        logfmt.log(f"SIGTERM received. {signum=} {frame=}. Draining requests and shutting down...")
        gpu.release(role)
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    try:
        httpd = QuietHTTPServer((args.host, args.port), make_handler(app))
        if args.disaggregation_mode == "prefill":
            serve(QuietHTTPServer((args.host, args.disaggregation_bootstrap_port), _Bootstrap))
    except OSError as e:
        gpu.release(role)
        logfmt.log("Initialization failed. warmup error: " + "".join(traceback.format_exception_only(e)).strip())
        sys.exit(1)
    serve(httpd)
    if args.disaggregation_mode == "decode":
        url = f"http://{sched.bootstrap_addr}/health"
        threading.Thread(target=heartbeat, args=(sched, url), daemon=True).start()
        threading.Thread(target=watch_peer, args=(sched, url), daemon=True).start()
    if args.disaggregation_mode in ("prefill", "decode"):
        logfmt.log("Start of pd disaggregation warmup ...")
        time.sleep(0.5)
        logfmt.log("End of disaggregation warmup")
    app.status = "Up"
    logfmt.log("The server is fired up and ready to roll!")
    last = time.monotonic()
    while True:
        if sched.state not in STALLED:  # a stalled server's ticks wait in forward_batch_generation instead
            time.sleep(TICK_S)
        now = time.monotonic()
        for rank in ranks:
            rank.tick(now - last)
        last = now
        if sched.fatal_due():
            die_running(sched, role)
        busy = any(r.stalled or r.running or r.queue for r in ranks)
        if int(now * 10) % 20 == 0:
            gpu.hold(role, gpus, mib, busy=busy or sched.state in STALLED)


if __name__ == "__main__":
    main()
