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

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from flexamem.errors import (
    ConcurrentWriteError,
    DuplicateUnitError,
    ReadOnlyStoreError,
    StoreClosedError,
    StoreError,
    WriteOnceError,
)
from flexamem.store.sql import SQLStore

_IMMUTABLE = ("notes", "pieces", "links", "merged", "steps", "piece_vectors")

MIGRATIONS: list[str] = [
    # 1: everything SQLite's schema 3 holds
    """
    CREATE TABLE histories (
        id TEXT PRIMARY KEY, kind TEXT NOT NULL, meta TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE notes (
        history_id TEXT NOT NULL REFERENCES histories(id), seq INTEGER NOT NULL,
        unit_id TEXT NOT NULL, kind TEXT NOT NULL, session_id TEXT, date TEXT,
        step_first INTEGER, step_last INTEGER,
        raw TEXT NOT NULL, raw_tokens INTEGER NOT NULL,
        record TEXT NOT NULL, record_tokens INTEGER NOT NULL,
        fields TEXT NOT NULL, fields_tokens INTEGER NOT NULL,
        embedding BYTEA NOT NULL, blocks TEXT NOT NULL,
        writer TEXT NOT NULL, flagged INTEGER NOT NULL, created_at DOUBLE PRECISION NOT NULL,
        flag_reason TEXT,
        CONSTRAINT notes_seq PRIMARY KEY (history_id, seq),
        CONSTRAINT notes_unit UNIQUE (history_id, unit_id)
    );
    CREATE TABLE pieces (
        history_id TEXT NOT NULL, seq INTEGER NOT NULL, idx INTEGER NOT NULL,
        start INTEGER NOT NULL, "end" INTEGER NOT NULL, tokens INTEGER NOT NULL,
        label TEXT, label_tokens INTEGER NOT NULL, block INTEGER NOT NULL, source_id TEXT,
        PRIMARY KEY (history_id, seq, idx)
    );
    CREATE TABLE links (
        history_id TEXT NOT NULL, src INTEGER NOT NULL, dst INTEGER NOT NULL, id BIGSERIAL,
        PRIMARY KEY (history_id, src, dst)
    );
    CREATE TABLE merged (
        history_id TEXT NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL,
        level INTEGER NOT NULL, text TEXT NOT NULL, tokens INTEGER NOT NULL, writer TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL, flagged INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (history_id, first_seq, last_seq, level)
    );
    CREATE TABLE piece_vectors (
        history_id TEXT NOT NULL, seq INTEGER NOT NULL, idx INTEGER NOT NULL, vector BYTEA NOT NULL,
        PRIMARY KEY (history_id, seq, idx)
    );
    CREATE TABLE llm_calls (
        id BIGSERIAL PRIMARY KEY, history_id TEXT NOT NULL, seq INTEGER, purpose TEXT NOT NULL,
        model TEXT NOT NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
        cached INTEGER NOT NULL, created_at DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX llm_calls_by_note ON llm_calls (history_id, seq);
    CREATE TABLE state (
        history_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (history_id, key)
    );
    CREATE TABLE steps (
        history_id TEXT NOT NULL, n INTEGER NOT NULL, step_id TEXT, data TEXT NOT NULL,
        CONSTRAINT steps_n PRIMARY KEY (history_id, n), CONSTRAINT steps_id UNIQUE (history_id, step_id)
    );
    CREATE TABLE dropping (history_id TEXT PRIMARY KEY);
    CREATE FUNCTION flexamem_write_once() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'DELETE' AND EXISTS (
            SELECT 1 FROM dropping WHERE history_id = to_jsonb(OLD) ->> TG_ARGV[0]) THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'flexamem: % are write-once', TG_TABLE_NAME;
    END $$;
    """
    + "".join(
        f"""
    CREATE TRIGGER {t}_write_once BEFORE UPDATE OR DELETE ON {t}
        FOR EACH ROW EXECUTE FUNCTION flexamem_write_once('{"id" if t == "histories" else "history_id"}');
    """
        for t in (*_IMMUTABLE, "histories")
    ),
    # 2: each note's digest, chained over the notes before it (Memory.verify)
    "ALTER TABLE notes ADD COLUMN digest TEXT;",
    # 3: each history's epoch (SQLite's schema 5)
    "ALTER TABLE histories ADD COLUMN epoch TEXT;",
]
SCHEMA_VERSION = len(MIGRATIONS)


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
                kwargs={"autocommit": False, "options": options},
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
        if self._closed:
            raise StoreClosedError("the store is closed")
        with self._pool.connection() as conn:
            yield conn

    def _migrate(self) -> None:
        with self._conn() as conn:
            try:
                if self.read_only:
                    self._check_version(conn)
                    return
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(7919)")  # one migrator at a time
                    conn.execute("CREATE TABLE IF NOT EXISTS flexamem_schema (version INTEGER NOT NULL)")
                    row = conn.execute("SELECT version FROM flexamem_schema").fetchone()
                    version = row[0] if row else 0
                    if version > SCHEMA_VERSION:
                        raise StoreError(f"database schema v{version} is newer than this FlexA-Mem (v{SCHEMA_VERSION})")
                    for n in range(version, SCHEMA_VERSION):
                        conn.execute(MIGRATIONS[n])
                    if row is None:
                        conn.execute("INSERT INTO flexamem_schema VALUES (%s)", (SCHEMA_VERSION,))
                    elif version != SCHEMA_VERSION:
                        conn.execute("UPDATE flexamem_schema SET version = %s", (SCHEMA_VERSION,))
            except self._psycopg.Error as exc:
                raise _map_error(exc, self.path) from exc

    def _check_version(self, conn: Any) -> None:
        try:
            row = conn.execute("SELECT version FROM flexamem_schema").fetchone()
        except self._psycopg.Error as exc:
            raise ReadOnlyStoreError(f"{_safe(self.path)} has no FlexA-Mem schema and is open read-only") from exc
        finally:
            conn.rollback()
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
        sql = sql.replace("?", "%s")  # the shared queries (store/sql.py) use ? placeholders
        with self._conn() as conn:
            try:
                rows: list[Any] = conn.execute(sql, args).fetchall()
                return rows
            except self._psycopg.Error as exc:
                raise _map_error(exc, self.path) from exc
            finally:
                conn.rollback()

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
    text = str(exc).strip()
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
