"""Top-k over logits rows: exact multi-program radix select, deterministic (lower index wins ties), -1 padded.

Each row r has `lengths[r]` visible entries (its prefix); the output holds the indices of the
min(k, length) largest, in ascending index order, then -1. Ranking is by value with NaN lowest
(below -inf); equal values, and -0.0 below +0.0, are ordered by their fp32 bits, then by index.
Indices are logical positions, or physical cache slots `block_table[b, p // 64] * 64 + p % 64`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.layout import PAGE, KernelInputError, require, require_same_device

TOPK_SIZES = (512, 1024, 2048)
RADIX_BITS = 8


@triton.jit
def _sort_key(x):
    """fp32 → uint32 that orders like the value; NaN maps to 0, below -inf."""
    bits = x.to(tl.uint32, bitcast=True)
    key = tl.where((bits >> 31) == 1, ~bits, bits | 0x80000000)
    return tl.where(x != x, 0, key).to(tl.uint32)


@triton.jit
def _translate(idx, row, bt_ptr, bt_stride, mask, NEXT_N: tl.constexpr, PHYSICAL: tl.constexpr, PAGE_SIZE: tl.constexpr):
    if PHYSICAL:
        b = (row // NEXT_N).to(tl.int64)
        page = tl.load(bt_ptr + b * bt_stride + idx // PAGE_SIZE, mask=mask, other=0)
        return page * PAGE_SIZE + idx % PAGE_SIZE
    else:
        return idx


@triton.jit
def _radix_state(hist_ptr, row, ROUNDS: tl.constexpr, K: tl.constexpr):
    """(prefix, rem) after ROUNDS 8-bit digits: the k-th key's top 8 * ROUNDS bits, and how many
    keys with exactly that prefix still belong to the top k."""
    bins = tl.arange(0, 256)
    prefix = tl.zeros((), tl.uint32)
    rem = tl.full((), K, tl.int32)
    for r in tl.static_range(ROUNDS):
        hist = tl.load(hist_ptr + row.to(tl.int64) * 1024 + r * 256 + bins)
        at_least = tl.sum(hist) - tl.cumsum(hist, 0) + hist  # keys with digit >= bin
        digit = tl.max(tl.where(at_least >= rem, bins, -1))
        rem = rem - tl.sum(tl.where(bins > digit, hist, 0))
        prefix = (prefix << 8) | digit.to(tl.uint32)
    return prefix, rem


@triton.jit
def _row_len(len_ptr, row, x_stride):
    return tl.minimum(tl.maximum(tl.load(len_ptr + row), 0), x_stride)


@triton.jit
def _topk_hist_kernel(
    x_ptr, len_ptr, hist_ptr, x_stride, ROUND: tl.constexpr, K: tl.constexpr, CHUNK: tl.constexpr, SPARSE: tl.constexpr,
):
    """Round ROUND of the radix select: this chunk's histogram of digit ROUND among keys that
    match the prefix chosen so far, added into the row's global histogram. tl.histogram costs the
    same for every key of the chunk, masked or not; when at most SPARSE keys match (usual after
    round 0), each adds its own count instead."""
    row = tl.program_id(0)
    start = tl.program_id(1) * CHUNK
    n = _row_len(len_ptr, row, x_stride)
    if (n > K) & (start < n):
        prefix, rem = _radix_state(hist_ptr, row, ROUND, K)
        idx = start + tl.arange(0, CHUNK)
        m = idx < n
        key = _sort_key(tl.load(x_ptr + row.to(tl.int64) * x_stride + idx, mask=m, other=0.0))
        digit = ((key >> (24 - 8 * ROUND)) & 0xFF).to(tl.int32)
        hist_row = hist_ptr + row.to(tl.int64) * 1024 + ROUND * 256
        if ROUND > 0:
            m = m & ((key >> (32 - 8 * ROUND)) == prefix)
        matched = tl.sum(m.to(tl.int32))
        if matched > SPARSE:  # a dense chunk: a block histogram, one atomic per non-empty bin
            h = tl.histogram(digit, 256, mask=m)
            bins = tl.arange(0, 256)
            tl.atomic_add(hist_row + bins, h, mask=h > 0, sem="relaxed")
        elif matched > 0:  # later rounds: few keys keep the prefix, one atomic each beats the histogram
            tl.atomic_add(hist_row + digit, tl.full([CHUNK], 1, tl.int32), mask=m, sem="relaxed")


@triton.jit
def _topk_count_kernel(x_ptr, len_ptr, hist_ptr, count_ptr, x_stride, n_chunks, K: tl.constexpr, CHUNK: tl.constexpr):
    """Per chunk: how many keys beat the k-th key, and how many equal it."""
    row = tl.program_id(0)
    c = tl.program_id(1)
    start = c * CHUNK
    n = _row_len(len_ptr, row, x_stride)
    gt = tl.zeros((), tl.int32)
    eq = tl.zeros((), tl.int32)
    if (n > K) & (start < n):
        kth, rem = _radix_state(hist_ptr, row, 4, K)
        idx = start + tl.arange(0, CHUNK)
        m = idx < n
        key = _sort_key(tl.load(x_ptr + row.to(tl.int64) * x_stride + idx, mask=m, other=0.0))
        gt = tl.sum((m & (key > kth)).to(tl.int32))
        eq = tl.sum((m & (key == kth)).to(tl.int32))
    slot = count_ptr + (row.to(tl.int64) * n_chunks + c) * 2
    tl.store(slot, gt)
    tl.store(slot + 1, eq)


@triton.jit
def _topk_write_kernel(
    x_ptr, len_ptr, hist_ptr, count_ptr, out_ptr, bt_ptr, x_stride, bt_stride, n_chunks,
    K: tl.constexpr, CHUNK: tl.constexpr, N_CHUNKS_P2: tl.constexpr, NEXT_N: tl.constexpr,
    PHYSICAL: tl.constexpr, PAGE_SIZE: tl.constexpr,
):
    """Write this chunk's selected indices at their place in ascending index order: every key above
    the k-th key, and the first `rem` keys equal to it (the lower index wins)."""
    row = tl.program_id(0)
    c = tl.program_id(1)
    start = c * CHUNK
    n = _row_len(len_ptr, row, x_stride)
    out_row = out_ptr + row.to(tl.int64) * K
    if n <= K:  # everything visible is selected, no logits are read; chunk 0 writes the row
        if c == 0:
            j = tl.arange(0, K)
            keep = j < n
            val = _translate(j, row, bt_ptr, bt_stride, keep, NEXT_N, PHYSICAL, PAGE_SIZE)
            tl.store(out_row + j, tl.where(keep, val, -1))
    elif start < n:
        kth, rem = _radix_state(hist_ptr, row, 4, K)
        ch = tl.arange(0, N_CHUNKS_P2)
        before = count_ptr + (row.to(tl.int64) * n_chunks + ch) * 2
        gt_before = tl.sum(tl.load(before, mask=ch < c, other=0))
        eq_before = tl.sum(tl.load(before + 1, mask=ch < c, other=0))
        idx = start + tl.arange(0, CHUNK)
        m = idx < n
        key = _sort_key(tl.load(x_ptr + row.to(tl.int64) * x_stride + idx, mask=m, other=0.0))
        eq = m & (key == kth)
        sel = (m & (key > kth)) | (eq & (eq_before + tl.cumsum(eq.to(tl.int32), 0) <= rem))
        pos = gt_before + tl.minimum(eq_before, rem) + tl.cumsum(sel.to(tl.int32), 0) - 1
        val = _translate(idx, row, bt_ptr, bt_stride, sel, NEXT_N, PHYSICAL, PAGE_SIZE)
        tl.store(out_row + pos, val, mask=sel)


def topk(
    logits: torch.Tensor,
    lengths: torch.Tensor,
    k: int,
    block_table: torch.Tensor | None = None,
    next_n: int = 1,
    chunk: int = 2048,
    num_warps: int = 4,
    sparse: bool = True,
) -> torch.Tensor:
    """Indices of the k largest logits of each row's first lengths[r] entries → [R, k] int32.

    logits [R, W] fp32, lengths [R] int32. With block_table [B, max_pages] (R = B * next_n), the
    indices are physical slots of row r's request r // next_n; without it, logical positions.
    Each row is split into chunks of `chunk` entries, one program each: four histogram passes
    (8 bits each, summed across chunks) find the k-th key, a count pass and a write pass place
    the selected indices. `sparse=False` always takes the block histogram (the path before it).
    """
    require("logits", logits, (torch.float32,), (None, None))
    rows, width = logits.shape
    require("lengths", lengths, (torch.int32,), (rows,))
    if k not in TOPK_SIZES:
        raise KernelInputError(f"k must be one of {TOPK_SIZES}; got {k}")
    if chunk < k or chunk & (chunk - 1):
        raise KernelInputError(f"chunk must be a power of two >= k; got {chunk}")
    if block_table is not None:
        require("block_table", block_table, (torch.int32,), (None, None))
        if block_table.shape[0] * next_n != rows:
            raise KernelInputError(
                f"block_table has {block_table.shape[0]} requests x next_n {next_n}, but logits has {rows} rows"
            )
        if width > block_table.shape[1] * PAGE:
            raise KernelInputError("logits are wider than the block table's pages; pass max_context_len <= pages * 64")
        require_same_device(logits=logits, lengths=lengths, block_table=block_table)
    else:
        require_same_device(logits=logits, lengths=lengths)
    out = torch.empty(rows, k, dtype=torch.int32, device=logits.device)
    if not rows:
        return out
    n_chunks = max(1, triton.cdiv(width, chunk))
    hist = torch.zeros(rows, 4, 256, dtype=torch.int32, device=logits.device)
    counts = torch.empty(rows, n_chunks, 2, dtype=torch.int32, device=logits.device)
    grid = (rows, n_chunks)
    for rnd in range(4):
        _topk_hist_kernel[grid](
            logits, lengths, hist, width, ROUND=rnd, K=k, CHUNK=chunk, SPARSE=chunk // 8 if sparse else chunk,
            num_warps=num_warps,
        )
    _topk_count_kernel[grid](logits, lengths, hist, counts, width, n_chunks, K=k, CHUNK=chunk, num_warps=num_warps)
    bt = block_table if block_table is not None else lengths
    _topk_write_kernel[grid](
        logits, lengths, hist, counts, out, bt, width, bt.shape[-1] if bt.dim() == 2 else 0, n_chunks,
        K=k, CHUNK=chunk, N_CHUNKS_P2=triton.next_power_of_2(n_chunks), NEXT_N=next_n,
        PHYSICAL=block_table is not None, PAGE_SIZE=PAGE, num_warps=num_warps,
    )
    return out


# ---- torch reference --------------------------------------------------------------------------


def sort_key_ref(x: torch.Tensor) -> torch.Tensor:
    """The kernel's ordering key as int64 (fp32 bits made monotone, NaN lowest)."""
    bits = x.contiguous().view(torch.int32).long() & 0xFFFFFFFF
    key = torch.where(bits >= 0x80000000, bits ^ 0xFFFFFFFF, bits | 0x80000000)
    return torch.where(x.isnan(), 0, key)


def topk_ref(logits, lengths, k, block_table=None, next_n=1):
    """Torch reference of `topk`: stable sort by key, take min(k, length), indices ascending, -1 padded."""
    rows, width = logits.shape
    n = lengths.long().clamp(0, width)
    pos = torch.arange(width, device=logits.device)
    key = torch.where(pos[None, :] < n[:, None], sort_key_ref(logits), -1)
    if width < k:
        key = torch.nn.functional.pad(key, (0, k - width), value=-1)
    order = torch.sort(key, dim=1, descending=True, stable=True).indices[:, :k]
    j = torch.arange(k, device=logits.device)
    big = torch.iinfo(torch.int64).max
    top = torch.sort(torch.where(j[None, :] < n[:, None].clamp(max=k), order, big), dim=1).values
    if block_table is not None:
        b = (torch.arange(rows, device=logits.device) // next_n)[:, None]
        safe = torch.where(top == big, 0, top)
        top = torch.where(top == big, big, block_table.long()[b, safe // PAGE] * PAGE + safe % PAGE)
    return torch.where(top == big, -1, top).to(torch.int32)
