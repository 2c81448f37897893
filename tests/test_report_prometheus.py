"""The weekly report against a real Prometheus holding two weeks of backfilled SGLang samples.

Figures are checked against the totals the generator kept (tests/promweek.py), not against
Prometheus itself; the HTML is opened in headless Chromium, its DOM read back and a screenshot kept.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from matplotlib import image as mpimg

from opsbot.report.render import change, number, render
from opsbot.report.week import last_complete_week, zone
from opsbot.report.weekly import build_weekly
from opsbot.settings import Settings
from opsbot.store import Store
from serving.spec import load_spec
from tests.prometheus import PrometheusServer
from tests.promweek import generate
from tests.realparts import need_binary
from tests.reportseed import seed_week

pytestmark = pytest.mark.integration
NOW = datetime.now(timezone.utc)
WEEK = last_complete_week(NOW, zone("UTC"))
BEFORE = WEEK.previous()
SCREENSHOT_DIR = Path(os.environ.get("OPSBOT_SCREENSHOT_DIR", tempfile.gettempdir()))


@pytest.fixture(scope="module")
def prom():
    """Prometheus on loopback with the last two complete weeks: a queue incident on this week's
    Wednesday, a decode restart on Thursday, and 25 % more load than the week before."""
    server = PrometheusServer(need_binary("prometheus"), need_binary("promtool"))
    data = generate(BEFORE.start, WEEK.end, step_s=600, busy_factor={WEEK.label: 1.25},
                    incident_at=WEEK.start + timedelta(days=2, hours=14),
                    restart_at=WEEK.start + timedelta(days=3, hours=3))
    try:
        server.backfill(data.text)
        server.start()
        yield server, data
    finally:
        server.stop()


@pytest.fixture
def store(tmp_path):
    s = Store(f"sqlite:///{tmp_path / 'opsbot.db'}")
    yield s
    s.close()


def _settings(url: str | None, **kw) -> Settings:
    return Settings(prometheus_url=url, report_timezone="UTC", goal="p99 TTFT under 2 s", **kw)


async def test_weekly_figures_match_the_generated_week(prom, store):
    server, data = prom
    truth, prev = data.weeks[WEEK.label], data.weeks[BEFORE.label]
    seed_week(store, WEEK.start)
    report = await build_weekly(store, server.url, WEEK.label, settings=_settings(server.url), now=NOW)
    fig = {f.key: f for f in report.figures}
    assert report.missing == []
    for which in ("ttft", "itl"):
        for q in (0.5, 0.99):
            key = f"{which}_p{round(q * 100)}"
            assert fig[key].value == pytest.approx(truth.quantile(which, q), rel=0.01), key
            assert fig[key].previous == pytest.approx(prev.quantile(which, q), rel=0.01), key
    assert fig["decode_tokens_per_s"].value == pytest.approx(truth.decode_tokens / WEEK.seconds, rel=0.02)
    assert fig["prefill_tokens_per_s"].value == pytest.approx(truth.prefill_tokens / WEEK.seconds, rel=0.02)
    assert fig["decode_tokens_per_s"].previous == pytest.approx(prev.decode_tokens / BEFORE.seconds, rel=0.02)
    assert fig["prefill_queue_peak"].value == truth.peak_prefill_queue
    assert fig["prefill_queue_peak"].previous == prev.peak_prefill_queue
    assert fig["kv_usage_peak"].value == pytest.approx(max(truth.kv_usage), abs=1e-4)
    assert fig["kv_usage_mean"].value == pytest.approx(sum(truth.kv_usage) / len(truth.kv_usage), rel=0.005)
    assert fig["restarts"].value == truth.restarts == 1
    assert fig["restarts"].previous in (None, 0)
    # the incident week's p99 TTFT is far worse than the week before's, and the report says so
    assert fig["ttft_p99"].value > 2 * fig["ttft_p99"].previous
    assert "worse" in change(fig["ttft_p99"])
    assert [c.key for c in report.charts] == ["latency", "throughput", "pressure", "incidents"]

    md = render(report, "markdown")
    assert f"| Time to first token p99 | {number(fig['ttft_p99'].value, 's')} |" in md
    assert f"| Peak prefill queue | {truth.peak_prefill_queue:.0f} requests | {prev.peak_prefill_queue:.0f} requests |" in md
    assert "| Restarts by opsbot (actions) | 1 |" in md
    assert "| prefill-queue-saturation | 1 | 0 |" in md


async def test_html_report_in_headless_chromium(prom, store, tmp_path):
    server, data = prom
    seed_week(store, WEEK.start)
    report = await build_weekly(store, server.url, WEEK.label, settings=_settings(
        server.url, spec=Path("serving/examples/dsv4-flash-1node.yaml")), now=NOW)
    page = tmp_path / "weekly.html"
    page.write_text(render(report, "html"))
    chromium = need_binary("chromium")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    assert report.missing == []  # the spec's scrape jobs match the samples' job labels
    dom = subprocess.run([chromium, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    peak = f"{data.weeks[WEEK.label].peak_prefill_queue:.0f} requests"
    assert peak in dom and "Time to first token p99" in dom and "prefill-queue-saturation" in dom
    assert dom.count("data:image/png;base64,") == 4
    assert "(the spec asks for bf16)" in dom and "max 256 concurrent" in dom
    shot = SCREENSHOT_DIR / "weekly-report.png"
    subprocess.run([chromium, *flags, f"--screenshot={shot}", "--window-size=1200,2400", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    pixels = mpimg.imread(shot)
    assert pixels.shape[:2] == (2400, 1200)
    assert pixels.std() > 0.05, "the screenshot is blank"


async def test_prometheus_answering_errors_still_renders_and_says_what_is_missing(prom, store):
    """A real Prometheus whose query timeout is 1 ms answers the week's queries with errors."""
    server, _ = prom
    strict = PrometheusServer(server.prometheus, server.promtool)
    strict.copy_data_from(server)
    try:
        strict.start("--query.timeout=1ms")
        seed_week(store, WEEK.start)
        report = await build_weekly(store, strict.url, WEEK.label, settings=_settings(strict.url), now=NOW)
    finally:
        strict.stop()
    assert any("answered an error" in m for m in report.missing), report.missing
    assert any(f.value is None and f.missing for f in report.figures)
    md = render(report, "markdown")
    assert "**Missing figures:**" in md and "answered an error" in md
    assert "| prefill-queue-saturation | 1 | 0 |" in md  # opsbot's own history is still there


async def test_prometheus_that_hangs_times_out_and_is_reported(store):
    with socket.socket() as hung:  # accepts connections (backlog) and never answers
        hung.bind(("127.0.0.1", 0))
        hung.listen(64)
        url = f"http://127.0.0.1:{hung.getsockname()[1]}"
        seed_week(store, WEEK.start)
        started = datetime.now(timezone.utc)
        report = await build_weekly(store, url, WEEK.label, settings=_settings(url, prometheus_timeout_s=0.5), now=NOW)
        took = (datetime.now(timezone.utc) - started).total_seconds()
    assert report.missing == [f"every Prometheus figure and chart: Prometheus at {url} did not answer within 0.5 s"]
    assert all(f.value is None for f in report.figures)
    assert took < 10
    assert report.by_class == {"prefill-queue-saturation": 1, "decode-wedged": 1}
    assert [c.key for c in report.charts] == ["incidents"]


async def test_prometheus_unreachable(store):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, not listening: connection refused
        report = await build_weekly(store, url, WEEK.label, settings=_settings(url), now=NOW)
    assert report.missing == [f"every Prometheus figure and chart: Prometheus at {url} is unreachable"]
    assert "is unreachable" in render(report, "html")


async def test_queries_are_limited_to_the_deployments_jobs(prom, store):
    """With a serving spec, only its prefill/decode scrape jobs count: the right jobs give the same
    figures, another deployment's jobs give none (and the report says there were no samples)."""
    server, data = prom
    spec = load_spec(Path("serving/examples/dsv4-flash-1node.yaml"))
    assert spec.prometheus.jobs["decode"] == "sglang-decode"  # the generator's job label
    ours = await build_weekly(store, server.url, WEEK.label, settings=_settings(server.url), spec=spec, now=NOW)
    assert ours.missing == [] and ours.context.prometheus_jobs == ["sglang-prefill", "sglang-decode"]
    assert ours.figure("prefill_queue_peak").value == data.weeks[WEEK.label].peak_prefill_queue
    other = spec.model_copy(update={"prometheus": spec.prometheus.model_copy(
        update={"jobs": {"prefill": "other-prefill", "decode": "other.decode"}})})
    theirs = await build_weekly(store, server.url, WEEK.label, settings=_settings(server.url), spec=other, now=NOW)
    assert all(f.value is None for f in theirs.figures)
    assert any(m.endswith(": no samples in Prometheus for this week") for m in theirs.missing)
