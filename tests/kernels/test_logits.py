"""Paged decode and ragged prefill logits against the fp32 torch reference of the same inputs."""

import pytest
import torch

from kernels.layout import KernelInputError, new_bf16_cache
from kernels.logits import causal_bounds, paged_logits, paged_logits_ref, ragged_logits, ragged_logits_ref, row_lengths
from kernels.store import quantize_fp8_ref

from .cases import paged_case, rel_err


@pytest.mark.parametrize("kind", ["bf16", "fp8", "fp8q"])
@pytest.mark.parametrize("next_n", [1, 2])
def test_paged_logits_match_reference(kind, next_n):
    # a partial last page, an exact page, a sequence shorter than next_n, an empty one
    lens = [150, 64, 1, 0]
    q, w, cache, table, seq = paged_case(lens, next_n, kind, seed=next_n)
    got = paged_logits(q, w, cache, table, seq, pages_per_program=2)
    want = paged_logits_ref(q, w, cache, table, seq)
    visible = row_lengths(seq, next_n)
    pos = torch.arange(got.shape[1])
    # every entry is written: exactly the visible prefix is finite, the rest is -inf
    assert torch.equal(torch.isfinite(got), pos[None, :] < visible[:, None])
    assert (got[~torch.isfinite(got)] == float("-inf")).all()
    assert rel_err(got, want) < 1e-5


def test_next_n_rows_see_one_more_token_each():
    q, w, cache, table, seq = paged_case([100], 2, "bf16")
    got = paged_logits(q, w, cache, table, seq)
    assert torch.isfinite(got[0, :99]).all() and got[0, 99] == float("-inf")
    assert torch.isfinite(got[1, :100]).all() and got[1, 100] == float("-inf")


def test_max_context_len_crops_and_pads():
    q, w, cache, table, seq = paged_case([70, 20], 1, "fp8")
    full = paged_logits(q, w, cache, table, seq)
    assert torch.equal(paged_logits(q, w, cache, table, seq, max_context_len=80), full[:, :80])
    wide = paged_logits(q, w, cache, table, seq, max_context_len=300)
    assert wide.shape == (2, 300) and (wide[:, 128:] == float("-inf")).all()


def test_nan_key_poisons_only_its_column_and_bad_pages_read_nothing():
    q, w, cache, table, seq = paged_case([130], 1, "bf16")
    cache.view(-1, 128)[table[0, 1].long() * 64 + 3, 5] = float("nan")
    table[0, 2] = 10_000  # a page id past the cache: its tokens are not visible
    got = paged_logits(q, w, cache, table, seq)
    assert got[0, 67].isnan() and torch.isfinite(got[0, :67]).all()
    assert (got[0, 128:] == float("-inf")).all()


def test_inf_query_gives_inf_or_nan_not_garbage_elsewhere():
    q, w, cache, table, seq = paged_case([64, 64], 1, "bf16")
    q[0, 0, 3, 0] = float("inf")
    got = paged_logits(q, w, cache, table, seq)
    want = paged_logits_ref(q, w, cache, table, seq)
    assert rel_err(got[1:], want[1:]) < 1e-5
    assert torch.equal(got[0].isnan(), want[0].isnan())


@pytest.mark.parametrize("kv_kind", ["bf16", "fp8", "fp8q"])
def test_ragged_causal_prefill_matches_reference(kv_kind):
    torch.manual_seed(5)
    ks, ke = causal_bounds(torch.tensor([5, 3, 1]), torch.tensor([40, 30, 70]))
    q = torch.randn(9, 64, 128).to(torch.bfloat16)
    w = torch.randn(9, 64) / 64
    k = torch.randn(140, 128)
    kv = k.to(torch.bfloat16) if kv_kind == "bf16" else quantize_fp8_ref(k)
    if kv_kind == "fp8q":
        q = q.to(torch.float8_e4m3fn)
    got = ragged_logits(q, w, kv, ks, ke, block_t=4)
    want = ragged_logits_ref(q, w, kv, ks, ke)
    assert torch.equal(torch.isfinite(got), torch.isfinite(want))
    assert rel_err(got, want) < 1e-5
    # causal: request 0's last token sees 40 keys, request 1's first sees 28 of its own
    assert ke[4] - ks[4] == 40 and (ks[5], ke[5]) == (40, 68)


def good_args():
    return list(paged_case([64], 1, "bf16"))


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda a: a.__setitem__(0, a[0].float()), "q must be"),
        (lambda a: a.__setitem__(0, a[0][:, :, :32]), r"q must have shape"),
        (lambda a: a.__setitem__(1, a[1].to(torch.bfloat16)), "weights must be float32"),
        (lambda a: a.__setitem__(2, new_bf16_cache(2)[:, ::2]), "cache must be"),
        (lambda a: a.__setitem__(3, a[3].long()), "block_table must be int32"),
        (lambda a: a.__setitem__(3, torch.zeros(1, 4, dtype=torch.int32).t()), "block_table must have shape"),
        (lambda a: a.__setitem__(3, torch.zeros(1, 8, dtype=torch.int32)[:, ::2]), "contiguous"),
        (lambda a: a.__setitem__(4, torch.tensor([64, 1], dtype=torch.int32)), "seq_lens must have shape"),
        (lambda a: a.__setitem__(0, a[0].to(torch.float8_e4m3fn)), "fp8 q needs the fp8 cache"),
    ],
)
def test_bad_input_is_refused_before_launch(mutate, match):
    args = good_args()
    mutate(args)
    with pytest.raises(KernelInputError, match=match):
        paged_logits(*args)


def test_ragged_refuses_fp8_q_on_bf16_keys():
    with pytest.raises(KernelInputError, match="fp8 keys"):
        ragged_logits(
            torch.zeros(2, 64, 128, dtype=torch.float8_e4m3fn), torch.zeros(2, 64),
            torch.zeros(4, 128, dtype=torch.bfloat16), torch.zeros(2, dtype=torch.int32), torch.ones(2, dtype=torch.int32),
        )


@pytest.mark.parametrize("kind", ["bf16", "fp8q"])
@pytest.mark.parametrize("tile_pages, pages_per_program, next_n", [(1, 3, 1), (2, 4, 2), (4, 4, 4)])
def test_tiles_of_several_pages_match_reference(kind, tile_pages, pages_per_program, next_n):
    # chunks that end mid-sequence, a tile straddling the last page, a row with no pages at all
    lens = [300, 129, 0]
    q, w, cache, table, seq = paged_case(lens, next_n, kind, seed=tile_pages)
    got = paged_logits(q, w, cache, table, seq, pages_per_program=pages_per_program, tile_pages=tile_pages)
    want = paged_logits_ref(q, w, cache, table, seq)
    pos = torch.arange(got.shape[1])
    assert torch.equal(torch.isfinite(got), pos[None, :] < row_lengths(seq, next_n)[:, None])
    assert rel_err(got, want) < 1e-5


def test_tile_pages_must_divide_pages_per_program():
    q, w, cache, table, seq = paged_case([64], 1, "bf16")
    with pytest.raises(KernelInputError, match="tile_pages"):
        paged_logits(q, w, cache, table, seq, pages_per_program=3, tile_pages=2)


@pytest.mark.parametrize("kind, next_n, tile_pages, lens", [
    ("bf16", 1, 1, [300, 129, 0, 1, 64]), ("fp8q", 2, 2, [300, 129, 0, 1, 64]), ("fp8", 4, 4, [0, 0, 5]),
    ("bf16", 1, 4, [700]),
])
def test_persistent_grid_and_prefetch_give_the_plain_grids_bits(kind, next_n, tile_pages, lens):
    # shares that start and end mid-request, requests with no pages, columns past the table (-inf), a crop;
    # more programs than tiles
    q, w, cache, table, seq = paged_case(lens, next_n, kind, seed=tile_pages)
    for width in (None, 200, 700):
        plain = paged_logits(q, w, cache, table, seq, max_context_len=width, programs=0, prefetch=False,
                             pages_per_program=4, tile_pages=tile_pages)
        for programs, prefetch in ((0, True), (1, False), (1, True), (3, True), (100, False), (100, True)):
            got = paged_logits(q, w, cache, table, seq, max_context_len=width, programs=programs, prefetch=prefetch,
                               pages_per_program=4 if programs == 0 else None, tile_pages=tile_pages)
            assert torch.equal(got, plain), (width, programs, prefetch)


def test_programs_must_not_be_negative():
    q, w, cache, table, seq = paged_case([64], 1, "bf16")
    with pytest.raises(KernelInputError, match="programs"):
        paged_logits(q, w, cache, table, seq, programs=-1)
