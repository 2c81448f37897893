"""Indexer kernels on the GPU: decode logits (bf16 / fp8 keys), top-k, beside the torch reference
and torch.topk, against the copy bandwidth measured in the same run; and the precision study.

    python -m bench.kernels speed      [--quick] [--json PATH] [--baseline DIR]
    python -m bench.kernels sweep      [--baseline DIR]      (logits configs and top-k chunking)
    python -m bench.kernels topk       [--baseline DIR] [--json PATH]   (top-k 2048 variants, graphs)
    python -m bench.kernels precision  [--json PATH]
    python -m bench.kernels v4         [--json PATH]   (V4-Flash C4 shapes: fixed lengths, top-k 512/2048 vs
                                                       fast_topk_v2's figures and torch.topk over the same width)
    python -m bench.kernels v4-sweep   [--json PATH]   (logits launch configs near 80% of copy; row top-k warps)
    python -m bench.kernels plot       --json PATH --png PATH    (no GPU needed)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys

import torch

from kernels.layout import PAGE, new_bf16_cache, new_fp8_cache
from kernels.logits import paged_logits, row_lengths
from kernels.topk import ROW_MAX, topk

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


def timed_graph(fn, iters: int = 15) -> float:
    """Median µs of one CUDA-graph replay of fn() (how SGLang runs decode), L2 flushed before each.

    Takes the host's launch cost out: a multi-kernel op is timed by its GPU time."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # compile and warm up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return timed(graph.replay, iters)


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


def load_baseline(root: str | None) -> dict:
    """paged_logits / topk of another checkout (e.g. main before a change), to time in the same run."""
    if not root:
        return {}
    mods = {}
    for name in ("logits", "topk"):
        spec = importlib.util.spec_from_file_location(f"baseline_{name}", f"{root}/kernels/{name}.py")
        mods[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mods[name])
    # the configurations that checkout's own tuning chose
    cfg = {"bf16": {"pages_per_program": 16, "num_warps": 4, "num_stages": 2},
           "fp8": {"pages_per_program": 8, "num_warps": 4, "num_stages": 2}}
    return {"logits": mods["logits"].paged_logits, "topk": mods["topk"].topk, "cfg": cfg}


TUNE_SHAPES = ((64, 65536), (16, 65536))
TUNE_SPACE = [
    {"tile_pages": tp, "pages_per_program": ppp, "num_warps": nw, "num_stages": ns}
    for tp in (1, 2, 4) for ppp in (8, 16, 32) for nw in (4, 8) for ns in (2, 3)
    if ppp >= tp and not (tp == 1 and nw == 8)
]


def tune(out: list, base: dict) -> dict:
    """Each config of TUNE_SPACE at TUNE_SHAPES; the best per kind by the sum of its times there."""
    best = {}
    for kind in ("bf16", "fp8"):
        totals: dict[int, float] = {}
        for batch, length in TUNE_SHAPES:
            q, w, cache, table, lens = decode_case(batch, length, kind)
            nbytes = key_bytes(lens, kind, table.shape[1] * PAGE)
            if base:
                us = timed(lambda: base["logits"](q, w, cache, table, lens, **base["cfg"][kind]))
                print(f"tune {kind} B={batch} before {base['cfg'][kind]}: {us:8.1f} us {nbytes / us / 1e6:5.2f} TB/s", flush=True)
                out.append({"tune": kind, "B": batch, "L": length, "before": True, **base["cfg"][kind], "us": us})
            for i, cfg in enumerate(TUNE_SPACE):
                try:
                    us = timed(lambda: paged_logits(q, w, cache, table, lens, **cfg))
                except Exception as exc:  # a config the compiler refuses (shared memory)
                    print(f"tune {kind} {cfg}: {type(exc).__name__}", file=sys.stderr)
                    totals[i] = float("inf")
                    continue
                totals[i] = totals.get(i, 0.0) + us
                out.append({"tune": kind, "B": batch, "L": length, **cfg, "us": us, "tbs": nbytes / us / 1e6})
                print(f"tune {kind} B={batch} {cfg}: {us:8.1f} us {nbytes / us / 1e6:5.2f} TB/s", flush=True)
            del q, w, cache, table, lens
        best[kind] = TUNE_SPACE[min(totals, key=totals.get)]
    return best


def sweep_topk(out: list, base: dict) -> None:
    """Top-k 2048 over randn rows with ragged lengths: chunk x num_warps, against torch.topk and the baseline."""
    print(f"{'B':>4} {'L':>7} {'chunk':>6} {'warps':>5} {'topk us':>8} {'torch.topk':>10} {'before':>8}", flush=True)
    for batch in (1, 16, 64):
        for length in (4096, 16384, 65536, 131072):
            g = torch.Generator(device="cuda").manual_seed(batch + length)
            x = torch.randn(batch, length, generator=g, device="cuda") * 3 + 10
            lens = torch.randint(int(0.7 * length), length + 1, (batch,), generator=g, device="cuda", dtype=torch.int32)
            tt = timed(lambda: x.topk(2048, dim=1, sorted=False))
            before = timed(lambda: base["topk"](x, lens, 2048)) if base else None
            for chunk in (2048, 4096, 8192):
                for warps in (4, 8):
                    us = timed(lambda: topk(x, lens, 2048, chunk=chunk, num_warps=warps))
                    out.append({"B": batch, "L": length, "chunk": chunk, "num_warps": warps, "us": us,
                                "torch_topk_us": tt, "before_us": before})
                    b = f"{before:8.1f}" if before else f"{'-':>8}"
                    print(f"{batch:>4} {length:>7} {chunk:>6} {warps:>5} {us:8.1f} {tt:10.1f} {b}", flush=True)


def tune_topk(out: list) -> dict:
    """top-k 2048 chunk x num_warps under CUDA graphs at two shapes; the best by the sum of times."""
    totals = {}
    for batch, length in ((64, 65536), (4, 131072)):
        g = torch.Generator(device="cuda").manual_seed(batch)
        x = torch.randn(batch, length, generator=g, device="cuda") * 3 + 10
        lens = torch.randint(int(0.7 * length), length + 1, (batch,), generator=g, device="cuda", dtype=torch.int32)
        for chunk in (2048, 4096, 8192):
            for warps in (4, 8):
                us = timed_graph(lambda: topk(x, lens, 2048, chunk=chunk, num_warps=warps))
                totals[(chunk, warps)] = totals.get((chunk, warps), 0.0) + us
                out.append({"topk_tune": True, "B": batch, "L": length, "chunk": chunk, "num_warps": warps, "us": us})
                print(f"top-k B={batch} L={length} chunk={chunk} warps={warps}: {us:7.1f} us (graph)", flush=True)
    chunk, warps = min(totals, key=totals.get)
    return {"chunk": chunk, "num_warps": warps}


def sweep(path: str | None, base: dict) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  copy bandwidth {copy_bandwidth():.2f} TB/s", flush=True)
    rows: list[dict] = []
    best = tune(rows, base)
    print("best", best, flush=True)
    sweep_topk(rows, base)
    if path:
        with open(path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "best": best, "rows": rows}, f, indent=1)


def speed(quick: bool, path: str | None, base: dict) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    copy_tbs = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  copy bandwidth {copy_tbs:.2f} TB/s", flush=True)
    rows: list[dict] = []
    tk_cfg = tune_topk(rows)
    print("top-k", tk_cfg, flush=True)
    batches = (64, 16, 1, 128) if not quick else (64,)  # the goal cells first
    lengths = (4096, 16384, 65536, 131072) if not quick else (65536,)
    header = (f"{'B':>4} {'L':>7} {'keys':>5} {'logits us':>10} {'TB/s':>6} {'%copy':>6} {'before':>7} {'topk512':>8} "
              f"{'topk2048':>9} {'eager':>7} {'before':>7} {'torch.topk':>10} {'e2e us':>8} {'torch ref':>10}")
    print(header, flush=True)
    for batch in batches:
        for length in lengths:
            for kind in ("bf16", "fp8"):
                q, w, cache, table, lens = decode_case(batch, length, kind)
                width = table.shape[1] * PAGE
                us = timed(lambda: paged_logits(q, w, cache, table, lens))
                logits = paged_logits(q, w, cache, table, lens)
                rl = row_lengths(lens, 1)
                tk = {kk: timed_graph(lambda: topk(logits, rl, kk, block_table=table, **tk_cfg)) for kk in (512, 2048)}
                eager = timed(lambda: topk(logits, rl, 2048, block_table=table, **tk_cfg))
                tt = timed_graph(lambda: logits.topk(2048, dim=1, sorted=False))
                old = old_tk = None
                if base:
                    old = timed(lambda: base["logits"](q, w, cache, table, lens, **base["cfg"][kind]))
                    old_tk = timed_graph(lambda: base["topk"](logits, rl, 2048, block_table=table))
                e2e = timed_graph(lambda: topk(paged_logits(q, w, cache, table, lens), rl, 2048, block_table=table, **tk_cfg))
                ref = None
                if kind == "bf16" and batch * width <= 4 << 20:
                    ref = timed(lambda: torch_reference(q, w, cache, table, lens, 2048), iters=5)
                tbs = key_bytes(lens, kind, width) / us / 1e6
                row = {"B": batch, "L": length, "kind": kind, "logits_us": us, "tbs": tbs, "pct_copy": 100 * tbs / copy_tbs,
                       "topk512_us": tk[512], "topk2048_us": tk[2048], "torch_topk_us": tt, "e2e_us": e2e,
                       "torch_ref_us": ref, "tokens": int(lens.sum().item()), "topk2048_eager_us": eager,
                       "before_logits_us": old, "before_topk2048_us": old_tk}
                rows.append(row)
                refs = f"{ref:10.1f}" if ref else f"{'-':>10}"
                o = f"{old:7.1f}" if old else f"{'-':>7}"
                ot = f"{old_tk:7.1f}" if old_tk else f"{'-':>7}"
                print(f"{batch:>4} {length:>7} {kind:>5} {us:10.1f} {tbs:6.2f} {row['pct_copy']:6.1f} {o} {tk[512]:8.1f} "
                      f"{tk[2048]:9.1f} {eager:7.1f} {ot} {tt:10.1f} {e2e:8.1f} {refs}", flush=True)
                del q, w, cache, table, lens, logits
    if path:
        with open(path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_tbs": copy_tbs,
                       "rows": rows}, f, indent=1)


TOPK_VARIANTS = {
    "sparse c2048 w4": {"chunk": 2048, "num_warps": 4},
    "sparse c4096 w8": {"chunk": 4096, "num_warps": 8},
    "dense c2048 w4": {"chunk": 2048, "num_warps": 4, "sparse": False},
}


def topk_speed(path: str | None, base: dict) -> None:
    """Top-k 2048 on decode logits (bf16 keys, ragged lengths, physical slots) under CUDA graphs:
    each variant of TOPK_VARIANTS beside the baseline's topk and torch.topk; every output checked
    bit-identical to the baseline's (or this checkout's dense path)."""
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    names = list(TOPK_VARIANTS)
    print(f"{'B':>4} {'L':>7} {'before':>7} " + " ".join(f"{n:>18}" for n in names) + f" {'torch.topk':>10}", flush=True)
    rows = []
    for batch in (64, 16, 1):
        for length in (4096, 16384, 65536, 131072):
            q, w, cache, table, lens = decode_case(batch, length, "bf16")
            logits = paged_logits(q, w, cache, table, lens)
            rl = row_lengths(lens, 1)
            ref_fn = base["topk"] if base else (lambda *a, **kw: topk(*a, sparse=False, **kw))
            want = ref_fn(logits, rl, 2048, block_table=table)
            before = timed_graph(lambda: ref_fn(logits, rl, 2048, block_table=table))
            us = {}
            for name, cfg in TOPK_VARIANTS.items():
                got = topk(logits, rl, 2048, block_table=table, **cfg)
                if not torch.equal(got, want):
                    raise SystemExit(f"{name} differs from the baseline at B={batch} L={length}")
                us[name] = timed_graph(lambda: topk(logits, rl, 2048, block_table=table, **cfg))
            tt = timed_graph(lambda: logits.topk(2048, dim=1, sorted=False))
            rows.append({"B": batch, "L": length, "before_us": before, **{f"{n}_us": v for n, v in us.items()},
                         "torch_topk_us": tt})
            print(f"{batch:>4} {length:>7} {before:7.1f} " + " ".join(f"{us[n]:18.1f}" for n in names) + f" {tt:10.1f}",
                  flush=True)
            del q, w, cache, table, lens, logits
    if path:
        with open(path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


# sgl-kernel fast_topk_v2 (k = 2048, one CTA a row) on an H200, decode B = 64: SGLang's
# nsa/hisa/benchmarks/_results/2026-04-21_h200_stage_profile_full.txt (dsa-indexer.md §5.3)
FAST_TOPK_V2_B64_US = {4096: 13.0, 16384: 17.0, 65536: 39.0}
V4_BATCHES = (1, 16, 64, 128)
V4_LENGTHS = (4096, 16384, 65536)  # compressed entries: 16K, 64K and 256K tokens of context


def v4_case(batch: int, entries: int, seed: int = 0):
    """B query rows, each its own request of exactly `entries` compressed bf16 keys (shuffled pages)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    pages = entries // PAGE
    table = torch.randperm(batch * pages, generator=g, device="cuda").to(torch.int32).reshape(batch, pages)
    cache = (torch.randn(batch * pages, PAGE, 128, generator=g, device="cuda") / 4).to(torch.bfloat16)
    q = torch.randn(batch, 1, 64, 128, generator=g, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(batch, 1, 64, generator=g, device="cuda") / 64
    lens = torch.full((batch,), entries, dtype=torch.int32, device="cuda")
    return q, w, cache, table, lens


def v4(path: str | None) -> None:
    """Logits and top-k at V4-Flash's C4 shapes, every figure from this one run."""
    from kernels.topk import topk_ref

    copy = copy_bandwidth()
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  copy bandwidth {copy:.2f} TB/s", flush=True)
    print(f"{'B':>4} {'L':>6} {'logits us':>9} {'TB/s':>5} {'%copy':>5} {'k':>5} {'row us':>7} {'radix us':>8} "
          f"{'auto us':>7} {'torch.topk':>10} {'fast_topk_v2':>12} {'auto/v2':>7}", flush=True)
    rows = []
    for batch in V4_BATCHES:
        for entries in V4_LENGTHS:
            q, w, cache, table, lens = v4_case(batch, entries)
            lg = timed(lambda: paged_logits(q, w, cache, table, lens, max_context_len=entries))
            tb = key_bytes(lens, "bf16", entries) / lg / 1e6
            logits = paged_logits(q, w, cache, table, lens, max_context_len=entries)
            logits += torch.randn_like(logits) * 1e-3  # fewer exact ties than bf16 keys give
            for k in (512, 2048):
                got = topk(logits, lens, k, block_table=table)
                assert torch.equal(got, topk_ref(logits, lens, k, table)), (batch, entries, k)
                row_us = (timed_graph(lambda: topk(logits, lens, k, block_table=table, method="row"))
                          if entries <= ROW_MAX else float("nan"))
                radix_us = timed_graph(lambda: topk(logits, lens, k, block_table=table, method="radix"))
                auto_us = timed_graph(lambda: topk(logits, lens, k, block_table=table))
                tt = timed_graph(lambda: logits.topk(k, dim=1, sorted=False))
                v2 = FAST_TOPK_V2_B64_US.get(entries) if batch == 64 else None
                print(f"{batch:>4} {entries:>6} {lg:>9.1f} {tb:>5.2f} {100 * tb / copy:>5.0f} {k:>5} {row_us:>7.1f} "
                      f"{radix_us:>8.1f} {auto_us:>7.1f} {tt:>10.1f} {v2 if v2 else '-':>12} "
                      f"{f'{auto_us / v2:.2f}' if v2 else '-':>7}", flush=True)
                rows.append({"B": batch, "L": entries, "logits_us": lg, "tbps": tb, "pct_copy": 100 * tb / copy,
                             "k": k, "row_us": row_us, "radix_us": radix_us, "auto_us": auto_us, "torch_topk_us": tt,
                             "fast_topk_v2_us": v2, "copy_tbps": copy})
            del q, w, cache, table, logits
    if path:
        with open(path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


def v4_sweep(path: str | None) -> None:
    """Logits launch configs at the B x L >= 1M cells near the 80% line, and row top-k warps."""
    copy = copy_bandwidth()
    print(f"copy bandwidth {copy:.2f} TB/s", flush=True)
    rows = []
    for batch, entries in ((16, 65536), (64, 16384), (32, 32768)):
        q, w, cache, table, lens = v4_case(batch, entries)
        for ppp in (4, 8, 16, 32):
            for nw, ns in ((4, 2), (4, 3), (8, 2)):
                us = timed(lambda: paged_logits(q, w, cache, table, lens, max_context_len=entries,
                                                pages_per_program=ppp, num_warps=nw, num_stages=ns))
                tb = key_bytes(lens, "bf16", entries) / us / 1e6
                print(f"logits B={batch} L={entries} ppp={ppp} warps={nw} stages={ns}: {us:.1f} us "
                      f"{100 * tb / copy:.0f}% of copy", flush=True)
                rows.append({"B": batch, "L": entries, "ppp": ppp, "num_warps": nw, "num_stages": ns, "us": us,
                             "pct_copy": 100 * tb / copy})
    for batch, entries in ((64, 4096), (64, 8192), (64, 16384), (128, 4096)):
        q, w, cache, table, lens = v4_case(batch, entries)
        logits = paged_logits(q, w, cache, table, lens, max_context_len=entries) + 0
        for nw in (4, 8, 16, 32):
            us = timed_graph(lambda: topk(logits, lens, 512, block_table=table, method="row", num_warps=nw))
            print(f"row top-k 512 B={batch} L={entries} warps={nw}: {us:.1f} us", flush=True)
            rows.append({"B": batch, "L": entries, "row_warps": nw, "us": us})
    if path:
        with open(path, "w") as f:
            json.dump(rows, f, indent=1)


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
    ap.add_argument("what", choices=["speed", "sweep", "topk", "precision", "plot", "v4", "v4-sweep"])
    ap.add_argument("--baseline", help="a checkout whose kernels/ to time beside this one (before/after)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--png")
    a = ap.parse_args()
    if a.what == "speed":
        speed(a.quick, a.json, load_baseline(a.baseline))
    elif a.what == "topk":
        topk_speed(a.json, load_baseline(a.baseline))
    elif a.what == "sweep":
        sweep(a.json, load_baseline(a.baseline))
    elif a.what == "precision":
        precision(a.json)
    elif a.what == "v4":
        v4(a.json)
    elif a.what == "v4-sweep":
        v4_sweep(a.json)
    else:
        from bench.kernels_plot import plot

        plot(a.json, a.png)


if __name__ == "__main__":
    main()
