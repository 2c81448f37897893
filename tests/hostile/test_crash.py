"""Crash recovery (issue 13 item 2): a bounded alert burst to a real ``opsbot serve``, SIGKILL twice
in the middle, restarted at once. Every acknowledged alert is stored and probed within 60 s of the
last restart, none by two recorded probes; on a SQLite file and on PostgreSQL. The figures of a
larger run are in bench/README.md (``bench/crash_recovery.py``)."""

from __future__ import annotations

from bench.crash_recovery import run


async def test_sigkill_twice_mid_burst_loses_nothing_and_probes_each_alert_once(tmp_path, database_url):
    f = await run(tmp_path, database_url, n_alerts=150, per_call=10, kills=2, deadline_s=60.0)
    assert f.kills == 2 and f.acknowledged == 150
    assert f.lost == 0 and f.stored == f.acknowledged, f
    assert f.probed == f.acknowledged and f.drain_s is not None, f"not drained within 60 s: {f}"
    assert f.probed_twice == 0, f
