"""The deployment rules: each bad configuration is refused with its rule id, the place and a fix."""

from __future__ import annotations

import pytest

from opsbot.yamlsource import ConfigError
from serving.checked import SpecRefused, load_checked
from serving.rules import check, hicache_host_bytes
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
    assert hicache_host_bytes(example, pinned) == 1_000_000 * example.model.kv_bytes_per_token * 2 * 4
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
    assert "did you mean --health-check-interval-secs?" in texts[1]


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
