"""Precision study (dsa-indexer.md §8): recall of the fp32 top-k when q and k are rounded to
bf16, fp8 (e4m3, ue8m0 scales) or fp4 (e2m1, block 32, ue8m0), on synthetic indexer scores with a
shared key component, near-duplicate distractors at the threshold and needles placed by margin."""

from __future__ import annotations

import math

import torch

from kernels.layout import HEAD_DIM, HEADS, PAGE, new_bf16_cache, new_fp8_cache
from kernels.logits import paged_logits
from kernels.store import quantize_fp8_ref, store_bf16, store_fp8, ue8m0_round
from kernels.topk import topk

MARGINS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)  # needle margin over the k-th score, in sigma_e(fp8) units
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
VARIANTS = ("bf16", "q16k8", "q8k8", "fp4", "bf16-logits")


def hadamard(x: torch.Tensor) -> torch.Tensor:
    """Fast Walsh-Hadamard over the last dim (128), scaled by d^-1/2: orthonormal."""
    shape = x.shape
    y = x.reshape(-1, HEAD_DIM)
    h = 1
    while h < HEAD_DIM:
        y = y.reshape(-1, HEAD_DIM // (2 * h), 2, h)
        y = torch.stack((y[:, :, 0] + y[:, :, 1], y[:, :, 0] - y[:, :, 1]), dim=2)
        h *= 2
    return (y.reshape(shape) * HEAD_DIM**-0.5).contiguous()


def fp4_qdq(x: torch.Tensor) -> torch.Tensor:
    """Simulated fp4 (V4's QAT): e2m1 values, blocks of 32, ue8m0 scale = 2^ceil(log2(amax / 6))."""
    b = x.reshape(-1, 32)
    s = ue8m0_round(b.abs().amax(-1, keepdim=True).clamp_min(1e-12) / 6.0)
    a = (b / s).abs().clamp(max=6.0)
    grid = E2M1.to(x.device)
    v = grid[torch.bucketize(a, (grid[1:] + grid[:-1]) / 2)]  # nearest grid value (ties go down)
    return (torch.sign(b) * v * s).reshape(x.shape)


def scores(q: torch.Tensor, w: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """fp32 I = sum_h w_h relu(q_h . k): q [Q, H, D], w [Q, H], k [Q, L, D] → [Q, L]."""
    s = torch.einsum("qhd,qld->qhl", q, k).clamp_min_(0)
    return torch.einsum("qhl,qh->ql", s, w)


def make_queries(n: int, gen: torch.Generator, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    q = hadamard(torch.randn(n, HEADS, HEAD_DIM, generator=gen, device=device))
    w = torch.randn(n, HEADS, generator=gen, device=device) * (HEADS * HEAD_DIM) ** -0.5
    return q, w


def make_keys(q, w, length: int, cm: float, gen: torch.Generator) -> torch.Tensor:
    """Keys Had(LN(z) + b) with |b| = cm * sqrt(d), plus 2% 'topic' tokens with a graded component
    along the query's preferred direction (so the top of the distribution is not pure noise)."""
    n, dev = q.shape[0], q.device
    z = torch.randn(n, length, HEAD_DIM, generator=gen, device=dev)
    z = torch.nn.functional.layer_norm(z, (HEAD_DIM,))
    b = torch.randn(HEAD_DIM, generator=gen, device=dev)
    z += cm * math.sqrt(HEAD_DIM) * b / b.norm()
    k = hadamard(z)
    u = query_direction(q, w)
    topic = torch.rand(n, length, generator=gen, device=dev) < 0.02
    grade = torch.rand(n, length, generator=gen, device=dev) * 0.5 * math.sqrt(HEAD_DIM)
    return k + (topic * grade)[:, :, None] * u[:, None, :]


def query_direction(q: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    u = (w.clamp_min(0)[:, :, None] * q).sum(1)
    return u / u.norm(dim=-1, keepdim=True)


def place(q, w, k, pos, target, u) -> torch.Tensor:
    """Move key k[i, pos[i, j]] along u[i] until its fp32 score is target[i, j] (bisection)."""
    rows = torch.arange(k.shape[0], device=k.device)[:, None].expand_as(pos)
    base = k[rows, pos]  # [Q, J, D]
    a = torch.einsum("qhd,qjd->qjh", q, base)
    c = torch.einsum("qhd,qd->qh", q, u)[:, None, :]
    lo = torch.full(pos.shape, -200.0, device=k.device)
    hi = torch.full(pos.shape, 200.0, device=k.device)
    for _ in range(60):
        mid = (lo + hi) / 2
        f = ((a + mid[..., None] * c).clamp_min(0) * w[:, None, :]).sum(-1)
        up = f < target
        lo, hi = torch.where(up, mid, lo), torch.where(up, hi, mid)
    k[rows, pos] = base + ((lo + hi) / 2)[..., None] * u[:, None, :]
    return k


def variant_logits(q, w, k, variant: str) -> torch.Tensor:
    """Logits of one precision variant through the Triton kernels (pages laid out in order)."""
    n, length, dev = k.shape[0], k.shape[1], k.device
    pages = -(-length // PAGE)
    table = torch.arange(n * pages, device=dev, dtype=torch.int32).reshape(n, pages)
    slots = torch.arange(n * pages * PAGE, device=dev).reshape(n, -1)[:, :length].reshape(-1).to(torch.int32)
    seq = torch.full((n,), length, device=dev, dtype=torch.int32)
    flat = k.reshape(-1, HEAD_DIM)
    qq, ww = q.to(torch.bfloat16), w
    if variant in ("bf16", "bf16-logits", "fp4"):
        cache = new_bf16_cache(n * pages, dev)
        store_bf16(fp4_qdq(flat) if variant == "fp4" else flat, cache, slots)
        if variant == "fp4":
            qq = fp4_qdq(q).to(torch.bfloat16)
    else:
        cache = new_fp8_cache(n * pages, dev)
        store_fp8(flat, cache, slots, ue8m0=True)
        if variant == "q8k8":
            v, s = quantize_fp8_ref(q.reshape(-1, HEAD_DIM))
            qq, ww = v.reshape(q.shape), w * s.reshape(w.shape)
    out_dtype = torch.bfloat16 if variant == "bf16-logits" else torch.float32
    logits = paged_logits(qq[:, None].contiguous(), ww[:, None].contiguous(), cache, table, seq, out_dtype=out_dtype)
    return logits.float()


def study_cell(q, w, keys, length: int, k_sizes, gen, n_distractors: int = 100) -> dict:
    """One context length: plant distractors and needles, then recall and needle retention per variant."""
    n, dev = q.shape[0], q.device
    k = keys[:, :length].clone()
    u = query_direction(q, w)
    ref = scores(q, w, k)
    sigma_e = (variant_logits(q, w, k, "q8k8") - ref).std(dim=1)  # fp8 score noise per query
    kmax = max(k_sizes)
    planted = length > kmax
    needles = margins = None
    if planted:
        tau = ref.topk(kmax, dim=1).values[:, -1]
        pos = torch.randint(0, length, (n, n_distractors), generator=gen, device=dev)
        jitter = torch.randn(n, n_distractors, generator=gen, device=dev)
        k = place(q, w, k, pos, tau[:, None] + jitter * sigma_e[:, None], u)
        tau = scores(q, w, k).topk(kmax, dim=1).values[:, -1]
        depth = torch.tensor([0.1, 0.5, 0.9], device=dev)
        needles = (depth * length).long()[None, :].expand(n, 3).contiguous()
        idx = (torch.arange(n, device=dev)[:, None] * 3 + torch.arange(3, device=dev)) % len(MARGINS)
        margins = torch.tensor(MARGINS, device=dev)[idx]
        k = place(q, w, k, needles, tau[:, None] + margins * sigma_e[:, None], u)
        ref = scores(q, w, k)
    cell = {"L": length, "sigma_e_fp8": sigma_e.mean().item(), "r_fp8": (sigma_e / ref.std(dim=1)).mean().item()}
    lens = torch.full((n,), length, device=dev, dtype=torch.int32)
    for variant in VARIANTS:
        logits = variant_logits(q, w, k, variant)
        for kk in k_sizes:
            ref_top = ref.topk(min(kk, length), dim=1)
            tau_ref = ref_top.values[:, -1:]
            sel = topk(logits, lens, kk).long()
            hit = (sel >= 0) & (ref.gather(1, sel.clamp_min(0)) >= tau_ref)
            rec = hit.sum(1).float() / min(kk, length)
            cell[f"recall@{kk}/{variant}"] = rec.mean().item()
            cell[f"recall_ci@{kk}/{variant}"] = 1.96 * rec.std().item() / math.sqrt(n) if n > 1 else 0.0
            if planted and kk == kmax:
                kept = (sel[:, None, :] == needles[:, :, None]).any(-1)  # [Q, 3]
                for m in MARGINS:
                    at = margins == m
                    cell[f"needle@{m}/{variant}"] = kept[at].float().mean().item()
    if planted:
        cell["needle_margin_achieved"] = ((ref.gather(1, needles) - tau[:, None]) / sigma_e[:, None]).median().item()
    return cell


def run_study(lengths, cms=(0.0, 3.0), seeds=(0, 1, 2), n_queries: int = 32, k_sizes=(512, 2048), device="cuda", progress=None):
    """All cells; returns a list of dicts (one per cm, seed, L)."""
    rows = []
    for cm in cms:
        for seed in seeds:
            gen = torch.Generator(device=device).manual_seed(seed)
            q, w = make_queries(n_queries, gen, device)
            keys = make_keys(q, w, max(lengths), cm, gen)
            for length in lengths:
                cell = study_cell(q, w, keys, length, k_sizes, gen)
                rows.append({"cm": cm, "seed": seed, **cell})
                if progress:
                    progress(rows[-1])
            del keys
    return rows
