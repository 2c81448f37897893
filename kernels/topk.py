"""Top-k over logits rows: exact select, deterministic (lower index wins ties), -1 padded.

Two methods, one contract. "row" (widths up to ROW_MAX): one program a row holds the row in
registers, finds the k-th key by a 32-step bisection on its bits (each step one compare-and-count
over the row), then writes the selection with a prefix sum: one launch. "radix" (any width): each
row is cut into chunks, one program each, with four 8-bit histogram rounds summed across chunks, a
count pass and an ordered write pass: seven launches.

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
ROW_MAX = 16384  # widest row the one-launch "row" method holds in registers (wider spills: slower than radix)
ROW_AUTO_MAX = 8192  # "auto" takes "row" up to here at any batch (see use_row)
METHODS = ("auto", "row", "radix")


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


@triton.jit
def _topk_row_kernel(
    x_ptr, len_ptr, out_ptr, bt_ptr, x_stride, bt_stride,
    K: tl.constexpr, BLOCK: tl.constexpr, NEXT_N: tl.constexpr, PHYSICAL: tl.constexpr, PAGE_SIZE: tl.constexpr,
):
    """One program a row: the k-th key by bisection on its 32 bits, then an ordered write."""
    row = tl.program_id(0)
    n = _row_len(len_ptr, row, x_stride)
    out_row = out_ptr + row.to(tl.int64) * K
    if n <= K:
        j = tl.arange(0, K)
        keep = j < n
        val = _translate(j, row, bt_ptr, bt_stride, keep, NEXT_N, PHYSICAL, PAGE_SIZE)
        tl.store(out_row + j, tl.where(keep, val, -1))
    elif n > K:  # not `else`: Triton merges names set in both arms, and these have other shapes
        idx = tl.arange(0, BLOCK)
        m = idx < n
        key = tl.where(m, _sort_key(tl.load(x_ptr + row.to(tl.int64) * x_stride + idx, mask=m, other=0.0)), 0)
        # the largest kth with count(key >= kth) >= K, one bit at a time from the top; stop early
        # once exactly K keys are >= the candidate (then the selection is those keys, no ties)
        kth = tl.zeros((), tl.uint32)
        one = tl.full((), 1, tl.uint32)
        shift = tl.full((), 31, tl.uint32)
        go = tl.full((), 1, tl.int32)
        while go > 0:
            cand = kth | (one << shift)
            count = tl.sum((key >= cand).to(tl.int32))
            kth = tl.where(count >= K, cand, kth)
            go = ((count != K) & (shift > 0)).to(tl.int32)
            shift = shift - 1
        gt = key > kth
        rem = K - tl.sum(gt.to(tl.int32))
        eq = m & (key == kth)
        sel = gt | (eq & (tl.cumsum(eq.to(tl.int32), 0) <= rem))
        pos = tl.cumsum(sel.to(tl.int32), 0) - 1
        val = _translate(idx, row, bt_ptr, bt_stride, sel, NEXT_N, PHYSICAL, PAGE_SIZE)
        tl.store(out_row + pos, val, mask=sel)


def sparse_limit(chunk: int, sparse: bool) -> int:
    """Matched keys in a chunk above which a radix round takes the block histogram: chunk/8 with
    `sparse`, else 0, so every chunk holding a matching key takes the histogram."""
    return chunk // 8 if sparse else 0


def row_warps(width: int) -> int:
    """Warps for the one-program-a-row method: 8 (H200, top-k 512 at B=64: 13.5 µs at L=4K against
    15.0 with 4 warps and 15.3 with 16; 33.5 µs at 16K against 78 with 4 and 37 with 16), 4 below 2K."""
    return 4 if width < 2048 else 8


def use_row(width: int, rows: int) -> bool:
    """What "auto" takes: "row" up to 8K wide, and up to 16K when there are enough rows to fill the
    GPU (B=64, L=16K: row 33.5 µs, radix 44; B=1, L=16K: radix 29 µs, its chunks spread one row)."""
    return width <= ROW_AUTO_MAX or (width <= ROW_MAX and rows >= 32)


def topk(
    logits: torch.Tensor,
    lengths: torch.Tensor,
    k: int,
    block_table: torch.Tensor | None = None,
    next_n: int = 1,
    chunk: int = 2048,
    num_warps: int | None = None,
    sparse: bool = True,
    method: str = "auto",
) -> torch.Tensor:
    """Indices of the k largest logits of each row's first lengths[r] entries → [R, k] int32.

    logits [R, W] fp32, lengths [R] int32. With block_table [B, max_pages] (R = B * next_n), the
    indices are physical slots of row r's request r // next_n; without it, logical positions.
    method "row" (W <= ROW_MAX): one launch, one program a row, `row_warps(W)` warps unless `num_warps`
    is given (its default is the radix method's).
    method "radix": rows cut into chunks of `chunk` entries, one program each: four histogram passes
    (8 bits each, summed across chunks) find the k-th key, a count pass and a write pass place the
    selected indices; `sparse=False` makes every round take the block histogram in each chunk with a
    matching key (with `sparse`, a chunk with at most chunk/8 matching keys adds one atomic per key
    instead). "auto" picks by `use_row`. Same output from each.
    """
    require("logits", logits, (torch.float32,), (None, None))
    rows, width = logits.shape
    require("lengths", lengths, (torch.int32,), (rows,))
    if k not in TOPK_SIZES:
        raise KernelInputError(f"k must be one of {TOPK_SIZES}; got {k}")
    if method not in METHODS:
        raise KernelInputError(f"method must be one of {METHODS}; got {method!r}")
    if method == "row" and width > ROW_MAX:
        raise KernelInputError(f"method 'row' takes rows up to {ROW_MAX} wide; got {width}")
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
    bt = block_table if block_table is not None else lengths
    bt_stride = bt.shape[-1] if bt.dim() == 2 else 0
    if method == "row" or (method == "auto" and use_row(width, rows)):
        _topk_row_kernel[(rows,)](
            logits, lengths, out, bt, width, bt_stride, K=k, BLOCK=max(triton.next_power_of_2(width), k),
            NEXT_N=next_n, PHYSICAL=block_table is not None, PAGE_SIZE=PAGE, num_warps=num_warps or row_warps(width),
        )
        return out
    num_warps = num_warps or 4
    n_chunks = max(1, triton.cdiv(width, chunk))
    hist = torch.zeros(rows, 4, 256, dtype=torch.int32, device=logits.device)
    counts = torch.empty(rows, n_chunks, 2, dtype=torch.int32, device=logits.device)
    grid = (rows, n_chunks)
    for rnd in range(4):
        _topk_hist_kernel[grid](
            logits, lengths, hist, width, ROUND=rnd, K=k, CHUNK=chunk, SPARSE=sparse_limit(chunk, sparse),
            num_warps=num_warps,
        )
    _topk_count_kernel[grid](logits, lengths, hist, counts, width, n_chunks, K=k, CHUNK=chunk, num_warps=num_warps)
    _topk_write_kernel[grid](
        logits, lengths, hist, counts, out, bt, width, bt_stride, n_chunks,
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
