"""One DeepSeek-V4-Flash indexer step (decode logits + top-k 512 into physical slots), like for like:
the patched bf16 path as the patch runs it beside upstream's fp8 path with its own kernels, in one run.

    python -m bench.indexer_step [--batches 1 16 64 128] [--lengths 4096 16384 65536 131072] [--json PATH]
    python -m bench.indexer_step --sweep   (bf16 logits launch configs at the B x L = 1M cells, as timed here)
    python -m bench.indexer_step --grid [--configs] [--ragged] [--baseline DIR] [--repeat N]   (bf16 logits: DIR's
        kernel, the plain grid, the default choice and the persistent configs, bit-checked, same timing)

Per (B, L): B query rows, each its own request of exactly L compressed entries in shuffled pages.
  (a) patched: `select_bf16` (our bf16 logits, then the top-k the patch picks, `sglang_topk`: SGLang's
      JIT `topk_transform_paged_v2` with its plan, or ours where that cannot be loaded);
  (b) upstream: DeepGEMM `fp8_paged_mqa_logits` (e4m3 q and keys with fp32 scales, 132 B an entry)
      + the same `topk_transform_paged_v2`, as 0.5.23's `forward_c4_indexer` calls them; skipped with
      the error where DeepGEMM does not load or compile;
  (c) where (b) is missing: DeepGEMM's published H200 logits figure (B = 64, L = 64K only) + the
      top-k measured here.
Beside them: our logits alone (% of the copy bandwidth measured in the same run), DeepGEMM's logits
alone, our top-k and SGLang's on the same fp32 logits (same slots checked). Per-forward metadata
(DeepGEMM's schedule, the top-k plan) is built once outside the timing, as SGLang builds it once for
all layers. Every figure is a CUDA-graph replay with L2 flushed, median of 15 (bench.kernels.timed_graph).

Needs a GPU, nvcc, sglang 0.5.23 with apache-tvm-ffi (and sgl-deep-gemm for (b)); SGLang's modules are
imported with its CUDA detection held off (compare.cuda_detection_held_off says why).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import statistics
import sys
from collections.abc import Callable
from types import ModuleType, SimpleNamespace

import torch
import triton

from bench.kernels import copy_bandwidth, decode_case, key_bytes, timed_graph, v4_case
from kernels.layout import HEAD_DIM, HEADS, PAGE, V4_FLASH_TOPK, new_fp8_cache
from kernels.logits import paged_logits
from kernels.sglang_patch.bf16_indexer import (
    TopkFor,
    opsbot_topk,
    select_bf16,
    sglang_topk,
)
from kernels.sglang_patch.compare import cuda_detection_held_off
from kernels.store import quantize_fp8_ref, store_fp8
from kernels.topk import topk

# DeepGEMM fp8_paged_mqa_logits on an H200 at B = 64, L = 64K: SGLang's profile
# (shared/reference/dsa-indexer.md §0.6, nsa/hisa/benchmarks/_results/2026-04-21_h200_stage_profile_full.txt)
DEEPGEMM_PUBLISHED_US = {(64, 65536): 149.0}
BATCHES = (1, 16, 64, 128)
LENGTHS = (4096, 16384, 65536, 131072)
FP8_ENTRY_BYTES = HEAD_DIM + 4


def load_upstream() -> tuple[ModuleType | None, str]:
    """SGLang's V4 indexer module (whose globals are the top-k functions its forward calls), or the error."""
    try:
        with cuda_detection_held_off():
            from sglang.srt.layers.attention.dsv4 import indexer
        return indexer, ""
    except Exception as e:  # noqa: BLE001  (any import failure is reported in the table, not hidden)
        return None, f"{type(e).__name__}: {str(e)[-300:]}"


def load_deep_gemm() -> tuple[ModuleType | None, str]:
    try:
        import deep_gemm

        return deep_gemm, ""
    except Exception as e:  # noqa: BLE001  (a DeepGEMM that does not load is reported, then (c))
        return None, f"{type(e).__name__}: {str(e)[-300:]}"


def fp8_inputs(q, w, cache):
    """The same keys as fp8 pages (plain fp32 scales, as 0.5.23's fused_store_indexer_cache writes them)
    and an e4m3 q with its per-(row, head) scale folded into the weights."""
    pages = cache.shape[0]
    fp8 = new_fp8_cache(pages, "cuda")
    store_fp8(cache.reshape(-1, HEAD_DIM), fp8, torch.arange(pages * PAGE, dtype=torch.int32, device="cuda"), ue8m0=False)
    qv, qs = quantize_fp8_ref(q.reshape(-1, HEAD_DIM), ue8m0=False)
    return fp8, qv.view(q.shape), (w.reshape(-1, HEADS) * qs.view(-1, HEADS)).contiguous()


def same_sets(a: torch.Tensor, b: torch.Tensor) -> float:
    """Share of rows whose selected slot sets are equal."""
    return float((a.sort(dim=1).values == b.sort(dim=1).values).all(dim=1).float().mean())


def overlap(a: torch.Tensor, b: torch.Tensor) -> float:
    hit = sum(int(torch.isin(x[x >= 0], y[y >= 0]).sum()) for x, y in zip(a, b))
    return hit / max(1, int((b >= 0).sum()))


def case(batch: int, entries: int, up: ModuleType | None, dg: ModuleType | None, copy: float) -> dict:
    q, w, cache, table, lens = v4_case(batch, entries)
    q3, w2 = q[:, 0].contiguous(), w[:, 0].contiguous()
    r: dict = {"B": batch, "L": entries, "k": V4_FLASH_TOPK, "copy_tbps": copy}
    out_a = torch.full((batch, V4_FLASH_TOPK), -1, dtype=torch.int32, device="cuda")
    topk_for: TopkFor = opsbot_topk
    plan = None
    if up is not None:
        backend = SimpleNamespace(dsa_topk_backend=up.DSATopKBackend.SGL_KERNEL, flashinfer_topk_transform=None)
        plan = up.plan_topk_v2(lens)
        topk_for = sglang_topk(backend, up, SimpleNamespace(compressed_page_size=PAGE, topk_metadata=plan), jit=True)
    r["patched_topk"] = "sglang-v2" if up is not None else "opsbot"
    r["patched_step_us"] = timed_graph(lambda: select_bf16(q3, w2, cache, table, lens, out_a, entries, topk_for=topk_for))

    r["bf16_logits_us"] = timed_graph(lambda: paged_logits(q, w, cache, table, lens, max_context_len=entries))
    tbps = key_bytes(lens, "bf16", entries) / r["bf16_logits_us"] / 1e6
    r["bf16_logits_pct_copy"] = 100 * tbps / copy
    logits = paged_logits(q, w, cache, table, lens, max_context_len=entries)
    ours = topk(logits, lens, V4_FLASH_TOPK, block_table=table)
    r["ours_topk_us"] = timed_graph(lambda: topk(logits, lens, V4_FLASH_TOPK, block_table=table))
    if up is not None:
        out_u = torch.full_like(out_a, -1)
        def run_up() -> None:
            up.topk_transform_paged_v2(logits, lens, table, out_u, PAGE, plan, None)

        run_up()
        r["sglang_topk_us"] = timed_graph(run_up)
        r["topk_same_slots_rows"] = same_sets(out_u, ours)
        r["ours_over_sglang_topk"] = r["ours_topk_us"] / r["sglang_topk_us"]
    r["patched_same_slots_rows"] = same_sets(out_a, ours)

    fp8, q8, w8 = fp8_inputs(q, w, cache)
    if dg is not None and up is not None:
        try:
            ctx = lens[:, None].contiguous()
            sched = dg.get_paged_mqa_logits_metadata(ctx, PAGE, dg.get_num_sms())
            kv = fp8.view(fp8.shape[0], PAGE, 1, FP8_ENTRY_BYTES)
            out_b = torch.full_like(out_a, -1)

            def fp8_logits() -> torch.Tensor:
                return dg.fp8_paged_mqa_logits(q8, kv, w8, ctx, table, sched, entries, False)

            def fp8_step() -> None:
                up.topk_transform_paged_v2(fp8_logits(), lens, table, out_b, PAGE, plan, None)

            fp8_step()
            r["deepgemm_logits_us"] = timed_graph(fp8_logits)
            r["upstream_step_us"] = timed_graph(fp8_step)
            r["upstream_vs_patched_overlap"] = overlap(out_b, out_a)
            r["patched_over_upstream"] = r["patched_step_us"] / r["upstream_step_us"]
        except Exception as e:  # noqa: BLE001  (a DeepGEMM build that fails here is reported, not hidden)
            r["deepgemm_error"] = f"{type(e).__name__}: {str(e)[-300:]}"
    published = DEEPGEMM_PUBLISHED_US.get((batch, entries))
    if "upstream_step_us" not in r and published is not None and "sglang_topk_us" in r:
        r["upstream_step_published_us"] = published + r["sglang_topk_us"]
        r["patched_over_upstream"] = r["patched_step_us"] / r["upstream_step_published_us"]
    return r


def sweep_logits() -> None:
    """% of copy of our bf16 logits per launch config at the two B x L = 1M cells, CUDA-graph timed."""
    copy = copy_bandwidth()
    for batch, entries in ((16, 65536), (64, 16384)):
        q, w, cache, table, lens = v4_case(batch, entries)
        for ppp in (8, 16, 32, 64):
            for nw, ns in ((4, 2), (4, 3), (4, 4), (8, 2), (8, 3)):
                us = timed_graph(functools.partial(paged_logits, q, w, cache, table, lens, max_context_len=entries,
                                                   pages_per_program=ppp, num_warps=nw, num_stages=ns))
                pct = 100 * key_bytes(lens, "bf16", entries) / us / 1e6 / copy
                print(json.dumps({"B": batch, "L": entries, "ppp": ppp, "num_warps": nw, "num_stages": ns, "us": us,
                                  "pct_copy": pct}), flush=True)


# launch configs tried by --grid --configs, by name: the plain grid with the register prefetch, and the
# persistent grid (programs per SM x the SM count) with and without it
GRID_CONFIGS: dict[str, dict] = {
    **{f"plain/ppp{ppp}/pf": {"programs": 0, "pages_per_program": ppp, "prefetch": True} for ppp in (16, 32, 64)},
    **{f"pers{per_sm}/t1/w4/{'pf' if pf else 'nopf'}": {"per_sm": per_sm, "tile_pages": 1, "num_warps": 4, "prefetch": pf}
       for per_sm in (1, 2, 3, 4, 6, 8) for pf in (False, True)},
    **{f"pers{per_sm}/t2/w4/{'pf' if pf else 'nopf'}": {"per_sm": per_sm, "tile_pages": 2, "num_warps": 4, "prefetch": pf}
       for per_sm in (1, 2, 4) for pf in (False, True)},
    **{f"pers{per_sm}/t1/w8/pf": {"per_sm": per_sm, "tile_pages": 1, "num_warps": 8, "prefetch": True} for per_sm in (1, 2)},
    "pers2/t1/w4/pf/s3": {"per_sm": 2, "tile_pages": 1, "num_warps": 4, "num_stages": 3, "prefetch": True},
}


def load_logits(root: str) -> Callable[..., torch.Tensor]:
    """`paged_logits` of another checkout (e.g. main's, before a change), to time in the same run."""
    spec = importlib.util.spec_from_file_location("baseline_logits", f"{root}/kernels/logits.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.paged_logits


def read_flushed(fn: Callable[[], object], iters: int = 15) -> float:
    """Median µs of a graph replay of fn() with L2 flushed by *reading* 512 MiB (clean lines) instead of
    `timed`'s zero-fill, whose dirty lines the timed kernel then writes back. Diagnosis only."""
    flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    graph = torch.cuda.CUDAGraph()
    fn()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        fn()
    times = []
    for _ in range(iters + 1):
        flush.sum()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times[1:])


RAGGED_CELLS = ((16, 16384), (16, 65536), (64, 16384), (64, 65536), (128, 16384), (128, 65536))


def grid_run(cells: list[tuple[int, int]], baseline: str | None, configs: bool, repeat: int, path: str | None,
             ragged: bool = False) -> None:
    """bf16 logits per cell: the baseline checkout's kernel (before), this checkout's plain grid (programs=0),
    its default choice (auto) and, with configs, each persistent config of GRID_CONFIGS; every output
    checked bit-identical to the before one; % of the copy bandwidth measured in this run. Cells as in
    `case` (exactly L entries a row); with ragged, RAGGED_CELLS too, as `bench.kernels.decode_case` makes
    them (lengths U[0.7L, 1.3L], logits as wide as the table). Variants run in the reverse order on odd
    repeats (the first after a new case ran slower at times)."""
    copy = copy_bandwidth()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    head = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "copy_tbps": copy, "sms": sms}
    print(json.dumps(head), flush=True)
    before = load_logits(baseline) if baseline else functools.partial(paged_logits, programs=0)
    rows = []
    for batch, length, kind in [(b, n, "v4") for b, n in cells] + [(b, n, "ragged") for b, n in RAGGED_CELLS if ragged]:
        if kind == "v4":
            q, w, cache, table, lens = v4_case(batch, length)
            entries = length
        else:
            q, w, cache, table, lens = decode_case(batch, length, "bf16")
            entries = table.shape[1] * PAGE
        nbytes = key_bytes(lens, "bf16", entries)
        want = before(q, w, cache, table, lens, max_context_len=entries)
        variants: dict[str, Callable[[], torch.Tensor]] = {
            "before": functools.partial(before, q, w, cache, table, lens, max_context_len=entries),
            "plain": functools.partial(paged_logits, q, w, cache, table, lens, max_context_len=entries, programs=0),
            "auto": functools.partial(paged_logits, q, w, cache, table, lens, max_context_len=entries),
        }
        if configs:
            for name, cfg in GRID_CONFIGS.items():
                kw = {key: v for key, v in cfg.items() if key != "per_sm"}
                if "per_sm" in cfg:
                    kw["programs"] = cfg["per_sm"] * sms
                variants[name] = functools.partial(paged_logits, q, w, cache, table, lens, max_context_len=entries, **kw)
        for rep in range(repeat):
            for name, fn in (variants.items() if rep % 2 == 0 else reversed(variants.items())):
                try:
                    same = bool(torch.equal(fn(), want))
                except Exception as e:  # noqa: BLE001  (a config the compiler refuses: reported, skipped)
                    print(json.dumps({"B": batch, "L": length, "cells": kind, "variant": name,
                                      "error": f"{type(e).__name__}: {e}"[:300]}), flush=True)
                    continue
                us = timed_graph(fn)
                r = {"B": batch, "L": length, "cells": kind, "variant": name, "rep": rep, "us": us,
                     "pct_copy": 100 * nbytes / us / 1e6 / copy, "same_bits": same}
                if name in ("before", "auto", "plain/ppp32/pf", "pers2/t1/w4/pf", "pers4/t1/w4/pf") and rep == 0:
                    r["read_flushed_us"] = read_flushed(fn)
                print(json.dumps(r), flush=True)
                rows.append(r)
        mine = [r for r in rows if (r["B"], r["L"], r["cells"]) == (batch, length, kind)]
        best = min((r for r in mine if r["variant"] not in ("before", "plain")), key=lambda r: r["us"])
        summary: dict = {"B": batch, "L": length, "cells": kind, "best": best["variant"], "best_us": best["us"],
                         "best_pct": best["pct_copy"], "all_same_bits": all(r["same_bits"] for r in mine)}
        for name in ("before", "plain", "auto"):
            mr = [r for r in mine if r["variant"] == name]
            summary[f"{name}_us"] = [round(r["us"], 1) for r in mr]
            summary[f"{name}_pct"] = round(statistics.mean(r["pct_copy"] for r in mr), 1)
            summary[f"{name}_read_flushed_us"] = [round(r["read_flushed_us"], 1) for r in mr if "read_flushed_us" in r]
        print("summary " + json.dumps(summary), flush=True)
        del q, w, cache, table, lens, want
        torch.cuda.empty_cache()
    if path:
        with open(path, "w") as f:
            json.dump({**head, "rows": rows}, f, indent=1)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    ap.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    ap.add_argument("--json")
    ap.add_argument("--sweep", action="store_true", help="bf16 logits launch configs at B x L = 1M instead")
    ap.add_argument("--grid", action="store_true", help="bf16 logits only: before / plain / auto grid instead")
    ap.add_argument("--configs", action="store_true", help="with --grid: each persistent config too")
    ap.add_argument("--baseline", help="with --grid: the checkout whose kernels/logits.py is 'before'")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--ragged", action="store_true", help="with --grid: ragged-length cells too (RAGGED_CELLS)")
    a = ap.parse_args(argv)
    if a.sweep:
        sweep_logits()
        return
    if a.grid:
        grid_run([(b, n) for b in a.batches for n in a.lengths], a.baseline, a.configs, a.repeat, a.json, a.ragged)
        return
    up, up_err = load_upstream()
    dg, dg_err = load_deep_gemm() if up is not None else (None, "sglang not loaded")
    copy = copy_bandwidth()
    head = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_tbps": copy,
            "sglang_error": up_err, "deep_gemm_error": dg_err, "OPSBOT_DSV4_TOPK": os.environ.get("OPSBOT_DSV4_TOPK")}
    print(json.dumps(head), flush=True)
    rows = []
    for batch in a.batches:
        for entries in a.lengths:
            r = case(batch, entries, up, dg, copy)
            print(json.dumps(r), flush=True)
            rows.append(r)
            torch.cuda.empty_cache()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({**head, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
