"""The SGLang and router metric families opsbot reads: the one list every stage takes names from.

Fact names are the exposition name without the ``sglang:`` / ``sglang_`` prefix and without
``_total`` (router ``smg_*`` and ``sgl_router_*`` names are kept as they are). The names come from
reference/sglang.md §1.4 (server) and §1.6 (router); serving/metric_names.txt is that reference's
full catalogue, against which dashboards and alerts are checked.
"""

from __future__ import annotations

PREFIXES = ("sglang:", "sglang_")

GAUGES = frozenset(
    """num_running_reqs num_queue_reqs num_grammar_queue_reqs gen_throughput cache_hit_rate decode_sum_seq_lens
    token_usage full_token_usage swa_token_usage mamba_usage num_used_tokens kv_available_tokens kv_evictable_tokens
    kv_used_tokens swa_available_tokens swa_evictable_tokens swa_used_tokens num_retracted_reqs num_paused_reqs
    num_prefill_bootstrap_queue_reqs num_prefill_inflight_queue_reqs num_decode_prealloc_queue_reqs
    num_decode_transfer_queue_reqs num_decode_host_receive_queue_reqs num_decode_deferred_kv_release_reqs
    pending_prealloc_token_usage prealloc_full_token_usage prealloc_swa_token_usage utilization fwd_occupancy
    new_token_ratio is_cuda_graph max_total_num_tokens max_total_num_tokens_swa context_len page_size num_pages
    weight_memory_usage_gb kv_cache_memory_usage_gb startup_available_gpu_memory_gb spec_accept_length
    spec_accept_rate http_requests_active hicache_host_used_tokens hicache_host_total_tokens
    max_running_requests_under_SLO num_unique_running_routing_keys
    smg_worker_pool_size smg_worker_health smg_worker_connections_active smg_worker_requests_active
    smg_worker_cb_state smg_worker_cb_consecutive_failures smg_http_connections_active
    smg_worker_stalled smg_workers_overloaded smg_pd_prefill_admission_queued smg_pd_prefill_admission_inflight
    sgl_router_active_workers sgl_router_worker_load sgl_router_worker_cb_state sgl_router_worker_health
    routing_keys_active""".split()
)
COUNTERS = frozenset(
    """realtime_tokens prompt_tokens generation_tokens num_requests num_aborted_requests cached_tokens
    num_retracted_requests num_retracted_input_tokens num_retracted_output_tokens num_bootstrap_failed_reqs
    num_transfer_failed_reqs num_prefill_retries cuda_graph_passes forward_execution_seconds
    scheduler_idle_seconds prefill_effective_tokens evicted_tokens http_requests http_responses
    num_grammar_aborted num_grammar_timeout process_cpu_seconds failed_session_recoveries
    time_to_first_token_seconds inter_token_latency_seconds e2e_request_latency_seconds queue_time_seconds
    kv_transfer_latency_ms kv_transfer_speed_gb_s kv_transfer_bootstrap_ms kv_transfer_alloc_ms kv_transfer_total_mb
    per_stage_req_latency_seconds
    smg_http_requests smg_http_responses smg_router_requests smg_router_request_errors smg_router_upstream_responses
    smg_worker_health_checks smg_worker_errors smg_worker_retries smg_worker_retries_exhausted
    smg_worker_selection smg_worker_cb_transitions smg_worker_cb_outcomes smg_worker_stall_transitions
    smg_pd_bootstrap_failures smg_pd_kv_transfer_failures smg_pd_rendezvous_failures smg_pd_prefill_admission_rejections
    smg_pd_admission_sheds smg_worker_overload_shed
    sgl_router_request_errors sgl_router_pd_errors sgl_router_pd_prefill_errors sgl_router_pd_decode_errors
    sgl_router_pd_stream_errors sgl_router_pd_requests
    sgl_router_retries_exhausted sgl_router_cb_state_transitions sgl_router_processed_requests sgl_router_requests
    num_decode_host_receive_reqs dp_cooperation_realtime_tokens decode_deferred_kv_release""".split()
)

# The counter that says a role is making progress, per kind; realtime_tokens (all modes) when a kind has none.
PROGRESS_COUNTER = {"decode": "realtime_tokens_decode", "prefill": "realtime_tokens_prefill_compute"}

# Where a role's token progress comes from, best first, as (group, fact, what it is): the one list the
# diagnosis (parse/facts.py), the figures (parse/figures.py: probe table, status page, reports) and the
# restart check read. SGLang 0.5.x late: realtime_tokens_total{mode}; 0.4.6.post5 and 0.5.0rc2
# metrics/collector.py: generation_tokens_total / prompt_tokens_total, counted as requests finish, and
# the gen_throughput gauge, last set by the periodic Decode batch line (a last value: it goes stale).
PROGRESS_SOURCES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "decode": (("delta", "realtime_tokens_decode", 'realtime_tokens_total{mode="decode"}'),
               ("delta", "generation_tokens", "generation_tokens_total (moves as requests finish)"),
               ("metrics", "gen_throughput", "gen_throughput gauge (last Decode batch line)")),
    "prefill": (("delta", "realtime_tokens_prefill_compute", 'realtime_tokens_total{mode="prefill_compute"}'),
                ("delta", "prompt_tokens", "prompt_tokens_total (moves as requests finish)")),
}
# Requests the router routed, best first: SMG / sglang-router >= 0.3.2 smg_router_requests_total; the in-tree
# sgl-router of 2025 (sgl-router/src/metrics.rs) sgl_router_processed_requests_total{worker} and
# sgl_router_requests_total{route}.
ROUTER_REQUEST_SOURCES = ("smg_router_requests", "sgl_router_processed_requests", "sgl_router_requests")

# Figures read by name (parse/figures.py, report/prom.py, act/verify.py).
RUNNING_REQS = "num_running_reqs"
QUEUE_REQS = "num_queue_reqs"
TOKEN_USAGE = "token_usage"
REALTIME_TOKENS = "realtime_tokens"
TTFT = "time_to_first_token_seconds"
ITL = "inter_token_latency_seconds"
ROUTER_REQUESTS = "smg_router_requests"


def exposed(fact: str, suffix: str = "") -> str:
    """The name Prometheus holds for a listed family: ``sglang:`` before a server's, then ``suffix`` (``_total``, ``_bucket``)."""
    if fact not in GAUGES and fact not in COUNTERS:
        raise KeyError(f"{fact} is not a metric family opsbot reads")
    return (fact if fact.startswith(("smg_", "sgl_router_")) else PREFIXES[0] + fact) + suffix
