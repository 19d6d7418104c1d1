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

import json
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
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
from flexamem.notes import LLMCall, Note
from flexamem.store.base import MergedRecord, StepRow
from flexamem.store.rows import note_row, piece_rows, vector_rows
from flexamem.store.sql import SQLReads

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
]
SCHEMA_VERSION = len(MIGRATIONS)


class PostgresStore(SQLReads):
    LINK_ORDER = "id"

    """A :class:`~flexamem.store.base.Store` in a PostgreSQL database (shared by every process)."""

    def __init__(self, url: str, *, read_only: bool = False, pool_size: int = 4) -> None:
        try:
            import psycopg
            from psycopg_pool import ConnectionPool
        except ImportError as exc:  # pragma: no cover - depends on the installed extras
            raise StoreError("PostgreSQL needs the postgres extra: pip install 'flexamem[postgres]'") from exc
        self._psycopg = psycopg
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

    # -- histories ---------------------------------------------------------------------------------
    def ensure_history(self, history: str, kind: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
        rows = self._read("SELECT kind, meta FROM histories WHERE id = %s", (history,))
        if not rows:
            with self._write() as conn:
                conn.execute(
                    "INSERT INTO histories VALUES (%s, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
                    (history, kind, json.dumps(meta or {}), time.time()),
                )
            rows = self._read("SELECT kind, meta FROM histories WHERE id = %s", (history,))
        if rows[0][0] != kind:
            raise StoreError(f"history {history!r} is a {rows[0][0]} history, not {kind}")
        return dict(json.loads(rows[0][1]))

    def drop_history(self, history: str) -> bool:
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM histories WHERE id = %s FOR UPDATE", (history,)).fetchone() is None:
                return False
            conn.execute("INSERT INTO dropping VALUES (%s) ON CONFLICT DO NOTHING", (history,))
            for table in ("pieces", "piece_vectors", "links", "merged", "steps", "state", "llm_calls", "notes"):
                conn.execute(f"DELETE FROM {table} WHERE history_id = %s", (history,))
            conn.execute("DELETE FROM histories WHERE id = %s", (history,))
            conn.execute("DELETE FROM dropping WHERE history_id = %s", (history,))
        return True

    # -- notes -------------------------------------------------------------------------------------
    def append_notes(
        self,
        history: str,
        notes: Sequence[Note],
        links: Sequence[tuple[int, int]],
        calls: Sequence[LLMCall] = (),
        *,
        steps: Sequence[StepRow] = (),
        state: Mapping[str, Any] | None = None,
    ) -> None:
        now = time.time()
        with self._write() as conn:
            if notes:
                conn.execute(
                    "INSERT INTO histories VALUES (%s, %s, '{}', %s) ON CONFLICT (id) DO NOTHING",
                    (history, notes[0].kind, now),
                )
                kind = conn.execute("SELECT kind FROM histories WHERE id = %s", (history,)).fetchone()[0]
                if kind != notes[0].kind:
                    raise StoreError(f"history {history!r} is a {kind} history, not {notes[0].kind}")
            for step in steps:
                conn.execute("INSERT INTO steps VALUES (%s,%s,%s,%s)", (history, step.n, step.step_id, step.data))
            for key, value in (state or {}).items():
                conn.execute(
                    "INSERT INTO state VALUES (%s,%s,%s) ON CONFLICT (history_id, key) DO UPDATE SET value = %s",
                    (history, key, json.dumps(value), json.dumps(value)),
                )
            with conn.cursor() as cur:
                for n in notes:
                    cur.execute("INSERT INTO notes VALUES (" + ",".join(["%s"] * 21) + ")", note_row(history, n, now))
                    cur.executemany("INSERT INTO pieces VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)", piece_rows(history, n))
                    cur.executemany(
                        "INSERT INTO piece_vectors VALUES (%s,%s,%s,%s) ON CONFLICT DO NOTHING", vector_rows(history, n)
                    )
                if links:
                    cur.executemany(
                        "INSERT INTO links (history_id, src, dst) VALUES (%s,%s,%s) ON CONFLICT DO NOTHING",
                        [(history, a, b) for a, b in links],
                    )
                _insert_calls(cur, history, calls)

    # -- caches and accounting ---------------------------------------------------------------------
    def put_merged(self, history: str, merged: MergedRecord, calls: Sequence[LLMCall] = ()) -> MergedRecord:
        with self._write() as conn:
            with conn.cursor() as cur:
                _insert_calls(cur, history, calls)
            conn.execute(
                "INSERT INTO merged VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT DO NOTHING",
                (
                    history,
                    merged.first,
                    merged.last,
                    merged.level,
                    merged.text,
                    merged.tokens,
                    merged.writer,
                    time.time(),
                    int(merged.flagged),
                ),
            )
        return self.get_merged(history, merged.first, merged.last, merged.level) or merged

    def record_llm_call(self, history: str, call: LLMCall) -> None:
        with self._write() as conn, conn.cursor() as cur:
            _insert_calls(cur, history, [call])


def _insert_calls(cur: Any, history: str, calls: Sequence[LLMCall]) -> None:
    if not calls:
        return
    now = time.time()
    cur.executemany(
        "INSERT INTO llm_calls (history_id, seq, purpose, model, prompt_tokens, completion_tokens, cached, created_at)"
        " VALUES (%s,%s,%s,%s,%s,%s,%s,%s)",
        [(history, c.seq, c.purpose, c.model, c.prompt_tokens, c.completion_tokens, int(c.cached), now) for c in calls],
    )


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
