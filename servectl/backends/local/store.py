"""The local runtime's state store: one SQLite file under the state directory.

The CLI process (``servectl apply``, ``rollout promote``) and the controller process write
it at the same time; a ``kill -9`` of either at any moment loses nothing a call had
returned from (docs/local-store.md says why each setting):

- WAL journal mode (readers never block the writer, the writer never blocks readers),
  ``synchronous=FULL`` (a commit is on disk before it returns, power loss included), a
  busy timeout (a second writer waits for the lock instead of failing), foreign keys on
  (deleting a service deletes its status, state, events, commands and history);
- every write is one ``BEGIN IMMEDIATE`` transaction: it takes the write lock first, so a
  read-modify-write (``put_spec``, ``take_commands``) never races another writer;
- the schema is versioned with ``PRAGMA user_version`` and upgraded by :data:`MIGRATIONS`
  in order, in one transaction; a file from a newer servectl, or not a SQLite database,
  is refused with a :class:`StoreError` that says what to do.

Values are JSON text; the store does not interpret specs, status or loop state. One
:class:`Store` is one connection: use it from one thread (open one per thread).
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Literal, cast

Migration = tuple[str, ...]
"""One schema step: SQL statements run in order, in the upgrade's transaction."""

MIGRATIONS: tuple[Migration, ...] = (
    # 1: the first schema.
    (
        """CREATE TABLE services (
            id INTEGER PRIMARY KEY,
            namespace TEXT NOT NULL,
            name TEXT NOT NULL,
            spec TEXT NOT NULL,
            generation INTEGER NOT NULL,
            updated REAL NOT NULL,
            UNIQUE (namespace, name)
        )""",
        """CREATE TABLE status (
            service_id INTEGER PRIMARY KEY REFERENCES services (id) ON DELETE CASCADE,
            status TEXT NOT NULL,
            updated REAL NOT NULL
        )""",
        """CREATE TABLE loop_state (
            service_id INTEGER PRIMARY KEY REFERENCES services (id) ON DELETE CASCADE,
            state TEXT NOT NULL,
            updated REAL NOT NULL
        )""",
        # AUTOINCREMENT: ids are never reused after pruning, so a watcher's since_id holds.
        """CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            service_id INTEGER NOT NULL REFERENCES services (id) ON DELETE CASCADE,
            time REAL NOT NULL,
            type TEXT NOT NULL,
            reason TEXT NOT NULL,
            message TEXT NOT NULL
        )""",
        "CREATE INDEX events_by_service ON events (service_id, id)",
        """CREATE TABLE commands (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            service_id INTEGER NOT NULL REFERENCES services (id) ON DELETE CASCADE,
            op TEXT NOT NULL,
            version INTEGER,
            enqueued REAL NOT NULL,
            taken REAL
        )""",
        "CREATE INDEX commands_by_service ON commands (service_id, taken, id)",
        """CREATE TABLE rollouts (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            service_id INTEGER NOT NULL REFERENCES services (id) ON DELETE CASCADE,
            time REAL NOT NULL,
            record TEXT NOT NULL
        )""",
        "CREATE INDEX rollouts_by_service ON rollouts (service_id, id)",
    ),
    # 2: what the local runtime keeps per service (front ports, revisions as applied,
    # draining replicas) and runtime-wide settings (its own ports).
    (
        """CREATE TABLE runtime (
            service_id INTEGER PRIMARY KEY REFERENCES services (id) ON DELETE CASCADE,
            data TEXT NOT NULL,
            updated REAL NOT NULL
        )""",
        """CREATE TABLE settings (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL
        )""",
    ),
    # 3: what became of each command, for the CLI that waits on it: NULL until the
    # controller's cycle that took it has decided, then done, refused or failed (the
    # cycle failed), with the controller's message.
    (
        "ALTER TABLE commands ADD COLUMN outcome TEXT",
        "ALTER TABLE commands ADD COLUMN message TEXT",
    ),
)
"""The schema, in order: a database at ``user_version`` v gets ``MIGRATIONS[v:]``. Append
only; never edit a released step."""

SCHEMA_VERSION = len(MIGRATIONS)

EVENTS_KEPT = 1000
"""Events kept per service; the oldest are pruned on append."""
COMMANDS_KEPT = 1000
"""Taken commands kept per service (for inspection); untaken ones are never pruned."""
ROLLOUTS_KEPT = 100
"""Rollout records kept per service."""

BUSY_TIMEOUT_S = 5.0


class StoreError(Exception):
    """The store cannot be opened or used; the message names the file and what to do."""


@dataclass(frozen=True)
class Service:
    namespace: str
    name: str
    spec: dict[str, Any]
    generation: int
    """1 on creation; +1 each time ``put_spec`` changes the spec."""
    updated: float


@dataclass(frozen=True)
class StoredEvent:
    id: int
    time: float
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class QueuedCommand:
    id: int
    op: str
    version: int | None
    enqueued: float
    """When the CLI enqueued it (seconds since the epoch)."""


CommandOutcome = Literal["done", "refused", "failed"]
"""What became of a command: carried out, refused by the rollout machine, or lost with a
cycle that failed."""


@dataclass(frozen=True)
class StoredCommand:
    """A command with what became of it (``taken``/``outcome`` None: not yet)."""

    id: int
    op: str
    version: int | None
    enqueued: float
    taken: float | None
    outcome: CommandOutcome | None
    message: str


@dataclass(frozen=True)
class RolloutRecord:
    id: int
    time: float
    record: dict[str, Any]


def _dumps(value: Any, what: str) -> str:
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise StoreError(f"{what} is not JSON: {e}") from e


def _loads_object(text: str, what: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise StoreError(f"{what}: stored value is not a JSON object")
    return value


class Store:
    """One connection to the state store at ``path``. Open with :meth:`open`."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: Path,
        *,
        events_kept: int = EVENTS_KEPT,
    ) -> None:
        self._conn = conn
        self.path = path
        self.events_kept = events_kept

    # ---- opening ------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
        migrations: Sequence[Migration] = MIGRATIONS,
        events_kept: int = EVENTS_KEPT,
    ) -> Store:
        """Open (creating, or upgrading to ``len(migrations)``) the store at ``path``."""
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"state store at {path}: cannot create its directory: {e}") from e
        try:
            # isolation_level=None: no implicit transactions; every write says BEGIN itself.
            conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None)
        except sqlite3.Error as e:
            raise StoreError(f"state store at {path}: cannot open: {e}") from e
        try:
            _configure(conn, path, busy_timeout_s)
            _migrate(conn, path, migrations)
        except StoreError:
            conn.close()
            raise
        except sqlite3.DatabaseError as e:
            conn.close()
            if "not a database" in str(e) or "malformed" in str(e):
                raise StoreError(
                    f"{path} is not a servectl state store (not a SQLite database: {e}); "
                    "move it away or choose another state directory"
                ) from e
            raise StoreError(f"state store at {path}: {e}") from e
        return cls(conn, path, events_kept=events_kept)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    # ---- plumbing -----------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taking the write lock up front (waits up to the busy
        timeout for another writer). Commits on success, rolls back on any exception."""
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise StoreError(f"state store at {self.path}: {e}") from e
        try:
            yield conn
        except sqlite3.Error as e:
            _rollback(conn)
            raise StoreError(f"state store at {self.path}: {e}") from e
        except BaseException:
            _rollback(conn)
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as e:
            _rollback(conn)
            raise StoreError(f"state store at {self.path}: commit failed: {e}") from e

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        try:
            return self._conn.execute(sql, args).fetchall()
        except sqlite3.Error as e:
            raise StoreError(f"state store at {self.path}: {e}") from e

    @staticmethod
    def _service_id(conn: sqlite3.Connection, namespace: str, name: str) -> int:
        row = conn.execute(
            "SELECT id FROM services WHERE namespace = ? AND name = ?", (namespace, name)
        ).fetchone()
        if row is None:
            raise StoreError(f"no ModelService {namespace}/{name} in the state store")
        return int(row[0])

    # ---- services -----------------------------------------------------------------------

    def put_spec(
        self, namespace: str, name: str, spec: Mapping[str, Any], *, now: float | None = None
    ) -> int:
        """Create or replace the spec; returns the generation (1 when created, +1 when the
        spec changed, unchanged when the same spec is put again)."""
        text = _dumps(spec, f"spec of {namespace}/{name}")
        now = time.time() if now is None else now
        with self._write() as conn:
            row = conn.execute(
                "SELECT spec, generation FROM services WHERE namespace = ? AND name = ?",
                (namespace, name),
            ).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO services (namespace, name, spec, generation, updated) "
                    "VALUES (?, ?, ?, 1, ?)",
                    (namespace, name, text, now),
                )
                return 1
            old_text, generation = str(row[0]), int(row[1])
            if json.loads(old_text) == json.loads(text):
                return generation
            conn.execute(
                "UPDATE services SET spec = ?, generation = ?, updated = ? "
                "WHERE namespace = ? AND name = ?",
                (text, generation + 1, now, namespace, name),
            )
            return generation + 1

    def get_spec(self, namespace: str, name: str) -> Service | None:
        rows = self._read(
            "SELECT namespace, name, spec, generation, updated FROM services "
            "WHERE namespace = ? AND name = ?",
            (namespace, name),
        )
        return _service(rows[0]) if rows else None

    def list_services(self, namespace: str | None = None) -> list[Service]:
        """All services (or one namespace's), by namespace then name."""
        sql = "SELECT namespace, name, spec, generation, updated FROM services"
        args: tuple[str, ...] = ()
        if namespace is not None:
            sql += " WHERE namespace = ?"
            args = (namespace,)
        return [_service(r) for r in self._read(sql + " ORDER BY namespace, name", args)]

    def delete_service(self, namespace: str, name: str) -> bool:
        """Delete the service and everything stored for it; False if there was none."""
        with self._write() as conn:
            cursor = conn.execute(
                "DELETE FROM services WHERE namespace = ? AND name = ?", (namespace, name)
            )
            return cursor.rowcount > 0

    # ---- status and loop state ----------------------------------------------------------

    # One document per service in each of three tables (table -> its column); a write
    # replaces it. Names from this constant only, never from input, go into the SQL.
    _PER_SERVICE: ClassVar[Mapping[str, str]] = {
        "status": "status",
        "loop_state": "state",
        "runtime": "data",
    }

    def _put_per_service(
        self, table: str, namespace: str, name: str, text: str, now: float | None
    ) -> None:
        column = self._PER_SERVICE[table]
        now = time.time() if now is None else now
        with self._write() as conn:
            sid = self._service_id(conn, namespace, name)
            conn.execute(
                f"INSERT INTO {table} (service_id, {column}, updated) VALUES (?, ?, ?) "
                f"ON CONFLICT (service_id) DO UPDATE SET {column} = excluded.{column}, "
                "updated = excluded.updated",
                (sid, text, now),
            )

    def _get_per_service(self, table: str, namespace: str, name: str) -> str | None:
        column = self._PER_SERVICE[table]
        rows = self._read(
            f"SELECT t.{column} FROM {table} t JOIN services s ON s.id = t.service_id "
            "WHERE s.namespace = ? AND s.name = ?",
            (namespace, name),
        )
        return str(rows[0][0]) if rows else None

    def put_status(
        self, namespace: str, name: str, status: Mapping[str, Any], *, now: float | None = None
    ) -> None:
        text = _dumps(status, f"status of {namespace}/{name}")
        self._put_per_service("status", namespace, name, text, now)

    def get_status(self, namespace: str, name: str) -> dict[str, Any] | None:
        text = self._get_per_service("status", namespace, name)
        return None if text is None else _loads_object(text, f"status of {namespace}/{name}")

    def put_loop_state(
        self, namespace: str, name: str, text: str, *, now: float | None = None
    ) -> None:
        """Save the loop state text (``servectl.controller.state.dumps``), unparsed."""
        self._put_per_service("loop_state", namespace, name, text, now)

    def get_loop_state(self, namespace: str, name: str) -> str | None:
        return self._get_per_service("loop_state", namespace, name)

    def put_runtime(
        self, namespace: str, name: str, data: Mapping[str, Any], *, now: float | None = None
    ) -> None:
        """Save the runtime's own record of the service (ports, revisions as applied)."""
        text = _dumps(data, f"runtime record of {namespace}/{name}")
        self._put_per_service("runtime", namespace, name, text, now)

    def get_runtime(self, namespace: str, name: str) -> dict[str, Any] | None:
        text = self._get_per_service("runtime", namespace, name)
        where = f"runtime record of {namespace}/{name}"
        return None if text is None else _loads_object(text, where)

    def all_runtime(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Every service's runtime record, by (namespace, name)."""
        rows = self._read(
            "SELECT s.namespace, s.name, r.data FROM runtime r "
            "JOIN services s ON s.id = r.service_id"
        )
        return {
            (str(r[0]), str(r[1])): _loads_object(r[2], f"runtime record of {r[0]}/{r[1]}")
            for r in rows
        }

    # ---- settings -----------------------------------------------------------------------

    def put_setting(self, key: str, value: Any) -> None:
        text = _dumps(value, f"setting {key}")
        with self._write() as conn:
            conn.execute(
                "INSERT INTO settings (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, text),
            )

    def get_setting(self, key: str) -> Any:
        """The setting's value, or None when unset."""
        rows = self._read("SELECT value FROM settings WHERE key = ?", (key,))
        return json.loads(rows[0][0]) if rows else None

    # ---- the last cycle ---------------------------------------------------------------

    @staticmethod
    def _cycle_key(namespace: str, name: str) -> str:
        return f"cycle/{namespace}/{name}"

    def put_cycle(self, namespace: str, name: str, cycle: Mapping[str, Any]) -> None:
        """The service's last cycle as JSON (what ``servectl explain`` and ``top`` show):
        kept as a setting, so a new cycle replaces the old one with no schema change."""
        self.put_setting(self._cycle_key(namespace, name), dict(cycle))

    def get_cycle(self, namespace: str, name: str) -> dict[str, Any] | None:
        value = self.get_setting(self._cycle_key(namespace, name))
        return dict(value) if isinstance(value, Mapping) else None

    # ---- events -------------------------------------------------------------------------

    def append_events(
        self, namespace: str, name: str, events: Sequence[Mapping[str, Any]]
    ) -> list[int]:
        """Append events (each with ``time``, ``type``, ``reason``, ``message``); returns
        their ids, increasing. Keeps the newest ``events_kept`` of the service."""
        rows: list[tuple[float, str, str, str]] = []
        for i, event in enumerate(events):
            try:
                t = float(event["time"])
                row = (t, str(event["type"]), str(event["reason"]), str(event["message"]))
            except (KeyError, TypeError, ValueError) as e:
                where = f"event {i} of {namespace}/{name}"
                raise StoreError(f"{where}: needs time, type, reason, message ({e!r})") from e
            if not math.isfinite(t):
                raise StoreError(f"event {i} of {namespace}/{name}: time is {t}")
            rows.append(row)
        ids: list[int] = []
        with self._write() as conn:
            sid = self._service_id(conn, namespace, name)
            for row in rows:
                cursor = conn.execute(
                    "INSERT INTO events (service_id, time, type, reason, message) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (sid, *row),
                )
                assert cursor.lastrowid is not None
                ids.append(cursor.lastrowid)
            _prune(conn, "events", sid, self.events_kept)
        return ids

    def events(
        self, namespace: str, name: str, *, since_id: int | None = None, limit: int = 100
    ) -> list[StoredEvent]:
        """Events in id order: with ``since_id``, the first ``limit`` after it (follow
        with the last id returned); without, the newest ``limit``."""
        select = (
            "SELECT e.id, e.time, e.type, e.reason, e.message FROM events e "
            "JOIN services s ON s.id = e.service_id WHERE s.namespace = ? AND s.name = ?"
        )
        if since_id is None:
            rows = self._read(select + " ORDER BY e.id DESC LIMIT ?", (namespace, name, limit))
            rows.reverse()
        else:
            rows = self._read(
                select + " AND e.id > ? ORDER BY e.id LIMIT ?", (namespace, name, since_id, limit)
            )
        return [StoredEvent(int(r[0]), float(r[1]), r[2], r[3], r[4]) for r in rows]

    # ---- the command queue --------------------------------------------------------------

    def enqueue_command(
        self, namespace: str, name: str, op: str, version: int | None = None
    ) -> int:
        """Queue a user's rollout command for the controller; returns its id."""
        with self._write() as conn:
            sid = self._service_id(conn, namespace, name)
            cursor = conn.execute(
                "INSERT INTO commands (service_id, op, version, enqueued) VALUES (?, ?, ?, ?)",
                (sid, op, version, time.time()),
            )
            assert cursor.lastrowid is not None
            return cursor.lastrowid

    def take_commands(
        self, namespace: str, name: str, *, now: float | None = None
    ) -> list[QueuedCommand]:
        """The commands not yet taken, in enqueue order, marked taken in the same
        transaction: each command is returned by exactly one call, whoever calls."""
        now = time.time() if now is None else now
        with self._write() as conn:
            row = conn.execute(
                "SELECT id FROM services WHERE namespace = ? AND name = ?", (namespace, name)
            ).fetchone()
            if row is None:
                return []
            sid = int(row[0])
            rows = conn.execute(
                "SELECT id, op, version, enqueued FROM commands "
                "WHERE service_id = ? AND taken IS NULL ORDER BY id",
                (sid,),
            ).fetchall()
            if rows:
                conn.execute(
                    "UPDATE commands SET taken = ? WHERE service_id = ? AND taken IS NULL "
                    "AND id <= ?",
                    (now, sid, rows[-1][0]),
                )
                _prune(conn, "commands", sid, COMMANDS_KEPT, where="taken IS NOT NULL")
        return [QueuedCommand(int(r[0]), r[1], r[2], float(r[3])) for r in rows]

    def pending_commands(self, namespace: str, name: str) -> list[QueuedCommand]:
        """The commands not yet taken, in enqueue order (read only: nothing is taken)."""
        rows = self._read(
            "SELECT c.id, c.op, c.version, c.enqueued FROM commands c "
            "JOIN services s ON s.id = c.service_id "
            "WHERE s.namespace = ? AND s.name = ? AND c.taken IS NULL ORDER BY c.id",
            (namespace, name),
        )
        return [QueuedCommand(int(r[0]), r[1], r[2], float(r[3])) for r in rows]

    def settle_commands(
        self,
        namespace: str,
        name: str,
        outcomes: Mapping[int, tuple[CommandOutcome, str]],
    ) -> None:
        """Record what became of taken commands (id -> outcome, message): the controller,
        once the cycle that took them has decided. A command of another service, or one
        not taken, is left alone."""
        if not outcomes:
            return
        with self._write() as conn:
            row = conn.execute(
                "SELECT id FROM services WHERE namespace = ? AND name = ?", (namespace, name)
            ).fetchone()
            if row is None:
                return  # deleted meanwhile: its commands went with it
            for ident, (outcome, message) in sorted(outcomes.items()):
                conn.execute(
                    "UPDATE commands SET outcome = ?, message = ? "
                    "WHERE id = ? AND service_id = ? AND taken IS NOT NULL",
                    (outcome, message, ident, int(row[0])),
                )

    def command(self, namespace: str, name: str, ident: int) -> StoredCommand | None:
        """One command of the service and what became of it; None when there is none
        (never queued, pruned, or the service was deleted)."""
        rows = self._read(
            "SELECT c.id, c.op, c.version, c.enqueued, c.taken, c.outcome, c.message "
            "FROM commands c JOIN services s ON s.id = c.service_id "
            "WHERE s.namespace = ? AND s.name = ? AND c.id = ?",
            (namespace, name, ident),
        )
        if not rows:
            return None
        r = rows[0]
        outcome = r[5] if r[5] in ("done", "refused", "failed") else None
        return StoredCommand(
            id=int(r[0]),
            op=str(r[1]),
            version=r[2],
            enqueued=float(r[3]),
            taken=None if r[4] is None else float(r[4]),
            outcome=cast("CommandOutcome | None", outcome),
            message=str(r[6] or ""),
        )

    # ---- rollout history ----------------------------------------------------------------

    def append_rollout(
        self, namespace: str, name: str, record: Mapping[str, Any], *, now: float | None = None
    ) -> int:
        """Record a finished (or aborted) rollout; returns its id. Keeps the newest
        ``ROLLOUTS_KEPT``."""
        text = _dumps(record, f"rollout record of {namespace}/{name}")
        now = time.time() if now is None else now
        with self._write() as conn:
            sid = self._service_id(conn, namespace, name)
            cursor = conn.execute(
                "INSERT INTO rollouts (service_id, time, record) VALUES (?, ?, ?)",
                (sid, now, text),
            )
            _prune(conn, "rollouts", sid, ROLLOUTS_KEPT)
            assert cursor.lastrowid is not None
            return cursor.lastrowid

    def rollout_history(self, namespace: str, name: str) -> list[RolloutRecord]:
        """Rollout records, oldest first."""
        rows = self._read(
            "SELECT r.id, r.time, r.record FROM rollouts r "
            "JOIN services s ON s.id = r.service_id "
            "WHERE s.namespace = ? AND s.name = ? ORDER BY r.id",
            (namespace, name),
        )
        return [
            RolloutRecord(int(r[0]), float(r[1]), _loads_object(r[2], "rollout record"))
            for r in rows
        ]


def _service(row: Sequence[Any]) -> Service:
    namespace, name = str(row[0]), str(row[1])
    return Service(
        namespace=namespace,
        name=name,
        spec=_loads_object(row[2], f"spec of {namespace}/{name}"),
        generation=int(row[3]),
        updated=float(row[4]),
    )


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _prune(
    conn: sqlite3.Connection, table: str, service_id: int, kept: int, *, where: str = "1"
) -> None:
    """Delete all but the newest ``kept`` rows of ``table`` for the service."""
    conn.execute(
        f"DELETE FROM {table} WHERE service_id = ? AND {where} AND id NOT IN "
        f"(SELECT id FROM {table} WHERE service_id = ? AND {where} ORDER BY id DESC LIMIT ?)",
        (service_id, service_id, kept),
    )


def _configure(conn: sqlite3.Connection, path: Path, busy_timeout_s: float) -> None:
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise StoreError(
            f"state store at {path}: SQLite cannot use WAL journal mode there (got {mode!r}); "
            "put the state directory on a local file system"
        )
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA foreign_keys = ON")


def _migrate(conn: sqlite3.Connection, path: Path, migrations: Sequence[Migration]) -> None:
    known = len(migrations)

    def check(version: int) -> None:
        if version > known:
            raise StoreError(
                f"state store at {path} has schema {version}; this servectl knows up to "
                f"{known}: upgrade servectl"
            )

    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    check(version)
    if version == known:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another process may have upgraded it while we waited for the lock.
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        check(version)
        for step in migrations[version:]:
            for statement in step:
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {known}")
    except BaseException:
        _rollback(conn)
        raise
    conn.execute("COMMIT")
