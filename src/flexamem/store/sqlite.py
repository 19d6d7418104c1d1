"""SQLite store: the embedded default (WAL, a migrations list, one transaction per write).

Write-once is enforced by the database itself: triggers abort any UPDATE or DELETE of notes, pieces,
links and merged records, so not even raw SQL through this connection can rewrite history.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flexamem.errors import (
    ReadOnlyStoreError,
    StoreClosedError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreUnavailableError,
    WriteOnceError,
)
from flexamem.store.schema import MIGRATIONS, SCHEMA_VERSION, SQLITE_CORRECTIONS
from flexamem.store.sql import SQLStore

log = logging.getLogger("flexamem.store")


class SQLiteStore(SQLStore):
    """A :class:`~flexamem.store.base.Store` in one SQLite file (or ``":memory:"``)."""

    INTEGRITY = (sqlite3.IntegrityError,)

    def __init__(self, path: str | Path = ":memory:", *, read_only: bool = False) -> None:
        self.path = str(path)
        self.read_only = read_only
        self._lock = threading.RLock()
        self._unscrubbed = False  # an erasure's WAL not yet truncated (another connection held a read)
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
            self._db.execute("PRAGMA secure_delete = ON")  # freed bytes are zeroed: an erasure leaves none behind
            if not read_only and self.path != ":memory:":
                self._use_wal()
            self._migrate()
        except sqlite3.DatabaseError as exc:
            folder = Path(self.path).resolve().parent if self.path != ":memory:" else None
            if folder is not None and folder.exists() and not os.access(folder, os.W_OK):
                raise ReadOnlyStoreError(
                    f"cannot open {self.path!r}: its folder or file system is read-only ({exc})"
                ) from exc
            mapped = _map_error(exc, self.path)
            raise type(mapped)(f"cannot open {self.path!r}: {mapped}") from exc
        except UnicodeDecodeError as exc:  # a flipped byte in the file's schema text
            raise StoreCorruptError(f"cannot open {self.path!r}: its schema is damaged ({exc.reason})") from exc

    # -- plumbing ----------------------------------------------------------------------------------
    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreClosedError("the store is closed")
        return self._db

    def _use_wal(self) -> None:
        """Switch the file to WAL (once per file; it stays so). Processes opening a new file together
        may find it locked for a moment: try again until the busy timeout, then go on (a read-only file
        keeps its mode; reads work and writes raise ReadOnlyStoreError)."""
        deadline = time.monotonic() + 5
        while True:
            try:
                self.db.execute("PRAGMA journal_mode = WAL")
                self.db.execute("PRAGMA synchronous = NORMAL")
                return
            except sqlite3.OperationalError as exc:
                if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                    return
                time.sleep(0.01)

    def _version(self) -> int:
        version = int(self.db.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StoreError(f"database schema v{version} is newer than this FlexA-Mem (v{SCHEMA_VERSION})")
        return version

    def _migrate(self) -> None:
        """Bring the schema to ``SCHEMA_VERSION``, in one transaction. The version is read again after
        taking the write lock, so processes and threads opening a new file together migrate it once (the
        others wait, then find it done). A database an older version wrote (not a new one) also gets the
        corrective steps of the migrations it runs (``SQLITE_CORRECTIONS``: agent sessions of schemas 1
        and 2 filed under the history that started them)."""
        version = self._version()
        if version == SCHEMA_VERSION:
            return
        if self.read_only:
            raise ReadOnlyStoreError(f"database schema v{version} needs migrating, but it is open read-only")
        with self._write():
            start = self._version()
            for n in range(start, SCHEMA_VERSION):
                steps = [SQLITE_CORRECTIONS[n]] if start > 0 and n in SQLITE_CORRECTIONS else []
                for script in (*steps, MIGRATIONS[n].sqlite):
                    for statement in split_sql(script):
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
                if self._unscrubbed:  # once the read that held the erased frames has ended, at no wait
                    self._truncate_wal(db, wait=False)
            except BaseException as exc:
                # SQLite may have ended the transaction itself (a failed COMMIT on a full disk): the
                # rollback must neither fail nor hide the first error, and the connection stays usable
                if db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
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
            except UnicodeDecodeError as exc:  # a flipped byte in a text column
                raise StoreCorruptError(
                    f"{self.path}: a stored row holds bytes that are not UTF-8 text ({exc.reason})"
                ) from None

    def _scrub(self) -> None:
        """Checkpoint the WAL into the database and truncate it (secure delete being on, the erased bytes
        were zeroed where they lay in the database): retried for 5 s while another connection's read
        holds frames. Past that the erased words may still lie in the WAL file: this store then tries
        again after each of its writes (without waiting) until the truncation lands, and logs a warning
        saying so; ``scrub()`` (``flexamem scrub``) and the last connection's close do it too."""
        if self.path == ":memory:" or self.read_only:
            return
        deadline = time.monotonic() + 5
        with self._lock:
            while not self._truncate_wal(self.db, wait=True):
                if time.monotonic() > deadline:
                    log.warning(
                        "%s: another connection holds a read, so the WAL still holds the erased words; it is"
                        " truncated after this store's next write once that read ends (or run flexamem scrub)",
                        self.path,
                    )
                    return
                time.sleep(0.02)

    def _truncate_wal(self, db: sqlite3.Connection, *, wait: bool) -> bool:
        """``PRAGMA wal_checkpoint(TRUNCATE)``; whether it landed (no reader held frames). ``wait=False``:
        without the busy timeout, as the tail of a write."""
        if not wait:
            db.execute("PRAGMA busy_timeout = 0")
        try:
            busy = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.Error:
            busy = (1,)
        finally:
            if not wait:
                db.execute("PRAGMA busy_timeout = 5000")
        self._unscrubbed = bool(busy and busy[0])
        return not self._unscrubbed

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def _run(self, conn: sqlite3.Connection, sql: str, args: Sequence[Any] = ()) -> sqlite3.Cursor:
        return conn.execute(sql, args)

    def _run_many(self, conn: sqlite3.Connection, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        conn.executemany(sql, rows)


def split_sql(script: str) -> list[str]:
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
    """SQLite's error as ours, naming its cause (sqlite3's result codes, with its message as fallback)."""
    text = str(exc)
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    if "write-once" in text:
        return WriteOnceError(text.removeprefix("flexamem: "))
    if primary == sqlite3.SQLITE_FULL or "disk is full" in text:
        return StoreFullError(f"{path}: the disk is full ({text}); nothing of this write was stored")
    if primary == sqlite3.SQLITE_READONLY or "readonly" in text or "read-only" in text:
        return ReadOnlyStoreError(f"{path} is read-only: {text}")
    if primary in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in text:
        return StoreUnavailableError(f"{path} is locked by another writer ({text}): try again")
    if primary in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB) or "malformed" in text or "decode" in text:
        return StoreCorruptError(f"{path} is damaged: {text[:200]}")
    if primary in (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN):
        return StoreError(f"{path}: the file system failed ({text})")
    if isinstance(exc, sqlite3.ProgrammingError) and "closed" in text:
        return StoreClosedError("the store is closed")
    return StoreError(f"{path}: {text}")
