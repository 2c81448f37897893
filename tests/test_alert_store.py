"""The alert intake's write on both backends: what is stored is what was sent, and on PostgreSQL one
fixed statement per batch whatever its size (so it is prepared and planned once)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import event, text

from opsbot.store import AlertIn, Store


@pytest.fixture
def store(database_url):
    s = Store(database_url)
    yield s
    s.close()


def _alert(fp: str, **over) -> AlertIn:
    start = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    return AlertIn(**{"fingerprint": fp, "status": "firing", "labels": {"alertname": "DecodeWedged", "note": "é ✓ \"q\""},
                      "annotations": {"summary": "line\nbreak \\ back"}, "starts_at": start,
                      "ends_at": start + timedelta(minutes=5), "group_key": '{}:{alertname="DecodeWedged"}',
                      "cluster": "lab", "role": "decode", **over})


def test_an_alert_is_stored_as_sent(store):
    sent = _alert("abc", cluster=None, role=None, ends_at=None)
    [(alert_id, new)] = store.save_alerts([sent], claimer="me")
    [row] = store.alerts()
    assert new and row.id == alert_id
    assert (row.dedup_key, row.fingerprint, row.status, row.alertname, row.cluster, row.role, row.group_key) == (
        sent.dedup_key, "abc", "firing", "DecodeWedged", None, None, sent.group_key)
    assert (row.labels, row.annotations, row.starts_at, row.ends_at) == (sent.labels, sent.annotations, sent.starts_at, None)
    assert row.claimed_by == "me" and row.claimed_at == row.received_at


def test_a_time_with_any_offset_is_stored_in_utc(store):
    far = timezone(timedelta(hours=19, minutes=19))  # RFC 3339 allows it, PostgreSQL's timestamptz input does not
    sent = _alert("tz", starts_at=datetime(7261, 4, 23, 18, 10, 49, tzinfo=far))
    store.save_alerts([sent])
    [row] = store.alerts()
    assert row.starts_at == sent.starts_at and row.starts_at.utcoffset() == timedelta(0)


def test_a_naive_time_is_refused(store):
    with pytest.raises(Exception, match="naive datetime"):
        store.save_alerts([_alert("n", starts_at=datetime(2026, 12, 1, 9, 0))])
    assert store.count_alerts() == 0


@pytest.fixture
def pg_store(postgres_server):
    s = Store(postgres_server.fresh_database())
    yield s
    s.close()


def test_one_statement_per_batch_whatever_its_size(pg_store):
    store = pg_store
    statements: list[str] = []
    event.listen(store.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    store.save_alerts([_alert("a"), _alert("b"), _alert("a")])
    store.save_alerts([_alert(f"fp{i}") for i in range(50)] + [_alert("b")])
    writes = [s for s in statements if s.lstrip().upper().startswith("WITH")]
    assert len(writes) == 2 and writes[0] == writes[1], "one statement per batch, the same text for 3 and 51 alerts"
    assert len(statements) == 2, statements


def test_a_key_another_instance_commits_meanwhile_gets_its_id(pg_store):
    """The batch's own look-up cannot see a row committed after it began; the key still gets its id."""
    store = pg_store
    other = store.engine.connect()
    tx = other.begin()
    taken = other.execute(text("INSERT INTO alerts (dedup_key, fingerprint, status, labels, annotations, received_at) "
                               "VALUES (:k, 'x', 'firing', '{}', '{}', CURRENT_TIMESTAMP) RETURNING id"),
                          {"k": _alert("x").dedup_key}).scalar_one()
    saved: list[tuple[int, bool]] = []
    writer = threading.Thread(target=lambda: saved.extend(store.save_alerts([_alert("x"), _alert("y")])))
    writer.start()
    time.sleep(0.5)  # the batch waits on the uncommitted row of the same key
    tx.commit()
    other.close()
    writer.join(10)
    assert saved[0] == (taken, False) and saved[1][1]
