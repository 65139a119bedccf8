"""The local runtime's state store (servectl/backends/local/store.py, docs/local-store.md)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from servectl.backends.local import store as store_mod
from servectl.backends.local.store import Store, StoreError

REPO = Path(__file__).resolve().parents[4]
NS, NAME = "default", "resnet"
SPEC = {"model": {"name": "resnet", "basePath": "/models/resnet"}, "replicas": {"min": 1}}


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / "servectl.db"


@pytest.fixture
def store(db: Path) -> Iterator[Store]:
    with Store.open(db) as s:
        s.put_spec(NS, NAME, SPEC, now=1.0)
        yield s


def _event(t: float, message: str = "m") -> dict[str, object]:
    return {"time": t, "type": "Normal", "reason": "Scaled", "message": message}


# ---- opening and settings --------------------------------------------------------------


def test_fresh_store_has_the_current_schema_and_durable_settings(db: Path) -> None:
    with Store.open(db) as s:
        assert s.schema_version == store_mod.SCHEMA_VERSION == len(store_mod.MIGRATIONS)
        conn = s._conn
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
    # Reopening an up-to-date store changes nothing.
    with Store.open(db) as s:
        assert s.schema_version == store_mod.SCHEMA_VERSION


def test_a_store_from_a_newer_servectl_is_refused(db: Path) -> None:
    Store.open(db).close()
    newer = store_mod.SCHEMA_VERSION + 3
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {newer}")
    conn.close()
    with pytest.raises(StoreError) as e:
        Store.open(db)
    assert str(e.value) == (
        f"state store at {db} has schema {newer}; this servectl knows up to "
        f"{store_mod.SCHEMA_VERSION}: upgrade servectl"
    )


def test_a_file_that_is_not_sqlite_is_refused_naming_the_path(db: Path) -> None:
    db.parent.mkdir(parents=True)
    db.write_bytes(b"this is my shopping list, not a database\n" * 100)
    with pytest.raises(StoreError) as e:
        Store.open(db)
    message = str(e.value)
    assert str(db) in message
    assert "not a SQLite database" in message
    assert "move it away" in message


def test_a_directory_in_place_of_the_file_is_refused_naming_the_path(db: Path) -> None:
    db.mkdir(parents=True)
    with pytest.raises(StoreError, match=str(db)):
        Store.open(db)


def test_migrations_run_in_order_on_an_older_store(db: Path) -> None:
    migrations = [
        ("CREATE TABLE t (a INTEGER)", "INSERT INTO t (a) VALUES (1)"),
        ("ALTER TABLE t ADD COLUMN b INTEGER DEFAULT 7", "UPDATE t SET b = a + 1"),
        ("CREATE TABLE log (step INTEGER)", "INSERT INTO log (step) SELECT b FROM t"),
    ]
    with Store.open(db, migrations=migrations[:1]) as s:
        assert s.schema_version == 1
        s._conn.execute("INSERT INTO t (a) VALUES (10)")
    with Store.open(db, migrations=migrations) as s:
        assert s.schema_version == 3
        rows = s._conn.execute("SELECT a, b FROM t ORDER BY a").fetchall()
        assert rows == [(1, 2), (10, 11)]  # step 2 saw step 1's rows, and the later insert
        assert s._conn.execute("SELECT step FROM log ORDER BY step").fetchall() == [(2,), (11,)]
    # Older code is then refused.
    with pytest.raises(StoreError, match="has schema 3; this servectl knows up to 1"):
        Store.open(db, migrations=migrations[:1])


def test_a_failing_migration_leaves_the_store_as_it_was(db: Path) -> None:
    good = ("CREATE TABLE t (a INTEGER)",)
    bad = ("CREATE TABLE u (a INTEGER)", "THIS IS NOT SQL")
    Store.open(db, migrations=[good]).close()
    with pytest.raises(StoreError):
        Store.open(db, migrations=[good, bad])
    with Store.open(db, migrations=[good]) as s:
        assert s.schema_version == 1
        tables = {r[0] for r in s._conn.execute("SELECT name FROM sqlite_master")}
        assert "u" not in tables


# ---- services --------------------------------------------------------------------------


def test_spec_round_trip_and_generation_bumps_only_on_change(db: Path) -> None:
    with Store.open(db) as s:
        assert s.get_spec(NS, NAME) is None
        assert s.put_spec(NS, NAME, SPEC, now=5.0) == 1
        got = s.get_spec(NS, NAME)
        assert got is not None
        assert (got.spec, got.generation, got.updated) == (SPEC, 1, 5.0)
        # The same spec (keys in another order) is no change.
        same = dict(reversed(list(SPEC.items())))
        assert s.put_spec(NS, NAME, same, now=6.0) == 1
        assert s.get_spec(NS, NAME).updated == 5.0  # type: ignore[union-attr]
        changed = {**SPEC, "replicas": {"min": 2}}
        assert s.put_spec(NS, NAME, changed, now=7.0) == 2
        assert s.put_spec(NS, NAME, changed, now=8.0) == 2
        assert s.put_spec(NS, NAME, SPEC, now=9.0) == 3
        got = s.get_spec(NS, NAME)
        assert got is not None and (got.spec, got.generation) == (SPEC, 3)


def test_list_services_by_namespace_then_name(db: Path) -> None:
    with Store.open(db) as s:
        for ns, name in [("b", "x"), ("a", "z"), ("a", "y")]:
            s.put_spec(ns, name, {"n": name})
        assert [(v.namespace, v.name) for v in s.list_services()] == [
            ("a", "y"),
            ("a", "z"),
            ("b", "x"),
        ]
        assert [v.name for v in s.list_services("a")] == ["y", "z"]
        assert s.list_services("none") == []


def test_a_spec_that_is_not_json_is_refused(db: Path) -> None:
    with Store.open(db) as s:
        with pytest.raises(StoreError, match="spec of default/resnet is not JSON"):
            s.put_spec(NS, NAME, {"x": float("nan")})
        with pytest.raises(StoreError, match="not JSON"):
            s.put_spec(NS, NAME, {"x": object()})
        assert s.get_spec(NS, NAME) is None


def test_delete_cascades_to_everything_stored_for_the_service(store: Store) -> None:
    store.put_spec(NS, "other", SPEC)
    for name in (NAME, "other"):
        store.put_status(NS, name, {"phase": "Ready"})
        store.put_loop_state(NS, name, '{"format":1}')
        store.append_events(NS, name, [_event(1.0)])
        store.enqueue_command(NS, name, "promote")
        store.append_rollout(NS, name, {"version": 2})
    assert store.delete_service(NS, NAME) is True
    assert store.delete_service(NS, NAME) is False
    assert store.get_spec(NS, NAME) is None
    assert store.get_status(NS, NAME) is None
    assert store.get_loop_state(NS, NAME) is None
    assert store.events(NS, NAME) == []
    assert store.rollout_history(NS, NAME) == []
    conn = store._conn
    for table in ("status", "loop_state", "events", "commands", "rollouts"):
        assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 1, table
    # Recreated, it starts afresh.
    assert store.put_spec(NS, NAME, SPEC) == 1
    assert store.take_commands(NS, NAME) == []
    assert store.get_status(NS, "other") == {"phase": "Ready"}


# ---- status, loop state, rollout history -----------------------------------------------


def test_status_and_loop_state_round_trip(store: Store) -> None:
    assert store.get_status(NS, NAME) is None
    assert store.get_loop_state(NS, NAME) is None
    status = {"phase": "Progressing", "replicas": 3, "weights": {"1": 0.9, "2": 0.1}}
    store.put_status(NS, NAME, status, now=2.0)
    assert store.get_status(NS, NAME) == status
    store.put_status(NS, NAME, {"phase": "Ready"}, now=3.0)
    assert store.get_status(NS, NAME) == {"phase": "Ready"}
    text = '{"format": 1, "demand": 0.30000000000000004}'
    store.put_loop_state(NS, NAME, text)
    assert store.get_loop_state(NS, NAME) == text  # stored as given, not parsed
    store.put_loop_state(NS, NAME, "second")
    assert store.get_loop_state(NS, NAME) == "second"


def test_writes_for_an_unknown_service_are_refused(db: Path) -> None:
    with Store.open(db) as s:
        for write in (
            lambda: s.put_status(NS, NAME, {}),
            lambda: s.put_loop_state(NS, NAME, "{}"),
            lambda: s.append_events(NS, NAME, [_event(1.0)]),
            lambda: s.enqueue_command(NS, NAME, "promote"),
            lambda: s.append_rollout(NS, NAME, {}),
        ):
            with pytest.raises(StoreError, match="no ModelService default/resnet"):
                write()
        assert s.take_commands(NS, NAME) == []


def test_rollout_history_round_trip(store: Store) -> None:
    records = [
        {"from": 1, "to": 2, "result": "Promoted"},
        {"from": 2, "to": 3, "result": "Aborted"},
    ]
    ids = [store.append_rollout(NS, NAME, r, now=10.0 + i) for i, r in enumerate(records)]
    assert ids == sorted(ids)
    history = store.rollout_history(NS, NAME)
    assert [(h.id, h.time, h.record) for h in history] == [
        (ids[0], 10.0, records[0]),
        (ids[1], 11.0, records[1]),
    ]


# ---- events ----------------------------------------------------------------------------


def test_events_round_trip_and_since_id_paging(store: Store) -> None:
    ids = store.append_events(NS, NAME, [_event(float(i), f"e{i}") for i in range(10)])
    assert ids == sorted(ids) and len(set(ids)) == 10
    first = store.events(NS, NAME)
    assert [(e.id, e.time, e.type, e.reason, e.message) for e in first][:2] == [
        (ids[0], 0.0, "Normal", "Scaled", "e0"),
        (ids[1], 1.0, "Normal", "Scaled", "e1"),
    ]
    # Without since_id: the newest `limit`, oldest first.
    assert [e.message for e in store.events(NS, NAME, limit=3)] == ["e7", "e8", "e9"]
    # A watcher follows from the last id it saw, page by page.
    seen: list[str] = []
    since = ids[0] - 1
    while page := store.events(NS, NAME, since_id=since, limit=4):
        seen += [e.message for e in page]
        since = page[-1].id
    assert seen == [f"e{i}" for i in range(10)]
    store.append_events(NS, NAME, [_event(10.0, "e10")])
    assert [e.message for e in store.events(NS, NAME, since_id=since)] == ["e10"]


def test_events_are_pruned_to_the_newest_n_and_ids_never_reused(db: Path) -> None:
    with Store.open(db, events_kept=5) as s:
        s.put_spec(NS, NAME, SPEC)
        s.put_spec(NS, "other", SPEC)
        s.append_events(NS, "other", [_event(0.0)])
        ids = s.append_events(NS, NAME, [_event(float(i), f"e{i}") for i in range(8)])
        more = s.append_events(NS, NAME, [_event(8.0, "e8")])
        assert more[0] > ids[-1]
        assert [e.message for e in s.events(NS, NAME, limit=100)] == [
            "e4",
            "e5",
            "e6",
            "e7",
            "e8",
        ]
        assert len(s.events(NS, "other")) == 1  # pruning is per service


def test_a_malformed_event_is_refused_and_nothing_is_written(store: Store) -> None:
    with pytest.raises(StoreError, match="event 1 of default/resnet"):
        store.append_events(NS, NAME, [_event(1.0), {"time": 2.0, "type": "Normal"}])
    with pytest.raises(StoreError, match="time is inf"):
        store.append_events(NS, NAME, [_event(float("inf"))])
    assert store.events(NS, NAME) == []


# ---- the command queue -----------------------------------------------------------------


def test_commands_are_taken_once_in_order_with_their_enqueue_time(store: Store) -> None:
    a = store.enqueue_command(NS, NAME, "start", 2)
    b = store.enqueue_command(NS, NAME, "promote")
    taken = store.take_commands(NS, NAME, now=100.0)
    assert [(c.id, c.op, c.version) for c in taken] == [(a, "start", 2), (b, "promote", None)]
    assert all(c.enqueued > 1e9 for c in taken)  # wall clock seconds
    assert taken[0].enqueued <= taken[1].enqueued
    assert store.take_commands(NS, NAME) == []
    c = store.enqueue_command(NS, NAME, "abort")
    assert [x.id for x in store.take_commands(NS, NAME)] == [c]


def test_two_racing_controllers_take_each_command_exactly_once(db: Path) -> None:
    with Store.open(db) as s:
        s.put_spec(NS, NAME, SPEC)
    per_producer, producers, consumers = 150, 2, 4
    enqueued: list[int] = []
    taken: list[list[int]] = [[] for _ in range(consumers)]
    done = threading.Event()
    errors: list[BaseException] = []
    start = threading.Barrier(producers + consumers)

    def produce(k: int) -> None:
        try:
            with Store.open(db) as s:
                start.wait()
                for i in range(per_producer):
                    enqueued.append(s.enqueue_command(NS, NAME, f"p{k}", i))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def consume(k: int) -> None:
        try:
            with Store.open(db) as s:
                start.wait()
                while True:
                    finished = done.is_set()
                    taken[k] += [c.id for c in s.take_commands(NS, NAME)]
                    if finished:
                        break
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(producers)]
    takers = [threading.Thread(target=consume, args=(k,)) for k in range(consumers)]
    for t in threads + takers:
        t.start()
    for t in threads:
        t.join()
    done.set()
    for t in takers:
        t.join()
    assert errors == []
    everything = [i for ids in taken for i in ids]
    assert len(enqueued) == producers * per_producer
    assert sorted(everything) == sorted(enqueued)  # each taken once: no loss, no duplicate
    assert len(set(everything)) == len(everything)
    for ids in taken:
        assert ids == sorted(ids)  # each controller sees them in enqueue order


def test_a_take_waits_for_another_controllers_take_and_gets_nothing_twice(
    store: Store, db: Path
) -> None:
    ids = [store.enqueue_command(NS, NAME, "promote") for _ in range(3)]
    # Another controller is in the middle of its take: it holds the write lock.
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    other.execute("UPDATE commands SET taken = 1.0 WHERE taken IS NULL")
    got: list[list[int]] = []

    def take() -> None:
        with Store.open(db) as s:
            got.append([c.id for c in s.take_commands(NS, NAME)])

    t = threading.Thread(target=take)
    t.start()
    t.join(timeout=0.2)
    assert t.is_alive()  # waiting for the lock (busy timeout), not failing, not reading
    other.execute("COMMIT")
    other.close()
    t.join()
    assert got == [[]]  # the other controller had them all
    assert ids and store.take_commands(NS, NAME) == []


# ---- durability ------------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys
    from servectl.backends.local.store import Store
    s = Store.open(sys.argv[1], events_kept=10**9)
    s.put_spec("default", "resnet", {"n": 1})
    i = 0
    while True:
        i += 1
        if i % 2:
            ack = s.enqueue_command("default", "resnet", "promote", i)
        else:
            ack = s.append_events("default", "resnet", [
                {"time": float(i), "type": "Normal", "reason": "Scaled", "message": str(i)}
            ])[0]
        print(("c" if i % 2 else "e") + str(ack), flush=True)
    """
)


def test_kill_9_loses_nothing_acknowledged(db: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    acked: list[str] = []
    with subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, env=env, text=True
    ) as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                acked.append(line.strip())
                if len(acked) >= 40:
                    break
            proc.send_signal(signal.SIGKILL)
            # Whatever it printed before dying was acknowledged too.
            acked += [line.strip() for line in proc.stdout if line.strip()]
        finally:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert len(acked) >= 40
    with Store.open(db, events_kept=10_000) as s:
        assert s._conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        commands = {f"c{c.id}" for c in s.take_commands(NS, NAME)}
        events = {f"e{e.id}" for e in s.events(NS, NAME, limit=10_000)}
        missing = [a for a in acked if a not in commands | events]
        assert missing == []


def test_runtime_records_and_settings(store: Store) -> None:
    assert store.get_runtime(NS, NAME) is None
    store.put_runtime(NS, NAME, {"restPort": 8501, "grpcPort": 8500}, now=2.0)
    store.put_runtime(NS, NAME, {"restPort": 8501, "grpcPort": 8500, "nextOrdinal": 3}, now=3.0)
    assert store.get_runtime(NS, NAME) == {"restPort": 8501, "grpcPort": 8500, "nextOrdinal": 3}
    assert store.all_runtime() == {
        (NS, NAME): {"restPort": 8501, "grpcPort": 8500, "nextOrdinal": 3}
    }
    with pytest.raises(StoreError, match="no ModelService default/other"):
        store.put_runtime(NS, "other", {})
    assert store.get_setting("ports") is None
    store.put_setting("ports", {"prometheus": 9090})
    store.put_setting("ports", {"prometheus": 9091})
    assert store.get_setting("ports") == {"prometheus": 9091}
    # Deleting the service deletes its runtime record; settings are the runtime's own.
    store.delete_service(NS, NAME)
    assert store.all_runtime() == {}
    assert store.get_setting("ports") == {"prometheus": 9091}


def test_a_schema_1_store_is_upgraded_keeping_its_services(db: Path) -> None:
    with Store.open(db, migrations=store_mod.MIGRATIONS[:1]) as s:
        s.put_spec(NS, NAME, SPEC)
    with Store.open(db) as s:
        assert s.schema_version == len(store_mod.MIGRATIONS)  # the latest
        assert s.get_spec(NS, NAME) is not None
        s.put_runtime(NS, NAME, {"restPort": 1, "grpcPort": 2})
        assert s.get_runtime(NS, NAME) == {"restPort": 1, "grpcPort": 2}
