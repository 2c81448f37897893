"""Top-k against the stable-sort reference, plus checks that do not trust the reference."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.layout import KernelInputError
from kernels.logits import paged_logits, row_lengths
from kernels.topk import topk, topk_ref

from .cases import paged_case


def assert_valid(idx: torch.Tensor, logits: torch.Tensor, lengths: torch.Tensor, k: int) -> None:
    """Tie-aware validity from the values alone: count, range, distinct, min(selected) >= max(rest)."""
    for r in range(logits.shape[0]):
        n = min(int(lengths[r]), logits.shape[1])
        got = idx[r][idx[r] >= 0]
        assert len(got) == min(k, n) and (idx[r][len(got):] == -1).all()
        assert len(set(got.tolist())) == len(got) and (got < n).all()
        assert torch.equal(got, got.sort().values)  # ascending index order
        row = torch.nan_to_num(logits[r, :n], nan=float("-inf"))
        rest = torch.ones(n, dtype=torch.bool)
        rest[got.long()] = False
        if rest.any() and len(got):
            assert row[got.long()].min() >= row[rest].max()


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("k", [512, 1024, 2048])
def test_topk_matches_reference_and_is_valid(k, sparse):
    torch.manual_seed(k)
    width = 2 * k + 300
    x = torch.randn(6, width)
    x[1] = torch.randint(0, 3, (width,)).float()  # heavy ties: the lower index must win
    x[2, :50] = float("nan")
    x[2, 60:70] = float("inf")
    x[2, 100:] = float("-inf")  # fewer finite values than k
    x[3] = x[3].abs() * 1e-30  # tiny values, one exponent bin
    lens = torch.tensor([width, width - 7, width, k - 5, 0, k], dtype=torch.int32)
    got = topk(x, lens, k, chunk=k, sparse=sparse)  # several chunks a row: ties straddle them
    assert torch.equal(got, topk_ref(x, lens, k))
    assert_valid(got, x, lens, k)
    ties = got[1][got[1] >= 0]
    boundary = x[1, ties.long()].min()
    # among the tied boundary values, exactly the lowest indices were taken
    tied = (x[1, : lens[1]] == boundary).nonzero().flatten()
    taken = ties[x[1, ties.long()] == boundary]
    assert torch.equal(taken.long(), tied[: len(taken)])


def test_topk_physical_slots_follow_the_shuffled_table():
    q, w, cache, table, seq = paged_case([700, 300, 64], 2, "fp8", seed=9)
    logits = paged_logits(q, w, cache, table, seq)
    lens = row_lengths(seq, 2)
    logical = topk(logits, lens, 512)
    physical = topk(logits, lens, 512, block_table=table, next_n=2)
    assert torch.equal(physical, topk_ref(logits, lens, 512, table, next_n=2))
    r = 1  # request 0, row 1: 700 visible tokens > k
    pos = logical[r][logical[r] >= 0].long()
    assert torch.equal(physical[r][: len(pos)].long(), table[0, pos // 64].long() * 64 + pos % 64)
    assert (physical[4:] >= 0).sum(1).tolist() == [63, 64]  # request 2: 64 tokens, next_n = 2
    assert_valid(logical, logits, lens, 512)


@settings(max_examples=12, deadline=None)
@given(
    width=st.integers(1, 1500),
    length=st.integers(-3, 1600),
    levels=st.sampled_from([2, 50, 0]),
    seed=st.integers(0, 2**16),
)
def test_topk_property(width, length, levels, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, width, generator=g)
    if levels:
        x = (x * levels).round()
    lens = torch.tensor([length, width], dtype=torch.int32)
    got = topk(x, lens, 512, chunk=512)
    assert torch.equal(got, topk_ref(x, lens, 512))
    assert_valid(got, x, lens.clamp_min(0), 512)


@pytest.mark.parametrize(
    "args, match",
    [
        ((torch.zeros(2, 10, dtype=torch.float64), torch.zeros(2, dtype=torch.int32), 512), "logits must be float32"),
        ((torch.zeros(2, 10), torch.zeros(3, dtype=torch.int32), 512), "lengths must have shape"),
        ((torch.zeros(2, 10), torch.zeros(2, dtype=torch.int64), 512), "lengths must be int32"),
        ((torch.zeros(2, 10), torch.zeros(2, dtype=torch.int32), 100), "k must be one of"),
        ((torch.zeros(10, 2).t(), torch.zeros(2, dtype=torch.int32), 512), "contiguous"),
    ],
)
def test_bad_input_is_refused(args, match):
    with pytest.raises(KernelInputError, match=match):
        topk(*args)


def test_block_table_must_cover_the_rows():
    with pytest.raises(KernelInputError, match="next_n"):
        topk(torch.zeros(4, 64), torch.zeros(4, dtype=torch.int32), 512, torch.zeros(3, 1, dtype=torch.int32))


def test_chunk_size_makes_no_difference():
    torch.manual_seed(3)
    x = (torch.randn(3, 5000) * 3).round()  # ties everywhere, the k-th value spans chunks
    lens = torch.tensor([5000, 4097, 1025], dtype=torch.int32)
    want = topk_ref(x, lens, 1024)
    for chunk in (1024, 2048, 8192):
        assert torch.equal(topk(x, lens, 1024, chunk=chunk), want)


def test_chunk_must_hold_k():
    with pytest.raises(KernelInputError, match="chunk"):
        topk(torch.zeros(1, 10), torch.zeros(1, dtype=torch.int32), 2048, chunk=1024)
