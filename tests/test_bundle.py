"""Bundles round-trip, keep unknown fields, and refuse other versions and truncated files."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opsbot.bundle import SCHEMA, Bundle, BundleError, parse_bundle, utcnow


def minimal() -> dict:
    env = {"ok": True, "error": None, "elapsed_ms": 1.0}
    return {
        "schema": SCHEMA,
        "id": "abc",
        "cluster": "lab",
        "trigger": {"kind": "cli", "text": "decode is stuck", "user": None, "alerts": []},
        "started_at": utcnow(),
        "finished_at": utcnow(),
        "roles": [
            {
                "role": "decode",
                "node": "node2",
                "unit": "sglang-dsv4-decode.service",
                "systemd": {**env, "raw": "ActiveState=active\n"},
                "metrics": {**env, "samples": [{"at": utcnow(), "raw": "x 1\n"}]},
                "health": {**env, "endpoint": "/health", "status": 200, "body": ""},
                "logs": {**env, "since": "-15min", "raw": "", "truncated": False},
                "future_field": {"kept": True},
            }
        ],
        "nodes": [{"node": "node2", "gpu": {**env, "raw": ""}}],
        "recall": None,
    }


def test_round_trip_keeps_unknown_fields() -> None:
    bundle = parse_bundle(json.dumps(minimal()))
    again = json.loads(bundle.to_json())
    assert again["schema"] == SCHEMA
    assert again["roles"][0]["future_field"] == {"kept": True}
    assert bundle.role("decode") is not None and bundle.node("node2") is not None


def test_other_schema_version_is_refused() -> None:
    data = minimal() | {"schema": "opsbot/probe-bundle@2"}
    with pytest.raises(BundleError, match="probe-bundle@2"):
        parse_bundle(json.dumps(data))


def test_truncated_file_is_refused() -> None:
    text = json.dumps(minimal())
    with pytest.raises(BundleError, match="truncated"):
        parse_bundle(text[: len(text) // 2])


def test_a_missing_section_reads_as_not_collected() -> None:
    data = minimal()
    del data["roles"][0]["systemd"]
    bundle = parse_bundle(json.dumps(data))
    assert not bundle.roles[0].systemd.ok and bundle.roles[0].systemd.error == "not in the bundle"


def test_a_malformed_section_is_listed_not_refused() -> None:
    data = minimal()
    data["roles"][0]["systemd"] = {"ok": True, "raw": 12}
    bundle = parse_bundle(json.dumps(data))
    assert not bundle.roles[0].systemd.ok
    assert bundle.problems == ["roles[0].systemd: Input should be a valid string; read as not collected"]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_garbage_never_escapes_as_anything_but_bundle_error(text: str) -> None:
    try:
        assert isinstance(parse_bundle(text), Bundle)
    except BundleError:
        pass
