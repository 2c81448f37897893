"""The functions the patch puts into SGLang 0.5.23's DeepSeek-V4 C4 indexer when index keys are bf16.

Upstream stores each compressed index key (one per 4 tokens) as fp8 + an fp32 scale, 132 B in a
`[pages, 64 * 132]` uint8 page row, and scores it with DeepGEMM's `fp8_paged_mqa_logits` and
sgl-kernel's top-k. Patched: the same uint8 page rows sized for 64 bf16 keys (64 * 256 B; the pool
allocates `page_size * get_dsv4_indexer_bytes_per_token(...)` bytes a page, so only that function
changes), keys written by `kernels.store.store_bf16`, q kept in bf16 (RoPE on the last 64 dims in
SGLang's interleaved-pair convention, then the Hadamard rotation, no fp8 quantization), logits by
`kernels.logits.paged_logits`. The logits are fp32 as upstream's, so the top-k is upstream's own,
chosen as its `run_topk_transform` chooses it (`sglang_topk`), unless the launcher found that SGLang's
top-k cannot be loaded here (`upstream_topk`): then `kernels.topk.topk`, straight into physical slots.
"""

from __future__ import annotations

import functools
import os
import sys
from types import ModuleType
from typing import Any, Callable

import torch

from kernels.layout import HEAD_DIM, HEADS, PAGE
from kernels.logits import paged_logits
from kernels.sglang_patch.upstream_topk import ENV_TOPK, SGLANG
from kernels.topk import TOPK_SIZES, topk

# (rows, the fp32 logits of those rows) -> their top-k written as physical slots into the output rows
TopkRun = Callable[[slice, torch.Tensor], None]
# (page table, lengths, output) of all rows -> the TopkRun over them
TopkFor = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], TopkRun]


class UnsupportedIndexerMode(RuntimeError):
    """The running configuration asks for something the bf16 path does not do."""


def bytes_per_token(original: Callable[[int, bool], int]) -> Callable[[int, bool], int]:
    """Replacement for `get_dsv4_indexer_bytes_per_token`: 2 * index_head_dim for the fp8 (now bf16)
    layout; the fp4 layout (low-ratio pools, `--enable-deepseek-v4-fp4-indexer`) is left as is."""

    @functools.wraps(original)
    def get_dsv4_indexer_bytes_per_token(index_head_dim: int, use_fp4_indexer: bool) -> int:
        if use_fp4_indexer:
            return original(index_head_dim, use_fp4_indexer)
        return index_head_dim * 2

    get_dsv4_indexer_bytes_per_token.__opsbot_patch__ = True
    return get_dsv4_indexer_bytes_per_token


def bf16_pages(buf: torch.Tensor) -> torch.Tensor:
    """A pool's uint8 page rows `[pages, 64 * 256]` seen as the bf16 cache `[pages, 64, 128]`."""
    if buf.dtype != torch.uint8 or buf.dim() != 2 or buf.shape[1] != PAGE * HEAD_DIM * 2:
        raise UnsupportedIndexerMode(
            f"index-K buffer is {buf.dtype} {list(buf.shape)}, not uint8 [pages, {PAGE * HEAD_DIM * 2}]: "
            "the pool was not sized for bf16 keys (patch attached after the pool was built?)"
        )
    return buf.view(torch.bfloat16).view(buf.shape[0], PAGE, HEAD_DIM)


def set_index_fused(self: Any, layer_id: int, loc: torch.Tensor, cache_k: torch.Tensor) -> None:
    """Replacement for `DeepSeekV4IndexerPool.set_index_fused`: bf16 keys at `loc` (slot = page*64 + offset)."""
    from kernels.store import store_bf16

    if self.page_size != PAGE:
        raise UnsupportedIndexerMode(f"bf16 index keys need 64 entries a page; this pool has {self.page_size}")
    cache = bf16_pages(self.index_k_with_scale_buffer[layer_id - self.start_layer])
    store_bf16(cache_k.reshape(-1, HEAD_DIM).contiguous(), cache, loc.reshape(-1).contiguous())


set_index_fused.__opsbot_patch__ = True


@functools.lru_cache(maxsize=4)
def hadamard(d: int, device: str) -> torch.Tensor:
    """Sylvester Hadamard matrix scaled by d^-1/2 (what `hadamard_transform(x, scale=d**-0.5)` applies)."""
    h = torch.ones(1, 1)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return (h * d**-0.5).to(device)


def rope_hadamard_bf16(q: torch.Tensor, freqs_cis: torch.Tensor, positions: torch.Tensor, rope_dim: int) -> torch.Tensor:
    """q [N, H, D] → bf16: RoPE on the last `rope_dim` dims as interleaved (real, imag) pairs (the
    convention of SGLang's `fused_norm_rope_inplace_triton`, used for the compressed keys), then
    the Hadamard rotation; fp32 math, one rounding to bf16 at the end."""
    n, heads, d = q.shape
    x = q.float()
    pairs = torch.view_as_complex(x[..., d - rope_dim :].reshape(n, heads, rope_dim // 2, 2).contiguous())
    turned = torch.view_as_real(pairs * freqs_cis[positions.long()][:, None, :]).reshape(n, heads, rope_dim)
    x = torch.cat([x[..., : d - rope_dim], turned], dim=-1)
    return (x @ hadamard(d, str(q.device))).to(torch.bfloat16)


# fp32 logits of one row chunk at most (upstream bounds its DeepGEMM logits the same way: prefill
# rows x 256K compressed entries at 1M context would be 8 GB for 8K rows)
LOGITS_BUDGET_BYTES = 1 << 30


def opsbot_topk(table: torch.Tensor, lens: torch.Tensor, out: torch.Tensor) -> TopkRun:
    """`kernels.topk.topk`: the fallback where SGLang's top-k cannot be loaded."""

    def run(rows: slice, logits: torch.Tensor) -> None:
        out[rows].copy_(topk(logits, lens[rows], out.shape[1], block_table=table[rows]))

    return run


def sglang_topk(backend: Any, indexer: ModuleType, metadata: Any, jit: bool) -> TopkFor:
    """Upstream's own top-k for these logits, picked exactly as 0.5.23's `run_topk_transform`
    (srt/layers/attention/dsv4/indexer.py:948-997) picks it: torch, FlashInfer, the JIT v2 kernel with
    the forward's plan (a chunk of rows plans its own), or the JIT v1 kernel. `indexer` is the module
    upstream's forward runs in, so these are the very functions it would call. Without `jit` (SGLang's
    JIT top-k cannot be loaded here: upstream_topk), ours takes the JIT kernels' place."""
    page = metadata.compressed_page_size

    def topk_for(table: torch.Tensor, lens: torch.Tensor, out: torch.Tensor) -> TopkRun:
        ours = opsbot_topk(table, lens, out)

        def run(rows: slice, logits: torch.Tensor) -> None:
            args = (logits, lens[rows], table[rows], out[rows], page)
            if backend.dsa_topk_backend.is_torch():
                indexer.topk_transform_pytorch_vectorized(*args, None)
            elif backend.dsa_topk_backend.is_flashinfer():
                backend.flashinfer_topk_transform(*args, None)
            elif not jit:
                ours(rows, logits)
            elif backend.dsa_topk_backend.should_use_topk_v2():
                whole = rows.start == 0 and rows.stop == out.shape[0]
                plan = metadata.topk_metadata if whole else indexer.plan_topk_v2(lens[rows])
                indexer.topk_transform_paged_v2(*args, plan, None)
            else:
                indexer.topk_transform_paged(*args, None)

        return run

    return topk_for


def select_bf16(
    q: torch.Tensor,
    weights: torch.Tensor,
    cache: torch.Tensor,
    page_table: torch.Tensor,
    seq_lens: torch.Tensor,
    out_page_indices: torch.Tensor,
    max_seq_len: int,
    budget_bytes: int = LOGITS_BUDGET_BYTES,
    topk_for: TopkFor = opsbot_topk,
) -> None:
    """Score each query row over its own compressed entries and write the top-k as physical slots.

    q [R, 64, 128] bf16, weights [R, 64] (scale folded in), cache bf16 [pages, 64, 128], page_table
    [R, max_pages], seq_lens [R] (compressed entries each row sees), out [R, k] int32: what upstream's
    `fp8_paged_mqa_logits` + `topk_transform_paged` fill, -1 past min(k, seq_len). Rows go in chunks
    whose fp32 logits fit `budget_bytes`; the logits' width is a multiple of 4 (16-byte rows, which
    SGLang's v2 top-k requires, as DeepGEMM's logits have them), the extra columns -inf.
    """
    rows, k = out_page_indices.shape
    if k not in TOPK_SIZES:
        raise UnsupportedIndexerMode(f"index_topk {k} is not one the kernel selects ({TOPK_SIZES})")
    if q.shape[1:] != (HEADS, HEAD_DIM):
        raise UnsupportedIndexerMode(f"indexer q is {list(q.shape)}; the kernels take [*, {HEADS}, {HEAD_DIM}]")
    table = page_table[:rows].to(torch.int32).contiguous()
    lens = seq_lens.reshape(-1)[:rows].to(torch.int32).contiguous()
    width = max(4, min(-(-int(max_seq_len) // 4) * 4, table.shape[1] * PAGE))
    step = max(1, budget_bytes // (width * 4))
    run = topk_for(table, lens, out_page_indices)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        logits = paged_logits(
            q[r0:r1].reshape(r1 - r0, 1, HEADS, HEAD_DIM).contiguous(),
            weights[r0:r1].float().reshape(r1 - r0, 1, HEADS).contiguous(),
            cache, table[r0:r1], lens[r0:r1], max_context_len=width,
        )
        run(slice(r0, r1), logits)


def _fit_rows(t: torch.Tensor, rows: int, value: int) -> torch.Tensor:
    """Upstream's `match_num_queries`: trim or pad the first dim to `rows`."""
    if t.shape[0] >= rows:
        return t[:rows]
    pad = (0, 0) * (t.dim() - 1) + (0, rows - t.shape[0])
    return torch.nn.functional.pad(t, pad, value=value)


def forward_c4_indexer(original: Callable[..., None]) -> Callable[..., None]:
    """Replacement for `C4IndexerBackendMixin.forward_c4_indexer` (same signature); the fp4 indexer
    and the debug/capture/HiSparse modes are refused with a clear error rather than run half-patched.
    The top-k is upstream's own (`sglang_topk`) when the launcher settled on it (ENV_TOPK), else ours."""

    @functools.wraps(original)
    def patched(self, x, q_lora, c4_indexer, forward_batch, alt_streams=None, enable_multi_stream=False,
                q_lora_ready=None, skip_compressor=False, q_lora_quant=None) -> None:
        from sglang.srt.state_capturer.indexer_topk import get_global_indexer_capturer

        if forward_batch.forward_mode.is_idle():
            return
        if c4_indexer.use_fp4_indexer:
            raise UnsupportedIndexerMode("bf16 index keys and --enable-deepseek-v4-fp4-indexer exclude each other")
        if (self.hisparse_coordinator is not None or self.debug_use_external_c4_sparse_indices
                or get_global_indexer_capturer() is not None):
            raise UnsupportedIndexerMode("bf16 index keys do not support HiSparse, external indices or top-k capture")
        metadata = self.forward_metadata
        indexer_metadata, core = metadata.indexer_metadata, metadata.core_metadata
        if indexer_metadata.compressed_page_size != PAGE:
            raise UnsupportedIndexerMode(f"compressed page size {indexer_metadata.compressed_page_size}, not {PAGE}")
        positions = core.positions
        n = min(x.shape[0], q_lora.shape[0], positions.shape[0])
        if q_lora.shape[0] != n:
            q_lora_quant = None
        x, q_lora, positions = x[:n], q_lora[:n], positions[:n]
        if q_lora_ready is not None:
            torch.cuda.current_stream().wait_event(q_lora_ready)
        weights = c4_indexer.compute_weights(x, skip_scale=True).float() * c4_indexer.weight_scale
        q, _ = c4_indexer.wq_b(q_lora if q_lora_quant is None else q_lora_quant)
        q = rope_hadamard_bf16(q.view(n, c4_indexer.n_heads, c4_indexer.head_dim), c4_indexer.freqs_cis,
                               positions, c4_indexer.rope_head_dim)
        if not skip_compressor:
            self.forward_indexer_compressor(x=x, forward_batch=forward_batch, layer_id=c4_indexer.layer_id,
                                            compressor=c4_indexer.compressor)
        cache = bf16_pages(self.token_to_kv_pool.get_index_k_with_scale_buffer(layer_id=c4_indexer.layer_id))
        select_bf16(
            q, weights, cache,
            _fit_rows(indexer_metadata.page_table, n, 0),
            _fit_rows(indexer_metadata.compressed_seq_lens.reshape(-1), n, 1),
            _fit_rows(core.c4_sparse_page_indices, n, -1),
            indexer_metadata.max_compressed_seq_len,
            topk_for=sglang_topk(self, sys.modules[original.__module__], indexer_metadata,
                                 jit=os.environ.get(ENV_TOPK) == SGLANG),
        )

    patched.__opsbot_patch__ = True
    return patched
