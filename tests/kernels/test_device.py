"""The same checks at real shapes on the GPU (run on the H200 through `device`; never in CI)."""

import pytest
import torch

from kernels.logits import causal_bounds, paged_logits, paged_logits_ref, ragged_logits, ragged_logits_ref, row_lengths
from kernels.layout import fp8_views
from kernels.store import quantize_fp8_ref, store_bf16, store_bf16_ref, store_fp8, store_fp8_ref
from kernels.topk import topk, topk_ref

from .cases import paged_case, rel_err

pytestmark = [
    pytest.mark.device,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: run through the device machine"),
]


def ragged(batch: int, mean: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(batch, generator=g) * 0.6 * mean + 0.7 * mean).long().tolist()  # U[0.7L, 1.3L]


@pytest.mark.parametrize("kind", ["bf16", "fp8", "fp8q"])
@pytest.mark.parametrize("batch, mean, next_n", [(64, 65536, 1), (16, 131072, 2), (128, 4096, 1)])
def test_paged_logits_real_shapes(kind, batch, mean, next_n):
    q, w, cache, table, seq = paged_case(ragged(batch, mean, seed=batch), next_n, kind, device="cuda")
    got = paged_logits(q, w, cache, table, seq)
    want = paged_logits_ref(q, w, cache, table, seq, chunk=2048)
    pos = torch.arange(got.shape[1], device="cuda")
    assert torch.equal(torch.isfinite(got), pos[None, :] < row_lengths(seq, next_n)[:, None])
    # fp8 x fp8 wgmma accumulates with fewer bits than fp32 on Hopper (why DeepGEMM promotes partial
    # sums); measured 1.3e-4 here. bf16 operands accumulate in full fp32.
    assert rel_err(got, want) < (5e-4 if kind == "fp8q" else 1e-5)


@pytest.mark.parametrize("kind", ["bf16", "fp8q"])
@pytest.mark.parametrize("batch, mean, next_n", [(16, 65536, 1), (64, 16384, 2), (3, 4096, 1), (1, 65536, 1)])
def test_persistent_grid_and_prefetch_give_the_plain_grids_bits(kind, batch, mean, next_n):
    q, w, cache, table, seq = paged_case(ragged(batch, mean, seed=batch + 1), next_n, kind, device="cuda")
    plain = paged_logits(q, w, cache, table, seq, programs=0, prefetch=False)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for programs in (0, sms, 2 * sms, 3 * sms + 1):
        for prefetch in (False, True):
            got = paged_logits(q, w, cache, table, seq, programs=programs, prefetch=prefetch)
            assert torch.equal(got, plain), (programs, prefetch)
    assert torch.equal(paged_logits(q, w, cache, table, seq), plain)  # the default choice


@pytest.mark.parametrize("k", [512, 1024, 2048])
@pytest.mark.parametrize("batch, width", [(64, 65536), (8, 131072), (128, 4096)])
def test_topk_real_shapes(k, batch, width):
    g = torch.Generator(device="cuda").manual_seed(k + batch)
    x = torch.randn(batch, width, device="cuda", generator=g)
    x[::3] = (x[::3] * 4).round()  # ties
    lens = torch.randint(width // 2, width + 1, (batch,), device="cuda", dtype=torch.int32)
    lens[0] = k - 1
    want = topk_ref(x, lens, k)
    assert torch.equal(topk(x, lens, k), want)
    assert torch.equal(topk(x, lens, k, method="radix"), want)
    assert torch.equal(topk(x, lens, k, method="radix", sparse=False), want)


@pytest.mark.parametrize("ue8m0", [True, False])
def test_store_real_shapes(ue8m0):
    t, pages = 65536, 1100
    k = torch.randn(t, 128, device="cuda", dtype=torch.bfloat16) * 3
    slots = torch.randperm(pages * 64, device="cuda")[:t].to(torch.int32)
    from kernels.layout import new_bf16_cache, new_fp8_cache

    a, b = new_fp8_cache(pages, "cuda"), new_fp8_cache(pages, "cuda")
    store_fp8(k, a, slots, ue8m0)
    store_fp8_ref(k, b, slots, ue8m0)
    va, sa = fp8_views(a)
    vb, sb = fp8_views(b)
    assert torch.equal(sa, sb)  # scales bit-exact
    diff = (va.view(torch.uint8).int() - vb.view(torch.uint8).int()).abs()
    print(f"ue8m0={ue8m0}: {int((diff > 0).sum())} of {diff.numel()} fp8 codes differ, max {int(diff.max())}")
    assert torch.equal(a, b), f"{int((diff > 0).sum())} codes differ from torch's cast"
    a, b = new_bf16_cache(pages, "cuda"), new_bf16_cache(pages, "cuda")
    store_bf16(k, a, slots)
    store_bf16_ref(k, b, slots)
    assert torch.equal(a, b)


@pytest.mark.parametrize("fp8", [False, True])
def test_ragged_prefill_real_shapes(fp8):
    ks, ke = causal_bounds(torch.tensor([1024, 512], device="cuda"), torch.tensor([8192, 4096], device="cuda"))
    q = torch.randn(1536, 64, 128, device="cuda").to(torch.bfloat16)
    w = torch.randn(1536, 64, device="cuda") / 64
    k = torch.randn(12288, 128, device="cuda")
    kv = quantize_fp8_ref(k) if fp8 else k.to(torch.bfloat16)
    got = ragged_logits(q, w, kv, ks, ke)
    want = ragged_logits_ref(q, w, kv, ks, ke)
    assert torch.equal(torch.isfinite(got), torch.isfinite(want))
    assert rel_err(got, want) < 1e-5


@pytest.mark.parametrize("k", [512, 2048])
@pytest.mark.parametrize("entries", [4096, 16384, 65536])
def test_v4_rows_logits_and_topk(k, entries):
    """V4-Flash C4 decode: 64 rows, each its own request of `entries` compressed bf16 keys."""
    from kernels.layout import new_bf16_cache

    g = torch.Generator(device="cuda").manual_seed(entries + k)
    rows, pages = 64, entries // 64
    table = torch.randperm(rows * pages, generator=g, device="cuda").to(torch.int32).reshape(rows, pages)
    cache = new_bf16_cache(rows * pages, "cuda")
    keys = torch.randn(rows * pages * 64, 128, generator=g, device="cuda")
    store_bf16(keys, cache, torch.arange(rows * pages * 64, device="cuda", dtype=torch.int32))
    q = torch.randn(rows, 1, 64, 128, generator=g, device="cuda").to(torch.bfloat16)
    w = torch.randn(rows, 1, 64, generator=g, device="cuda") / 64
    lens = torch.randint(entries // 2, entries + 1, (rows,), generator=g, device="cuda", dtype=torch.int32)
    got = paged_logits(q, w, cache, table, lens, max_context_len=entries)
    assert rel_err(got, paged_logits_ref(q, w, cache, table, lens, max_context_len=entries)) < 1e-5
    idx = topk(got, lens, k, block_table=table)
    assert torch.equal(idx, topk_ref(got, lens, k, table))
