"""The store against real databases: a SQLite file and a PostgreSQL server (tests/databases.py)."""

from __future__ import annotations

import sqlite3
import threading
import time
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from sqlalchemy import inspect, select, text
from sqlalchemy.exc import DBAPIError, IntegrityError

from opsbot.bundle import Bundle, utcnow
from opsbot.store import AlertIn, SchemaTooNew, Store, StoreBusy, StoreError
from opsbot.store.database import head_revision
from opsbot.store.models import Base, Probe
from tests.databases import free_port
from tests.findings import diagnosis, finding

TABLES = {"probes", "findings", "alerts", "actions", "approvals", "audit", "reports", "notes", "decisions",
          "job_runs", "api_tokens", "role_locks", "slack_group_threads", "slack_signatures", "instances", "incidents",
          "action_captures", "role_log_templates", "role_log_history"}



def _bundle(cluster: str = "lab", ok: bool = True) -> Bundle:
    env = {"ok": ok, "error": None if ok else "connection refused"}
    role = {"role": "decode", "node": "node2", "unit": "sglang-dsv4-decode.service",
            "systemd": {**env, "raw": "ActiveState=active\n"}, "metrics": {**env, "samples": []},
            "health": {**env, "status": 200}, "logs": {**env, "raw": "x" * 5000}}
    return Bundle.model_validate({"cluster": cluster, "started_at": utcnow(), "finished_at": utcnow(),
                                  "roles": [role], "nodes": [{"node": "node2", "gpu": {"ok": True, "raw": ""}}]})


@pytest.fixture
def store(database_url):
    s = Store(database_url)
    yield s
    s.close()


def test_upgrade_from_empty_creates_every_table_and_is_idempotent(database_url):
    with Store(database_url) as s:
        assert s.revision == head_revision()
        assert TABLES <= set(inspect(s.engine).get_table_names())
        assert set(Base.metadata.tables) == TABLES
        if s.engine.dialect.name == "sqlite":  # the connect event's pragmas are in force
            with s.engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
                assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
                assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000
    with Store(database_url) as again:  # a second open finds the schema at head and changes nothing
        assert again.revision == head_revision()


def test_two_processes_opening_a_fresh_database_at_once(database_url):
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def _open() -> None:
        barrier.wait()
        try:
            Store(database_url).close()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=_open) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert errors == []


def test_database_from_a_newer_opsbot_is_refused(database_url):
    with Store(database_url) as s, s.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'f00dfeed9999'"))
    with pytest.raises(SchemaTooNew, match=r"f00dfeed9999.*Upgrade opsbot"):
        Store(database_url)


def test_url_that_does_not_connect_says_so():
    url = f"postgresql://opsbot:secret@127.0.0.1:{free_port()}/opsbot"
    with pytest.raises(StoreError, match="cannot connect to the database") as err:
        Store(url)
    assert "secret" not in str(err.value) and "OPSBOT_DATABASE_URL" in str(err.value)
    with pytest.raises(StoreError, match="unsupported database 'mysql'"):
        Store("mysql://u@h/db")
    with pytest.raises(StoreError, match="not valid"):
        Store("not a url")


def test_audit_is_append_only_in_the_database_itself(store):
    first = store.audit("alice", "cli", "restart planned", {"role": "decode"}, role="decode")
    assert [e.id for e in store.audit_log()] == [first]
    for sql in ("UPDATE audit SET actor = 'mallory'", "DELETE FROM audit"):
        with pytest.raises(DBAPIError, match="append-only"), store.engine.begin() as conn:
            conn.execute(text(sql))
    (entry,) = store.audit_log()
    assert (entry.actor, entry.surface, entry.what, entry.detail) == ("alice", "cli", "restart planned",
                                                                      {"role": "decode"})
    assert not any(n for n in dir(store) if n.startswith(("update_audit", "delete_audit")))


def test_alerts_deduplicated_by_fingerprint_status_and_start(store):
    a = AlertIn(fingerprint="abc123", status="firing", labels={"alertname": "DecodeWedged", "role": "decode"},
                group_key="{}:{cluster=lab}", cluster="lab", role="decode")
    first, new = store.save_alert(a)
    again, new2 = store.save_alert(a)
    assert (new, new2, again) == (True, False, first)
    _, resolved_new = store.save_alert(AlertIn(**{**a.__dict__, "status": "resolved"}))
    assert resolved_new and store.count_alerts() == 2
    with pytest.raises(IntegrityError), store.engine.begin() as conn:  # the database enforces it too
        conn.execute(text("INSERT INTO alerts (dedup_key, fingerprint, status, labels, annotations, received_at) "
                          "VALUES (:k, 'abc123', 'firing', '{}', '{}', CURRENT_TIMESTAMP)"), {"k": a.dedup_key})


def _alert(fp: str, status: str = "firing", **over) -> AlertIn:
    return AlertIn(**{"fingerprint": fp, "status": status, "labels": {"alertname": "DecodeWedged"},
                      "group_key": "g", "cluster": "lab", "role": "decode", **over})


def test_one_notification_is_one_transaction_all_or_nothing(store):
    ids = store.save_alerts([_alert("a"), _alert("b"), _alert("a"), _alert("c")])
    assert [new for _, new in ids] == [True, True, False, True] and ids[0][0] == ids[2][0]
    assert store.save_alerts([_alert("b"), _alert("d")])[0] == (ids[1][0], False)
    broken = _alert("f")
    broken.status = None  # type: ignore[assignment]  # NOT NULL: the database refuses this row
    with pytest.raises(DBAPIError):
        store.save_alerts([_alert("e"), broken])
    assert sorted(a.fingerprint for a in store.alerts()) == ["a", "b", "c", "d"], "nothing of the failed call is kept"


def test_two_instances_claim_leftover_alerts_exactly_once(database_url):
    Store(database_url).close()
    a, b = Store(database_url), Store(database_url)
    lease = timedelta(seconds=30)
    for me in ("a", "b", "c"):
        a.heartbeat(me, "host", 1)
    a.save_alerts([_alert(f"fp{i}") for i in range(40)])
    a.save_alerts([_alert("live")], claimer="c")  # accepted by a live instance: not leftover
    barrier = threading.Barrier(2)
    got: dict[str, list[int]] = {}

    def _claim(s: Store, me: str) -> None:
        barrier.wait()
        got[me] = [r.id for r in s.claim_unprocessed(me, lease=lease)]

    threads = [threading.Thread(target=_claim, args=(s, me)) for s, me in ((a, "a"), (b, "b"))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not set(got["a"]) & set(got["b"]), "an alert was claimed by both instances"
    assert len(got["a"]) + len(got["b"]) == 40
    assert b.claim_unprocessed("b", lease=lease) == []
    stores = {"a": a, "b": b}
    gone, other = ("a", "b") if got["a"] else ("b", "a")
    stores[gone].leave(gone)  # a clean shutdown: its claims are free at once; the other's and c's are not
    taken = stores[other].claim_unprocessed(other, lease=lease)
    assert sorted(r.id for r in taken) == sorted(got[gone]) and {r.claimed_by for r in taken} == {other}
    [s.close() for s in (a, b)]


def test_a_dead_instances_claims_are_taken_over_after_its_lease(database_url):
    with Store(database_url) as store:
        store.heartbeat("dead", "host", 1)
        store.heartbeat("alive", "host", 2)
        store.save_alerts([_alert("x"), _alert("y")], claimer="dead")
        store.save_alerts([_alert("z")], claimer="alive")
        assert store.claim_unprocessed("alive", lease=timedelta(seconds=30)) == []  # "dead" beat just now
        time.sleep(0.3)
        store.heartbeat("alive", "host", 2)
        taken = store.claim_unprocessed("alive", lease=timedelta(seconds=0.2))
        assert sorted(r.fingerprint for r in taken) == ["x", "y"]  # never its own "z", never twice
        assert store.claim_unprocessed("alive", lease=timedelta(seconds=0.2)) == []
        assert store.claim_unprocessed("never-beat", lease=timedelta(seconds=0.2)) == [], "alive's claims hold"
        states = {i.id: up for i, up in store.instances(timedelta(seconds=0.2))}
        assert states == {"dead": False, "alive": True}


def test_an_alert_whose_probe_cannot_run_is_given_up_on(store):
    (bad, _), (flaky, _) = store.save_alerts([_alert("bad", role="decoder"), _alert("flaky")])
    store.alert_probe_failed([bad], "unknown role 'decoder'", max_attempts=3, final=True)
    lease = timedelta(minutes=10)
    for _attempt in range(1, 4):
        assert flaky in [r.id for r in store.claim_unprocessed("me", lease=lease)]
        assert bad not in [r.id for r in store.claim_unprocessed("other", lease=timedelta(seconds=-1))]
        store.alert_probe_failed([flaky], "no inventory", max_attempts=3)
        assert store.claim_unprocessed("me", lease=lease, retry_after=timedelta(minutes=1)) == [], "retried too soon"
    assert store.claim_unprocessed("me", lease=timedelta(seconds=-1)) == []
    failed = {r.fingerprint: r for r in store.failed_alerts()}
    assert failed["bad"].probe_attempts == 1 and failed["flaky"].probe_attempts == 3
    assert "unknown role 'decoder'" in failed["bad"].probe_error
    items = [i for i in store.history() if i.kind == "alert"]
    assert {i.what for i in items} == {"probe failed: DecodeWedged"} and any("decoder" in i.detail for i in items)


def test_slack_threads_have_their_table(store):
    assert store.slack_thread("g") is None
    store.save_slack_thread("g", "C0ALERTS", "1700000000.000100", "firing")
    store.save_slack_thread("g", "C0ALERTS", "1700000099.000100", "resolved")  # the group keeps its first thread
    row = store.slack_thread("g")
    assert (row.channel, row.ts, row.state) == ("C0ALERTS", "1700000000.000100", "resolved")
    assert store.audit_log() == []


def test_a_group_thread_is_claimed_once_across_instances_and_a_stale_claim_is_taken_over(database_url):
    """Two instances each hold some of one group's alerts: one posts the group's first message, the other
    waits for its thread; a poster killed mid-post leaves a claim that goes stale, a failed post frees it."""
    Store(database_url).close()
    a, b = Store(database_url), Store(database_url)
    try:
        assert a.claim_slack_thread("g", "C0ALERTS", timedelta(minutes=2))
        assert not b.claim_slack_thread("g", "C0ALERTS", timedelta(minutes=2))
        assert b.slack_thread("g") is None, "a claim still posting is not a thread yet"
        a.save_slack_thread("g", "C0ALERTS", "1700000000.000100", "firing")
        assert (b.slack_thread("g").ts, b.slack_thread("g").state) == ("1700000000.000100", "firing")
        assert not b.claim_slack_thread("g", "C0ALERTS", timedelta(0)), "a posted thread is never claimed again"
        assert a.claim_slack_thread("h", "C0ALERTS", timedelta(minutes=2))
        assert b.claim_slack_thread("h", "C0ALERTS", timedelta(0)), "stale: its poster went quiet"
        b.release_slack_thread("h")
        assert a.claim_slack_thread("h", "C0ALERTS", timedelta(minutes=2)), "a failed post frees the claim"
    finally:
        a.close()
        b.close()


def test_a_group_key_of_any_length_claims_its_thread(database_url):
    """Alertmanager's groupKey is as long as the route's matchers (5,000 characters here): the thread is
    keyed by its SHA-256, so the claim holds on SQLite and PostgreSQL alike, and two keys differing only
    at their end are two threads."""
    long_key = '{}/{alertname=~"^(?:' + "|".join(f"SGLang{i:04d}" for i in range(500)) + ')$"}'
    long_key = (long_key + "x" * 5000)[:5000]
    other = long_key[:-1] + "y"
    with Store(database_url) as s:
        assert s.claim_slack_thread(long_key, "C0ALERTS", timedelta(minutes=2))
        assert s.claim_slack_thread(other, "C0ALERTS", timedelta(minutes=2)), "another group, another thread"
        assert not s.claim_slack_thread(long_key, "C0ALERTS", timedelta(minutes=2))
        s.save_slack_thread(long_key, "C0ALERTS", "1700000000.000100", "firing")
        assert s.slack_thread(long_key).ts == "1700000000.000100" and s.slack_thread(other) is None


def test_threads_are_rekeyed_by_the_migration(database_url):
    """A thread kept before the hash (revision 0008) is found by its groupKey after the upgrade."""
    from alembic import command

    from opsbot.store.alerts import group_hash
    from opsbot.store.database import alembic_config

    with Store(database_url) as s:
        s.save_slack_thread("g", "C0ALERTS", "1700000000.000100", "firing")
        config = alembic_config()
        with s.engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0008")
            conn.execute(text("INSERT INTO slack_threads (group_key, channel, ts, state, created_at, updated_at) "
                              "VALUES ('{}:{alertname=\"X\"}', 'C0ALERTS', '1700000000.000200', 'firing', "
                              ":at, :at)"), {"at": datetime.now(timezone.utc)})
            command.upgrade(config, "head")
        row = s.slack_thread('{}:{alertname="X"}')
        assert row is not None and row.ts == "1700000000.000200" and row.group_hash == group_hash('{}:{alertname="X"}')


def test_concurrent_claimers_exactly_one_wins(database_url):
    Store(database_url).close()
    stores = [Store(database_url) for _ in range(6)]
    barrier = threading.Barrier(len(stores))
    wins: list[bool] = []

    def _claim(s: Store) -> None:
        barrier.wait()
        wins.append(s.claim_period("weekly-report", "2026-W48", claimer=str(id(s))))

    threads = [threading.Thread(target=_claim, args=(s,)) for s in stores]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sorted(wins) == [False] * 5 + [True]
    assert stores[0].claim_period("weekly-report", "2026-W49") is True
    [s.close() for s in stores]


def test_a_dead_instances_unfinished_period_is_taken_over_once(database_url):
    """Every scheduled job claims its period; the claim of an instance killed mid-job is taken over
    by exactly one live instance, and a finished period never runs again."""
    Store(database_url).close()
    stores = [Store(database_url) for _ in range(4)]
    lease = timedelta(seconds=1)
    stores[0].heartbeat("i0", "host", 100)
    assert stores[0].claim_period("recall", "2026-12-01T22:00", "i0", lease=lease)
    assert not stores[1].claim_period("recall", "2026-12-01T22:00", "i1", lease=lease), "i0 is alive"
    stores[0].leave("i0")  # as if its heartbeat stopped: SIGKILL, then the lease ran out
    assert stores[1].orphaned_periods("recall", lease) == [], "a claim younger than the lease is left alone"
    time.sleep(1.1)
    for i in (1, 2, 3):
        stores[i].heartbeat(f"i{i}", "host", 100 + i)
    assert stores[1].orphaned_periods("recall", lease) == ["2026-12-01T22:00"]
    barrier = threading.Barrier(3)
    wins: list[str] = []

    def _take(i: int) -> None:
        barrier.wait()
        if stores[i].claim_period("recall", "2026-12-01T22:00", f"i{i}", lease=lease):
            wins.append(f"i{i}")

    threads = [threading.Thread(target=_take, args=(i,)) for i in (1, 2, 3)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(wins) == 1
    assert stores[1].orphaned_periods("recall", lease) == []
    stores[1].finish_period("recall", "2026-12-01T22:00", "done")
    for i in (1, 2, 3):
        stores[i].leave(f"i{i}")
    assert not stores[1].claim_period("recall", "2026-12-01T22:00", "i9", lease=lease), "finished: never again"
    [s.close() for s in stores]


def test_probe_bundle_is_compressed_and_round_trips_with_findings(store):
    b = _bundle(ok=False)
    diag = diagnosis(b.id, [  # diagnose() puts the most likely first
        finding("decode-wedged", "critical", ["decode"], evidence=["0 tokens in 3 s"]),
        finding("decode-slow", "warning", ["decode"], summary="slow"),
    ])
    assert store.save_probe(b, diag) == b.id
    assert store.save_probe(b, diag) == b.id  # saving again keeps one copy
    (row,) = store.probes(role="decode")
    assert row.top_incident == "decode-wedged" and row.cluster == "lab" and row.roles == ["decode"]
    assert row.ok_axes["decode"] == {"systemd": False, "metrics": False, "health": False, "logs": False}
    assert len(row.bundle) < len(b.to_json(indent=None)) / 3
    assert store.load_bundle(b.id).model_dump() == b.model_dump()
    assert sorted(f.incident for f in store.findings(role="decode")) == ["decode-slow", "decode-wedged"]
    assert store.probes(role="prefill") == [] and store.probes(incident="decode-wedged")[0].id == b.id


def test_a_failing_write_leaves_no_partial_rows(store):
    b = _bundle()
    bad = diagnosis(b.id, [finding("x" * 500, "critical", ["decode"])])
    if store.engine.dialect.name == "sqlite":  # SQLite does not enforce VARCHAR lengths: break NOT NULL instead
        bad.findings[0].incident = None  # type: ignore[assignment]
    with pytest.raises(DBAPIError):
        store.save_probe(b, bad)
    assert store.read(lambda s: s.scalars(select(Probe)).all()) == []
    assert store.findings() == []


def test_tokens_are_stored_hashed_and_checked(store):
    secret = store.create_token("ci", ["read", "probe"])
    assert store.check_token(secret) == ["probe", "read"] and store.check_token(secret).name == "ci"
    assert store.check_token(secret + "x") is None
    (tok,) = store.tokens()
    assert secret not in (tok.token_hash, tok.name) and tok.last_used_at is not None
    with pytest.raises(ValueError, match="choose from read, probe, act"):
        store.create_token("bad", ["admin"])
    with pytest.raises(ValueError, match="exists"):
        store.create_token("ci", ["read"])


def test_role_lock_is_exclusive_and_stale_locks_expire(store):
    assert store.take_lock("lab", "decode", "a1", "alice", timedelta(minutes=5)) is None
    held = store.take_lock("lab", "decode", "a2", "bob", timedelta(minutes=5))
    assert held is not None and (held.holder, held.action_id) == ("alice", "a1")
    assert store.take_lock("lab", "prefill", "a3", "bob", timedelta(minutes=5)) is None
    store.release_lock("lab", "decode", "a1")
    assert store.take_lock("lab", "decode", "a4", "carol", timedelta(seconds=-1)) is None  # already stale
    assert store.take_lock("lab", "decode", "a5", "dave", timedelta(minutes=5)) is None


def test_reports_notes_decisions(store):
    store.save_report("status", "2026-11-30", "markdown", "# old", {"n": 1})
    rid = store.save_report("status", "2026-11-30", "markdown", "# new", {"n": 2})
    latest = store.latest_report("status")
    assert latest is not None and (latest.id, latest.body, latest.meta) == (rid, "# new", {"n": 2})
    assert store.latest_report("weekly") is None
    store.add_note("blocked", "waiting for GPUs", "alice")
    store.add_decision("HiCache ratio 2.0", "prefill queue", "bob")
    assert [n.kind for n in store.notes()] == ["blocked"] and store.decisions()[0].why == "prefill queue"
    with pytest.raises(ValueError, match="done, doing, blocked, next"):
        store.add_note("later", "x", "alice")
    kinds = {h.what for h in store.history()}
    assert {"note blocked", "decision"} <= kinds


def test_busy_database_is_retried_then_fails_clearly(database_url):
    Store(database_url).close()
    store = Store(database_url, busy_timeout_ms=100, attempts=3)
    hold, release = _hold_write_lock(database_url)
    try:
        started = time.monotonic()
        with pytest.raises(StoreBusy, match="database is busy: audit still locked after 3 attempts"):
            store.audit("alice", "cli", "blocked")
        assert time.monotonic() - started >= 0.3  # it waited and retried before giving up
    finally:
        release()
    # a lock released while we retry: the write goes through, once
    hold, release = _hold_write_lock(database_url)
    threading.Timer(0.25, release).start()
    store.audit("alice", "cli", "after wait")
    assert [e.what for e in store.audit_log()] == ["after wait"]
    store.close()


def _hold_write_lock(url: str):
    """Another client holding the write lock, as a second opsbot or a sqlite3 shell would."""
    if url.startswith("sqlite"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None, check_same_thread=False)
        conn.execute("BEGIN IMMEDIATE")
    else:
        dsn = url.replace("postgresql+psycopg://", "postgresql://")
        conn = psycopg.connect(dsn)
        conn.execute("LOCK TABLE audit IN ACCESS EXCLUSIVE MODE")

    def release() -> None:
        conn.rollback()
        conn.close()

    return conn, release


def test_concurrent_lock_takers_exactly_one_wins(database_url):
    Store(database_url).close()
    stores = [Store(database_url) for _ in range(6)]
    barrier = threading.Barrier(len(stores))
    results: list[object] = []

    def _take(i: int, s: Store) -> None:
        barrier.wait()
        results.append(s.take_lock("lab", "decode", f"action-{i}", f"host:{i}", timedelta(minutes=5)))

    threads = [threading.Thread(target=_take, args=(i, s)) for i, s in enumerate(stores)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    winners = [r for r in results if r is None]
    assert len(results) == 6 and len(winners) == 1
    (lock,) = stores[0].locks("lab")
    assert all(r.action_id == lock.action_id for r in results if r is not None)  # losers are told who holds it
    [s.close() for s in stores]


def test_one_plan_waits_per_key_across_instances_and_the_key_frees_when_it_leaves_planned(database_url):
    """Six instances planning the same class's restart of a role at once (each from its own probe) get one row;
    once it is approved the key is free, so the next incident's plan is a new row."""
    Store(database_url).close()
    stores = [Store(database_url) for _ in range(6)]
    barrier = threading.Barrier(len(stores))
    ids: list[str] = []

    def _plan(i: int, s: Store) -> None:
        barrier.wait()
        ids.append(s.create_action(kind="restart", cluster="lab", roles=["decode"], plan={}, reason="decode-wedged",
                                   requested_by=f"alert:{i}", surface="alert", ttl=timedelta(minutes=15),
                                   plan_key=f"probe{i}:decode", waiting_key="lab/decode/decode-wedged").id)

    threads = [threading.Thread(target=_plan, args=(i, s)) for i, s in enumerate(stores)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(ids) == 6 and len(set(ids)) == 1 and len(stores[0].actions()) == 1
    assert stores[0].waiting_action("lab/decode/decode-wedged").id == ids[0]
    approved = stores[0].approve_action(ids[0], "U0BOB", "slack", timedelta(minutes=5))
    assert approved is not None and approved.waiting_key is None
    assert stores[0].waiting_action("lab/decode/decode-wedged") is None
    later = stores[1].create_action(kind="restart", cluster="lab", roles=["decode"], plan={}, reason="decode-wedged",
                                    requested_by="alert:x", surface="alert", ttl=timedelta(minutes=15),
                                    plan_key="probe9:decode", waiting_key="lab/decode/decode-wedged")
    assert later.id != ids[0] and len(stores[0].actions()) == 2
    moved = stores[0].transition(later.id, ("planned",), "refused", actor="U0BOB", surface="slack", what="dismissed")
    assert moved is not None and moved.waiting_key is None
    [s.close() for s in stores]


def test_models_and_migrations_agree(database_url):
    """A model changed without a migration (or the reverse) shows up here, on both backends."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    with Store(database_url) as s, s.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_downgrade_to_empty_and_upgrade_again(database_url):
    from alembic import command

    from opsbot.store.database import alembic_config

    with Store(database_url) as s:
        s.audit("alice", "cli", "before downgrade")
        with s.engine.begin() as conn:
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "base")
        assert set(inspect(s.engine).get_table_names()) <= {"alembic_version"}
    with Store(database_url) as again:
        assert TABLES <= set(inspect(again.engine).get_table_names())
        again.audit("alice", "cli", "after")
        with pytest.raises(DBAPIError, match="append-only"), again.engine.begin() as conn:  # triggers are back
            conn.execute(text("DELETE FROM audit"))


def test_probes_by_role_are_filtered_before_the_limit(store):
    """Newer probes of other roles must not push the role's probes out of ``limit``."""
    decode = _bundle()
    store.save_probe(decode)
    for _ in range(3):
        other = _bundle()
        other.roles[0].role = "prefill"
        store.save_probe(other)
    assert [p.id for p in store.probes(role="decode", limit=1)] == [decode.id]
    assert len(store.probes(limit=2)) == 2 and len(store.probes(role="prefill", limit=5)) == 3
