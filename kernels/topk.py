"""Top-k over logits rows: exact radix select, deterministic (lower index wins ties), -1 padded.

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
def _topk_kernel(
    x_ptr, len_ptr, out_ptr, bt_ptr, x_stride, bt_stride,
    K: tl.constexpr, BLOCK: tl.constexpr, NEXT_N: tl.constexpr, PHYSICAL: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
):
    row = tl.program_id(0)
    n = tl.minimum(tl.maximum(tl.load(len_ptr + row), 0), x_stride)
    x_row = x_ptr + row.to(tl.int64) * x_stride
    out_row = out_ptr + row.to(tl.int64) * K
    ar = tl.arange(0, BLOCK)
    if n <= K:  # everything visible is selected; no logits are read
        for c in range(0, K, BLOCK):
            idx = c + ar
            keep = idx < n
            val = _translate(idx, row, bt_ptr, bt_stride, keep, NEXT_N, PHYSICAL, PAGE_SIZE)
            tl.store(out_row + idx, tl.where(keep, val, -1), mask=idx < K)
    else:
        bins = tl.arange(0, 256)
        prefix = tl.zeros((), tl.uint32)
        rem = tl.full((), K, tl.int32)
        for rnd in tl.static_range(4):  # most significant byte first
            shift = 24 - 8 * rnd
            hist = tl.zeros((256,), tl.int32)
            for c in range(0, n, BLOCK):
                idx = c + ar
                m = idx < n
                key = _sort_key(tl.load(x_row + idx, mask=m, other=0.0))
                if rnd > 0:
                    m = m & ((key >> (shift + 8)) == prefix)
                hist += tl.histogram(((key >> shift) & 0xFF).to(tl.int32), 256, mask=m)
            at_least = tl.sum(hist) - tl.cumsum(hist, 0) + hist  # entries with digit >= bin
            digit = tl.max(tl.where(at_least >= rem, bins, -1))
            rem = rem - tl.sum(tl.where(bins > digit, hist, 0))
            prefix = (prefix << 8) | digit.to(tl.uint32)
        # prefix is the k-th key; take every larger key and the first `rem` equal ones
        taken = tl.zeros((), tl.int32)
        ties = tl.zeros((), tl.int32)
        for c in range(0, n, BLOCK):
            idx = c + ar
            m = idx < n
            key = _sort_key(tl.load(x_row + idx, mask=m, other=0.0))
            eq = m & (key == prefix)
            sel = (m & (key > prefix)) | (eq & (ties + tl.cumsum(eq.to(tl.int32), 0) <= rem))
            pos = taken + tl.cumsum(sel.to(tl.int32), 0) - 1
            val = _translate(idx, row, bt_ptr, bt_stride, sel, NEXT_N, PHYSICAL, PAGE_SIZE)
            tl.store(out_row + pos, val, mask=sel)
            taken += tl.sum(sel.to(tl.int32))
            ties += tl.sum(eq.to(tl.int32))


def topk(
    logits: torch.Tensor,
    lengths: torch.Tensor,
    k: int,
    block_table: torch.Tensor | None = None,
    next_n: int = 1,
    block: int = 4096,
    num_warps: int = 8,
) -> torch.Tensor:
    """Indices of the k largest logits of each row's first lengths[r] entries → [R, k] int32.

    logits [R, W] fp32, lengths [R] int32. With block_table [B, max_pages] (R = B * next_n), the
    indices are physical slots of row r's request r // next_n; without it, logical positions.
    """
    require("logits", logits, (torch.float32,), (None, None))
    rows = logits.shape[0]
    require("lengths", lengths, (torch.int32,), (rows,))
    if k not in TOPK_SIZES:
        raise KernelInputError(f"k must be one of {TOPK_SIZES}; got {k}")
    if block_table is not None:
        require("block_table", block_table, (torch.int32,), (None, None))
        if block_table.shape[0] * next_n != rows:
            raise KernelInputError(
                f"block_table has {block_table.shape[0]} requests x next_n {next_n}, but logits has {rows} rows"
            )
        if logits.shape[1] > block_table.shape[1] * PAGE:
            raise KernelInputError("logits are wider than the block table's pages; pass max_context_len <= pages * 64")
        require_same_device(logits=logits, lengths=lengths, block_table=block_table)
    else:
        require_same_device(logits=logits, lengths=lengths)
    out = torch.empty(rows, k, dtype=torch.int32, device=logits.device)
    if rows:
        bt = block_table if block_table is not None else lengths
        _topk_kernel[(rows,)](
            logits, lengths, out, bt, logits.shape[1], bt.shape[-1] if bt.dim() == 2 else 0,
            K=k, BLOCK=block, NEXT_N=next_n,
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
