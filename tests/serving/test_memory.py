"""KV bytes per token from the model config (serving/models.yaml) and the fit of a role's budget."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from serving.memory import GIB, RoleFit, index_key_bytes, kv_bytes, model_configs, v4_paged_bytes


def test_models_yaml_names_a_source_for_every_model_and_v4_flash_has_its_layers():
    cfgs = model_configs()
    assert all(len(c.source) > 20 for c in cfgs.values())
    flash = cfgs["DeepSeek-V4-Flash"]
    assert len(flash.compress_ratios or []) == flash.num_hidden_layers + 1  # the MTP placeholder
    assert (flash.layers_with_ratio(4), flash.layers_with_ratio(128), flash.layers_with_ratio(0)) == (21, 20, 2)
    assert flash.index_layers == 21 and cfgs["DeepSeek-V3"].index_layers == 0


def test_the_pool_pads_v4_pages_as_sglang_allocates_them():
    """ceil_div(page_size * 584, 576) * 576 bytes a page (DeepSeekV4SingleKVPool.create_buffer)."""
    assert v4_paged_bytes(256) == 149760 / 256 == 585
    assert v4_paged_bytes(64) == 585 and v4_paged_bytes(2) == 864


def test_index_key_bytes_upstream_and_patched():
    assert index_key_bytes(128, "fp8") == 132  # get_dsv4_indexer_bytes_per_token(128, fp4=False)
    assert index_key_bytes(128, "bf16") == 256


@given(page=st.sampled_from([128, 256, 512]), swa=st.floats(0.01, 1.0))
def test_bf16_keys_add_exactly_the_index_key_difference(page, swa):
    fp8 = kv_bytes("DeepSeek-V4-Flash", "fp8", page, swa)
    bf16 = kv_bytes("DeepSeek-V4-Flash", "bf16", page, swa)
    diff = sum(t.bytes for t in bf16.terms) - sum(t.bytes for t in fp8.terms)
    assert math.isclose(diff, 21 * (256 - 132) / 4)
    assert [t.what for t in fp8.terms][0] == "C4 compressed KV" and all(t.bytes > 0 for t in fp8.terms)


@given(gpu=st.floats(16, 200), frac=st.floats(0.05, 0.99), weights=st.floats(0, 150), tp=st.sampled_from([1, 2, 4, 8]),
       bpt=st.integers(100, 100_000), context=st.integers(1, 2_000_000))
def test_fit_and_the_fraction_it_suggests_agree(gpu, frac, weights, tp, bpt, context):
    fit = RoleFit("decode", gpu * GIB, frac, weights * GIB / tp, bpt, context)
    assert (fit.short_bytes == 0) == (fit.pool_bytes >= fit.need_bytes)
    if fit.short_bytes:
        assert fit.fraction_needed() > frac
        raised = RoleFit("decode", gpu * GIB, fit.fraction_needed() + 1e-9, weights * GIB / tp, bpt, context)
        assert raised.short_bytes == 0
    assert fit.pool_tokens * bpt <= max(0.0, fit.pool_bytes)
