"""Readers take what is there (spec/probe-bundle-v1.md): nulls read as absent, a malformed section is
a listed problem and the rest is diagnosed; only a file that is not a bundle at all is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from opsbot.bundle import SCHEMA, BundleError, parse_bundle
from opsbot.cli import app
from opsbot.diagnose import default_runbooks, diagnose

DEV = Path(__file__).parent / "scenarios" / "dev"

garbage = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=40),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
log_text = st.lists(
    st.sampled_from([
        "Traceback (most recent call last):", '  File "/sgl/scheduler.py", line 1, in run', "ValueError: bad --flag",
        "Scheduler hit an exception: Traceback (most recent call last):", "E0603 20:16:59.104586 27322 x.cpp:271] boom",
        "Decode batch. #running-req: 1, #token: 5, token usage: 0.00, gen throughput (token/s): 2.0, #queue-req: 0",
        "sglang-decode.service: Scheduled restart job, restart counter is at 4.", "NVRM: Xid (PCI:0000:18:00): 79",
    ]) | st.text(max_size=60),
    max_size=6,
).map("\n".join)
unit_text = st.lists(
    st.sampled_from(["ActiveState=activating", "SubState=auto-restart", "NRestarts=7", "NRestarts=x", "ExecMainStatus=1",
                     "ExecMainCode=2", "ActiveState=active", "LoadState=loaded", "Result=exit-code", "=", "junk"])
    | st.text(max_size=30),
    max_size=6,
).map("\n".join)
metrics_text = st.lists(
    st.sampled_from(['sglang:num_running_reqs{tp_rank="0"} 4', "sglang:realtime_tokens_total{mode=\"decode\"} 10",
                     "sglang:generation_tokens_total 5", "# TYPE x counter", "x_total 1", "smg_worker_health 0"])
    | st.text(max_size=40),
    max_size=5,
).map("\n".join)


def maybe(strategy):  # a value, a null, garbage, or the key left out (None from the dict filter below)
    return st.one_of(strategy, st.none(), garbage, st.just(...))


def section(**fields):
    return st.fixed_dictionaries({"ok": maybe(st.booleans()), "error": maybe(st.text(max_size=20)),
                                  "elapsed_ms": maybe(st.floats(0, 1e4)), **{k: maybe(v) for k, v in fields.items()}})


role = st.fixed_dictionaries({
    "role": maybe(st.sampled_from(["prefill", "decode", "router", "worker"])),
    "node": maybe(st.sampled_from(["n1", "n2"])),
    "unit": maybe(st.just("sglang-decode.service")),
    "gpus": maybe(st.lists(st.integers(0, 7), max_size=2)),
    "systemd": maybe(section(raw=unit_text)),
    "metrics": maybe(section(samples=st.lists(st.fixed_dictionaries({"at": maybe(st.just("2026-11-30T10:00:00Z")),
                                                                      "raw": maybe(metrics_text)}), max_size=3))),
    "health": maybe(section(endpoint=st.just("/health"), status=st.sampled_from([200, 503]), body=st.text(max_size=10))),
    "logs": maybe(section(since=st.just("-15min"), raw=log_text, truncated=st.booleans())),
    "unknown_field": maybe(garbage),
})
node = st.fixed_dictionaries({"node": maybe(st.sampled_from(["n1", "n2"])),
                              "gpu": maybe(section(raw=st.text(max_size=60))), "kernel_log": maybe(section(raw=log_text))})
bundle_shaped = st.fixed_dictionaries({
    "schema": st.sampled_from([SCHEMA, ...]),
    "id": maybe(st.text(max_size=8)), "cluster": maybe(st.text(max_size=8)),
    "trigger": maybe(st.fixed_dictionaries({"kind": maybe(st.sampled_from(["cli", "pager"])), "alerts": maybe(st.lists(garbage, max_size=2))})),
    "started_at": maybe(st.text(max_size=5)), "finished_at": maybe(st.text(max_size=5)),
    "roles": st.one_of(st.lists(st.one_of(role, garbage), max_size=3), garbage),
    "nodes": st.one_of(st.lists(st.one_of(node, garbage), max_size=2), garbage),
    "canary": maybe(garbage), "recall": maybe(garbage), "something_new": maybe(garbage),
})


def _drop_ellipsis(value):
    if isinstance(value, dict):
        return {k: _drop_ellipsis(v) for k, v in value.items() if v is not ...}
    if isinstance(value, list):
        return [_drop_ellipsis(v) for v in value]
    return value


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bundle_shaped)
def test_any_bundle_shaped_json_diagnoses_without_an_exception(data: dict) -> None:
    data = _drop_ellipsis(data)
    if "schema" not in data and not isinstance(data.get("roles"), list) and not isinstance(data.get("nodes"), list):
        with pytest.raises(BundleError, match="not a probe bundle"):
            parse_bundle(json.dumps(data))
        return
    bundle = parse_bundle(json.dumps(data))
    d = diagnose(bundle, default_runbooks())
    assert all(isinstance(p, str) for p in d.problems)
    assert json.dumps(d.public())


def _a_dev_bundle() -> dict:
    return json.loads((DEV / "healthy.json").read_text(encoding="utf-8"))


def test_a_refused_health_with_null_status_and_body_is_diagnosed() -> None:
    data = _a_dev_bundle()
    for r in data["roles"]:
        r["health"] = {"ok": False, "error": "connection refused", "elapsed_ms": None, "endpoint": "/health", "status": None, "body": None}
        r["logs"]["truncated"] = None
    bundle = parse_bundle(json.dumps(data))
    assert not bundle.problems
    assert diagnose(bundle, default_runbooks()).bundle == data["id"]


def test_a_malformed_section_is_a_problem_of_that_section_and_the_rest_is_read() -> None:
    data = _a_dev_bundle()
    data["roles"][0]["metrics"] = {"ok": True, "samples": "not a list"}
    data["roles"][1]["role"] = "worker"
    bundle = parse_bundle(json.dumps(data))
    assert any(p.startswith("roles[0].metrics:") for p in bundle.problems), bundle.problems
    assert any(p.startswith("roles[1]:") and "left out" in p for p in bundle.problems), bundle.problems
    assert len(bundle.roles) == len(data["roles"]) - 1 and not bundle.roles[0].metrics.ok
    d = diagnose(bundle, default_runbooks())
    assert any(p.startswith("bundle: roles[0].metrics") for p in d.problems)


@pytest.mark.parametrize(
    ("text", "why"),
    [("[1, 2]", "JSON list"), ('"hello"', "JSON str"), ("{", "not valid JSON"), ('{"a": 1}', "no 'schema' field"),
     (json.dumps({"schema": "opsbot/probe-bundle@2", "roles": []}), "probe-bundle@2")],
)
def test_diagnose_refuses_only_what_is_not_a_bundle_naming_the_file(tmp_path: Path, text: str, why: str) -> None:
    path = tmp_path / "thing.json"
    path.write_text(text, encoding="utf-8")
    out = CliRunner().invoke(app, ["diagnose", str(path)])
    assert out.exit_code == 2 and str(path) in out.output and why in out.output
    assert "Traceback" not in out.output


def test_diagnose_reads_a_bundle_with_garbage_inside_and_lists_it(tmp_path: Path) -> None:
    data = _a_dev_bundle()
    data["nodes"] = [{"node": None, "gpu": 7}, "junk"]
    data["roles"][0]["systemd"] = {"ok": True, "raw": ["not", "text"]}
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    out = CliRunner().invoke(app, ["diagnose", "--json", str(path)])
    assert out.exit_code in (1, 3), out.output  # a role whose systemd state is garbage is never healthy
    assert json.loads(out.stdout)["answer"] != "healthy"
    problems = json.loads(out.stdout)["problems"]
    assert any("roles[0].systemd" in p for p in problems) and any(p.startswith("bundle: nodes[") for p in problems)
