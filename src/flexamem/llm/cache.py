"""A response cache keyed by model + request, so a rerun of the same writing or judging costs nothing.

One SQLite file (WAL, safe across threads and processes). Only successful answers are kept; a
cached answer keeps the token counts of the call that produced it, and comes back marked ``cached``
so accounting can tell spent tokens from saved ones.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any


def request_key(payload: dict[str, Any]) -> str:
    """A stable hash of everything that decides the answer (model, messages, limits, format)."""
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ResponseCache:
    """``key -> (text, prompt_tokens, completion_tokens)`` in a SQLite file (or ``":memory:"``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA busy_timeout=5000")
            self._db.execute("PRAGMA secure_delete=ON")  # a cleared answer leaves no bytes behind
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, model TEXT NOT NULL, text TEXT NOT NULL,"
                " prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL)"
            )

    def get(self, key: str) -> tuple[str, int, int] | None:
        with self._lock:
            row = self._db.execute(
                "SELECT text, prompt_tokens, completion_tokens FROM responses WHERE key = ?", (key,)
            ).fetchone()
        return (str(row[0]), int(row[1]), int(row[2])) if row else None

    def put(self, key: str, model: str, text: str, prompt_tokens: int, completion_tokens: int) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO responses VALUES (?,?,?,?,?)",
                (key, model, text, prompt_tokens, completion_tokens),
            )

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])

    def clear(self) -> None:
        """Delete every answer (an erasure: answers written from erased words cannot be told from the
        others without keeping their prompts, one more copy of the words), zeroed and checkpointed out
        of the WAL, so no file of the cache holds them."""
        with self._lock:
            self._db.execute("DELETE FROM responses")
            if self.path != ":memory:":
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        with self._lock:
            self._db.close()
