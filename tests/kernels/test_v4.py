"""DeepSeek-V4-Flash's C4 indexer shapes: a row a query over its own compressed entries, top-k 512."""

import pytest
import torch

from kernels.layout import (BF16_ENTRY_BYTES, FP8_ENTRY_BYTES, PAGE, V4_FLASH_TOPK, compressed_lengths,
                            new_bf16_cache, new_fp8_cache)
from kernels.logits import paged_logits, paged_logits_ref
from kernels.store import store_bf16, store_fp8
from kernels.topk import ROW_MAX, sparse_limit, topk, topk_ref

from .cases import rel_err


def v4_rows(positions: list[int], request_entries: int, kind: str, seed: int = 0):
    """One request's compressed keys in a shuffled page pool, and one query row per position
    (each row: the request's page-table row, `compressed_lengths(position + 1)` entries)."""
    g = torch.Generator().manual_seed(seed)
    pages = (request_entries + PAGE - 1) // PAGE
    table_row = torch.randperm(pages + 2, generator=g)[:pages].to(torch.int32)
    keys = torch.randn(request_entries, 128, generator=g)
    slots = (table_row.long()[torch.arange(request_entries) // PAGE] * PAGE + torch.arange(request_entries) % PAGE)
    cache = new_bf16_cache(pages + 2) if kind == "bf16" else new_fp8_cache(pages + 2)
    (store_bf16 if kind == "bf16" else store_fp8)(keys, cache, slots.to(torch.int32))
    rows = len(positions)
    table = table_row[None, :].expand(rows, -1).contiguous()
    lens = compressed_lengths(torch.tensor(positions) + 1)
    q = torch.randn(rows, 1, 64, 128, generator=g).to(torch.bfloat16)
    w = torch.randn(rows, 1, 64, generator=g) / 64
    return q, w, cache, table, lens


def test_entry_bytes_are_the_issue_s():
    assert (BF16_ENTRY_BYTES, FP8_ENTRY_BYTES) == (256, 132)
    assert new_bf16_cache(1).numel() * 2 == PAGE * 256 and new_fp8_cache(1).numel() == PAGE * 132
    assert compressed_lengths(torch.tensor([1, 3, 4, 7, 8, 4096])).tolist() == [1, 1, 1, 1, 2, 1024]


@pytest.mark.parametrize("kind", ["bf16", "fp8"])
def test_prefill_rows_over_compressed_entries_select_like_the_reference(kind):
    # a prefill chunk: queries at positions 2000.. of one request, each row seeing about 500..750 entries
    # (fewer for fp8: the interpreter is slow on the fp8 store)
    positions, entries = (list(range(2000, 3000, 83)), 750) if kind == "bf16" else (list(range(2000, 2240, 50)), 560)
    q, w, cache, table, lens = v4_rows(positions, entries, kind)
    logits = paged_logits(q, w, cache, table, lens)
    assert rel_err(logits, paged_logits_ref(q, w, cache, table, lens)) < 1e-5
    got = topk(logits, lens, V4_FLASH_TOPK, block_table=table)
    assert torch.equal(got, topk_ref(logits, lens, V4_FLASH_TOPK, table))
    short = lens <= V4_FLASH_TOPK  # rows that see <= 512 entries take them all, in order, then -1
    assert short.any() and (~short).any()
    r = int(short.nonzero()[0])
    n = int(lens[r])
    assert torch.equal(got[r, :n].long(), table[r, torch.arange(n) // PAGE].long() * PAGE + torch.arange(n) % PAGE)
    assert (got[r, n:] == -1).all()


@pytest.mark.parametrize("k", [512, 2048])
def test_row_and_radix_methods_agree(k):
    torch.manual_seed(k)
    width = 3 * k + 17
    x = torch.randn(5, width)
    x[1] = (x[1] * 2).round()  # ties across the k-th value
    x[2, :30] = float("nan")
    x[3] = -x[3].abs()  # all negative
    lens = torch.tensor([width, width - 100, k + 1, width, k], dtype=torch.int32)
    want = topk_ref(x, lens, k)
    for method, sparse in (("row", True), ("radix", True), ("radix", False), ("auto", True)):
        assert torch.equal(topk(x, lens, k, method=method, sparse=sparse, chunk=k), want), (method, sparse)


def test_sparse_false_takes_the_histogram_in_every_matching_chunk():
    assert sparse_limit(2048, True) == 256
    assert sparse_limit(2048, False) == 0  # a chunk with >= 1 matching key is "dense"


def test_row_method_refuses_rows_wider_than_it_holds():
    from kernels.layout import KernelInputError

    with pytest.raises(KernelInputError, match="method 'row'"):
        topk(torch.zeros(1, ROW_MAX + 1), torch.zeros(1, dtype=torch.int32), 512, method="row")
    with pytest.raises(KernelInputError, match="method must be"):
        topk(torch.zeros(1, 10), torch.zeros(1, dtype=torch.int32), 512, method="heap")
