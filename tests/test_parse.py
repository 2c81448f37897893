"""Parsers: real fixtures, SGLang's label rules, and property tests (only ParseError may escape)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opsbot.bundle import MetricSample
from opsbot.parse import ParseError
from opsbot.parse.gpu import parse_gpu_csv
from opsbot.parse.kernel import parse_xid
from opsbot.parse.logs import LOG_FILTER, classify, count_kinds, parse_log_lines
from opsbot.parse.metrics import covers, family_blocks, parse_samples, plain_family
from opsbot.parse.unit import parse_unit

FIXTURES = Path(__file__).parent / "fixtures"

# --- unit -------------------------------------------------------------------------------------

UNIT_RAW = """Id=sglang-dsv4-decode.service
LoadState=loaded
ActiveState=activating
SubState=auto-restart
Result=exit-code
NRestarts=7
ExecMainStatus=1
ExecMainCode=1
ExecMainStartTimestamp=Mon 2026-11-30 14:00:01 UTC
ActiveEnterTimestamp=
StateChangeTimestamp=Mon 2026-11-30 14:00:03 UTC
MainPID=0
MemoryCurrent=[not set]
"""


def test_unit_crash_loop_fields():
    u = parse_unit(UNIT_RAW)
    assert (u.id, u.load_state, u.active_state, u.sub_state) == (
        "sglang-dsv4-decode.service", "loaded", "activating", "auto-restart")
    assert (u.n_restarts, u.exec_main_status, u.exec_main_code, u.main_pid) == (7, 1, 1, 0)
    assert u.memory_current is None and u.active_enter_timestamp is None
    assert u.state_change_timestamp == "Mon 2026-11-30 14:00:03 UTC"
    assert u.exists


def test_unit_not_found_and_uint64_max():
    u = parse_unit("Id=nope.service\nLoadState=not-found\nMemoryCurrent=18446744073709551615\n")
    assert not u.exists and u.memory_current is None


def test_unit_empty_is_parse_error():
    with pytest.raises(ParseError, match="no Key=Value"):
        parse_unit("Failed to connect to bus: No such file or directory\n")


@given(st.text())
def test_unit_never_crashes(raw):
    try:
        parse_unit(raw)
    except ParseError:
        pass


# --- metrics ----------------------------------------------------------------------------------

def _body(decode_tokens: float, running: float, *, extra: str = "") -> str:
    return f"""# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{engine_type="decode",model_name="m",tp_rank="0",dp_rank="0"}} {running}
sglang:num_running_reqs{{engine_type="decode",model_name="m",tp_rank="1",dp_rank="0"}} {running}
sglang:num_running_reqs{{engine_type="decode",model_name="m",tp_rank="0",dp_rank="1"}} 2.0
# TYPE sglang:token_usage gauge
sglang:token_usage{{engine_type="decode",model_name="m",tp_rank="0",dp_rank="0"}} 0.5
sglang:token_usage{{engine_type="decode",model_name="m",tp_rank="0",dp_rank="1"}} 0.75
# TYPE sglang:num_retracted_reqs gauge
sglang:num_retracted_reqs{{pid="11",tp_rank="0"}} 3.0
sglang:num_retracted_reqs{{pid="12",tp_rank="0"}} 1.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{priority="",tp_rank="0"}} 9.0
sglang:num_queue_reqs{{priority="1",tp_rank="0"}} 4.0
# TYPE sglang:realtime_tokens_total counter
sglang:realtime_tokens_total{{mode="decode",tp_rank="0"}} {decode_tokens}
sglang:realtime_tokens_total{{mode="prefill_compute",tp_rank="0"}} 100.0
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{is_streaming="true",model_name="m"}} 10.0
sglang:generation_tokens_total{{is_streaming="false",model_name="m"}} 20.0
# TYPE sglang:kv_transfer_latency_ms histogram
sglang:kv_transfer_latency_ms_bucket{{le="1.0",tp_rank="0"}} 1.0
sglang:kv_transfer_latency_ms_bucket{{le="+Inf",tp_rank="0"}} 2.0
sglang:kv_transfer_latency_ms_count{{tp_rank="0"}} 2.0
sglang:kv_transfer_latency_ms_sum{{tp_rank="0"}} 7.5
{extra}"""


def _samples(*bodies: str, step: float = 5.0) -> list[MetricSample]:
    return [MetricSample(at=f"2026-11-30T14:00:{int(i * step):02d}.000Z", raw=b) for i, b in enumerate(bodies)]


def test_metrics_gauge_rules():
    m = parse_samples(_samples(_body(1000, 4), _body(1400, 5)))
    assert m.problems == []
    assert m.gauges["num_running_reqs"] == 5 + 2  # max over tp, sum over dp
    assert m.gauges["token_usage"] == 0.75  # ratios: max over dp
    assert m.gauges["num_retracted_reqs"] == 3  # pid dropped by max
    assert m.gauges["num_queue_reqs"] == 9  # priority="" is the total


def test_metrics_counter_deltas_rates_and_labels():
    m = parse_samples(_samples(_body(1000, 4), _body(1400, 4)))
    assert m.window_s == 5.0
    assert m.deltas["realtime_tokens_decode"] == 400
    assert m.deltas["realtime_tokens_prefill_compute"] == 0
    assert m.deltas["realtime_tokens"] == 400
    assert m.rates["realtime_tokens_decode"] == 80
    assert "generation_tokens" in m.deltas and not any("streaming" in k or "true" in k for k in m.deltas)
    assert m.deltas["kv_transfer_latency_ms_count"] == 0


def test_metrics_wedged_decode_shows_zero_delta():
    m = parse_samples(_samples(_body(1000, 8), _body(1000, 8)))
    assert m.gauges["num_running_reqs"] > 0 and m.deltas["realtime_tokens_decode"] == 0


def test_metrics_counter_reset_counts_from_zero():
    m = parse_samples(_samples(_body(5000, 1), _body(30, 1)))
    assert m.deltas["realtime_tokens_decode"] == 30


def test_metrics_three_samples_with_reset_in_between():
    m = parse_samples(_samples(_body(100, 1), _body(200, 1), _body(50, 1)))
    assert m.deltas["realtime_tokens_decode"] == 100 + 50
    assert m.window_s == 10.0


def test_metrics_old_underscore_prefix_and_router_names():
    body = "sglang_num_running_reqs{tp_rank=\"0\"} 3\nsmg_worker_pool_size{worker_type=\"decode\"} 1\n"
    m = parse_samples(_samples(body, body))
    assert m.gauges["num_running_reqs"] == 3 and m.gauges["smg_worker_pool_size"] == 1


def test_metrics_counter_without_type_line():
    m = parse_samples(_samples('sglang:num_requests_total 5\n', 'sglang:num_requests_total 9\n'))
    assert m.deltas["num_requests"] == 4


def test_metrics_not_prometheus_is_a_problem_not_a_crash():
    m = parse_samples(_samples("<html><body>502 Bad Gateway</body></html>", _body(1, 1)))
    assert any("sample 1" in p and "not Prometheus text" in p for p in m.problems)
    assert m.gauges["num_running_reqs"] == 3 and m.deltas == {}


@given(st.lists(st.tuples(st.text(max_size=30), st.text()), max_size=4))
@settings(max_examples=300)
def test_metrics_never_crash(pairs):
    parse_samples([MetricSample(at=a, raw=r) for a, r in pairs])


_metric_line = st.builds(
    lambda n, lbl, v: f'sglang:{n}{{tp_rank="{lbl}"}} {v}',
    st.sampled_from(["num_running_reqs", "token_usage", "realtime_tokens_total", "x_count"]),
    st.sampled_from(["0", "1", ""]),
    st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=True, allow_infinity=True)),
)


@given(st.lists(st.lists(_metric_line, max_size=6).map("\n".join), min_size=1, max_size=3))
def test_metrics_never_crash_on_near_valid_bodies(bodies):
    parse_samples(_samples(*bodies))


# --- metrics: parsing only the families wanted -----------------------------------------------

def test_covers_maps_facts_to_their_family():
    wanted = frozenset({"realtime_tokens_decode", "num_queue_reqs", "kv_transfer_latency_ms_count"})
    assert covers(wanted, "sglang:realtime_tokens_total") and covers(wanted, "sglang_num_queue_reqs")
    assert covers(wanted, "sglang:kv_transfer_latency_ms") and covers(wanted, "sglang:realtime_tokens")
    assert not covers(wanted, "sglang:num_running_reqs") and not covers(wanted, "sglang:realtime_tok")
    assert covers(wanted, "sglang:realtime")  # a label value "tokens_decode" would make realtime_tokens_decode


def test_wanted_families_only_give_the_same_wanted_facts():
    wanted = frozenset({"num_running_reqs", "realtime_tokens_decode"})
    full = parse_samples(_samples(_body(1000, 4), _body(1400, 5)))
    cut = parse_samples(_samples(_body(1000, 4), _body(1400, 5)), wanted)
    assert cut.gauges["num_running_reqs"] == full.gauges["num_running_reqs"] == 7
    assert cut.deltas["realtime_tokens_decode"] == full.deltas["realtime_tokens_decode"] == 400
    assert "token_usage" not in cut.gauges and "generation_tokens" not in cut.deltas  # not parsed
    assert cut.window_s == full.window_s and cut.problems == full.problems == []


def test_unusual_text_is_parsed_whole():
    assert family_blocks("# TYPE a gauge\na 1\n  # TYPE b gauge\nb 2\n") is None  # a line the parser strips
    assert family_blocks("# TYPE a gauge\na 1\n#  TYPE b gauge\nb 2\n") is None  # HELP/TYPE spelled oddly
    assert family_blocks("a 1\n") is None
    blocks = family_blocks("x 0\n# HELP a doc\n# TYPE a gauge\na 1\n# TYPE b gauge\nb 2\n")
    assert [n for n, _ in blocks] == ["", "a", "b"]
    assert plain_family("# TYPE b gauge\nb{x=\"1\"} 2\n")
    assert not plain_family('# TYPE b gauge\nb{x="1",x="2"} 2\n')  # prometheus_client refuses duplicates
    assert not plain_family("# TYPE b gauge\nb 2\nsglang:num_queue_reqs 5\n")  # another family inside
    assert not plain_family("# TYPE b gauge\nb{x=1} 2\n")


def test_a_broken_unwanted_family_still_breaks_the_sample():
    """An unread family the parser refuses makes the sample unreadable, as in a full parse."""
    bad = _body(1000, 4) + '# TYPE junk gauge\njunk{a="1",a="2"} 1\n'
    wanted = frozenset({"num_running_reqs"})
    full, cut = parse_samples(_samples(bad, _body(1400, 5))), parse_samples(_samples(bad, _body(1400, 5)), wanted)
    assert cut.problems == full.problems and any("not Prometheus text" in p for p in cut.problems)
    assert cut.gauges["num_running_reqs"] == full.gauges["num_running_reqs"]


def test_gauges_come_from_the_last_readable_sample_when_earlier_ones_are_left_unparsed():
    """Wanted gauge families of a sample before the last are proven plain, not parsed (facts read the last
    sample's gauges); when the last sample is unreadable, the earlier sample's gauges are read after all."""
    from opsbot.parse.metrics import _parse_samples

    def body(tokens: float, running: float) -> str:  # as the facts hand it over: no HELP lines
        return "".join(line for line in _body(tokens, running).splitlines(keepends=True) if not line.startswith("# HELP"))

    wanted = frozenset({"num_running_reqs", "realtime_tokens_decode"})
    read = _parse_samples(_samples(body(1000, 4), body(1400, 5), body(1800, 6)), wanted)
    assert read.gauges["num_running_reqs"] == 6 + 2 and read.deltas["realtime_tokens_decode"] == 800
    broken = body(1800, 6) + '# TYPE junk gauge\njunk{a="1",a="2"} 1\n'
    for wanted_or_all in (wanted, None):
        m = _parse_samples(_samples(body(1000, 4), body(1400, 5), broken), wanted_or_all)
        assert m.gauges["num_running_reqs"] == 5 + 2 and m.deltas["realtime_tokens_decode"] == 400
        assert any("sample 3" in p and "not Prometheus text" in p for p in m.problems)


_FAMILY_NAMES = ["num_running_reqs", "num_queue_reqs", "token_usage", "realtime_tokens", "num_aborted_requests", "ttft"]
_family = st.builds(
    lambda prefix, name, kind, labels, values, help_line, extra: "".join(
        [f"# HELP {prefix}{name} doc\n" if help_line else ""]
        + [f"# TYPE {prefix}{name}{'_total' if kind == 'counter' else ''} {kind}\n"]
        + [
            f"{prefix}{name}{suffix}{{{lb}}} {v}\n"
            for lb, v in zip(labels, values)
            for suffix in ({"counter": ["_total"], "gauge": [""], "histogram": ["_count", "_sum", "_bucket"]}[kind])
        ]
        + [extra]
    ),
    st.sampled_from(["sglang:", "sglang_", ""]),
    st.sampled_from(_FAMILY_NAMES),
    st.sampled_from(["gauge", "counter", "histogram"]),
    st.lists(st.sampled_from(['tp_rank="0"', 'tp_rank="1"', 'mode="decode",tp_rank="0"', 'dp_rank="1"', 'le="+Inf"', ""]), max_size=3),
    st.lists(st.sampled_from(["0", "1.5", "7", "NaN", "+Inf", "1e3", "12 1700000000000"]), min_size=3, max_size=3),
    st.booleans(),
    st.sampled_from(["", "", "", "\n", "stray 1\n", 'dup{a="1",a="2"} 1\n', "  # TYPE ttft gauge\n", "bad line\n", "# EOF\n"]),
)


@given(
    st.lists(st.lists(_family, max_size=6).map("".join), min_size=1, max_size=3),
    st.frozensets(st.sampled_from(["num_running_reqs", "realtime_tokens_decode", "num_aborted_requests", "ttft_count", "token_usage"])),
)
@settings(max_examples=300)
def test_metrics_wanted_facts_equal_a_full_parse(bodies, wanted):
    """For any text, the facts in ``wanted`` (and problems, window) are those a full parse gives."""
    full, cut = parse_samples(_samples(*bodies)), parse_samples(_samples(*bodies), wanted)
    assert (cut.problems, cut.window_s) == (full.problems, full.window_s)
    for got, want in ((cut.gauges, full.gauges), (cut.deltas, full.deltas), (cut.rates, full.rates)):
        for name in wanted:
            assert repr(got.get(name)) == repr(want.get(name)), name
    assert bool(cut.gauges or cut.deltas) == bool(full.gauges or full.deltas)


# --- gpu --------------------------------------------------------------------------------------

def test_gpu_real_h200_fixture_with_header_and_units():
    rows = parse_gpu_csv((FIXTURES / "gpu" / "nvidia-smi-query.csv").read_text())
    assert len(rows) == 1
    r = rows[0]
    assert (r.index, r.name, r.uuid) == (0, "NVIDIA H200", "GPU-1c24ded9-feed-e333-383d-8b14fe548dee")
    assert (r.memory_used_mib, r.memory_total_mib, r.utilization_pct, r.temperature_c, r.power_w) == (
        0, 143771, 0, 39, 81.39)


def test_gpu_noheader_nounits_and_na():
    rows = parse_gpu_csv("0, GPU-a, NVIDIA H200, 120000, 143771, 97, 61, [N/A]\n1, GPU-b, NVIDIA H200, 5, 143771, 0, 35, 80.1\n")
    assert [r.index for r in rows] == [0, 1]
    assert rows[0].power_w is None and rows[0].memory_used_mib == 120000


def test_gpu_driver_failure_is_parse_error():
    with pytest.raises(ParseError, match="not a GPU row"):
        parse_gpu_csv("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")


@given(st.text())
def test_gpu_never_crashes(raw):
    try:
        parse_gpu_csv(raw)
    except ParseError:
        pass


# --- logs -------------------------------------------------------------------------------------

def test_logs_journald_and_bare_lines():
    raw = (
        "2026-11-30T14:00:01+0000 node2 python3[1234]: [2026-11-30 14:00:01 DP1 TP3] Decode batch, #running-req: 8\n"
        "[2026-11-30 14:00:02 TP0] Decode transfer failed for request rank=0 decode_req.req.rid='a' with exception "
        "KVTransferError(bootstrap_room=7): Aborted by AbortReq.\n"
        "2026-11-30T14:00:03+00:00 node2 systemd[1]: sglang-dsv4-decode.service: Main process exited, code=killed\n"
        "\x00\x01\xff garbage \ud800?\n"
    )
    entries = parse_log_lines(raw)
    assert len(entries) == 4
    a, b, c, d = entries
    assert (a.host, a.process, a.pid, a.tp_rank, a.dp_rank, a.kind) == ("node2", "python3", 1234, 3, 1, "batch")
    assert a.message.startswith("Decode batch") and a.ts == "2026-11-30T14:00:01+0000"
    assert b.ts == "2026-11-30 14:00:02" and b.tp_rank == 0 and b.kind == "abort"
    assert c.kind == "crash" and c.process == "systemd"
    assert d.ts is None and d.kind is None


@pytest.mark.parametrize(
    "message,kind",
    [
        ("Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", "watchdog"),
        ("KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_tokens_gained: 10", "retract"),
        ("Decode out of memory. Try to lower your batch size.", "oom"),
        ("ValueError: DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead.", "hicache"),
        ("Lost connection with prefill instance (bootstrap_addr: 10.0.0.1:8998), 3 requests affected", "kv-transfer"),
        ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)", "nccl"),
        ("Scheduler hit an exception: Traceback (most recent call last):", "crash"),
        ("Prefill batch, #new-seq: 1, #new-token: 5", "batch"),
        ("GET /health HTTP/1.1 200", None),
        ("2026-11-29 10:00:01  WARN sglang_router_rs::routers::http::pd_router: No healthy worker pair available: "
         "prefill=0 decode=1", "router-workers"),
        ("2026-11-29 10:00:01  INFO sglang_router_rs::server: readiness: insufficient healthy workers", "router-workers"),
    ],
)
def test_logs_classify(message, kind):
    assert classify(message) == kind


def test_log_filter_selects_what_classify_names():
    import re

    assert re.search(LOG_FILTER, "Decode batch, #running-req: 1")
    assert not re.search(LOG_FILTER, "GET /health HTTP/1.1 200")
    # router worker-health lines are kept whatever their level (not only when they say ERROR)
    assert re.search(LOG_FILTER, "WARN sglang_router_rs::routers::http::pd_router: No healthy worker pair available")
    assert re.search(LOG_FILTER, "INFO readiness: insufficient healthy workers")


RELAYED = (
    ("0: ", "Slurm srun --label"),
    ("sglang-prefill-1  | ", "docker compose v2"),
    ("sglang_decode_1 | ", "docker compose v1"),
)


@pytest.mark.parametrize("prefix", [p for p, _ in RELAYED])
@pytest.mark.parametrize(("line", "kind"), [
    ("E0603 20:16:59.104586 27322 worker_pool.cpp:271] Worker: Process failed for slice", "native"),
    ('  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2618 in run_scheduler_process', "traceback"),
    (" 5  /opt/ucx/lib/libuct.so.0(uct_rc_iface_progress+0x8a) [0x7f3c2a1b4e2a]", "native"),
    ("[2025-06-05 15:08:56 TP0] Prefill batch. #new-seq: 3, #new-token: 15000, #queue-req: 40", "batch"),
])
def test_a_launchers_relay_label_is_dropped_and_kept_by_the_filter(prefix, line, kind):
    import re

    entry = parse_log_lines(f"2026-11-29T09:59:00+0000 node1 python3[4242]: {prefix}{line}\n")[0]
    assert entry.kind == kind and not entry.message.startswith(prefix)
    assert re.search(LOG_FILTER, prefix + line)  # journalctl --grep on the node keeps it


def test_a_log_level_column_is_not_a_relay_label():
    entry = parse_log_lines("2026-11-29T09:59:00+0000 node1 python3[4242]: ERROR    | transfer failed\n")[0]
    assert entry.message == "ERROR    | transfer failed" and entry.kind == "error"


def test_count_kinds_skips_heartbeat_lines():
    entries = parse_log_lines("Decode batch, #running-req: 1\nDecode out of memory. Try to lower your batch size.\n")
    assert count_kinds(entries) == {"oom": 1}


@given(st.text())
def test_logs_never_crash(raw):
    entries = parse_log_lines(raw)
    assert len(entries) <= len(raw.splitlines())


@given(st.binary())
def test_logs_binary_garbage(raw):
    parse_log_lines(raw.decode("utf-8", errors="replace"))


# --- kernel -----------------------------------------------------------------------------------

def test_xid_lines():
    raw = (
        "2026-11-30T14:00:01+0000 node2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, "
        "GPU has fallen off the bus.\n"
        "2026-11-30T14:00:02+0000 node2 kernel: NVRM: Xid (PCI:0000:3c:00): 48, pid='<unknown>', name=<unknown>, "
        "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6.\n"
        "2026-11-30T14:00:03+0000 node2 kernel: eth0: link up\n"
    )
    ev = parse_xid(raw)
    assert [(e.pci, e.xid, e.pid) for e in ev] == [("0000:3b:00", 79, 1234), ("0000:3c:00", 48, None)]
    assert ev[0].process == "python3" and ev[0].ts == "2026-11-30T14:00:01+0000"
    assert "fallen off the bus" in ev[0].message


@given(st.text())
def test_xid_never_crashes(raw):
    parse_xid(raw)


def test_router_gauges_per_worker_type_and_health_by_min():
    body = (
        'smg_worker_health{worker="http://p:1",worker_type="prefill"} 1\n'
        'smg_worker_health{worker="http://d:1",worker_type="decode"} 0\n'
        'smg_worker_pool_size{worker_type="decode",model="default"} 1\n'
        'smg_worker_pool_size{worker_type="prefill",model="default"} 2\n'
    )
    g = parse_samples(_samples(body, body)).gauges
    assert g["smg_worker_health"] == 0 and g["smg_worker_health_prefill"] == 1 and g["smg_worker_health_decode"] == 0
    assert g["smg_worker_pool_size"] == 3 and g["smg_worker_pool_size_prefill"] == 2
    assert not any(k.startswith("smg_worker_health_http") for k in g)


def test_batch_lines_give_their_figures():
    from opsbot.parse.logs import parse_batch

    d = parse_batch(
        "Decode batch, #running-req: 8, #full token: 60065, full token usage: 0.06, #swa token: 44032, "
        "swa token usage: 0.45, pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, "
        "cuda graph: True, gen throughput (token/s): 317.49, #queue-req: 0"
    )
    assert d.phase == "decode"
    assert d.fields["running-req"] == 8 and d.fields["swa token usage"] == 0.45
    assert d.fields["gen throughput (token/s)"] == 317.49 and d.fields["queue-req"] == 0
    p = parse_batch("Prefill batch [12], #new-seq: 1, #new-token: 3421, #cached-token: 1280, "
                    "input throughput (token/s): 1360.28")
    assert p.phase == "prefill" and p.fields["new-token"] == 3421
    assert parse_batch("Scheduler hit an exception") is None


@given(st.text())
def test_batch_never_crashes(raw):
    from opsbot.parse.logs import parse_batch

    parse_batch("Decode batch, " + raw)
    parse_batch(raw)


def test_batch_lines_in_lab_fixture():
    from opsbot.bundle import read_bundle
    from opsbot.parse.logs import parse_batch

    b = read_bundle(FIXTURES / "lab" / "healthy.json")
    lines = [parse_batch(e.message) for e in parse_log_lines(b.role("decode").logs.raw) if e.kind == "batch"]
    assert lines and all(x is not None and x.phase == "decode" and x.fields["running-req"] >= 0 for x in lines)
    assert all(x.fields["gen throughput (token/s)"] > 0 for x in lines)


@given(st.lists(st.sampled_from(["\n", "\n", "# HELP a doc", "# HELP ", "#", " ", "a_bucket{", "a_bucket ", "_bucket", "{",
                                  "a 1", "# TYPE a gauge", "\r", "\t", "é"]), max_size=12).map("".join))
@settings(max_examples=500)
def test_help_and_bucket_lines_are_dropped_as_one_multiline_sub_drops_them(raw):
    """``_without_unread`` (a sub over "\\n" + line, fast) drops what "^(HELP|bucket line)\\n?" with re.M drops."""
    import re

    from opsbot.parse.facts import _without_unread

    spec = re.compile(r"^(?:# HELP [^\n]*|[^#\n][^\n{ ]*_bucket[{ ][^\n]*)\n?", re.M)
    assert _without_unread(raw) == spec.sub("", raw)


def test_plain_families_is_every_block_plain():
    """One regex call over a body's unread blocks says what ``plain_family`` says of each of them."""
    from opsbot.parse.metrics import plain_families

    good = ["# TYPE a gauge\na 1\n", "# HELP b doc\n# TYPE b counter\nb_total{x=\"1\"} 2\n", "# TYPE a_x gauge\na_x 3\n"]
    bad = ['# TYPE c gauge\nc{x="1",x="2"} 2\n', "# TYPE d gauge\nd 2\nsglang:num_queue_reqs 5\n", "# TYPE e gauge\ne{x=1} 2\n"]
    assert plain_families(good)
    for wrong in bad:
        for at in range(len(good) + 1):
            blocks = [*good[:at], wrong, *good[at:]]
            assert not plain_families(blocks) and not all(plain_family(b) for b in blocks)
