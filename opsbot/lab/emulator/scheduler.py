"""The emulated scheduler: requests, KV usage, counters and log lines, driven by the control state.

A tick-based simulation, not a model: it moves the numbers an operator (and opsbot) reads the
way a DeepSeek-V4 PD server moves them, and stops moving them the way each incident does.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from . import logfmt
from .control import Control, read_control, take_up_control, write_control
from .exposition import Registry

VERSION = "0.5.23"
VERSIONS = ("0.5.23", "0.5.12")  # where they differ: is_streaming labels, a few metrics, log wording
NEW_IN_0_5_23 = {"max_total_num_tokens_swa"}
MAX_TOTAL_TOKENS = 983_040
MAX_SWA_TOKENS = 98_304
CONTEXT_LEN = 1_048_576
PAGE_SIZE = 256
MAX_RUNNING = 256
STEP_S = 0.025  # one decode iteration
TICK_S = 0.1
# A retraction storm slows decode down, it does not stop it (sglang#26248: 429 -> 20-38 tokens/s):
# the pool is full, most requests wait retracted in the queue, a few decode at a fraction of the speed.
RETRACT_DECODING = 2
RETRACT_WAITING = 46
RETRACT_SLOWDOWN = 2.2  # 2 requests x 18 steps/s = 36 tokens/s; a log interval (40 steps) every 2.2 s
STALLED = {"wedged", "gpu-fault", "watchdog", "nccl-timeout"}
STUCK_WAIT_S = TICK_S  # a stalled tick spends its whole tick here (the main loop then does not sleep)
RANK_STALLED = "rank-wedged"  # only the control's rank stalls; its siblings serve
FATAL_AFTER_S = {"oom": 4.0, "watchdog": 6.0, "nccl-timeout": 6.0}

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1,
               0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400)
KV_LATENCY_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
KV_SPEED_BUCKETS = (0.1, 0.5, 1, 5, 10, 25, 50, 100, 200, 400)
KV_MS_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500)
KV_MB_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)

GAUGES = {
    "num_running_reqs": "The number of running requests.",
    "num_queue_reqs": "The number of requests in the waiting queue.",
    "num_grammar_queue_reqs": "The number of requests in the grammar waiting queue.",
    "gen_throughput": "The generation throughput (token/s).",
    "cache_hit_rate": "The prefix cache hit rate.",
    "decode_sum_seq_lens": "The sum of all sequence lengths in decode.",
    "token_usage": "The token usage.",
    "full_token_usage": "The token usage for full attention layers.",
    "swa_token_usage": "The token usage for SWA layers.",
    "num_used_tokens": "The number of used tokens.",
    "kv_available_tokens": "Number of free token slots in the KV cache pool.",
    "kv_evictable_tokens": "Number of evictable (radix-cached) token slots in the KV cache pool.",
    "kv_used_tokens": "Number of actively used token slots in the KV cache pool.",
    "swa_available_tokens": "Number of free token slots in the SWA pool (hybrid-SWA only).",
    "swa_evictable_tokens": "Number of evictable (radix-cached) token slots in the SWA pool.",
    "swa_used_tokens": "Number of actively used token slots in the SWA pool.",
    "num_prefill_bootstrap_queue_reqs": "The number of requests in the prefill bootstrap queue.",
    "num_prefill_inflight_queue_reqs": "The number of requests in the prefill inflight queue.",
    "num_decode_prealloc_queue_reqs": "The number of requests in the decode prealloc queue.",
    "num_decode_transfer_queue_reqs": "The number of requests in the decode transfer queue.",
    "pending_prealloc_token_usage": "The token usage for pending preallocated tokens (not preallocated yet).",
    "utilization": "The utilization.",
    "new_token_ratio": "The new token ratio.",
    "is_cuda_graph": "Whether the batch is using CUDA graph.",
    "max_total_num_tokens": "Maximum total number of tokens in the KV cache pool.",
    "max_total_num_tokens_swa": "Maximum total number of tokens in the SWA KV cache pool.",
    "page_size": "KV cache page size in tokens.",
    "context_len": "Maximum context length.",
    "startup_available_gpu_memory_gb": "Available GPU memory in GB at startup.",
}
PID_GAUGES = {  # prometheus_client default multiprocess mode "all": exported with a pid label
    "num_retracted_reqs": "The number of retracted requests.",
    "num_paused_reqs": "The number of paused requests by async weight sync.",
}
COUNTERS = {
    "num_retracted_requests_total": "Total number of retracted requests.",
    "num_retracted_input_tokens_total": "Total number of retracted input tokens.",
    "num_retracted_output_tokens_total": "Total number of retracted output tokens.",
    "num_bootstrap_failed_reqs_total": "The number of bootstrap failed requests.",
    "num_transfer_failed_reqs_total": "The number of transfer failed requests.",
    "num_prefill_retries_total": "Total number of prefill retries.",
    "realtime_tokens_total": "Total number of tokens processed (updated on each log interval).",
}
TOKENIZER_COUNTERS = {
    "prompt_tokens_total": "Number of prefill tokens processed.",
    "generation_tokens_total": "Number of generation tokens processed.",
    "num_requests_total": "Number of requests processed.",
    "cached_tokens_total": "Number of cached prompt tokens by source (device/host/storage).",
    "num_aborted_requests_total": "Number of requests aborted.",
}
HISTOGRAMS = {
    "kv_transfer_speed_gb_s": ("Histogram of KV cache transfer speed in GB/s.", KV_SPEED_BUCKETS),
    "kv_transfer_latency_ms": ("Histogram of KV cache transfer latency in ms.", KV_LATENCY_BUCKETS),
    "kv_transfer_bootstrap_ms": ("Histogram of KV transfer bootstrap time in ms.", KV_MS_BUCKETS),
    "kv_transfer_alloc_ms": ("Histogram of KV transfer allocation waiting time in ms.", KV_MS_BUCKETS),
    "kv_transfer_total_mb": ("Histogram of KV cache transfer size in MB.", KV_MB_BUCKETS),
}
TOKENIZER_HISTOGRAMS = {
    "time_to_first_token_seconds": ("Histogram of time to first token in seconds.", TTFT_BUCKETS),
    "inter_token_latency_seconds": ("Histogram of inter-token latency in seconds.", ITL_BUCKETS),
    "e2e_request_latency_seconds": ("Histogram of End-to-end request latency in seconds", E2E_BUCKETS),
}
HTTP_FAMILIES = {
    "http_requests_total": ("counter", "Total number of HTTP requests by endpoint and method"),
    "http_responses_total": ("counter", "Total number of HTTP responses by endpoint and status code"),
    "http_requests_active": ("gauge", "Number of currently active HTTP requests"),
}


@dataclass
class Req:
    rid: str
    room: int
    input_len: int
    output_len: int
    done: int = 0
    arrived: float = 0.0


def scheduler_labels(model_name: str, engine_type: str, tp_rank: int = 0, dp_rank: int | None = None) -> dict[str, str]:
    """The scheduler collector's labels: sglang 0.5.23 observability/metrics_collector.py:1381-1392 (model_name,
    engine_type, tp_rank, pp_rank, moe_ep_rank; ``dp_rank`` only when the scheduler has one, i.e. under DP
    attention, where each DP rank's attention-TP-0 scheduler reports with its global tp_rank)."""
    labels = {"model_name": model_name, "engine_type": engine_type, "tp_rank": str(tp_rank), "pp_rank": "0",
              "moe_ep_rank": "0"}
    if dp_rank is not None:
        labels["dp_rank"] = str(dp_rank)
    return labels


def rank_prefix(dp_rank: int | None, tp_rank: int) -> str:
    """The scheduler's log prefix: sglang 0.5.23 managers/scheduler.py:6279-6290 (`` DP{dp}`` when the
    scheduler has a DP rank, then `` TP{tp}``), e.g. ``[2026-12-03 07:00:00 DP1 TP2] Decode batch, ...``."""
    return (f" DP{dp_rank}" if dp_rank is not None else "") + f" TP{tp_rank}"


def new_registry(model_name: str, engine_type: str, version: str = VERSION) -> Registry:
    """Every family this server exports, with SGLang's names, help texts and label sets."""
    reg = Registry(scheduler_labels(model_name, engine_type))
    for name, help in (GAUGES | PID_GAUGES).items():
        if version == "0.5.12" and name in NEW_IN_0_5_23:
            continue
        reg.family(f"sglang:{name}", "gauge", help)
    for name, help in (COUNTERS | TOKENIZER_COUNTERS).items():
        reg.family(f"sglang:{name}", "counter", help)
    for name, (help, buckets) in (HISTOGRAMS | TOKENIZER_HISTOGRAMS).items():
        reg.family(f"sglang:{name}", "histogram", help, buckets)
    for name, (kind, help) in HTTP_FAMILIES.items():
        reg.family(f"sglang:{name}", kind, help)
    return reg


class Scheduler:
    """One PD role's scheduler (the stats-logging rank TP0) and the tokenizer's request counters."""

    def __init__(self, mode: str, model_name: str, control_file: str, tp_size: int = 1,
                 bootstrap_addr: str = "127.0.0.1:8998", decode_log_interval: int = 40,
                 clock: Callable[[], float] = time.monotonic, version: str = VERSION,
                 dp_rank: int | None = None, dp_size: int = 1, registry: Registry | None = None):
        self.clock = clock  # injectable, so tests run minutes of simulation in milliseconds
        self.dp_rank = dp_rank  # None without DP attention
        self.dp_size = dp_size
        tp_rank = (dp_rank or 0) * max(tp_size // max(dp_size, 1), 1)  # the rank's attention-TP-0 scheduler
        self.prefix = rank_prefix(dp_rank, tp_rank)
        self.version = version
        self.mode = mode  # prefill | decode | null
        self.engine_type = mode if mode in ("prefill", "decode") else "unified"
        self.tp_size = tp_size
        self.bootstrap_addr = bootstrap_addr
        self.decode_log_interval = decode_log_interval
        shared = registry or new_registry(model_name, self.engine_type, version)
        self.reg = shared.view(scheduler_labels(model_name, self.engine_type, tp_rank, dp_rank))
        self.tok_labels = {"model_name": model_name, "engine_type": self.engine_type}
        self.control_file = control_file
        self.control = read_control(control_file)
        self._mtime = self._control_mtime()
        self.state_since = self.clock()
        self.lock = threading.Lock()
        self.running: list[Req] = []
        self.queue: list[Req] = []
        self.bootstrap_q = 0
        self.inflight_q = 0
        self.prealloc_q = 0
        self.transfer_q = 0
        self.retracted_now = 0
        self.steps = 0.0
        self.step_frac = 0.0
        self.flush_tokens = 0
        self.last_flush = self.clock()
        self.last_batch = self.clock()
        self.last_event = self.clock()
        self.last_progress = time.time()  # wall clock: last output seen by the "tokenizer"
        self.published = time.time()  # wall clock: last load snapshot / metrics publish
        self.new_token_ratio = 0.7
        self.warned: set[str] = set()
        self.connected = False  # decode: has reached the prefill bootstrap server at least once
        self.peer_gone = False  # decode: the prefill bootstrap server stopped answering since last seen
        self.heartbeat_failures = 0
        self.prefill_lost = False
        self.pid = str(os.getpid() + (dp_rank or 0))  # one scheduler process per rank
        self.http_waiting = 0  # requests over HTTP waiting for the prefill forward (the GPU)
        self.prefill_busy_us = 0  # /v1/loads total_prefill_busy_us: what prefill spent on requests
        self.prefill_uncached = 0
        self._static_gauges()

    # ---- control -------------------------------------------------------------------------------

    def _control_mtime(self) -> float:
        try:
            return os.stat(self.control_file).st_mtime
        except OSError:
            return 0.0

    def poll_control(self) -> None:
        mtime = self._control_mtime()
        if mtime == self._mtime:
            return
        self._mtime = mtime
        new = take_up_control(self.control_file)
        if new.state != self.control.state:
            self.state_since = self.clock()
            self.warned.clear()
        self.control = new

    @property
    def state(self) -> str:
        return self.control.state

    @property
    def stalled(self) -> bool:
        return self.state in STALLED or (self.state == RANK_STALLED and self.dp_rank == self.wedged_rank)

    @property
    def wedged_rank(self) -> int:
        """The rank a ``rank-wedged`` control stops: its ``rank``, else the last (rank 0 answers /health)."""
        rank = self.control.rank
        return rank if rank is not None and 0 <= rank < self.dp_size else self.dp_size - 1

    def _log(self, message: str) -> None:
        logfmt.log(message, self.prefix)

    def _share(self, requests: int) -> int:
        """This rank's share of the server's load (the DP controller spreads requests over the ranks)."""
        return requests if requests == 0 else max(1, round(requests / self.dp_size))

    def fatal_due(self) -> bool:
        after = FATAL_AFTER_S.get(self.state)
        return after is not None and self.clock() - self.state_since >= after

    # ---- requests --------------------------------------------------------------------------------

    def _new_req(self, input_len: int | None = None, output_len: int | None = None) -> Req:
        return Req(
            rid=os.urandom(16).hex(), room=random.randrange(1 << 62),
            input_len=input_len or random.randint(1500, 12000), output_len=output_len or random.randint(150, 900),
            arrived=self.clock(),
        )

    def submit(self, input_len: int, output_len: int) -> Req:
        """A request that came in over HTTP; the emulator serves it like its own load."""
        req = self._new_req(input_len, output_len)
        with self.lock:
            (self.running if self.mode == "decode" else self.queue).append(req)
        return req

    def account_prefill(self, tokens: int, seconds: float) -> None:
        """A request over HTTP prefilled for ``seconds``: counters and the load snapshot's busy time."""
        with self.lock:
            self.prefill_busy_us += int(seconds * 1e6)
            self.prefill_uncached += tokens
            self.reg.inc("sglang:realtime_tokens_total", tokens, {"mode": "prefill_compute"})
            self._gauge("num_queue_reqs", len(self.queue) + self.http_waiting)

    def finished_prefill(self, tokens: int) -> Req:
        req = self._new_req(tokens, 1)
        with self.lock:
            self._observe_transfer(tokens)
            self._finish(req, 1)
        return req

    def _finish(self, req: Req, generated: int) -> None:
        labels = self._streaming("false")
        self.reg.inc("sglang:prompt_tokens_total", req.input_len, labels, base=False)
        self.reg.inc("sglang:generation_tokens_total", generated, labels, base=False)
        self.reg.inc("sglang:num_requests_total", 1, labels, base=False)
        e2e = self.clock() - req.arrived
        self.reg.observe("sglang:e2e_request_latency_seconds", e2e, labels, base=False)
        self.reg.observe("sglang:time_to_first_token_seconds", min(e2e, random.uniform(0.3, 1.5)), labels, base=False)

    # ---- the tick --------------------------------------------------------------------------------

    def tick(self, dt: float) -> None:
        self.poll_control()
        with self.lock:
            stalled = self.stalled
            if stalled:
                held = self._share(12)
                if len(self.running) < held and self.mode == "decode":
                    self.running += [self._new_req() for _ in range(held - len(self.running))]
                if self.state == RANK_STALLED:  # what the rank held when it stopped, as last published
                    self._gauge("num_running_reqs", len(self.running))
        if stalled:
            if self.state in STALLED:  # the whole server hangs in its forward pass (one rank's wedge must not
                self.forward_batch_generation()  # hold its siblings, which share this thread in the emulator)
            return
        with self.lock:
            if self.mode == "prefill":
                self._prefill_tick(dt)
            else:
                self._decode_tick(dt)

    def forward_batch_generation(self) -> None:
        """Where a stalled scheduler's thread sits, as a real one sits in its forward pass (a kernel or a
        collective that never returns): a stack dump (py-spy) of a wedged emulator names this frame."""
        time.sleep(STUCK_WAIT_S)

    # prefill --------------------------------------------------------------------------------------

    def _prefill_tick(self, dt: float) -> None:
        now = self.clock()
        state = self.state
        rate = {"prefill-saturated": 6.0, "pd-desync": 1.0}.get(state, 1.5) / self.dp_size if self.control.load else 0.0
        arrivals = 1 if random.random() < rate * dt else 0
        self.queue += [self._new_req() for _ in range(arrivals)]
        if state == "prefill-saturated":
            if len(self.queue) < 40:
                self.queue += [self._new_req() for _ in range(40 - len(self.queue))]
            self.bootstrap_q = max(self.bootstrap_q, 12)
            if len(self.queue) > 64:  # clients give up
                dropped = self.queue[64:]
                self.queue = self.queue[:64]
                self.reg.inc("sglang:num_aborted_requests_total", len(dropped), self.tok_labels, base=False)
        elif state == "pd-desync":
            self.bootstrap_q = min(self.bootstrap_q + arrivals, 24)
            self.queue.clear()
            if now - self.last_event >= 1.5:
                self.last_event = now
                self._prefill_bootstrap_failures()
        else:
            self.bootstrap_q = 0
        interval = 2.0 if state == "prefill-saturated" else 0.5
        if self.queue and now - self.last_batch >= interval and state != "pd-desync":
            self._prefill_batch(now, 1 if state == "prefill-saturated" else min(len(self.queue), 4))
        elif not self.queue and now - self.last_batch >= 30:
            self.last_batch = now
            self._publish_prefill_gauges(0, 0.0)
        self.last_progress = time.time() if state != "pd-desync" else self.last_progress

    def _prefill_batch(self, now: float, n: int) -> None:
        batch, self.queue = self.queue[:n], self.queue[n:]
        new_tokens = cached = 0
        for req in batch:
            hit = int(req.input_len * random.uniform(0.0, 0.5)) // PAGE_SIZE * PAGE_SIZE
            cached += hit
            new_tokens += req.input_len - hit
            self._observe_transfer(req.input_len)
            self._finish(req, 1)
        elapsed = max(now - self.last_batch, 1e-3)
        self.last_batch = now
        throughput = new_tokens / elapsed
        self.reg.inc("sglang:realtime_tokens_total", new_tokens, {"mode": "prefill_compute"})
        self.reg.inc("sglang:realtime_tokens_total", cached, {"mode": "prefill_cache"})
        self.reg.inc("sglang:cached_tokens_total", cached, self.tok_labels | {"cache_source": "device"}, base=False)
        hit_rate = cached / max(cached + new_tokens, 1)
        usage = self._publish_prefill_gauges(len(batch), hit_rate)
        pending = sum(r.input_len for r in self.queue)
        self.inflight_q = len(batch)
        self._log(
            f"Prefill batch, #new-seq: {len(batch)}, #new-token: {new_tokens}, #cached-token: {cached}, "
            f"full token usage: {usage:.2f}, swa token usage: {usage:.2f}, #running-req: {len(batch)}, "
            f"#queue-req: {len(self.queue)}, #pending-token: {pending}, #bootstrap-req: {self.bootstrap_q}, "
            f"#inflight-req: {self.inflight_q}, {'' if self.version == '0.5.12' else '#optimistic-req: 0, '}"
            "cuda graph: False, "
            f"input throughput (token/s): {throughput:.2f}"
        )

    def _publish_prefill_gauges(self, batch: int, hit_rate: float) -> float:
        self.published = time.time()
        used = sum(r.input_len for r in self.queue[:4]) + 4096 * batch
        usage = min(used / MAX_TOTAL_TOKENS, 0.99)
        self._set_usage(used, usage)
        self._gauge("num_running_reqs", batch)
        self._gauge("num_queue_reqs", len(self.queue) + self.http_waiting)
        self._gauge("num_prefill_bootstrap_queue_reqs", self.bootstrap_q)
        self._gauge("num_prefill_inflight_queue_reqs", self.inflight_q)
        self._gauge("cache_hit_rate", hit_rate)
        self._gauge("utilization", 0.9 if batch else 0.0)
        return usage

    def _observe_transfer(self, tokens: int) -> None:
        mb = tokens * 584 * 43 / 1e6 / max(self.tp_size, 1)
        latency = random.uniform(8, 60)
        self.reg.observe("sglang:kv_transfer_total_mb", mb)
        self.reg.observe("sglang:kv_transfer_latency_ms", latency)
        self.reg.observe("sglang:kv_transfer_speed_gb_s", mb / 1000 / (latency / 1000))
        self.reg.observe("sglang:kv_transfer_bootstrap_ms", random.uniform(1, 8))
        self.reg.observe("sglang:kv_transfer_alloc_ms", random.uniform(0.5, 4))

    def _prefill_bootstrap_failures(self) -> None:
        self._warn_once(
            "bootstrap-timeout",
            "Some requests timed out when bootstrapping, which means prefill instances fail to receive the KV "
            "indices from the decode instance of this request. If a greater mean TTFT is acceptable, you can "
            "'export SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT=600' (10 minutes) to relax the timeout condition. ",
        )
        for _ in range(random.randint(1, 3)):
            req = self._new_req()
            self._log(
                f"Prefill bootstrap failed for request rank=0 req.rid={req.rid!r} req.bootstrap_room={req.room} "
                f"with exception KVTransferError(bootstrap_room={req.room}): "
                f"Request {req.room} timed out after 300.0s in KVPoll.Bootstrapping"
            )
            self.reg.inc("sglang:num_bootstrap_failed_reqs_total")
            self.reg.inc("sglang:num_aborted_requests_total", 1, self.tok_labels, base=False)
        self._publish_prefill_gauges(0, 0.0)

    # decode ---------------------------------------------------------------------------------------

    def awaits_peer_restart(self) -> bool:
        """Decode's KV transfers fail until a restart: the broken transfer sessions are with prefill, so
        prefill's restart (the remedy kv-transfer-failure offers) clears them, as decode's own does."""
        return self.mode == "decode" and self.state == "kv-transfer-fail" and self.control.until_restart

    def peer_seen(self, ok: bool) -> None:
        """Whether the prefill bootstrap server answers now: gone and back is a prefill restart, after which
        decode bootstraps fresh transfer sessions (an ``until_restart`` kv-transfer-fail clears)."""
        with self.lock:
            if not ok:
                self.peer_gone = True
                return
            if self.peer_gone and self.awaits_peer_restart():
                write_control(self.control_file, Control(load=self.control.load))
            self.peer_gone = False

    def heartbeat(self, ok: bool, max_failures: int = 2) -> None:
        """Decode's heartbeat to the prefill bootstrap server's /health (common/conn.py)."""
        with self.lock:
            if ok:
                self.connected, self.heartbeat_failures, self.prefill_lost = True, 0, False
                return
            if not self.connected or self.prefill_lost:
                return
            self.heartbeat_failures += 1
            self._log(f"Attempting to reconnect to {self.bootstrap_addr}...")
            if self.heartbeat_failures < max_failures:
                return
            self.prefill_lost = True
            affected = self.running[: max(1, len(self.running) // 2)]
            lost = "Losing" if self.version == "0.5.12" else "Lost"  # 0.5.12's mooncake wording
            self._log(f"{lost} connection with prefill instance (bootstrap_addr: {self.bootstrap_addr}), "
                       f"{len(affected)} requests affected")
            self._transfer_failures(len(affected), f"Lost connection with prefill instance (bootstrap_addr: "
                                                   f"{self.bootstrap_addr})")
            del self.running[: len(affected)]

    def _decode_tick(self, dt: float) -> None:
        now = self.clock()
        state = self.state
        target = {"retract-storm": RETRACT_DECODING, "prefill-saturated": 2, "kv-transfer-fail": 1, "pd-desync": 0}.get(state, 8)
        target = self._share(target)
        if not self.control.load or self.prefill_lost:
            target = 0
        while len(self.running) < target:
            req = self._new_req()
            self.reg.observe("sglang:kv_transfer_bootstrap_ms", random.uniform(1, 8))
            self.reg.observe("sglang:kv_transfer_alloc_ms", random.uniform(0.5, 4))
            self.running.append(req)
        if state in ("prefill-saturated", "kv-transfer-fail", "pd-desync", "retract-storm"):
            del self.running[target:]  # the rest failed their transfer or handshake, or were retracted
        self.prealloc_q = {"prefill-saturated": 6, "pd-desync": 10, "kv-transfer-fail": 2}.get(state, 0)
        self.transfer_q = {"prefill-saturated": 3, "kv-transfer-fail": 4}.get(state, 0)
        slow = RETRACT_SLOWDOWN if state == "retract-storm" else 1
        self.step_frac += dt / STEP_S / slow if self.running else 0.0
        steps = int(self.step_frac)  # whole decode iterations; the fraction carries over to the next tick
        self.step_frac -= steps
        self.steps += steps
        for req in list(self.running):
            req.done += steps
            self.flush_tokens += steps
            if req.done >= req.output_len:
                self.running.remove(req)
                self.reg.observe("sglang:inter_token_latency_seconds", STEP_S * slow, self.tok_labels, base=False)
                self._finish(req, req.output_len)
        if self.running:
            self.last_progress = time.time()
        if now - self.last_event >= 1.0:
            self.last_event = now
            self._decode_incidents(state)
        if self.steps >= self.decode_log_interval:
            self._decode_flush(now)
        elif not self.running and now - self.last_flush >= 30:
            self._decode_flush(now)

    def _decode_incidents(self, state: str) -> None:
        if state == "prefill-saturated":
            self._transfer_failures(random.randint(1, 3), "Aborted by AbortReq.", aborted=True)
        elif state == "kv-transfer-fail":
            down = (f"Prefill server with bootstrap_addr: {self.bootstrap_addr} is healthy before, but now it is "
                    "down. Request (bootstrap_room: {room}) has been marked as failed.")
            reason = random.choice(["Failed to get kvcache from prefill instance, it might be dead", down])
            self._transfer_failures(random.randint(1, 3), reason)
        elif state == "pd-desync":
            for _ in range(random.randint(1, 3)):
                req = self._new_req()
                self._log(
                    f"Decode handshake failed for request rank=0 decode_req.req.rid={req.rid!r} "
                    f"decode_req.req.bootstrap_room={req.room} with exception KVTransferError("
                    f"bootstrap_room={req.room}): Could not fetch prefill parallel info from bootstrap_addr: "
                    f"{self.bootstrap_addr}"
                )
                self.reg.inc("sglang:num_bootstrap_failed_reqs_total")
                self.reg.inc("sglang:num_aborted_requests_total", 1, self.tok_labels, base=False)
        elif state == "retract-storm":
            n = random.randint(2, 6)
            gained = sum(random.randint(2000, 9000) for _ in range(n))
            old, self.new_token_ratio = self.new_token_ratio, max(0.1, self.new_token_ratio - 0.05)
            self._log(
                f"KV cache pool is full. Retract requests. #retracted_reqs: {n}, #new_tokens_gained: {gained}, "
                f"#new_token_ratio: {old:.4f} -> {self.new_token_ratio:.4f}"
            )
            self.retracted_now = n
            self.reg.inc("sglang:num_retracted_requests_total", n)
            self.reg.inc("sglang:num_retracted_input_tokens_total", gained)
            self.reg.inc("sglang:num_retracted_output_tokens_total", n * random.randint(50, 400))
            self.reg.set("sglang:num_retracted_reqs", n, {"pid": self.pid}, base=True)

    def _transfer_failures(self, n: int, reason: str, aborted: bool = False) -> None:
        for _ in range(n):
            req = self._new_req()
            self._log(
                f"Decode transfer failed for request rank=0 decode_req.req.rid={req.rid!r} "
                f"decode_req.req.bootstrap_room={req.room} with exception "
                f"KVTransferError(bootstrap_room={req.room}): {reason.format(room=req.room)}"
            )
            self.reg.inc("sglang:num_transfer_failed_reqs_total")
            if aborted:
                self.reg.inc("sglang:num_aborted_requests_total", 1, self.tok_labels, base=False)

    def _decode_flush(self, now: float) -> None:
        self.published = time.time()
        elapsed = max(now - self.last_flush, 1e-3)
        tokens, self.flush_tokens, self.steps = self.flush_tokens, 0, 0.0
        self.last_flush = now
        self.reg.inc("sglang:realtime_tokens_total", tokens, {"mode": "decode"})
        throughput = tokens / elapsed
        seq = sum(r.input_len + r.done for r in self.running)
        usage = 0.99 if self.state == "retract-storm" else min(seq / MAX_TOTAL_TOKENS, 0.98)
        used = int(usage * MAX_TOTAL_TOKENS)
        swa = int(min(len(self.running) * 1024 / MAX_SWA_TOKENS, 0.99) * MAX_SWA_TOKENS)
        self._set_usage(used, usage, swa)
        prealloc = self.prealloc_q * 8192 / MAX_TOTAL_TOKENS
        self._gauge("num_running_reqs", len(self.running))
        waiting = RETRACT_WAITING if self.state == "retract-storm" else 0  # retracted, waiting to be re-run
        self._gauge("num_queue_reqs", waiting)
        self._gauge("gen_throughput", throughput)
        self._gauge("decode_sum_seq_lens", seq)
        self._gauge("num_decode_prealloc_queue_reqs", self.prealloc_q)
        self._gauge("num_decode_transfer_queue_reqs", self.transfer_q)
        self._gauge("pending_prealloc_token_usage", prealloc)
        self._gauge("new_token_ratio", self.new_token_ratio)
        self._gauge("utilization", 0.85 if self.running else 0.0)
        self._gauge("is_cuda_graph", 1.0)
        if self.state != "retract-storm":
            self.retracted_now = 0
            self.reg.set("sglang:num_retracted_reqs", 0, {"pid": self.pid})
        self._log(
            f"Decode batch, #running-req: {len(self.running)}, #full token: {used}, full token usage: {usage:.2f}, "
            f"#swa token: {swa}, swa token usage: {swa / MAX_SWA_TOKENS:.2f}, pre-allocated usage: {prealloc:.2f}, "
            f"#prealloc-req: {self.prealloc_q}, #transfer-req: {self.transfer_q}, "
            f"#retracted-req: {self.retracted_now}, cuda graph: True, gen throughput (token/s): {throughput:.2f}, "
            f"#queue-req: {waiting}"
        )

    # gauges ---------------------------------------------------------------------------------------

    def load_snapshot(self) -> dict:
        """The per-rank ``/v1/loads`` record, as last published (stale while the scheduler is stuck)."""
        g = self.reg.get
        used = int(g("sglang:num_used_tokens"))
        return {
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(self.published)) + "Z",
            "dp_rank": self.dp_rank or 0,
            "num_running_reqs": int(g("sglang:num_running_reqs")), "num_waiting_reqs": int(g("sglang:num_queue_reqs")),
            "num_used_tokens": used, "num_total_tokens": MAX_TOTAL_TOKENS, "max_total_num_tokens": MAX_TOTAL_TOKENS,
            "max_running_requests": MAX_RUNNING, "token_usage": g("sglang:token_usage"),
            "gen_throughput": g("sglang:gen_throughput"), "cache_hit_rate": g("sglang:cache_hit_rate"),
            "utilization": g("sglang:utilization"),
            "total_prefill_uncached_tokens": self.prefill_uncached, "total_prefill_busy_us": self.prefill_busy_us,
            "disaggregation": {
                "mode": self.engine_type,
                "prefill_bootstrap_queue_reqs": int(g("sglang:num_prefill_bootstrap_queue_reqs")),
                "prefill_inflight_queue_reqs": int(g("sglang:num_prefill_inflight_queue_reqs")),
                "decode_prealloc_queue_reqs": int(g("sglang:num_decode_prealloc_queue_reqs")),
                "decode_transfer_queue_reqs": int(g("sglang:num_decode_transfer_queue_reqs")),
                "decode_retracted_queue_reqs": self.retracted_now,
            },
        }

    def _gauge(self, name: str, value: float) -> None:
        self.reg.set(f"sglang:{name}", value)

    def _set_usage(self, used: int, usage: float, swa_used: int | None = None) -> None:
        swa_used = int(usage * MAX_SWA_TOKENS) if swa_used is None else swa_used
        self._gauge("token_usage", max(usage, swa_used / MAX_SWA_TOKENS))
        self._gauge("full_token_usage", usage)
        self._gauge("swa_token_usage", swa_used / MAX_SWA_TOKENS)
        self._gauge("num_used_tokens", used)
        self._gauge("kv_used_tokens", used)
        self._gauge("kv_evictable_tokens", 0 if self.mode == "decode" else min(65536, MAX_TOTAL_TOKENS - used))
        self._gauge("kv_available_tokens", MAX_TOTAL_TOKENS - used - (0 if self.mode == "decode" else
                                                                     min(65536, MAX_TOTAL_TOKENS - used)))
        self._gauge("swa_used_tokens", swa_used)
        self._gauge("swa_evictable_tokens", 0)
        self._gauge("swa_available_tokens", MAX_SWA_TOKENS - swa_used)

    def _streaming(self, value: str) -> dict[str, str]:
        """Tokenizer labels; 0.5.23 added is_streaming (0.5.12 has none)."""
        return self.tok_labels if self.version == "0.5.12" else self.tok_labels | {"is_streaming": value}

    def _static_gauges(self) -> None:
        self._gauge("max_total_num_tokens", MAX_TOTAL_TOKENS)
        if self.version != "0.5.12":
            self._gauge("max_total_num_tokens_swa", MAX_SWA_TOKENS)
        self._gauge("page_size", PAGE_SIZE)
        self._gauge("context_len", CONTEXT_LEN)
        self._gauge("startup_available_gpu_memory_gb", 17.21)
        self._gauge("new_token_ratio", self.new_token_ratio)
        self._set_usage(0, 0.0)
        for name in ("num_running_reqs", "num_queue_reqs", "num_grammar_queue_reqs", "gen_throughput",
                     "cache_hit_rate", "decode_sum_seq_lens", "num_prefill_bootstrap_queue_reqs",
                     "num_prefill_inflight_queue_reqs", "num_decode_prealloc_queue_reqs",
                     "num_decode_transfer_queue_reqs", "pending_prealloc_token_usage", "utilization",
                     "is_cuda_graph"):
            self._gauge(name, 0)
        for name in PID_GAUGES:
            self.reg.set(f"sglang:{name}", 0, {"pid": self.pid})
        for name in ("num_retracted_requests_total", "num_retracted_input_tokens_total",
                     "num_retracted_output_tokens_total", "num_bootstrap_failed_reqs_total",
                     "num_transfer_failed_reqs_total", "num_prefill_retries_total"):
            self.reg.inc(f"sglang:{name}", 0)
        for mode in ("prefill_compute", "prefill_cache", "decode"):
            self.reg.inc("sglang:realtime_tokens_total", 0, {"mode": mode})
        for streaming in ("false", "true"):
            for name in ("prompt_tokens_total", "generation_tokens_total", "num_requests_total"):
                self.reg.inc(f"sglang:{name}", 0, self._streaming(streaming), base=False)
        for source in ("device", "host", "storage", "total"):
            self.reg.inc("sglang:cached_tokens_total", 0, self.tok_labels | {"cache_source": source}, base=False)
        self.reg.inc("sglang:num_aborted_requests_total", 0, self.tok_labels, base=False)

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self.warned:
            self.warned.add(key)
            self._log(message)
