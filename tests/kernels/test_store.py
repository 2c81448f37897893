"""Store kernels against the torch reference: exact bytes, skipped slots, nothing outside the pages."""

import pytest
import torch

from kernels.layout import FP8_PAGE_BYTES, KernelInputError, fp8_views, new_bf16_cache, new_fp8_cache
from kernels.store import _e4m3_bits, quantize_fp8_ref, store_bf16, store_bf16_ref, store_fp8, store_fp8_ref


def poisoned(cache: torch.Tensor) -> torch.Tensor:
    cache.view(torch.uint8).copy_(torch.randint(0, 256, cache.view(torch.uint8).shape, dtype=torch.uint8))
    return cache


def slots_for(t: int, pages: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    slots = torch.randperm(pages * 64, generator=g)[:t]
    slots[::7] = -1  # padding tokens are skipped
    slots[3::11] = pages * 64 + 5  # past the cache: skipped, never written
    return slots.to(torch.int32)


@pytest.mark.parametrize("ue8m0", [True, False])
@pytest.mark.parametrize("kdtype", [torch.bfloat16, torch.float32])
def test_fp8_store_is_bit_exact(ue8m0, kdtype):
    torch.manual_seed(1)
    k = (torch.randn(90, 128) * torch.logspace(-6, 3, 90)[:, None]).to(kdtype)
    k[5] = 0.0  # amax floor 1e-4
    slots = slots_for(90, 3, seed=2)
    got = poisoned(new_fp8_cache(3))
    want = got.clone()
    store_fp8(k, got, slots, ue8m0=ue8m0)
    store_fp8_ref(k, want, slots, ue8m0=ue8m0)
    assert torch.equal(got, want)  # uint8 pages: every byte, scales included
    _, scales = fp8_views(got)
    ok = slots[(slots >= 0) & (slots < 3 * 64)].long()
    s = scales[ok // 64, ok % 64]
    if ue8m0:
        assert torch.equal(torch.frexp(s).mantissa, torch.full_like(s, 0.5))  # powers of two


def test_bf16_store_writes_only_its_slots():
    torch.manual_seed(3)
    k = torch.randn(70, 128, dtype=torch.bfloat16)
    slots = slots_for(70, 2, seed=4)
    got = poisoned(new_bf16_cache(2))
    want = got.clone()
    store_bf16(k, got, slots)
    store_bf16_ref(k, want, slots)
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))  # bytes: the poison holds NaNs
    flat = got.view(-1, 128)
    for t in (0, 1, 2):
        if 0 <= slots[t] < 128:
            assert torch.equal(flat[slots[t]], k[t])


def test_e4m3_encoder_matches_torch_rounding():
    """Ties to even, carries into the next binade, subnormals: the bytes torch's cast gives."""
    import triton
    import triton.language as tl

    @triton.jit
    def encode(x_ptr, o_ptr, N: tl.constexpr):
        r = tl.arange(0, N)
        tl.store(o_ptr + r, _e4m3_bits(tl.load(x_ptr + r)))

    grid = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    grid = grid[grid.isfinite()]
    mids = (grid[:-1] + grid[1:]) / 2  # exact ties between neighbours (same sign)
    x = torch.cat([grid, mids, torch.randn(2000) * 30, torch.rand(500) * 0.02 - 0.01]).clamp(-448, 448)
    n = 4096
    x = torch.cat([x, torch.zeros(n - len(x))])
    out = torch.empty(n, dtype=torch.uint8)
    encode[(1,)](x, out, N=n)
    assert torch.equal(out, x.to(torch.float8_e4m3fn).view(torch.uint8))


def test_nan_key_stays_in_its_slot():
    k = torch.randn(4, 128)
    k[1, 7] = float("nan")
    slots = torch.tensor([0, 1, 2, 3], dtype=torch.int32)
    cache = new_fp8_cache(1)
    store_fp8(k, cache, slots)
    values, scales = fp8_views(cache)
    v, s = quantize_fp8_ref(k[[0, 2, 3]])
    assert torch.equal(values[0, [0, 2, 3]].view(torch.uint8), v.view(torch.uint8))
    assert torch.equal(scales[0, [0, 2, 3]], s)


@pytest.mark.parametrize(
    "k, cache, slots, match",
    [
        (torch.randn(4, 128, dtype=torch.float16), new_bf16_cache(1), torch.zeros(4, dtype=torch.int32), "k must be"),
        (torch.randn(4, 64), new_bf16_cache(1), torch.zeros(4, dtype=torch.int32), r"shape \[\*, 128\]"),
        (torch.randn(4, 128), new_bf16_cache(1), torch.zeros(3, dtype=torch.int32), "slot_mapping must have shape"),
        (torch.randn(4, 128), new_bf16_cache(1), torch.zeros(4), "slot_mapping must be int32, int64"),
        (torch.randn(128, 4).t(), new_bf16_cache(1), torch.zeros(4, dtype=torch.int32), "contiguous"),
        (torch.randn(4, 128), torch.zeros(1, 32, 128, dtype=torch.bfloat16), torch.zeros(4, dtype=torch.int32), "64"),
        (torch.randn(4, 128), torch.zeros(1, 64 * 132, dtype=torch.float32), torch.zeros(4, dtype=torch.int32), "8448"),
    ],
)
def test_bad_input_is_refused_before_launch(k, cache, slots, match):
    before = cache.clone()
    with pytest.raises(KernelInputError, match=match):
        store_bf16(k, cache, slots)
    assert torch.equal(cache, before)


def test_fp8_store_refuses_a_bf16_cache():
    with pytest.raises(KernelInputError, match="fp8 cache"):
        store_fp8(torch.randn(2, 128), new_bf16_cache(1), torch.zeros(2, dtype=torch.int32))
    assert new_fp8_cache(2).shape == (2, FP8_PAGE_BYTES)
