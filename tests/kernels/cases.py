"""Builders for paged-cache test cases shared by the CPU and device tests."""

from __future__ import annotations

import torch

from kernels.layout import PAGE, new_fp8_cache
from kernels.store import store_bf16, store_fp8


def paged_case(lens: list[int], next_n: int, kind: str, seed: int = 0, device: str = "cpu", spare_pages: int = 3):
    """(q, w, cache, block_table, seq_lens) with a shuffled page table over a junk-filled page pool;
    only visible tokens are stored, through the store kernels."""
    g = torch.Generator(device=device).manual_seed(seed)
    batch = len(lens)
    max_pages = max(1, max((n + PAGE - 1) // PAGE for n in lens))
    num_pages = batch * max_pages + spare_pages
    table = torch.randperm(num_pages, generator=g, device=device)[: batch * max_pages]
    table = table.reshape(batch, max_pages).to(torch.int32)
    keys = torch.randn(batch, max_pages * PAGE, 128, generator=g, device=device)
    keys += 0.5 * torch.randn(128, generator=g, device=device)  # a shared component, as LayerNorm bias gives
    slots = (table.long()[:, :, None] * PAGE + torch.arange(PAGE, device=device)).reshape(batch, -1)
    keep = torch.arange(max_pages * PAGE, device=device)[None, :] < torch.tensor(lens, device=device)[:, None]
    slots = torch.where(keep, slots, -1).reshape(-1).to(torch.int32)
    if kind == "bf16":
        cache = (torch.randn(num_pages, PAGE, 128, generator=g, device=device) * 1e3).to(torch.bfloat16)
        store_bf16(keys.reshape(-1, 128), cache, slots)
    else:  # "fp8" (bf16 q) or "fp8q" (e4m3 q)
        cache = new_fp8_cache(num_pages, device)
        cache.copy_(torch.randint(0, 120, cache.shape, generator=g, device=device, dtype=torch.uint8))  # finite junk
        store_fp8(keys.reshape(-1, 128), cache, slots)
    q = torch.randn(batch, next_n, 64, 128, generator=g, device=device).to(torch.bfloat16)
    if kind == "fp8q":
        q = q.to(torch.float8_e4m3fn)
    w = torch.randn(batch, next_n, 64, generator=g, device=device) / 64
    seq = torch.tensor(lens, dtype=torch.int32, device=device)
    return q, w, cache, table, seq


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    fin = torch.isfinite(want)
    return ((got[fin].double() - want[fin].double()).norm() / want[fin].double().norm().clamp_min(1e-30)).item()
