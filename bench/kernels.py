"""Indexer kernels on the GPU: decode logits (bf16 / fp8 keys), top-k, beside the torch reference
and torch.topk, against the copy bandwidth measured in the same run; and the precision study.

    python -m bench.kernels speed      [--quick] [--json PATH]
    python -m bench.kernels precision  [--json PATH]
    python -m bench.kernels plot       --json PATH --png PATH    (no GPU needed)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

from kernels.layout import PAGE, new_bf16_cache, new_fp8_cache
from kernels.logits import paged_logits, row_lengths
from kernels.topk import topk

FLUSH_BYTES = 512 << 20


def timed(fn, iters: int = 15) -> float:
    """Median µs of fn() with L2 flushed before each call (CUDA events around the call only)."""
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    fn()
    times = []
    for _ in range(iters):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def copy_bandwidth() -> float:
    """TB/s of a 4 GiB device-to-device copy, bytes read + written."""
    src = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = timed(lambda: dst.copy_(src), iters=10)
    return 2 * src.numel() / us / 1e6


def decode_case(batch: int, length: int, kind: str, seed: int = 0):
    """Ragged lengths U[0.7L, 1.3L], a shuffled page table, random keys stored through the kernels."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    lens = (torch.rand(batch, generator=g, device="cuda") * 0.6 + 0.7) * length
    lens = lens.to(torch.int32).clamp_min(1) if batch > 1 else torch.full((1,), length, device="cuda", dtype=torch.int32)
    max_pages = int(lens.max().item() + PAGE - 1) // PAGE
    pages = batch * max_pages
    table = torch.randperm(pages, generator=g, device="cuda").to(torch.int32).reshape(batch, max_pages)
    keys = torch.randn(pages * PAGE, 128, generator=g, device="cuda", dtype=torch.bfloat16)
    slots = torch.arange(pages * PAGE, device="cuda", dtype=torch.int32)
    if kind == "bf16":
        cache = new_bf16_cache(pages, "cuda")
        from kernels.store import store_bf16

        store_bf16(keys, cache, slots)
        q = torch.randn(batch, 1, 64, 128, generator=g, device="cuda", dtype=torch.bfloat16)
    else:
        cache = new_fp8_cache(pages, "cuda")
        from kernels.store import store_fp8

        store_fp8(keys, cache, slots)
        q = torch.randn(batch, 1, 64, 128, generator=g, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(batch, 1, 64, generator=g, device="cuda") / 64
    return q, w, cache, table, lens


def torch_reference(q, w, cache, table, lens, k):
    """The naive paged reference of dsa-indexer.md §5.4: gather, bf16 einsum, ReLU, head-sum, topk."""
    kc = cache[table.long()].reshape(table.shape[0], -1, 128)  # bf16 [B, pages*64, 128]
    s = torch.einsum("bhd,bld->bhl", q[:, 0], kc).relu()
    logits = (s.float() * w[:, 0, :, None]).sum(1)
    pos = torch.arange(logits.shape[1], device="cuda")
    logits = logits.masked_fill(pos[None, :] >= lens[:, None], float("-inf"))
    return logits.topk(min(k, logits.shape[1]), dim=1, sorted=False).indices


def key_bytes(lens: torch.Tensor, kind: str, width: int) -> int:
    per = 256 if kind == "bf16" else 132
    batch = lens.numel()
    q = batch * 64 * 128 * (2 if kind == "bf16" else 1)
    return int(lens.sum().item()) * per + q + batch * width * 4  # keys + q + fp32 logits written


def tune(copy_tbs: float, out: list) -> dict:
    """A few (pages_per_program, num_warps, num_stages) at B=64, L=64K; the best per kind."""
    best = {}
    for kind in ("bf16", "fp8"):
        q, w, cache, table, lens = decode_case(64, 65536, kind)
        nbytes = key_bytes(lens, kind, table.shape[1] * PAGE)
        scores = []
        for ppp in (4, 8, 16):
            for warps in (4, 8):
                for stages in (2, 3, 4):
                    cfg = {"pages_per_program": ppp, "num_warps": warps, "num_stages": stages}
                    try:
                        us = timed(lambda: paged_logits(q, w, cache, table, lens, **cfg))
                    except Exception as exc:  # a config the compiler refuses (shared memory)
                        print(f"tune {kind} {cfg}: {type(exc).__name__}", file=sys.stderr)
                        continue
                    scores.append((us, cfg))
                    out.append({"tune": kind, **cfg, "us": us, "tbs": nbytes / us / 1e6})
                    print(f"tune {kind} {cfg}: {us:8.1f} us {nbytes / us / 1e6:5.2f} TB/s", flush=True)
        best[kind] = min(scores, key=lambda s: s[0])[1]
        del q, w, cache, table, lens
    return best


def speed(quick: bool, path: str | None) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    copy_tbs = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  copy bandwidth {copy_tbs:.2f} TB/s", flush=True)
    rows: list[dict] = []
    best = tune(copy_tbs, rows) if not quick else {"bf16": {}, "fp8": {}}
    print("best", best, flush=True)
    batches = (1, 16, 64, 128) if not quick else (64,)
    lengths = (4096, 16384, 65536, 131072) if not quick else (65536,)
    header = f"{'B':>4} {'L':>7} {'keys':>5} {'logits us':>10} {'TB/s':>6} {'%copy':>6} {'topk512':>8} {'topk2048':>9} {'torch.topk':>10} {'e2e us':>8} {'torch ref':>10}"
    print(header, flush=True)
    for batch in batches:
        for length in lengths:
            for kind in ("bf16", "fp8"):
                q, w, cache, table, lens = decode_case(batch, length, kind)
                width = table.shape[1] * PAGE
                cfg = best[kind]
                us = timed(lambda: paged_logits(q, w, cache, table, lens, **cfg))
                logits = paged_logits(q, w, cache, table, lens, **cfg)
                rl = row_lengths(lens, 1)
                tk = {kk: timed(lambda: topk(logits, rl, kk, block_table=table)) for kk in (512, 2048)}
                tt = timed(lambda: logits.topk(2048, dim=1, sorted=False))
                e2e = timed(lambda: topk(paged_logits(q, w, cache, table, lens, **cfg), rl, 2048, block_table=table))
                ref = None
                if kind == "bf16" and batch * width <= 4 << 20:
                    ref = timed(lambda: torch_reference(q, w, cache, table, lens, 2048), iters=5)
                tbs = key_bytes(lens, kind, width) / us / 1e6
                row = {"B": batch, "L": length, "kind": kind, "logits_us": us, "tbs": tbs, "pct_copy": 100 * tbs / copy_tbs,
                       "topk512_us": tk[512], "topk2048_us": tk[2048], "torch_topk_us": tt, "e2e_us": e2e,
                       "torch_ref_us": ref, "tokens": int(lens.sum().item())}
                rows.append(row)
                refs = f"{ref:10.1f}" if ref else f"{'-':>10}"
                print(f"{batch:>4} {length:>7} {kind:>5} {us:10.1f} {tbs:6.2f} {row['pct_copy']:6.1f} {tk[512]:8.1f} {tk[2048]:9.1f} {tt:10.1f} {e2e:8.1f} {refs}", flush=True)
                del q, w, cache, table, lens, logits
    if path:
        with open(path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_tbs": copy_tbs,
                       "best": best, "rows": rows}, f, indent=1)


def precision(path: str | None) -> None:
    from kernels.precision import run_study

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    lengths = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]

    def show(r):
        print(f"cm={r['cm']} seed={r['seed']} L={r['L']:>6} r_fp8={r['r_fp8']:.3f} "
              + " ".join(f"{v}={r[f'recall@2048/{v}']:.4f}" for v in ("bf16", "q16k8", "q8k8", "fp4", "bf16-logits")),
              flush=True)

    rows = run_study(lengths, progress=show)
    if path:
        with open(path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["speed", "precision", "plot"])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--png")
    a = ap.parse_args()
    if a.what == "speed":
        speed(a.quick, a.json)
    elif a.what == "precision":
        precision(a.json)
    else:
        from bench.kernels_plot import plot

        plot(a.json, a.png)


if __name__ == "__main__":
    main()
