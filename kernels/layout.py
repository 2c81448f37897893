"""Paged index-K cache layouts (dsa-indexer.md §3) and the checks every op runs before launch."""

from __future__ import annotations

import torch

PAGE = 64  # tokens per page
HEAD_DIM = 128  # index head dimension d
HEADS = 64  # index heads H
BF16_PAGE_BYTES = PAGE * HEAD_DIM * 2  # 16384 B: [64 x 128] bf16
FP8_VALUE_BYTES = PAGE * HEAD_DIM  # 8192 B of e4m3 values, token-major
FP8_PAGE_BYTES = FP8_VALUE_BYTES + PAGE * 4  # 8448 B: values, then 64 fp32 scales
FP8_MAX = 448.0
BF16_ENTRY_BYTES = HEAD_DIM * 2  # 256 B an index key
FP8_ENTRY_BYTES = HEAD_DIM + 4  # 132 B: e4m3 values + fp32 scale

# DeepSeek-V3.2: one index key per token, top-k 2048 (inference/config_671B_v3.2.json).
V32_TOPK = 2048
# DeepSeek-V4-Flash, as SGLang 0.5.23 serves it: the C4 indexer (srt/layers/attention/dsv4/indexer.py::
# C4Indexer: index_n_heads 64, index_head_dim 128, index_topk 512 from the model config) scores
# compressed entries, one per 4 tokens (compress_ratio 4), kept 64 entries a page
# (mem_cache/deepseek_v4_memory_pool.py::DeepSeekV4IndexerPool, compressed_page_size = page_size // 4).
# Each query row has its own page-table row and length: paged_logits with next_n = 1, a row a query.
V4_COMPRESS_RATIO = 4
V4_FLASH_TOPK = 512


class KernelInputError(ValueError):
    """An argument of a kernel op is wrong; raised before anything is launched."""


def new_bf16_cache(num_pages: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """An empty bf16 index-K cache: [num_pages, 64, 128] bf16, 256 B a token."""
    return torch.zeros(num_pages, PAGE, HEAD_DIM, dtype=torch.bfloat16, device=device)


def new_fp8_cache(num_pages: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """An empty fp8 index-K cache in the DeepGEMM/SGLang layout: [num_pages, 8448] uint8."""
    return torch.zeros(num_pages, FP8_PAGE_BYTES, dtype=torch.uint8, device=device)


def cache_kind(cache: torch.Tensor) -> str:
    """'bf16' or 'fp8' from the cache's dtype and shape; anything else is refused."""
    if cache.dtype == torch.bfloat16 and cache.dim() == 3 and tuple(cache.shape[1:]) == (PAGE, HEAD_DIM):
        kind = "bf16"
    elif cache.dtype == torch.uint8 and cache.dim() == 2 and cache.shape[1] == FP8_PAGE_BYTES:
        kind = "fp8"
    else:
        raise KernelInputError(
            f"cache must be bf16 [pages, {PAGE}, {HEAD_DIM}] or uint8 [pages, {FP8_PAGE_BYTES}] "
            f"(fp8 values then fp32 scales, {PAGE} tokens a page); got {cache.dtype} {list(cache.shape)}"
        )
    require_contiguous("cache", cache)
    return kind


def fp8_views(cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The fp8 cache as (values [pages, 64, 128] e4m3, scales [pages, 64] fp32), sharing storage."""
    pages = cache.shape[0]
    values = cache[:, :FP8_VALUE_BYTES].view(torch.float8_e4m3fn).view(pages, PAGE, HEAD_DIM)
    scales = cache[:, FP8_VALUE_BYTES:].view(torch.float32)
    return values, scales


def dequantize_fp8_pages(cache: torch.Tensor) -> torch.Tensor:
    """The fp8 cache's keys as fp32 [pages, 64, 128] (value x per-token scale)."""
    values, scales = fp8_views(cache)
    return values.float() * scales[:, :, None]


def require_contiguous(name: str, t: torch.Tensor) -> None:
    if not t.is_contiguous():
        raise KernelInputError(f"{name} must be contiguous (call .contiguous() first); got strides {t.stride()}")


def require(name: str, t: torch.Tensor, dtypes: tuple[torch.dtype, ...], shape: tuple[int | None, ...]) -> None:
    """Check dtype, rank, fixed dims (None = any), contiguity and device of one argument."""
    if not isinstance(t, torch.Tensor):
        raise KernelInputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise KernelInputError(f"{name} must be {names}; got {str(t.dtype).removeprefix('torch.')}")
    if t.dim() != len(shape) or any(want is not None and got != want for got, want in zip(t.shape, shape)):
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise KernelInputError(f"{name} must have shape {want}; got {list(t.shape)}")
    require_contiguous(name, t)


def require_same_device(**tensors: torch.Tensor) -> None:
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        raise KernelInputError(f"all tensors must be on one device; got {devices}")


def compressed_lengths(seq_lens: torch.Tensor) -> torch.Tensor:
    """V4's compressed entries a query sees, int32: `seq_len // 4`, at least 1 (SGLang 0.5.23
    dsv4/metadata.py: "bounded by at least 1, due to flash_mla requirement"); seq_len = position + 1."""
    return (seq_lens // V4_COMPRESS_RATIO).clamp_min(1).to(torch.int32)
