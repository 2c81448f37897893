"""The deployment rules: each bad configuration is refused with its rule id, the place and a fix."""

from __future__ import annotations

import pytest

from opsbot.yamlsource import ConfigError
from serving.checked import SpecRefused, load_checked
from serving.rules import bytes_per_token, check, hicache_host_bytes, role_fit
from serving.spec import GIB, load_spec
from tests.serving.conftest import EXAMPLE, LAB_SPEC


def rule_ids(path) -> list[str]:
    with pytest.raises(SpecRefused) as err:
        load_checked(path)
    return [v.rule for v in err.value.violations]


@pytest.mark.parametrize("path", [EXAMPLE, LAB_SPEC])
def test_examples_pass_every_rule(path):
    assert check(load_spec(path)) == []


def test_max_queued_requests_is_refused_in_pd(spec_file):
    p = spec_file(lambda d: d["decode"]["args"].update({"--max-queued-requests": 64}))
    with pytest.raises(SpecRefused) as err:
        load_checked(p)
    (v,) = err.value.violations
    assert v.rule == "pd-max-queued-requests" and v.where == ("decode", "args", "--max-queued-requests")
    assert "router.max_concurrent_requests" in v.fix
    line = err.value.problems[0].line
    assert "--max-queued-requests" in p.read_text().splitlines()[line - 1]


def test_hicache_size_refused_on_deepseek_v4_only(spec_file):
    assert rule_ids(spec_file(lambda d: d["prefill"]["args"].update({"--hicache-size": 100}))) == ["dsv4-hicache-size"]

    def other_model(d):
        d["model"]["family"] = "other"
        d["prefill"]["args"]["--hicache-size"] = 100

    assert check(load_spec(spec_file(other_model))) == []


def test_numa_budget_overrun_names_the_ratio_that_fits(example, spec_file):
    p = spec_file(lambda d: d["decode"].update({"hicache_ratio": 3.0}))
    with pytest.raises(SpecRefused) as err:
        load_checked(p)
    (v,) = err.value.violations
    assert v.rule == "hicache-numa-budget" and v.where == ("decode", "hicache_ratio")
    suggested = float(v.fix.rsplit(" ", 1)[1])
    fixed = load_spec(spec_file(lambda d: d["decode"].update({"hicache_ratio": suggested})))
    assert check(fixed) == []


def test_hicache_host_bytes_follow_pool_times_ratio_times_tp(example):
    pinned = example.decode.model_copy(update={"kv_pool_tokens": 1_000_000, "hicache_ratio": 2.0})
    assert hicache_host_bytes(example, pinned) == 1_000_000 * bytes_per_token(example, pinned) * 2 * 4
    # estimate from GPU memory: (140 GiB x 0.85 - 150 GiB / 4) per rank, x 2.0 x 4 ranks
    assert hicache_host_bytes(example, example.prefill) == pytest.approx((140 * 0.85 - 37.5) * GIB * 8, rel=1e-6)
    assert hicache_host_bytes(example, example.prefill.model_copy(update={"hicache_ratio": None})) == 0


def test_overlapping_gpus(spec_file):
    assert rule_ids(spec_file(lambda d: d["decode"].update({"gpus": [3, 4, 5, 6]}))) == ["gpu-overlap"]


def test_tp_must_divide_gpu_count(spec_file):
    assert rule_ids(spec_file(lambda d: d["prefill"].update({"tp": 3}))) == ["tp-divides-gpus"]


def test_gpu_and_numa_must_exist(spec_file):
    assert set(rule_ids(spec_file(lambda d: d["decode"].update({"gpus": [4, 5, 6, 9], "numa_node": 2})))) == {
        "gpu-range", "numa-unknown"}


def test_router_and_server_default_ports_collide(spec_file):
    def defaults(d):
        d["router"].pop("port")  # sglang-router defaults to 30000, like the prefill server
    ids = rule_ids(spec_file(defaults))
    assert ids == ["port-conflict"]


def test_bootstrap_port_must_match_prefill(spec_file):
    assert rule_ids(spec_file(lambda d: d["router"].update({"prefill_bootstrap_port": 8999}))) == [
        "bootstrap-port-mismatch"]
    assert check(load_spec(spec_file(lambda d: d["router"].update({"prefill_bootstrap_port": 8998})))) == []


def test_unknown_flags_refused_with_suggestion(spec_file):
    def typo(d):
        d["prefill"]["args"]["--chunked-prefil-size"] = 8192
        d["router"]["args"] = {"--health-check-intervall-secs": 5}
    with pytest.raises(SpecRefused) as err:
        load_checked(spec_file(typo))
    texts = [str(v) for v in err.value.violations]
    assert [v.rule for v in err.value.violations] == ["unknown-flag", "unknown-flag"]
    assert "did you mean --chunked-prefill-size?" in texts[0]
    assert "did you mean --health-check-interval-secs?" in texts[1] and "smg 1.13.0" in texts[1]


def test_router_flags_are_checked_against_the_router_in_use(spec_file):
    """--worker-wedge-secs is smg 1.13's; --mini-lb only sglang-router 0.3.2's."""
    assert check(load_spec(spec_file(lambda d: d["router"].update({"args": {"--worker-wedge-secs": 5}})))) == []
    assert rule_ids(spec_file(lambda d: d["router"].update({"args": {"--mini-lb": True}}))) == ["unknown-flag"]

    def old_router(d, flag):
        d["router"].update({"kind": "sgl-router", "args": {flag: True}})
    assert check(load_spec(spec_file(lambda d: old_router(d, "--mini-lb")))) == []
    assert rule_ids(spec_file(lambda d: old_router(d, "--worker-wedge-secs"))) == ["unknown-flag"]


def test_kv_bytes_per_token_come_from_the_model_config(example):
    """bf16 keys cost 256 B an entry where fp8 + scale cost 132: 21 C4 layers x 124 B / 4 tokens more."""
    fp8 = example.model_copy(update={"model": example.model.model_copy(update={"index_keys": "fp8"})})
    assert bytes_per_token(example) - bytes_per_token(fp8) == 21 * (256 - 132) // 4
    assert bytes_per_token(fp8) == 7087  # 3071.25 C4 KV + 693 index keys + 135 C128 + 3187.5 SWA, rounded up


def test_memory_that_cannot_fit_is_refused_by_how_much(spec_file):
    p = spec_file(lambda d: d["decode"].update({"mem_fraction_static": 0.3}))
    with pytest.raises(SpecRefused) as err:
        load_checked(p)
    (v,) = err.value.violations
    assert v.rule == "kv-budget" and v.where == ("decode", "mem_fraction_static")
    fit = role_fit(load_spec(p), "decode")
    assert fit.short_bytes > 0 and f"short by {fit.short_bytes / GIB:.2f} GiB" in v.reason
    raised = float(v.fix.split("at least ")[1].split(",")[0])
    assert check(load_spec(spec_file(lambda d: d["decode"].update({"mem_fraction_static": raised})))) == []
    shorter = int(v.fix.rsplit(" ", 1)[1].replace(",", ""))
    assert check(load_spec(spec_file(lambda d: d["decode"].update(
        {"mem_fraction_static": 0.3, "context_length": shorter})))) == []


def test_weights_over_the_static_fraction_are_refused(spec_file):
    assert rule_ids(spec_file(lambda d: d["prefill"].update({"mem_fraction_static": 0.2}))) == ["kv-budget"]


def test_bf16_keys_need_a_dsa_indexer_and_a_known_sglang(spec_file):
    def v3(d):
        d["model"]["config"] = "DeepSeek-V3"
        d["prefill"]["hicache_ratio"] = d["decode"]["hicache_ratio"] = None
        d["prefill"]["context_length"] = d["decode"]["context_length"] = 131072
    with pytest.raises(SpecRefused) as err:
        load_checked(spec_file(v3))
    (v,) = err.value.violations
    assert v.rule == "index-keys-no-indexer" and "0 of 61 layers" in v.reason
    assert rule_ids(spec_file(lambda d: d.update({"sglang_version": "0.5.24"}))) == ["patch-sglang-unknown"]
    assert rule_ids(spec_file(lambda d: d["model"].update({"config": "DeepSeek-V9"}))) == ["model-config-unknown"]
    fp8 = lambda d: (v3(d), d["model"].update({"index_keys": "fp8"}), d.update({"sglang_version": "0.5.24"}))  # noqa: E731
    assert check(load_spec(spec_file(fp8))) == []


def test_kv_source_is_the_config_or_a_measured_figure(spec_file):
    with pytest.raises(ConfigError, match="one of the two"):
        load_spec(spec_file(lambda d: d["model"].update({"kv_bytes_per_token": 4608})))
    def measured(d):
        d["model"].update({"config": None, "kv_bytes_per_token": 7000, "index_keys": "fp8"})
    assert check(load_spec(spec_file(measured))) == []


def test_managed_flags_must_be_set_through_fields(spec_file):
    assert rule_ids(spec_file(lambda d: d["prefill"]["args"].update({"--tp-size": 8}))) == ["managed-flag"]


def test_router_needs_admission_control(spec_file):
    assert rule_ids(spec_file(lambda d: d["router"].update({"max_concurrent_requests": -1}))) == [
        "pd-admission-control"]


def test_schema_errors_name_file_and_line(spec_file):
    p = spec_file(lambda d: d["prefill"].update({"mem_fractoin_static": 0.8}))
    with pytest.raises(ConfigError) as err:
        load_checked(p)
    problem = next(x for x in err.value.problems if "mem_fractoin_static" in x.where)
    assert problem.file == str(p) and "mem_fractoin_static" in p.read_text().splitlines()[problem.line - 1]


def test_a_measured_pool_is_what_the_context_must_fit(spec_file):
    """kv_pool_tokens (sglang:max_total_num_tokens of a running server) replaces the estimate."""
    with pytest.raises(SpecRefused) as err:
        load_checked(spec_file(lambda d: d["decode"].update({"kv_pool_tokens": 500_000})))
    (v,) = err.value.violations
    assert v.rule == "kv-budget" and "measured pool (kv_pool_tokens 500,000)" in v.reason
    assert "at most 500,000" in v.fix
    assert check(load_spec(spec_file(lambda d: d["decode"].update({"kv_pool_tokens": 2_000_000})))) == []
