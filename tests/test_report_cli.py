"""``opsbot note``, ``decide``, ``status`` and ``report weekly`` on a real SQLite file."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from opsbot.cli import app
from opsbot.settings import get_settings
from opsbot.store import Store
from tests.promweek import week_start
from tests.httpstub import serve
from tests.reportseed import seed_week

runner = CliRunner()


@pytest.fixture
def env(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'opsbot.db'}"
    monkeypatch.setenv("OPSBOT_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("OPSBOT_DATABASE_URL", url)
    monkeypatch.setenv("OPSBOT_GOAL", "Serve DeepSeek-V4-Flash at p99 TTFT < 2 s")
    monkeypatch.delenv("OPSBOT_PROMETHEUS_URL", raising=False)
    get_settings.cache_clear()
    yield url
    get_settings.cache_clear()


def test_notes_and_decisions_appear_in_status_and_save_keeps_it(env):
    assert runner.invoke(app, ["note", "blocked", "Second node waits for NIC firmware"]).exit_code == 0
    assert runner.invoke(app, ["decide", "Admission control at the router", "--why", "SGLang ignores "
                               "--max-queued-requests in PD mode"]).exit_code == 0
    out = runner.invoke(app, ["status", "--format", "json", "--save"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert report["goal"] == "Serve DeepSeek-V4-Flash at p99 TTFT < 2 s"
    assert [n["text"] for n in report["blocked"]] == ["Second node waits for NIC firmware"]
    assert report["decisions"][0]["why"] == "SGLang ignores --max-queued-requests in PD mode"
    with Store(env) as store:
        kept = store.latest_report("status", "markdown")
        assert kept is not None and "Second node waits for NIC firmware" in kept.body


@pytest.mark.parametrize(("argv", "message"), [
    (["note", "later", "x"], "note kind 'later'"),
    (["decide", "x", "--why", " "], "needs its text and why"),
    (["status", "--format", "pdf"], "use md, html, blocks or json"),
    (["report", "weekly", "--week", "2099-W01"], "is in the future"),
    (["report", "weekly", "--week", "2026-48"], "write it as YYYY-Www"),
])
def test_bad_input_is_refused_with_what_to_do(env, argv, message):
    out = runner.invoke(app, argv)
    assert out.exit_code == 2
    assert message in " ".join(out.output.split())


def test_weekly_to_a_directory_writes_the_report_and_its_charts(env, tmp_path):
    with Store(env) as store:
        seed_week(store, week_start("2026-W48"))
    out = runner.invoke(app, ["report", "weekly", "--week", "2026-W48", "--format", "html", "--out",
                              str(tmp_path / "out"), "--save"])
    assert out.exit_code == 0, out.output
    page = (tmp_path / "out" / "weekly-2026-W48.html").read_text()
    assert "prefill-queue-saturation" in page and "no Prometheus configured" in page
    assert (tmp_path / "out" / "incidents.png").read_bytes().startswith(b"\x89PNG")
    with Store(env) as store:
        assert {r.period for r in store.reports(kind="weekly")} == {"2026-W48"}


def test_status_with_a_fresh_probe_of_a_local_node(env, tmp_path, monkeypatch):
    """`opsbot status --probe --save`: the real probe() on this machine, a local SGLang-like /metrics."""
    state = {"tokens": 0}

    def body_for(path: str) -> bytes:
        if path == "/metrics":
            state["tokens"] += 300
        return ("# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{tp_rank=\"0\"} 7\n"
                "# TYPE sglang:realtime_tokens_total counter\n"
                f'sglang:realtime_tokens_total{{mode="decode",tp_rank="0"}} {state["tokens"]}\n').encode()

    with serve(body_for) as url:
        inventory = tmp_path / "inventory.yaml"
        inventory.write_text(
            "clusters:\n  here:\n    nodes:\n      - {name: self, address: localhost, transport: local}\n"
            f"    roles:\n      - {{role: decode, node: self, unit: sglang-dsv4-decode.service, "
            f"metrics_url: '{url}/metrics', health_url: '{url}/health', http_via_ssh: false}}\n")
        monkeypatch.setenv("OPSBOT_INVENTORY", str(inventory))
        monkeypatch.setenv("OPSBOT_METRICS_WINDOW_S", "0.5")
        get_settings.cache_clear()
        out = runner.invoke(app, ["status", "--probe", "--save", "--format", "json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout[out.stdout.index("{"):])
    assert report["current"]["fresh"] is True and report["current"]["cluster"] == "here"
    decode = report["current"]["roles"][0]
    assert decode["running_reqs"] == 7 and decode["health"] == "ok"
    assert 100 < decode["tokens_per_s"] < 1000  # 300 tokens over a ~0.5 s window
    with Store(env) as store:
        assert [p.id for p in store.probes()] == [report["current"]["probe_id"]]
