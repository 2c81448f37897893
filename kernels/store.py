"""Store index keys into the paged cache: bf16 (256 B a token) or fp8 e4m3 + fp32 scale (132 B).

Tokens are placed by a slot mapping (`slot = page * 64 + offset`, as SGLang's `out_cache_loc`).
A negative slot, or one past the cache, is skipped: nothing is written outside the cache's pages.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.layout import (
    FP8_MAX,
    FP8_PAGE_BYTES,
    FP8_VALUE_BYTES,
    HEAD_DIM,
    PAGE,
    KernelInputError,
    cache_kind,
    fp8_views,
    require,
    require_same_device,
)

AMAX_FLOOR = 1e-4  # V3.2 act_quant: s = max(amax, 1e-4) / 448


@triton.jit
def _store_bf16_kernel(k_ptr, slot_ptr, cache_ptr, num_slots, D: tl.constexpr):
    t = tl.program_id(0)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if (slot >= 0) & (slot < num_slots):
        d = tl.arange(0, D)
        x = tl.load(k_ptr + t.to(tl.int64) * D + d)
        tl.store(cache_ptr + slot * D + d, x.to(tl.bfloat16))


@triton.jit
def _e4m3_bits(v):
    """fp32 (|v| <= 448, finite) to e4m3fn bits, round-to-nearest-even, subnormals kept.

    Done with integer arithmetic so the interpreter (whose fp8 cast rounds differently) and the
    GPU (cvt.rn.satfinite) store the same bytes.
    """
    bits = v.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    mag = bits & 0x7FFFFFFF
    # normal range: keep 3 of 23 mantissa bits, rounding half to even
    rounded = (mag + 0x7FFFF + ((mag >> 20) & 1)) & 0x7FF00000
    normal = (((rounded >> 23) - 120) << 3) | ((rounded >> 20) & 7)
    # subnormal range (|v| < 2^-6): m * 2^-9 with m in 0..8 (m = 8 is the smallest normal)
    y = mag.to(tl.float32, bitcast=True) * 512.0
    whole = y.to(tl.int32)
    frac = y - whole.to(tl.float32)
    up = (frac > 0.5) | ((frac == 0.5) & ((whole & 1) == 1))
    sub = whole + up.to(tl.int32)
    code = tl.where(mag < 0x3C800000, sub, normal)
    return (sign | code).to(tl.uint8)


@triton.jit
def _store_fp8_kernel(
    k_ptr, slot_ptr, val_ptr, scale_ptr, num_slots,
    D: tl.constexpr, PAGE_SIZE: tl.constexpr, PAGE_BYTES: tl.constexpr, VALUE_BYTES: tl.constexpr,
    UE8M0: tl.constexpr,
):
    t = tl.program_id(0)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if (slot >= 0) & (slot < num_slots):
        d = tl.arange(0, D)
        x = tl.load(k_ptr + t.to(tl.int64) * D + d).to(tl.float32)
        amax = tl.maximum(tl.max(tl.abs(x), axis=0), 1e-4)
        s = tl.math.div_rn(amax, 448.0)
        if UE8M0:  # round the scale up to a power of two, exactly (bit arithmetic, no log2)
            bits = s.to(tl.int32, bitcast=True)
            exp = bits & 0x7F800000
            exp = tl.where((bits & 0x007FFFFF) != 0, exp + 0x00800000, exp)
            s = exp.to(tl.float32, bitcast=True)
        v = tl.minimum(tl.maximum(tl.math.div_rn(x, s), -448.0), 448.0)
        page = slot // PAGE_SIZE
        off = slot % PAGE_SIZE
        tl.store(val_ptr + page * PAGE_BYTES + off * D + d, _e4m3_bits(v))
        tl.store(scale_ptr + page * (PAGE_BYTES // 4) + VALUE_BYTES // 4 + off, s)


def _check(k: torch.Tensor, cache: torch.Tensor, slot_mapping: torch.Tensor, want: str) -> None:
    kind = cache_kind(cache)
    if kind != want:
        raise KernelInputError(f"this store writes a {want} cache; got a {kind} cache")
    require("k", k, (torch.bfloat16, torch.float32), (None, HEAD_DIM))
    require("slot_mapping", slot_mapping, (torch.int32, torch.int64), (k.shape[0],))
    require_same_device(k=k, cache=cache, slot_mapping=slot_mapping)


def store_bf16(k: torch.Tensor, cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Write k [T, 128] (bf16 or fp32, rounded to bf16) into a bf16 cache [pages, 64, 128] at the slots."""
    _check(k, cache, slot_mapping, "bf16")
    if k.shape[0]:
        _store_bf16_kernel[(k.shape[0],)](k, slot_mapping, cache, cache.shape[0] * PAGE, D=HEAD_DIM)


def store_fp8(k: torch.Tensor, cache: torch.Tensor, slot_mapping: torch.Tensor, ue8m0: bool = True) -> None:
    """Quantize k [T, 128] per token to e4m3 with an fp32 scale and write both into the fp8 cache.

    scale = max(amax, 1e-4) / 448 (IEEE-rounded division, as vLLM's CUDA quantizer and DeepSeek's
    reference compute it), rounded up to a power of two when `ue8m0` (V3.2's scale_fmt); values are
    x / scale rounded to nearest even, saturated at ±448.
    """
    _check(k, cache, slot_mapping, "fp8")
    if k.shape[0]:
        _store_fp8_kernel[(k.shape[0],)](
            k, slot_mapping, cache, cache.view(torch.float32),
            cache.shape[0] * PAGE, D=HEAD_DIM, PAGE_SIZE=PAGE, PAGE_BYTES=FP8_PAGE_BYTES,
            VALUE_BYTES=FP8_VALUE_BYTES, UE8M0=ue8m0,
        )


# ---- torch references -------------------------------------------------------------------------


def ue8m0_round(s: torch.Tensor) -> torch.Tensor:
    """Round positive fp32 scales up to the next power of two (exact: frexp, no log2)."""
    mantissa, exponent = torch.frexp(s)
    return torch.where(mantissa == 0.5, s, torch.ldexp(torch.ones_like(s), exponent))


def quantize_fp8_ref(k: torch.Tensor, ue8m0: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token e4m3 quantization: (values [T, 128] e4m3, scales [T] fp32)."""
    x = k.float()
    amax = x.abs().amax(dim=-1).clamp_min(AMAX_FLOOR)
    # IEEE division by a tensor: torch on CUDA divides by a Python scalar through its reciprocal
    # (amax * fl(1/448)), which differs in the last bit from amax / 448 and from the CPU
    s = amax / torch.full_like(amax, FP8_MAX)
    if ue8m0:
        s = ue8m0_round(s)
    v = (x / s[:, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return v, s


def _valid(slot_mapping: torch.Tensor, num_slots: int) -> torch.Tensor:
    return (slot_mapping >= 0) & (slot_mapping < num_slots)


def store_bf16_ref(k: torch.Tensor, cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    ok = _valid(slot_mapping, cache.shape[0] * PAGE)
    cache.view(-1, HEAD_DIM)[slot_mapping[ok].long()] = k[ok].to(torch.bfloat16)


def store_fp8_ref(k: torch.Tensor, cache: torch.Tensor, slot_mapping: torch.Tensor, ue8m0: bool = True) -> None:
    ok = _valid(slot_mapping, cache.shape[0] * PAGE)
    v, s = quantize_fp8_ref(k[ok], ue8m0)
    values, scales = fp8_views(cache)
    slots = slot_mapping[ok].long()
    values[slots // PAGE, slots % PAGE] = v
    scales[slots // PAGE, slots % PAGE] = s
