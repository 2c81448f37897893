"""The command lines of ``sglang.launch_server`` and ``sglang_router.launch_router`` (0.5.23 names).

Only flags the lab and real deployments use are modelled; each has SGLang's name, aliases and
default. An unknown flag ends the process with argparse's usage error, as SGLang's does.
"""

from __future__ import annotations

import argparse
import json


def _bool(parser: argparse.ArgumentParser, *names: str, help: str = "") -> None:
    parser.add_argument(*names, action="store_true", default=False, help=help)


def server_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sglang serve")  # allow_abbrev stays on: --tp means --tp-size
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--tokenizer-path", default=None)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    _bool(p, "--trust-remote-code")
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    p.add_argument("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    p.add_argument("--ep-size", "--expert-parallel-size", "--ep", dest="ep_size", type=int, default=1)
    p.add_argument("--pp-size", "--pipeline-parallel-size", dest="pp_size", type=int, default=1)
    # 0.5.23 server_args.py: deprecated in favour of --attn-dp-size, still accepted (reference/sglang.md §3)
    _bool(p, "--enable-dp-attention")
    p.add_argument("--attn-dp-size", "--attention-data-parallel-size", dest="attn_dp_size", type=int, default=1)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--dist-init-addr", "--nccl-init-addr", dest="dist_init_addr", default=None)
    p.add_argument("--mem-fraction-static", type=float, default=None)
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--max-queued-requests", type=int, default=None)
    p.add_argument("--context-length", type=int, default=None)
    p.add_argument("--chunked-prefill-size", type=int, default=None)
    p.add_argument("--page-size", type=int, default=None)
    p.add_argument(
        "--kv-cache-dtype", default="auto",
        choices=["auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16"],
    )
    p.add_argument("--watchdog-timeout", type=float, default=300)
    p.add_argument("--soft-watchdog-timeout", type=float, default=None)
    p.add_argument("--dist-timeout", type=int, default=None)
    _bool(p, "--enable-metrics")
    _bool(p, "--enable-metrics-for-all-schedulers")
    _bool(p, "--enable-mfu-metrics")
    p.add_argument("--extra-metric-labels", type=json.loads, default=None)
    p.add_argument("--decode-log-interval", type=int, default=40)
    p.add_argument("--log-level", default="info")
    p.add_argument("--log-level-http", default=None)
    p.add_argument("--disaggregation-mode", default="null", choices=["null", "prefill", "decode"])
    p.add_argument(
        "--disaggregation-transfer-backend", default="mooncake",
        choices=["mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp"],
    )
    p.add_argument("--disaggregation-bootstrap-port", type=int, default=8998)
    p.add_argument("--disaggregation-ib-device", default=None)
    p.add_argument("--disaggregation-decode-allocation-policy", default="early", choices=["early", "prefill_complete"])
    _bool(p, "--disaggregation-enable-kv-checksum")
    _bool(p, "--disaggregation-decode-enable-radix-cache")
    _bool(p, "--disaggregation-decode-enable-offload-kvcache")
    p.add_argument("--num-reserved-decode-tokens", type=int, default=512)
    p.add_argument("--disaggregation-decode-polling-interval", type=int, default=1)
    _bool(p, "--enable-hierarchical-cache", "--enable-hicache")
    p.add_argument("--hicache-ratio", type=float, default=None)
    p.add_argument("--hicache-size", type=int, default=0)
    p.add_argument("--hicache-write-policy", default="write_through",
                   choices=["write_back", "write_through", "write_through_selective"])
    p.add_argument("--hicache-mem-layout", default="page_first",
                   choices=["layer_first", "page_first", "page_first_direct", "page_first_kv_split", "page_head"])
    p.add_argument("--hicache-storage-backend", default=None)
    p.add_argument("--dsv4-attn-backend", default="auto", choices=["auto", "flashmla", "flashmla_mega", "trtllm"])
    p.add_argument("--dsv4-prefill-backend", default="auto", choices=["auto", "flashmla_sparse", "flashmla_sparse_q8"])
    _bool(p, "--enable-deepseek-v4-fp4-indexer")
    p.add_argument("--moe-runner-backend", default="auto")
    _bool(p, "--disable-flashinfer-autotune")
    p.add_argument("--swa-full-tokens-ratio", type=float, default=None)
    p.add_argument("--schedule-policy", default="fcfs")
    p.add_argument("--api-key", default=None)
    p.add_argument("--admin-api-key", default=None)
    _bool(p, "--skip-server-warmup")
    return p


def router_parser(smg: bool = False) -> argparse.ArgumentParser:
    """sglang-router 0.3.2's flags, or ``smg launch``'s (smg 1.13 smg/router_args.py: no ``--mini-lb``,
    stall detection added)."""
    p = argparse.ArgumentParser(prog="smg launch" if smg else "sglang-router")
    _bool(p, "--pd-disaggregation")
    p.add_argument("--prefill", nargs="+", action="append", default=[], metavar=("URL", "BOOTSTRAP_PORT"))
    p.add_argument("--decode", nargs=1, action="append", default=[], metavar="URL")
    p.add_argument("--worker-urls", nargs="*", default=[])
    p.add_argument("--policy", default="cache_aware")
    p.add_argument("--prefill-policy", default=None)
    p.add_argument("--decode-policy", default=None)
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--prometheus-host", default=None)  # resolved by parse_router (smg: --host's family)
    p.add_argument("--prometheus-port", type=int, default=29000)
    p.add_argument("--worker-startup-timeout-secs", type=int, default=1800)
    p.add_argument("--worker-startup-check-interval", type=int, default=30)
    p.add_argument("--request-timeout-secs", type=int, default=1800)
    p.add_argument("--max-concurrent-requests", type=int, default=-1)
    p.add_argument("--queue-size", type=int, default=100)
    p.add_argument("--queue-timeout-secs", type=int, default=60)
    p.add_argument("--health-failure-threshold", type=int, default=3)
    p.add_argument("--health-success-threshold", type=int, default=2)
    p.add_argument("--health-check-timeout-secs", type=int, default=5)
    p.add_argument("--health-check-interval-secs", type=int, default=60)
    p.add_argument("--health-check-endpoint", default="/health")
    p.add_argument("--log-level", default=None)
    p.add_argument("--log-dir", default=None)
    if smg:
        p.add_argument("--worker-wedge-secs", type=float, default=3.0)
        p.add_argument("--worker-stall-secs", type=float, default=2.0)
    else:
        _bool(p, "--mini-lb")
    return p




def parse_server(argv: list[str]) -> argparse.Namespace:
    args = server_parser().parse_args(argv)
    if args.served_model_name is None:
        args.served_model_name = args.model_path
    return args


def dp_attention_ranks(args: argparse.Namespace) -> int:
    """How many DP-attention scheduler ranks the server runs: ``--attn-dp-size N`` (0.5.23), or the older
    ``--enable-dp-attention --dp-size N``; 1 without DP attention."""
    if args.attn_dp_size > 1:
        return args.attn_dp_size
    return args.dp_size if args.enable_dp_attention and args.dp_size > 1 else 1


def parse_router(argv: list[str], smg: bool = False) -> argparse.Namespace:
    """sglang-router 0.3.2's flags, or smg 1.13's (``smg launch``) when ``smg``."""
    parser = router_parser(smg)
    args = parser.parse_args(argv)
    if args.prometheus_host is None:  # smg: the unspecified address of --host's family; sglang-router: 0.0.0.0
        args.prometheus_host = "::" if smg and ":" in args.host else "0.0.0.0"
    prefill = []
    for item in args.prefill:
        if len(item) > 2:
            parser.error("--prefill takes URL [BOOTSTRAP_PORT]")
        port = item[1] if len(item) == 2 else "none"
        if port != "none" and not port.isdigit():
            parser.error(f"BOOTSTRAP_PORT can be a port number, 'none', or omitted, not {port!r}")
        prefill.append((item[0], None if port == "none" else int(port)))
    args.prefill = prefill
    args.decode = [d[0] for d in args.decode]
    if args.pd_disaggregation and (not args.prefill or not args.decode):
        parser.error("--pd-disaggregation needs at least one --prefill and one --decode")
    return args
