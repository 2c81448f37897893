"""Indexer logits I[t, s] = sum_h w[t, h] * ReLU(q[t, h] . k[s]) over a paged (decode) or ragged (prefill) cache.

fp8 keys carry one positive scale per token, applied after the head sum (dsa-indexer.md §2.1);
an fp8 q's per-head scale is expected folded into w. Entries a row may not see are -inf.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from kernels.layout import (
    FP8_PAGE_BYTES,
    FP8_VALUE_BYTES,
    HEAD_DIM,
    HEADS,
    PAGE,
    KernelInputError,
    cache_kind,
    dequantize_fp8_pages,
    require,
    require_same_device,
)

Q_DTYPES = (torch.bfloat16, torch.float8_e4m3fn)
OUT_DTYPES = (torch.float32, torch.bfloat16)


def _upcast(q: torch.Tensor) -> bool:
    """Triton's CPU interpreter (tensors on the CPU) gets bf16 tl.dot wrong (seen with triton 3.9): there
    the operands are upcast to fp32 first, which is exact (a bf16 x bf16 product fits fp32; the GPU
    accumulates in fp32). Decided per call from the tensors, not from the environment at import."""
    return q.device.type == "cpu"

# a small grid halves pages_per_program down to MIN_PAGES_PER_PROGRAM until it has TARGET_PROGRAMS
TARGET_PROGRAMS = 512
MIN_PAGES_PER_PROGRAM = 4
# paged_logits launch defaults per cache kind: the best of `python -m bench.kernels sweep` on the H200
LAUNCH = {
    # 32 pages: 82% of copy at B x L = 1M (B=16/L=64K, 64/16K, 32/32K) against 81% with 16
    # (`bench.kernels v4-sweep`, results/v4-sweep.txt)
    "bf16": {"pages_per_program": 32, "tile_pages": 1, "num_warps": 4, "num_stages": 2, "prefetch": False},
    "fp8": {"pages_per_program": 16, "tile_pages": 1, "num_warps": 4, "num_stages": 2, "prefetch": False},
}
# the persistent grid (`_paged_logits_persistent_kernel`): per_sm programs per SM (4: one program per resident
# slot at 4 warps), the register prefetch on; taken by default (programs=None) from PERSISTENT_MIN_BATCH[kind]
# requests on. H200, results/grid-final.txt (the live-tile split, same bits as the plain grid in every cell):
# at B >= 64 ragged rows (a real decode batch) 64 x 16K 92.9 -> 81.3 us, 128 x 16K 171.3 -> 149.1 us, even rows
# 0.97-1.02x (64 x 4K 1.05x, within the run's noise of a few %); at B = 16 it loses (1.17-1.27x), so not there.
PERSISTENT = {"bf16": {"per_sm": 4, "tile_pages": 1, "num_warps": 4, "num_stages": 2, "prefetch": True}}
PERSISTENT_MIN_BATCH = {"bf16": 64}
PERSISTENT_MAX_BATCH = 1024  # each program holds every request's length in one block (`BLOCK_B`)


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def persistent_programs(kind: str, batch: int, device: torch.device) -> int:
    """The persistent grid's program count where `PERSISTENT` takes it for this batch, else 0 (plain grid)."""
    least = PERSISTENT_MIN_BATCH.get(kind)
    if device.type != "cuda" or least is None or not least <= batch <= PERSISTENT_MAX_BATCH:
        return 0
    return PERSISTENT[kind]["per_sm"] * _sm_count(device.index if device.index is not None else torch.cuda.current_device())


@triton.jit
def _tile_pages(bt_row, p0, limit, num_pages, TOK: tl.constexpr, PAGE_SIZE: tl.constexpr):
    """Page ids of the TOK tokens from page p0 of one request, and which tokens can be read: pages at or past
    `limit` are not read (nor their table entries), nor page ids outside the cache."""
    t = tl.arange(0, TOK)
    pidx = p0 + t // PAGE_SIZE
    live = pidx < limit
    page = tl.load(bt_row + pidx, mask=live, other=-1).to(tl.int64)
    ok = live & (page >= 0) & (page < num_pages)
    return tl.where(ok, page, 0), ok


@triton.jit
def _tile_keys(kv_ptr, page, ok, TOK: tl.constexpr, PAGE_SIZE: tl.constexpr, PAGE_ELEMS: tl.constexpr,
               D: tl.constexpr):
    t = tl.arange(0, TOK)
    d = tl.arange(0, D)
    slot = page * PAGE_ELEMS + (t % PAGE_SIZE) * D
    return tl.load(kv_ptr + slot[:, None] + d[None, :], mask=ok[:, None], other=0.0)  # [TOK, D]


@triton.jit
def _tile_logits(
    q, w, k, page, ok, scale_ptr, out_rows, p0, visible, max_ctx,
    NEXT_N: tl.constexpr, H: tl.constexpr, PAGE_SIZE: tl.constexpr, SCALE_OFF: tl.constexpr,
    SCALE_STRIDE: tl.constexpr, TILE_PAGES: tl.constexpr, KV_FP8: tl.constexpr, Q_FP8: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """The logits of one tile (TILE_PAGES pages from page p0, TOK tokens, one MMA), -inf where not visible.

    The MMA is keys x queries ([TOK, D] @ [D, NEXT_N * H]), so the head sum runs along the
    accumulator's N dimension: mostly inside each thread, with no cross-warp reduction.
    """
    TOK: tl.constexpr = TILE_PAGES * PAGE_SIZE
    t = tl.arange(0, TOK)
    if UPCAST:
        k = k.to(tl.float32)
    elif KV_FP8 and not Q_FP8:
        k = k.to(tl.bfloat16)
    s = tl.dot(k, tl.trans(q))  # [TOK, M] fp32
    s = tl.maximum(s, 0.0, propagate_nan=tl.PropagateNan.ALL) * w[None, :]
    if NEXT_N == 1:
        logits = tl.sum(s, axis=1)[:, None]  # [TOK, 1]
    else:
        logits = tl.sum(tl.reshape(s, (TOK, NEXT_N, H)), axis=2)  # [TOK, NEXT_N]
    if KV_FP8:
        sc = tl.load(scale_ptr + page * SCALE_STRIDE + SCALE_OFF + t % PAGE_SIZE, mask=ok, other=0.0)
        logits = logits * sc[:, None]
    tok = p0 * PAGE_SIZE + t
    logits = tl.where(ok[:, None] & (tok[:, None] < visible[None, :]), logits, float("-inf"))
    tl.store(out_rows + tok[:, None], logits.to(out_rows.dtype.element_ty), mask=tok[:, None] < max_ctx)


@triton.jit
def _prefetched_tiles(
    q, w, kv_ptr, scale_ptr, bt_row, out_rows, t_lo, t_hi, limit, num_pages, visible, max_ctx,
    NEXT_N: tl.constexpr, H: tl.constexpr, D: tl.constexpr, PAGE_SIZE: tl.constexpr,
    PAGE_ELEMS: tl.constexpr, SCALE_OFF: tl.constexpr, SCALE_STRIDE: tl.constexpr, TILE_PAGES: tl.constexpr,
    KV_FP8: tl.constexpr, Q_FP8: tl.constexpr, UPCAST: tl.constexpr,
):
    """Tiles [t_lo, t_hi) of one request, software-pipelined by hand: each iteration loads the next tile's
    keys (into registers; they are the MMA's register operand, so Triton's own pipeliner, which stages
    shared-memory operands, does not overlap them: no cp.async in the PTX, triton 3.9, sm_90) and the page ids of the one after, before this tile's
    MMA. Two tiles of keys in flight per program instead of one; the same arithmetic per tile."""
    TOK: tl.constexpr = TILE_PAGES * PAGE_SIZE
    page, ok = _tile_pages(bt_row, t_lo * TILE_PAGES, limit, num_pages, TOK, PAGE_SIZE)
    k = _tile_keys(kv_ptr, page, ok, TOK, PAGE_SIZE, PAGE_ELEMS, D)
    page_n, ok_n = _tile_pages(bt_row, (t_lo + 1) * TILE_PAGES, limit, num_pages, TOK, PAGE_SIZE)
    for tile in range(t_lo, t_hi):
        k_n = _tile_keys(kv_ptr, page_n, ok_n, TOK, PAGE_SIZE, PAGE_ELEMS, D)
        page_nn, ok_nn = _tile_pages(bt_row, (tile + 2) * TILE_PAGES, limit, num_pages, TOK, PAGE_SIZE)
        _tile_logits(q, w, k, page, ok, scale_ptr, out_rows, tile * TILE_PAGES, visible, max_ctx,
                     NEXT_N, H, PAGE_SIZE, SCALE_OFF, SCALE_STRIDE, TILE_PAGES, KV_FP8, Q_FP8, UPCAST)
        k, page, ok = k_n, page_n, ok_n
        page_n, ok_n = page_nn, ok_nn


@triton.jit
def _ninf_tile(out_rows, tok0, max_ctx, NEXT_N: tl.constexpr, TOK: tl.constexpr):
    """-inf into the TOK columns from tok0 on (past a request's pages)."""
    tok = tok0 + tl.arange(0, TOK)
    ninf = tl.full((TOK, NEXT_N), float("-inf"), out_rows.dtype.element_ty)
    tl.store(out_rows + tok[:, None], ninf, mask=tok[:, None] < max_ctx)


@triton.jit
def _paged_logits_kernel(
    q_ptr, w_ptr, kv_ptr, scale_ptr, bt_ptr, seqlen_ptr, out_ptr,
    bt_stride, out_stride, num_pages, max_ctx,
    NEXT_N: tl.constexpr, H: tl.constexpr, D: tl.constexpr, PAGE_SIZE: tl.constexpr,
    PAGE_ELEMS: tl.constexpr, SCALE_OFF: tl.constexpr, SCALE_STRIDE: tl.constexpr,
    PAGES_PER_PROG: tl.constexpr, TILE_PAGES: tl.constexpr,
    KV_FP8: tl.constexpr, Q_FP8: tl.constexpr, UPCAST: tl.constexpr, PREFETCH: tl.constexpr,
):
    """One program: PAGES_PER_PROG pages of request b, TILE_PAGES pages (TOK tokens) per MMA."""
    b = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    M: tl.constexpr = NEXT_N * H
    TOK: tl.constexpr = TILE_PAGES * PAGE_SIZE
    m = tl.arange(0, M)
    d = tl.arange(0, D)
    rows = tl.arange(0, NEXT_N)
    seq_len = tl.load(seqlen_ptr + b)
    # row i of this request sees tokens s < seq_len - NEXT_N + 1 + i
    visible = seq_len - NEXT_N + 1 + rows
    out_rows = out_ptr + (b * NEXT_N + rows)[None, :].to(tl.int64) * out_stride  # [1, NEXT_N]
    n_pages = tl.minimum(tl.cdiv(seq_len, PAGE_SIZE), bt_stride)
    bt_row = bt_ptr + b * bt_stride
    p_lo = chunk * PAGES_PER_PROG
    if p_lo < n_pages:
        q = tl.load(q_ptr + b * M * D + m[:, None] * D + d[None, :])  # [M, D]
        if UPCAST:
            q = q.to(tl.float32)
        w = tl.load(w_ptr + b * M + m)
        if PREFETCH:
            _prefetched_tiles(q, w, kv_ptr, scale_ptr, bt_row, out_rows, p_lo // TILE_PAGES,
                              (p_lo + PAGES_PER_PROG) // TILE_PAGES, tl.minimum(n_pages, p_lo + PAGES_PER_PROG),
                              num_pages, visible, max_ctx, NEXT_N, H, D, PAGE_SIZE, PAGE_ELEMS, SCALE_OFF,
                              SCALE_STRIDE, TILE_PAGES, KV_FP8, Q_FP8, UPCAST)
        else:
            for p0 in range(p_lo, p_lo + PAGES_PER_PROG, TILE_PAGES):
                page, ok = _tile_pages(bt_row, p0, n_pages, num_pages, TOK, PAGE_SIZE)
                k = _tile_keys(kv_ptr, page, ok, TOK, PAGE_SIZE, PAGE_ELEMS, D)
                _tile_logits(q, w, k, page, ok, scale_ptr, out_rows, p0, visible, max_ctx,
                             NEXT_N, H, PAGE_SIZE, SCALE_OFF, SCALE_STRIDE, TILE_PAGES, KV_FP8, Q_FP8, UPCAST)
    else:  # past this request's pages: only -inf to write
        for p0 in range(p_lo, p_lo + PAGES_PER_PROG, TILE_PAGES):
            _ninf_tile(out_rows, p0 * PAGE_SIZE, max_ctx, NEXT_N, TOK)


@triton.jit(do_not_specialize=["batch", "row_tiles"])  # scalars, not constexpr 1
def _paged_logits_persistent_kernel(
    q_ptr, w_ptr, kv_ptr, scale_ptr, bt_ptr, seqlen_ptr, out_ptr,
    bt_stride, out_stride, num_pages, max_ctx, batch, row_tiles,
    NEXT_N: tl.constexpr, H: tl.constexpr, D: tl.constexpr, PAGE_SIZE: tl.constexpr,
    PAGE_ELEMS: tl.constexpr, SCALE_OFF: tl.constexpr, SCALE_STRIDE: tl.constexpr, TILE_PAGES: tl.constexpr,
    KV_FP8: tl.constexpr, Q_FP8: tl.constexpr, UPCAST: tl.constexpr, PREFETCH: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    """A fixed number of programs (a multiple of the SM count), no tail wave. Each row of logits is
    row_tiles tiles: its live tiles first (those holding a page of the request), then dead ones (-inf only).
    Every program takes an even share of all live tiles (request after request, contiguous), then an even
    share of all dead ones, so ragged lengths stay balanced. The same tile code as `_paged_logits_kernel`;
    q and w are loaded once per request a program's share touches."""
    M: tl.constexpr = NEXT_N * H
    TOK: tl.constexpr = TILE_PAGES * PAGE_SIZE
    m = tl.arange(0, M)
    d = tl.arange(0, D)
    rows = tl.arange(0, NEXT_N)
    rb = tl.arange(0, BLOCK_B)
    in_b = rb < batch
    lens = tl.load(seqlen_ptr + rb, mask=in_b, other=0)
    live = tl.where(in_b, tl.minimum(tl.cdiv(tl.minimum(tl.cdiv(lens, PAGE_SIZE), bt_stride), TILE_PAGES), row_tiles), 0)
    dead = tl.where(in_b, row_tiles - live, 0)
    live_end = tl.cumsum(live, 0)  # inclusive: request b's live tiles are [live_end[b] - live[b], live_end[b])
    dead_end = tl.cumsum(dead, 0)
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0)
    total = tl.sum(live).to(tl.int64)
    u0 = total * pid // nprog
    u1 = total * (pid + 1) // nprog
    if u0 < u1:
        for b in range(tl.sum((live_end <= u0).to(tl.int32)), tl.sum((live_end < u1).to(tl.int32)) + 1):
            n_live = tl.sum(tl.where(rb == b, live, 0))
            start = tl.sum(tl.where(rb == b, live_end, 0)) - n_live
            lo = tl.maximum(u0 - start, 0)
            hi = tl.minimum(u1 - start, n_live)
            if lo < hi:
                bb = tl.cast(b, tl.int64)
                seq_len = tl.load(seqlen_ptr + bb)
                visible = seq_len - NEXT_N + 1 + rows  # row i of the request sees s < seq_len - NEXT_N + 1 + i
                out_rows = out_ptr + (bb * NEXT_N + rows)[None, :].to(tl.int64) * out_stride  # [1, NEXT_N]
                n_pages = tl.minimum(tl.cdiv(seq_len, PAGE_SIZE), bt_stride)
                bt_row = bt_ptr + bb * bt_stride
                q = tl.load(q_ptr + bb * M * D + m[:, None] * D + d[None, :])  # [M, D]
                if UPCAST:
                    q = q.to(tl.float32)
                w = tl.load(w_ptr + bb * M + m)
                if PREFETCH:
                    _prefetched_tiles(q, w, kv_ptr, scale_ptr, bt_row, out_rows, lo, hi,
                                      tl.minimum(n_pages, hi * TILE_PAGES), num_pages, visible, max_ctx,
                                      NEXT_N, H, D, PAGE_SIZE, PAGE_ELEMS, SCALE_OFF, SCALE_STRIDE, TILE_PAGES,
                                      KV_FP8, Q_FP8, UPCAST)
                else:
                    for tile in range(lo, hi):
                        page, ok = _tile_pages(bt_row, tile * TILE_PAGES, n_pages, num_pages, TOK, PAGE_SIZE)
                        k = _tile_keys(kv_ptr, page, ok, TOK, PAGE_SIZE, PAGE_ELEMS, D)
                        _tile_logits(q, w, k, page, ok, scale_ptr, out_rows, tile * TILE_PAGES, visible, max_ctx,
                                     NEXT_N, H, PAGE_SIZE, SCALE_OFF, SCALE_STRIDE, TILE_PAGES, KV_FP8, Q_FP8, UPCAST)
    total_dead = tl.sum(dead).to(tl.int64)
    v0 = total_dead * pid // nprog
    v1 = total_dead * (pid + 1) // nprog
    if v0 < v1:  # past the requests' pages: only -inf to write
        for b in range(tl.sum((dead_end <= v0).to(tl.int32)), tl.sum((dead_end < v1).to(tl.int32)) + 1):
            n_dead = tl.sum(tl.where(rb == b, dead, 0))
            start = tl.sum(tl.where(rb == b, dead_end, 0)) - n_dead
            first = row_tiles - n_dead  # the request's first dead tile
            out_rows = out_ptr + (tl.cast(b, tl.int64) * NEXT_N + rows)[None, :].to(tl.int64) * out_stride
            for j in range(tl.maximum(v0 - start, 0), tl.minimum(v1 - start, n_dead)):
                _ninf_tile(out_rows, (first + j) * TOK, max_ctx, NEXT_N, TOK)


def paged_logits(
    q: torch.Tensor,
    weights: torch.Tensor,
    cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    max_context_len: int | None = None,
    out_dtype: torch.dtype = torch.float32,
    pages_per_program: int | None = None,
    tile_pages: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    programs: int | None = None,
    prefetch: bool | None = None,
) -> torch.Tensor:
    """Decode logits: q [B, next_n, 64, 128], weights [B, next_n, 64] fp32, cache bf16 or fp8 pages,
    block_table [B, max_pages] int32, seq_lens [B] int32 → [B * next_n, max_context_len].

    Row b * next_n + i sees tokens s < seq_lens[b] - next_n + 1 + i; the rest of the row is -inf.
    q is bf16 (either cache) or e4m3 (fp8 cache only, its scale folded into weights).
    Launch parameters left None take the H200-tuned defaults for the cache kind (`LAUNCH`).
    programs: None picks the grid by shape (`PERSISTENT`); 0 the plain grid (a program per
    pages_per_program pages of a request); n > 0 the persistent grid of n programs
    (pages_per_program unused). prefetch: the next tile's keys loaded before this tile's MMA
    (`_prefetched_tiles`). All give the same bits: the same tile code, the same MMA per tile.
    """
    kind = cache_kind(cache)
    require("q", q, Q_DTYPES, (None, None, HEADS, HEAD_DIM))
    batch, next_n = q.shape[:2]
    if next_n not in (1, 2, 4):
        raise KernelInputError(f"next_n (q.shape[1]) must be 1, 2 or 4; got {next_n}")
    if q.dtype == torch.float8_e4m3fn and kind != "fp8":
        raise KernelInputError("an fp8 q needs the fp8 cache; give a bf16 q for the bf16 cache")
    require("weights", weights, (torch.float32,), (batch, next_n, HEADS))
    require("block_table", block_table, (torch.int32,), (batch, None))
    require("seq_lens", seq_lens, (torch.int32,), (batch,))
    require_same_device(q=q, weights=weights, cache=cache, block_table=block_table, seq_lens=seq_lens)
    if out_dtype not in OUT_DTYPES:
        raise KernelInputError(f"out_dtype must be float32 or bfloat16; got {out_dtype}")
    width = block_table.shape[1] * PAGE if max_context_len is None else int(max_context_len)
    if programs is None:
        programs = persistent_programs(kind, batch, q.device)
    if programs < 0:
        raise KernelInputError(f"programs must be >= 0; got {programs}")
    if programs and batch > PERSISTENT_MAX_BATCH:
        raise KernelInputError(f"the persistent grid (programs > 0) takes at most {PERSISTENT_MAX_BATCH} requests; got {batch}")
    launch = dict(LAUNCH[kind])
    if programs:  # the persistent grid: its own defaults; pages_per_program is not used
        launch.update({key: v for key, v in PERSISTENT.get(kind, {}).items() if key in launch})
    while (not programs and launch["pages_per_program"] > MIN_PAGES_PER_PROGRAM
           and batch * triton.cdiv(block_table.shape[1], launch["pages_per_program"]) < TARGET_PROGRAMS):
        launch["pages_per_program"] //= 2  # short rows, few requests: shorter chains, more programs
    given = {"pages_per_program": pages_per_program, "tile_pages": tile_pages, "num_warps": num_warps,
             "num_stages": num_stages, "prefetch": prefetch}
    launch.update({key: v for key, v in given.items() if v is not None})
    if programs:
        launch["pages_per_program"] = launch["tile_pages"]
    pages_per_program, tile_pages = launch["pages_per_program"], launch["tile_pages"]
    if tile_pages not in (1, 2, 4) or pages_per_program % tile_pages:
        raise KernelInputError(
            f"tile_pages must be 1, 2 or 4 and divide pages_per_program; got {tile_pages}, {pages_per_program}"
        )
    if width < 0:
        raise KernelInputError(f"max_context_len must be >= 0; got {width}")
    out = torch.empty(batch * next_n, width, dtype=out_dtype, device=q.device)
    if batch == 0 or width == 0:
        return out
    if kind == "fp8":
        kv, scales, page_elems = cache.view(torch.float8_e4m3fn), cache.view(torch.float32), FP8_PAGE_BYTES
    else:
        kv, scales, page_elems = cache, cache, PAGE * HEAD_DIM
    consts = dict(
        NEXT_N=next_n, H=HEADS, D=HEAD_DIM, PAGE_SIZE=PAGE, PAGE_ELEMS=page_elems,
        SCALE_OFF=FP8_VALUE_BYTES // 4, SCALE_STRIDE=FP8_PAGE_BYTES // 4, TILE_PAGES=tile_pages,
        KV_FP8=kind == "fp8", Q_FP8=q.dtype == torch.float8_e4m3fn, UPCAST=_upcast(q), PREFETCH=bool(launch["prefetch"]),
        num_warps=launch["num_warps"], num_stages=launch["num_stages"],
    )
    if programs:
        row_tiles = triton.cdiv(triton.cdiv(width, PAGE), tile_pages)
        _paged_logits_persistent_kernel[(min(programs, batch * row_tiles),)](
            q, weights, kv, scales, block_table, seq_lens, out,
            block_table.shape[1], width, cache.shape[0], width, batch, row_tiles,
            BLOCK_B=triton.next_power_of_2(batch), **consts,
        )
        return out
    grid = (batch, triton.cdiv(triton.cdiv(width, PAGE), pages_per_program))
    _paged_logits_kernel[grid](
        q, weights, kv, scales, block_table, seq_lens, out,
        block_table.shape[1], width, cache.shape[0], width, PAGES_PER_PROG=pages_per_program, **consts,
    )
    return out


def row_lengths(seq_lens: torch.Tensor, next_n: int) -> torch.Tensor:
    """Visible length of each logits row, [B * next_n] int32: seq_len - next_n + 1 + i, at least 0."""
    i = torch.arange(next_n, device=seq_lens.device, dtype=torch.int32)
    return (seq_lens[:, None] - next_n + 1 + i).clamp_min(0).reshape(-1).to(torch.int32)


@triton.jit
def _ragged_logits_kernel(
    q_ptr, w_ptr, kv_ptr, scale_ptr, ks_ptr, ke_ptr, out_ptr, T, S,
    H: tl.constexpr, D: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_S: tl.constexpr,
    KV_FP8: tl.constexpr, Q_FP8: tl.constexpr, UPCAST: tl.constexpr,
):
    t0 = tl.program_id(0) * BLOCK_T
    s0 = tl.program_id(1) * BLOCK_S
    h = tl.arange(0, H)
    d = tl.arange(0, D)
    cols = s0 + tl.arange(0, BLOCK_S)
    in_s = cols < S
    k = tl.load(kv_ptr + cols[:, None].to(tl.int64) * D + d[None, :], mask=in_s[:, None], other=0.0)
    if UPCAST:
        k = k.to(tl.float32)
    elif KV_FP8 and not Q_FP8:
        k = k.to(tl.bfloat16)
    if KV_FP8:
        k_scale = tl.load(scale_ptr + cols, mask=in_s, other=0.0)
    for i in range(0, BLOCK_T):
        t = t0 + i
        if t < T:
            ks = tl.load(ks_ptr + t)
            ke = tl.load(ke_ptr + t)
            row = out_ptr + t.to(tl.int64) * S + cols
            if (ke > s0) & (ks < s0 + BLOCK_S) & (ks < ke):
                q = tl.load(q_ptr + t.to(tl.int64) * H * D + h[:, None] * D + d[None, :])
                if UPCAST:
                    q = q.to(tl.float32)
                w = tl.load(w_ptr + t.to(tl.int64) * H + h)
                s = tl.maximum(tl.dot(q, tl.trans(k)), 0.0, propagate_nan=tl.PropagateNan.ALL) * w[:, None]
                logits = tl.sum(s, axis=0)
                if KV_FP8:
                    logits = logits * k_scale
                logits = tl.where((cols >= ks) & (cols < ke), logits, float("-inf"))
                tl.store(row, logits.to(out_ptr.dtype.element_ty), mask=in_s)
            else:
                tl.store(row, tl.full((BLOCK_S,), float("-inf"), out_ptr.dtype.element_ty), mask=in_s)


def ragged_logits(
    q: torch.Tensor,
    weights: torch.Tensor,
    kv: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
    ks: torch.Tensor,
    ke: torch.Tensor,
    out_dtype: torch.dtype = torch.float32,
    block_t: int = 16,
    block_s: int = 64,
    num_warps: int = 4,
) -> torch.Tensor:
    """Prefill logits over gathered keys: q [T, 64, 128], weights [T, 64] fp32, kv bf16 [S, 128] or
    (e4m3 [S, 128], fp32 scales [S]), ks/ke [T] int32 → [T, S]; row t sees [ks[t], ke[t]), else -inf.
    """
    require("q", q, Q_DTYPES, (None, HEADS, HEAD_DIM))
    n_q = q.shape[0]
    require("weights", weights, (torch.float32,), (n_q, HEADS))
    if isinstance(kv, tuple):
        values, scales = kv
        require("kv values", values, (torch.float8_e4m3fn,), (None, HEAD_DIM))
        require("kv scales", scales, (torch.float32,), (values.shape[0],))
    else:
        require("kv", kv, (torch.bfloat16,), (None, HEAD_DIM))
        values, scales = kv, kv
        if q.dtype == torch.float8_e4m3fn:
            raise KernelInputError("an fp8 q needs fp8 keys (values, scales); give a bf16 q for bf16 keys")
    require("ks", ks, (torch.int32,), (n_q,))
    require("ke", ke, (torch.int32,), (n_q,))
    require_same_device(q=q, weights=weights, kv=values, scales=scales, ks=ks, ke=ke)
    if out_dtype not in OUT_DTYPES:
        raise KernelInputError(f"out_dtype must be float32 or bfloat16; got {out_dtype}")
    n_kv = values.shape[0]
    out = torch.empty(n_q, n_kv, dtype=out_dtype, device=q.device)
    if n_q == 0 or n_kv == 0:
        return out
    grid = (triton.cdiv(n_q, block_t), triton.cdiv(n_kv, block_s))
    _ragged_logits_kernel[grid](
        q, weights, values, scales, ks, ke, out, n_q, n_kv,
        H=HEADS, D=HEAD_DIM, BLOCK_T=block_t, BLOCK_S=block_s,
        KV_FP8=isinstance(kv, tuple), Q_FP8=q.dtype == torch.float8_e4m3fn, UPCAST=_upcast(q),
        num_warps=num_warps,
    )
    return out


def causal_bounds(q_lens: torch.Tensor, kv_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ks/ke for requests packed one after another: request r's q_lens[r] tokens are the last of its
    kv_lens[r] keys, and its token i sees its own keys up to and including itself."""
    if (q_lens > kv_lens).any():
        raise KernelInputError("each request needs q_len <= kv_len (its queries are its last keys)")
    kv_start = torch.cumsum(kv_lens, 0) - kv_lens
    req = torch.repeat_interleave(torch.arange(len(q_lens), device=q_lens.device), q_lens)
    i = torch.arange(int(q_lens.sum()), device=q_lens.device) - (torch.cumsum(q_lens, 0) - q_lens)[req]
    ks = kv_start[req]
    ke = ks + kv_lens[req] - q_lens[req] + i + 1
    return ks.to(torch.int32), ke.to(torch.int32)


# ---- torch references -------------------------------------------------------------------------


def _score(q: torch.Tensor, w: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """sum_h w * relu(q . k) in fp32: q [R, H, D], w [R, H], k [R, C, D] → [R, C]."""
    s = torch.einsum("rhd,rcd->rhc", q.float(), k.float()).clamp_min(0)
    return (s * w.float()[:, :, None]).sum(1)


def paged_logits_ref(q, weights, cache, block_table, seq_lens, max_context_len=None, chunk=4096):
    """fp32 torch reference of `paged_logits` (gathers keys per chunk of the context)."""
    kind = cache_kind(cache)
    keys = dequantize_fp8_pages(cache) if kind == "fp8" else cache.float()
    batch, next_n = q.shape[:2]
    width = block_table.shape[1] * PAGE if max_context_len is None else max_context_len
    out = torch.full((batch, next_n, width), float("-inf"), device=q.device)
    qr = q.float().reshape(batch * next_n, HEADS, HEAD_DIM)
    wr = weights.reshape(batch * next_n, HEADS)
    vis = row_lengths(seq_lens, next_n).reshape(batch, next_n)
    cap = block_table.shape[1] * PAGE
    for c0 in range(0, min(width, cap), chunk):
        pos = torch.arange(c0, min(c0 + chunk, width, cap), device=q.device)
        pages = block_table[:, pos // PAGE].long()  # [B, C]
        ok = (pages >= 0) & (pages < cache.shape[0])
        k = keys[pages.clamp(0, cache.shape[0] - 1), pos % PAGE]  # [B, C, D]
        k = k[:, None].expand(batch, next_n, -1, -1).reshape(batch * next_n, len(pos), HEAD_DIM)
        s = _score(qr, wr, k).reshape(batch, next_n, -1)
        seen = (pos[None, None, :] < vis[:, :, None]) & ok[:, None, :]
        out[:, :, pos] = torch.where(seen, s, float("-inf"))
    return out.reshape(batch * next_n, width)


def ragged_logits_ref(q, weights, kv, ks, ke):
    """fp32 torch reference of `ragged_logits`."""
    k = kv[0].float() * kv[1][:, None] if isinstance(kv, tuple) else kv.float()
    s = torch.einsum("thd,sd->ths", q.float(), k).clamp_min(0)
    s = (s * weights[:, :, None]).sum(1)
    cols = torch.arange(k.shape[0], device=q.device)
    seen = (cols[None, :] >= ks[:, None]) & (cols[None, :] < ke[:, None])
    return torch.where(seen, s, float("-inf"))
