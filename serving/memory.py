"""Device KV bytes per token from the model's config and the index-key dtype, and whether a role fits.

Pure. The arithmetic is sglang 0.5.23's on an SM90 GPU (H200: KV layout ``V4``), read from
``sglang/srt/model_executor/pool_configurator.py::DSV4PoolConfigurator`` (ratio sizing, no
speculative decoding) and ``sglang/srt/mem_cache/deepseek_v4_memory_pool.py``; MLA models from
``mem_cache/memory_pool.py::MLATokenToKVPool``. Model facts come from ``serving/models.yaml``.
The KV of one token is not split over TP ranks (one latent per token), so the figures are per rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

MODELS_FILE = Path(__file__).parent / "models.yaml"
GIB = 1024**3
IndexKeys = Literal["fp8", "bf16"]

# sglang 0.5.23, each where it is defined:
PAGE_SIZE = 256  # arg_groups/model_overrides/deepseek_v4.py: page_size 256 on CUDA
V4_KV_BYTES = 448 + 64 * 2 + 8  # DeepSeekV4SingleKVPool.create_buffer's assert: 584 bytes/token
V4_PAGE_ALIGN = 576  # bytes_per_page_padded == ceil_div(page_size * 584, 576) * 576
SWA_FULL_TOKENS_RATIO = 0.1  # pool_configurator.py DSV4_DEFAULT_SWA_FULL_TOKENS_RATIO
C4_STATE_RING = 8  # deepseek_v4_memory_pool.get_compress_state_ring_size(4), no speculation
STATE_DTYPE_BYTES = 4  # SGLANG_DSV4_COMPRESS_STATE_DTYPE default "float32"
MLA_KV_DTYPE_BYTES = 2  # bf16 KV (the DSA/MLA default below SM100)


class ModelConfig(BaseModel):
    """The config.json fields the KV budget needs (one entry of ``serving/models.yaml``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=10, description="which config.json copy the values were read from")
    attention: Literal["deepseek-v4", "mla"]
    num_hidden_layers: int = Field(gt=0)
    max_position_embeddings: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    head_dim: int | None = None
    sliding_window: int | None = None
    kv_lora_rank: int | None = None
    index_head_dim: int | None = None
    index_n_heads: int | None = None
    index_topk: int | None = None
    compress_ratios: list[int] | None = None

    def layers_with_ratio(self, ratio: int) -> int:
        """Layers (MTP placeholder excluded) of one compress ratio; 4 = the layers with a C4 indexer."""
        return sum(r == ratio for r in (self.compress_ratios or [])[: self.num_hidden_layers])

    @property
    def index_layers(self) -> int:
        """Layers whose indexer the bf16-key patch changes (DeepSeek-V4's C4 layers)."""
        return self.layers_with_ratio(4) if self.attention == "deepseek-v4" and self.index_head_dim else 0


@cache
def model_configs() -> dict[str, ModelConfig]:
    return TypeAdapter(dict[str, ModelConfig]).validate_python(yaml.safe_load(MODELS_FILE.read_text()))


@dataclass(frozen=True)
class Term:
    """One line of the arithmetic: what, how it was computed, bytes per token."""

    what: str
    formula: str
    bytes: float


@dataclass(frozen=True)
class KVBytes:
    model: str
    index_keys: IndexKeys
    terms: tuple[Term, ...]

    @property
    def per_token(self) -> int:
        return math.ceil(sum(t.bytes for t in self.terms))


def index_key_bytes(index_head_dim: int, index_keys: IndexKeys) -> int:
    """Bytes of one compressed index key: fp8 values plus one fp32 scale per 128 (upstream), or bf16."""
    if index_keys == "bf16":
        return index_head_dim * 2
    return index_head_dim + index_head_dim // 128 * 4  # get_dsv4_indexer_bytes_per_token(d, fp4=False)


def v4_paged_bytes(page: int) -> float:
    """Bytes per slot of a V4-layout page of ``page`` slots, padded to 576 B as the pool allocates."""
    return math.ceil(page * V4_KV_BYTES / V4_PAGE_ALIGN) * V4_PAGE_ALIGN / page


def _v4_terms(cfg: ModelConfig, index_keys: IndexKeys, page: int, swa_ratio: float) -> list[Term]:
    assert cfg.head_dim and cfg.index_head_dim and cfg.compress_ratios is not None
    n4, n128, layers = cfg.layers_with_ratio(4), cfg.layers_with_ratio(128), cfg.num_hidden_layers
    kv4, kv128, kv_swa = v4_paged_bytes(page // 4), v4_paged_bytes(page // 128), v4_paged_bytes(page)
    ik = index_key_bytes(cfg.index_head_dim, index_keys)
    attn_dim = cfg.head_dim
    state = 2 * 2 * (attn_dim + cfg.index_head_dim) * STATE_DTYPE_BYTES * C4_STATE_RING / page
    key_what = "bf16 (patched)" if index_keys == "bf16" else "fp8 + fp32 scale (upstream)"
    return [
        Term("C4 compressed KV", f"{n4} layers x {kv4:g} B / 4 tokens", n4 * kv4 / 4),
        Term(f"C4 index keys, {key_what}", f"{n4} layers x {ik} B / 4 tokens", n4 * ik / 4),
        Term("C128 compressed KV", f"{n128} layers x {kv128:g} B / 128 tokens", n128 * kv128 / 128),
        Term("sliding-window KV and C4 compress state",
             f"{swa_ratio:g} SWA slots per token x ({layers} layers x {kv_swa:g} B + {n4} x {state:g} B state)",
             swa_ratio * (layers * kv_swa + n4 * state)),
    ]


def kv_bytes(name: str, index_keys: IndexKeys, page: int = PAGE_SIZE,
             swa_ratio: float = SWA_FULL_TOKENS_RATIO) -> KVBytes:
    """Device KV bytes one token of context costs on each rank, term by term."""
    cfg = model_configs()[name]
    if cfg.attention == "deepseek-v4":
        terms = _v4_terms(cfg, index_keys, page, swa_ratio)
    else:
        assert cfg.kv_lora_rank
        per_layer = (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * MLA_KV_DTYPE_BYTES
        terms = [Term("MLA latent KV (bf16)",
                      f"{cfg.num_hidden_layers} layers x ({cfg.kv_lora_rank} + {cfg.qk_rope_head_dim}) x 2 B",
                      cfg.num_hidden_layers * per_layer)]
    return KVBytes(name, index_keys, tuple(terms))


@dataclass(frozen=True)
class RoleFit:
    """A server role's KV budget on one GPU: what ``--mem-fraction-static`` leaves after the weights."""

    role: str
    gpu_bytes: float
    mem_fraction_static: float
    weights_bytes: float  # per rank
    kv_bytes_per_token: int
    context_length: int
    measured_tokens: int | None = None  # the spec's kv_pool_tokens (sglang:max_total_num_tokens), when known

    @property
    def pool_bytes(self) -> float:
        if self.measured_tokens is not None:
            return float(self.measured_tokens * self.kv_bytes_per_token)
        return self.gpu_bytes * self.mem_fraction_static - self.weights_bytes

    @property
    def pool_tokens(self) -> int:
        return max(0, int(self.pool_bytes // self.kv_bytes_per_token))

    @property
    def need_bytes(self) -> float:
        """One request of the full context must fit the pool."""
        return self.context_length * self.kv_bytes_per_token

    @property
    def short_bytes(self) -> float:
        return max(0.0, self.need_bytes - self.pool_bytes)

    def fraction_needed(self) -> float:
        """The smallest ``mem_fraction_static`` that holds one full-context request."""
        return (self.weights_bytes + self.need_bytes) / self.gpu_bytes

    def lines(self) -> list[str]:
        g = lambda b: f"{b / GIB:.2f} GiB"  # noqa: E731
        source = (f"{self.role}: measured pool (kv_pool_tokens {self.measured_tokens:,}) = KV pool {g(self.pool_bytes)}"
                  if self.measured_tokens is not None else
                  f"{self.role}: {self.gpu_bytes / GIB:g} GiB x mem_fraction_static {self.mem_fraction_static:g} "
                  f"- weights {g(self.weights_bytes)} per rank = KV pool {g(self.pool_bytes)}")
        return [
            source,
            f"{self.role}: pool / {self.kv_bytes_per_token} B per token = {self.pool_tokens:,} tokens; "
            f"context_length {self.context_length:,} needs {g(self.need_bytes)}"
            + (f": short by {g(self.short_bytes)}" if self.short_bytes else ""),
        ]
