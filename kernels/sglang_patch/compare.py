"""The patched V4 indexer path, on the pinned wheel's own modules, against upstream's own torch path
and the fp32 reference.

    python -m kernels.sglang_patch.compare [--rows 64] [--entries 4096 16384 65536] [--json PATH]

Attaches the patch (install("bf16")), imports SGLang's `dsv4/indexer.py` and
`deepseek_v4_memory_pool.py`, then per case (R query rows, each its own request of L compressed
entries in a shuffled page pool):
  - keys go into a real `DeepSeekV4IndexerPool` (its buffer sized by the patched byte count) through
    the patched `set_index_fused`;
  - the patched `C4IndexerBackendMixin.forward_c4_indexer` runs with stand-ins for the backend,
    batch and the indexer's two projections (a real model needs the GPU-only SGLang stack), its
    top-k SGLang's JIT v2 where that loads, else ours (`upstream_topk`, the "topk_kernel" field);
  - upstream's path that runs without DeepGEMM / sgl-kernel: `fp8_paged_mqa_logits_torch` and
    `topk_transform_pytorch_vectorized` from the same module, on the same keys in the fp8 + scale
    page layout (kernels.store.store_fp8 with plain fp32 scales max(amax, 1e-4) / 448, as 0.5.23's
    kernels/jit/csrc/deepseek_v4/store.cuh::fused_store_indexer_cache writes them) and an e4m3 q
    with its per-head scale folded into the weights;
  - the fp32 reference: exact scores from the unrounded q and keys, its top-k.
Reports each path's overlap with the fp32 top-k and its logits' relative error, and on a GPU the
time of each path (L2 flushed, median of 10).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
from types import SimpleNamespace

import torch

from kernels.layout import HEAD_DIM, HEADS, PAGE, V4_FLASH_TOPK, new_fp8_cache
from kernels.sglang_patch.attach import install
from kernels.sglang_patch.bf16_indexer import bf16_pages, hadamard, rope_hadamard_bf16, select_bf16, sglang_topk
from kernels.sglang_patch.upstream_topk import ENV_TOPK, SGLANG
from kernels.store import quantize_fp8_ref, store_fp8
from kernels.topk import topk_ref

ROPE_DIM = 64
Q_LORA = 256  # stand-in q-LoRA width (V4-Flash's is larger; it only feeds wq_b)


def freqs_table(positions: int, device: str) -> torch.Tensor:
    inv = 1.0 / (10000 ** (torch.arange(0, ROPE_DIM, 2, dtype=torch.float32) / ROPE_DIM))
    return torch.polar(torch.ones(positions, ROPE_DIM // 2), torch.outer(torch.arange(positions).float(), inv)).to(device)


def rope_hadamard_ref(q: torch.Tensor, freqs: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """fp32: interleaved-pair RoPE on the last 64 dims written out with cos/sin, then x @ H / sqrt(d)."""
    x = q.float().clone()
    f = freqs[positions.long()][:, None, :]
    cos, sin = f.real, f.imag
    a, b = x[..., HEAD_DIM - ROPE_DIM :: 2].clone(), x[..., HEAD_DIM - ROPE_DIM + 1 :: 2].clone()
    x[..., HEAD_DIM - ROPE_DIM :: 2] = a * cos - b * sin
    x[..., HEAD_DIM - ROPE_DIM + 1 :: 2] = a * sin + b * cos
    return x @ hadamard(HEAD_DIM, str(q.device))


def overlap(got: torch.Tensor, want: torch.Tensor) -> float:
    """Share of the reference's selected slots (>= 0) that `got` selected too, over all rows."""
    hit = total = 0
    for g, w in zip(got, want):
        w = w[w >= 0]
        hit += int(torch.isin(w, g[g >= 0]).sum())
        total += len(w)
    return hit / max(total, 1)


def rel(got: torch.Tensor, want: torch.Tensor, lens: torch.Tensor) -> float:
    seen = torch.arange(want.shape[1], device=want.device)[None, :] < lens[:, None].long()
    return float((got.double() - want.double())[seen].norm() / want.double()[seen].norm())


def timed(fn, iters: int = 10) -> float:
    flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
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


def run_case(rows: int, entries: int, device: str, seed: int = 0) -> dict:
    from sglang.srt.layers.attention.dsv4 import indexer as upstream
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4IndexerPool

    g = torch.Generator(device="cpu").manual_seed(seed)
    pages_per_row = (entries + PAGE - 1) // PAGE
    pool = DeepSeekV4IndexerPool(rows * pages_per_row * PAGE, PAGE, torch.bfloat16, HEAD_DIM, 1, device, False,
                                 use_fp4_indexer=False)
    buf = pool.get_index_k_with_scale_buffer(0)
    num_pages = buf.shape[0]
    table = torch.randperm(num_pages, generator=g)[: rows * pages_per_row].reshape(rows, pages_per_row)
    table = table.to(torch.int32).to(device)
    keys = torch.randn(rows, pages_per_row * PAGE, HEAD_DIM, generator=g) + 0.5 * torch.randn(HEAD_DIM, generator=g)
    keys = (keys @ hadamard(HEAD_DIM, "cpu")).to(device)
    slots = (table.long()[:, :, None] * PAGE + torch.arange(PAGE, device=device)).reshape(-1)
    pool.set_index_fused(0, slots, keys.reshape(-1, HEAD_DIM).to(torch.bfloat16))  # the patched store
    fp8 = new_fp8_cache(num_pages, device)
    store_fp8(keys.reshape(-1, HEAD_DIM).contiguous(), fp8, slots.to(torch.int32), ue8m0=False)
    lens = torch.full((rows,), entries, dtype=torch.int32, device=device)
    positions = lens.long() * 4 - 1  # the query's own position: entries = (position + 1) // 4

    # the indexer's inputs: q_lora -> wq_b -> RoPE + Hadamard; x -> weights_proj (stand-in weights)
    wq = (torch.randn(HEADS * HEAD_DIM, Q_LORA, generator=g) / Q_LORA**0.5).to(device)
    wp = (torch.randn(HEADS, 64, generator=g) / 8).to(device)
    q_lora = torch.randn(rows, Q_LORA, generator=g).to(device)
    x = torch.randn(rows, 64, generator=g).to(device)
    freqs = freqs_table(int(positions.max()) + 1, device)
    weight_scale = HEAD_DIM**-0.5 * HEADS**-0.5
    q32 = rope_hadamard_ref((q_lora @ wq.T).view(rows, HEADS, HEAD_DIM), freqs, positions)
    w32 = (x @ wp.T) * weight_scale

    # fp32 reference: unrounded q, keys and weights
    k32 = keys.reshape(rows, -1, HEAD_DIM)[:, :entries]
    ref = torch.stack([((q32[r] @ k32[r].T).clamp_min(0) * w32[r][:, None]).sum(0) for r in range(rows)])
    want = topk_ref(ref, lens, V4_FLASH_TOPK, table)

    # the patched forward_c4_indexer from the wheel's module, on stand-ins for the backend and batch
    out_fwd = torch.full((rows, V4_FLASH_TOPK), -7, dtype=torch.int32, device=device)
    c4 = SimpleNamespace(
        use_fp4_indexer=False, layer_id=0, n_heads=HEADS, head_dim=HEAD_DIM, rope_head_dim=ROPE_DIM,
        weight_scale=weight_scale, index_topk=V4_FLASH_TOPK, freqs_cis=freqs, compressor=None,
        compute_weights=lambda t, skip_scale=False: (t @ wp.T) * (1.0 if skip_scale else weight_scale),
        wq_b=lambda t: (t @ wq.T, None),
    )
    # the top-k as a default server picks it: sgl-kernel backend, v2 planned once per forward
    # (metadata.py:275) unless the launcher switched v2 off (upstream_topk: SGLang's cannot be loaded)
    jit = os.environ.get(ENV_TOPK) == SGLANG
    topk_backend = upstream.DSATopKBackend.SGL_KERNEL
    indexer_metadata = SimpleNamespace(
        compressed_page_size=PAGE, page_table=table, compressed_seq_lens=lens, max_compressed_seq_len=entries,
        topk_metadata=upstream.plan_topk_v2(lens) if jit and topk_backend.should_use_topk_v2() else torch.empty(0))
    backend = SimpleNamespace(
        hisparse_coordinator=None, debug_use_external_c4_sparse_indices=False, dsa_topk_backend=topk_backend,
        forward_metadata=SimpleNamespace(
            indexer_metadata=indexer_metadata,
            core_metadata=SimpleNamespace(positions=positions, c4_sparse_page_indices=out_fwd)),
        token_to_kv_pool=SimpleNamespace(get_index_k_with_scale_buffer=lambda layer_id: buf),
    )
    batch = SimpleNamespace(forward_mode=SimpleNamespace(is_idle=lambda: False))
    upstream.C4IndexerBackendMixin.forward_c4_indexer(backend, x, q_lora, c4, batch, skip_compressor=True)

    # the patched path alone (what forward_c4_indexer calls), for timing and the logits error
    q16 = rope_hadamard_bf16((q_lora @ wq.T).view(rows, HEADS, HEAD_DIM), freqs, positions, ROPE_DIM)
    out_ours = torch.empty(rows, V4_FLASH_TOPK, dtype=torch.int32, device=device)
    cache16 = bf16_pages(buf)

    topk_for = sglang_topk(backend, upstream, indexer_metadata, jit)

    def ours() -> None:
        select_bf16(q16, w32, cache16, table, lens, out_ours, entries, topk_for=topk_for)

    # upstream's torch path: e4m3 q with a per-(row, head) scale folded into the weights
    qv, qs = quantize_fp8_ref(q32.reshape(-1, HEAD_DIM), ue8m0=False)
    q8 = qv.view(rows, 1, HEADS, HEAD_DIM)
    w8 = (w32 * qs.view(rows, HEADS)).contiguous()
    out_up = torch.empty(rows, V4_FLASH_TOPK, dtype=torch.int32, device=device)
    kv = fp8.view(num_pages, PAGE, 1, HEAD_DIM + 4)

    def up() -> torch.Tensor:
        logits = upstream.fp8_paged_mqa_logits_torch(q8, kv, w8, lens, table, None, entries, False)
        upstream.topk_transform_pytorch_vectorized(logits, lens, table, out_up, PAGE)
        return logits

    ours()
    up_logits = up()
    from kernels.logits import paged_logits

    our_logits = paged_logits(q16[:, None].contiguous(), w32[:, None].contiguous(), cache16, table, lens,
                              max_context_len=entries)
    from sglang.srt.model_executor import pool_configurator

    result = {
        "configurator_bytes_per_token": pool_configurator.get_dsv4_indexer_bytes_per_token(HEAD_DIM, False),
        "rows": rows, "entries": entries, "topk": V4_FLASH_TOPK, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        # same slots in each row: SGLang's v2 top-k writes a row's slots in no fixed order
        "forward_equals_select": bool(torch.equal(out_fwd.sort(dim=1).values, out_ours.sort(dim=1).values)), "topk_kernel": os.environ.get(ENV_TOPK),
        "pool_bytes_per_page": buf.shape[1], "pool_dtype": str(buf.dtype),
        "overlap_patched_bf16": overlap(out_ours, want), "overlap_upstream_fp8": overlap(out_up, want),
        "logits_relerr_patched_bf16": rel(our_logits, ref, lens), "logits_relerr_upstream_fp8": rel(up_logits, ref, lens),
    }
    if device == "cuda":
        result["us_patched_bf16"] = timed(ours)
        result["us_upstream_torch_fp8"] = timed(up)
    return result


@contextlib.contextmanager
def cuda_detection_held_off():
    """Import SGLang's modules as if no GPU were there, then use the GPU as usual.

    With a GPU, 0.5.23's `sglang.srt.layers.quantization` imports `sgl_kernel` at module level (its
    `is_cuda()`), and the sglang-kernel wheel (373 MB, built for torch 2.14.1) cannot be carried to
    the test machine. Nothing the patched path or upstream's torch fallbacks run depends on that
    import: they take CUDA tensors regardless of what SGLang's platform checks said at import.
    """
    real = torch.cuda.is_available
    torch.cuda.is_available = lambda: False
    try:
        yield
    finally:
        torch.cuda.is_available = real


def load_modules(hold_off: bool) -> None:
    with cuda_detection_held_off() if hold_off else contextlib.nullcontext():
        import sglang.srt.layers.attention.dsv4.indexer  # noqa: F401
        import sglang.srt.mem_cache.deepseek_v4_memory_pool  # noqa: F401
        import sglang.srt.model_executor.pool_configurator  # noqa: F401


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hold-off-cuda-detection", action="store_true",
                    help="import SGLang as on a CPU machine (no sgl_kernel there), then run on the GPU")
    ap.add_argument("--rows", type=int, nargs="+", default=[64])
    ap.add_argument("--entries", type=int, nargs="+", default=[4096, 16384, 65536])
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    install("bf16")
    load_modules(a.hold_off_cuda_detection)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = []
    for rows in a.rows:
        for entries in a.entries:
            r = run_case(rows, entries, device)
            results.append(r)
            print(json.dumps(r), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
