"""SQLite store: the embedded default (WAL, a migrations list, one transaction per write).

Write-once is enforced by the database itself: triggers abort any UPDATE or DELETE of notes, pieces,
links and merged records, so not even raw SQL through this connection can rewrite history.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flexamem.errors import (
    ConcurrentWriteError,
    DuplicateUnitError,
    ReadOnlyStoreError,
    StoreClosedError,
    StoreError,
    WriteOnceError,
)
from flexamem.notes import Note
from flexamem.store.base import LLMCall, MergedRecord, StepRow
from flexamem.store.rows import note_row, piece_rows, vector_rows
from flexamem.store.schema import MIGRATIONS, SCHEMA_VERSION
from flexamem.store.sql import SQLReads

NOTE_MARKS = ",".join("?" * 21)  # the notes table's 21 columns


class SQLiteStore(SQLReads):
    """A :class:`~flexamem.store.base.Store` in one SQLite file (or ``":memory:"``)."""

    def __init__(self, path: str | Path = ":memory:", *, read_only: bool = False) -> None:
        self.path = str(path)
        self.read_only = read_only
        self._lock = threading.RLock()
        try:
            if read_only:
                if self.path == ":memory:" or not Path(self.path).exists():
                    raise StoreError(f"cannot open {self.path!r} read-only: no such database")
                uri = f"file:{Path(self.path).resolve()}?mode=ro"
                self._db: sqlite3.Connection | None = sqlite3.connect(
                    uri, uri=True, check_same_thread=False, isolation_level=None
                )
            else:
                self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA foreign_keys = ON")
            self._db.execute("PRAGMA busy_timeout = 5000")
            if not read_only and self.path != ":memory:":
                try:
                    self._db.execute("PRAGMA journal_mode = WAL")
                    self._db.execute("PRAGMA synchronous = NORMAL")
                except sqlite3.OperationalError:
                    pass  # a read-only file: reads still work, writes raise ReadOnlyStoreError
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open {self.path!r}: {exc}") from exc

    # -- plumbing ----------------------------------------------------------------------------------
    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreClosedError("the store is closed")
        return self._db

    def _migrate(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(f"database schema v{version} is newer than this FlexA-Mem (v{SCHEMA_VERSION})")
        if version == SCHEMA_VERSION:
            return
        if self.read_only:
            raise ReadOnlyStoreError(f"database schema v{version} needs migrating, but it is open read-only")
        with self._write():
            for n in range(version, SCHEMA_VERSION):
                for statement in _split_sql(MIGRATIONS[n]):
                    self.db.execute(statement)
            self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction; any error rolls everything back and is mapped to ours."""
        with self._lock:
            db = self.db
            if self.read_only:
                raise ReadOnlyStoreError(f"{self.path} is open read-only")
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise _map_error(exc, self.path) from exc
            try:
                yield db
                db.execute("COMMIT")
            except BaseException as exc:
                db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise _map_error(exc, self.path) from exc
                raise

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            try:
                return self.db.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise _map_error(exc, self.path) from exc

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    # -- histories ---------------------------------------------------------------------------------
    def ensure_history(self, history: str, kind: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
        rows = self._read("SELECT kind, meta FROM histories WHERE id = ?", (history,))
        if rows:
            if rows[0][0] != kind:
                raise StoreError(f"history {history!r} is a {rows[0][0]} history, not {kind}")
            return dict(json.loads(rows[0][1]))
        with self._write() as db:  # another process may create it first: the first meta wins
            db.execute(
                "INSERT OR IGNORE INTO histories VALUES (?, ?, ?, ?)",
                (history, kind, json.dumps(meta or {}), time.time()),
            )
            row = db.execute("SELECT kind, meta FROM histories WHERE id = ?", (history,)).fetchone()
        if row[0] != kind:
            raise StoreError(f"history {history!r} is a {row[0]} history, not {kind}")
        return dict(json.loads(row[1]))

    def drop_history(self, history: str) -> bool:
        """Delete a whole history (notes, pieces, links, merged records, steps, state, accounting); the
        only deletion there is. Returns whether it existed."""
        with self._write() as db:
            if db.execute("SELECT 1 FROM histories WHERE id = ?", (history,)).fetchone() is None:
                return False
            db.execute("INSERT OR IGNORE INTO dropping VALUES (?)", (history,))
            for table in ("pieces", "piece_vectors", "links", "merged", "steps", "state", "llm_calls", "notes"):
                db.execute(f"DELETE FROM {table} WHERE history_id = ?", (history,))
            db.execute("DELETE FROM histories WHERE id = ?", (history,))
            db.execute("DELETE FROM dropping WHERE history_id = ?", (history,))
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
        with self._write() as db:
            if notes:  # the history row lands with its first notes (a failed write leaves no empty history)
                db.execute(
                    "INSERT OR IGNORE INTO histories VALUES (?, ?, '{}', ?)", (history, notes[0].kind, time.time())
                )
                kind = db.execute("SELECT kind FROM histories WHERE id = ?", (history,)).fetchone()[0]
                if kind != notes[0].kind:
                    raise StoreError(f"history {history!r} is a {kind} history, not {notes[0].kind}")
            for step in steps:
                try:
                    db.execute("INSERT INTO steps VALUES (?,?,?,?)", (history, step.n, step.step_id, step.data))
                except sqlite3.IntegrityError as exc:
                    raise ConcurrentWriteError(f"step {step.n} of {history!r} was written by another writer") from exc
            for key, value in (state or {}).items():
                db.execute("INSERT OR REPLACE INTO state VALUES (?,?,?)", (history, key, json.dumps(value)))
            for n in notes:
                try:
                    db.execute(
                        "INSERT INTO notes VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        note_row(history, n, now),
                    )
                except sqlite3.IntegrityError as exc:
                    if "unit_id" in str(exc):
                        raise DuplicateUnitError(f"unit {n.unit_id!r} is already in history {history!r}") from exc
                    if "seq" in str(exc):
                        raise ConcurrentWriteError(
                            f"note {n.seq} of {history!r} was written by another writer"
                        ) from exc
                    raise
                db.executemany("INSERT INTO pieces VALUES (?,?,?,?,?,?,?,?,?,?)", piece_rows(history, n))
                db.executemany("INSERT OR IGNORE INTO piece_vectors VALUES (?,?,?,?)", vector_rows(history, n))
            db.executemany("INSERT OR IGNORE INTO links VALUES (?,?,?)", [(history, a, b) for a, b in links])
            _insert_calls(db, history, calls)

    # -- caches and accounting ---------------------------------------------------------------------
    def put_merged(self, history: str, merged: MergedRecord, calls: Sequence[LLMCall] = ()) -> MergedRecord:
        with self._write() as db:
            _insert_calls(db, history, calls)
            db.execute(
                "INSERT OR IGNORE INTO merged VALUES (?,?,?,?,?,?,?,?,?)",
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
        stored = self.get_merged(history, merged.first, merged.last, merged.level)
        return stored or merged

    def record_llm_call(self, history: str, call: LLMCall) -> None:
        with self._write() as db:
            _insert_calls(db, history, [call])


def _insert_calls(db: sqlite3.Connection, history: str, calls: Sequence[LLMCall]) -> None:
    now = time.time()
    db.executemany(
        "INSERT INTO llm_calls (history_id, seq, purpose, model, prompt_tokens, completion_tokens, cached, created_at)"
        " VALUES (?,?,?,?,?,?,?,?)",
        [(history, c.seq, c.purpose, c.model, c.prompt_tokens, c.completion_tokens, int(c.cached), now) for c in calls],
    )


def _split_sql(script: str) -> list[str]:
    """Split a migration into statements (triggers hold inner semicolons, so split on 'END;')."""
    out, buf = [], ""
    for part in script.split(";"):
        buf += part + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \n;"):
                out.append(buf.strip())
            buf = ""
    return out


def _map_error(exc: sqlite3.Error, path: str) -> Exception:
    text = str(exc)
    if "write-once" in text:
        return WriteOnceError(text.removeprefix("flexamem: "))
    if "readonly" in text or "read-only" in text:
        return ReadOnlyStoreError(f"{path} is read-only: {text}")
    if isinstance(exc, sqlite3.ProgrammingError) and "closed" in text:
        return StoreClosedError("the store is closed")
    return StoreError(f"{path}: {text}")
