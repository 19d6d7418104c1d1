"""PostgreSQL store: many machines on one truth (``fm.Memory("postgresql://user@host/db")``).

The same tables and the same promises as :mod:`flexamem.store.sqlite`: a migrations list, one
transaction per write, write-once enforced by the database (triggers refuse UPDATE and DELETE of
notes, pieces, links, merged records, steps and histories, except the deletion of a whole history
marked in ``dropping`` by :meth:`PostgresStore.drop_history`). Connections come from a small
``psycopg_pool`` pool, so one store is safe to share between threads.

Vectors are stored as ``bytea`` (float32) and scored in process, per history: a history is one
conversation or one agent episode (thousands of notes at most), while the scale of a deployment is in
the number of histories, which this spreads over every worker and machine. pgvector is not needed
(nor available in Debian 12's PostgreSQL); see docs/RELIABILITY.md for the limits.

Requires the ``postgres`` extra: ``pip install 'flexamem[postgres]'`` (psycopg 3 and psycopg_pool).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from flexamem.errors import (
    ConcurrentWriteError,
    DuplicateUnitError,
    FlexaMemError,
    ReadOnlyStoreError,
    StoreClosedError,
    StoreError,
    StoreFullError,
    StoreUnavailableError,
    WriteOnceError,
)
from flexamem.store.schema import LEGACY_POSTGRES, MIGRATIONS, SCHEMA_VERSION
from flexamem.store.sql import SCRUBBED, SQLStore


class PostgresStore(SQLStore):
    """A :class:`~flexamem.store.base.Store` in a PostgreSQL database (shared by every process)."""

    LINK_ORDER = "id"
    LOCK_ROW = " FOR UPDATE"
    SHARE_ROW = " FOR SHARE"

    def __init__(self, url: str, *, read_only: bool = False, pool_size: int = 4) -> None:
        try:
            import psycopg
            from psycopg_pool import ConnectionPool
        except ImportError as exc:  # pragma: no cover - depends on the installed extras
            raise StoreError("PostgreSQL needs the postgres extra: pip install 'flexamem[postgres]'") from exc
        self._psycopg = psycopg
        self.INTEGRITY = (psycopg.IntegrityError,)
        self.path = url
        self.read_only = read_only
        self._closed = False
        self._lock = threading.Lock()
        options = "-c default_transaction_read_only=on" if read_only else ""
        try:
            self._pool = ConnectionPool(
                url,
                min_size=1,
                max_size=pool_size,
                kwargs={"autocommit": True, "options": options},  # a read is one statement; a write, transaction()
                open=True,
                timeout=30,
            )
            self._pool.wait(timeout=30)
        except Exception as exc:
            raise StoreError(f"cannot connect to {_safe(url)}: {exc}") from exc
        self._migrate()

    # -- plumbing ----------------------------------------------------------------------------------
    @contextmanager
    def _conn(self) -> Iterator[Any]:
        """A pooled connection. Failing to get one (the server restarting, the network gone, the pool
        exhausted past its timeout) is :class:`StoreUnavailableError`: nothing was done, try again."""
        if self._closed:
            raise StoreClosedError("the store is closed")
        from psycopg_pool import PoolTimeout

        try:
            with self._pool.connection() as conn:
                yield conn
        except (self._psycopg.Error, PoolTimeout) as exc:
            raise _map_error(exc, self.path) from exc

    def _migrate(self) -> None:
        with self._conn() as conn:
            try:
                if self.read_only:
                    self._check_version(conn)
                    return
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(7919)")  # one migrator at a time
                    version = self._stored_version(conn)
                    if version > SCHEMA_VERSION:
                        raise StoreError(f"database schema v{version} is newer than this FlexA-Mem (v{SCHEMA_VERSION})")
                    for n in range(version, SCHEMA_VERSION):
                        if MIGRATIONS[n].postgres:
                            conn.execute(MIGRATIONS[n].postgres)
                    conn.execute("UPDATE flexamem_migrations SET version = %s", (SCHEMA_VERSION,))
            except self._psycopg.Error as exc:
                raise _map_error(exc, self.path) from exc

    @staticmethod
    def _stored_version(conn: Any) -> int:
        """The schema version in the shared numbering (inside the migrating transaction): read from
        ``flexamem_migrations``; a database from before the shared list has only ``flexamem_schema``
        in PostgreSQL's own numbering, translated once (``LEGACY_POSTGRES``)."""
        conn.execute("CREATE TABLE IF NOT EXISTS flexamem_schema (version INTEGER NOT NULL)")
        conn.execute("CREATE TABLE IF NOT EXISTS flexamem_migrations (version INTEGER NOT NULL)")
        row = conn.execute("SELECT version FROM flexamem_migrations").fetchone()
        if row is not None:
            return int(row[0])
        legacy = conn.execute("SELECT version FROM flexamem_schema").fetchone()
        version = LEGACY_POSTGRES.get(int(legacy[0]), int(legacy[0])) if legacy else 0
        conn.execute("INSERT INTO flexamem_migrations VALUES (%s)", (version,))
        return version

    def _check_version(self, conn: Any) -> None:
        try:
            row = conn.execute("SELECT version FROM flexamem_migrations").fetchone()
        except self._psycopg.Error as exc:
            raise ReadOnlyStoreError(f"{_safe(self.path)} has no FlexA-Mem schema and is open read-only") from exc
        if row is None or row[0] != SCHEMA_VERSION:
            raise ReadOnlyStoreError(f"database schema needs migrating, but {_safe(self.path)} is open read-only")

    @contextmanager
    def _write(self) -> Iterator[Any]:
        if self.read_only:
            raise ReadOnlyStoreError(f"{_safe(self.path)} is open read-only")
        with self._conn() as conn:
            try:
                with conn.transaction():
                    yield conn
            except self._psycopg.Error as exc:
                raise _map_error(exc, self.path) from exc

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        """One read; on a connection the server dropped (a restart: the pool's idle connections all
        die), once more on a fresh one, since a read changes nothing."""
        sql = sql.replace("?", "%s")  # the shared queries (store/sql.py) use ? placeholders
        for attempt in range(2):
            try:
                with self._conn() as conn:  # one statement, one snapshot: no BEGIN and ROLLBACK round trips
                    rows: list[Any] = conn.execute(sql, args).fetchall()
                    return rows
            except StoreUnavailableError:
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def scrub(self) -> None:
        """VACUUM FULL of the tables an erasure rewrites (each is rewritten without the dead rows that
        held erased words; it holds an exclusive lock on each table while it runs, so run it in a quiet
        window), then a CHECKPOINT when the role may. WAL segments, replicas and base backups keep the old
        bytes until they are recycled or expire: docs/RELIABILITY.md says what an operator must do."""
        if self.read_only:
            raise ReadOnlyStoreError(f"{_safe(self.path)} is open read-only")
        with self._conn() as conn:  # autocommit: VACUUM runs outside a transaction
            try:
                for table in SCRUBBED:
                    conn.execute(f"VACUUM FULL {table}")
                with contextlib.suppress(self._psycopg.errors.InsufficientPrivilege):
                    conn.execute("CHECKPOINT")
            except self._psycopg.Error as exc:
                raise _map_error(exc, self.path) from exc

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._pool.close()

    def _run(self, conn: Any, sql: str, args: Sequence[Any] = ()) -> Any:
        return conn.execute(sql.replace("?", "%s"), args)

    def _run_many(self, conn: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            with conn.cursor() as cur:
                cur.executemany(sql.replace("?", "%s"), rows)


def _safe(url: str) -> str:
    """The URL without its password, for messages."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':', 1)[0]}@{host}"
    return url


def _map_error(exc: Exception, url: str) -> Exception:
    """psycopg's error as ours, naming its cause (by SQLSTATE where there is one)."""
    import psycopg

    text = str(exc).strip()
    if isinstance(exc, FlexaMemError):
        return exc
    state = getattr(exc, "sqlstate", None) or ""
    first = text.splitlines()[0] if text else type(exc).__name__
    if state == "53100" or "No space left" in text or "disk full" in text.lower():
        return StoreFullError(f"{_safe(url)}: the database's disk is full ({first}); nothing of this write was stored")
    if (
        state.startswith(("08", "57P"))  # connection exceptions; admin/crash shutdown, cannot connect now
        or isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
        or type(exc).__name__ == "PoolTimeout"
    ) and not state.startswith(("53", "54", "55")):
        return StoreUnavailableError(f"{_safe(url)} cannot be reached right now ({first}): try again")
    constraint = getattr(getattr(exc, "diag", None), "constraint_name", None) or ""
    if "write-once" in text:
        return WriteOnceError(text.split("flexamem: ", 1)[-1].splitlines()[0])
    if constraint == "notes_unit":
        return DuplicateUnitError(f"unit already in the history ({text.splitlines()[0]})")
    if constraint in ("notes_seq", "steps_n", "steps_id"):
        return ConcurrentWriteError(f"another writer appended first ({constraint})")
    if "read-only transaction" in text:
        return ReadOnlyStoreError(f"{_safe(url)} is open read-only")
    return StoreError(f"{_safe(url)}: {text.splitlines()[0] if text else type(exc).__name__}")
