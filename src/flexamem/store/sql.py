"""What every SQL store reads the same way (SQLite and PostgreSQL): one copy of each query.

A backend provides ``_read(sql, args)`` for ``?``-placeholder SQL (PostgreSQL's store turns them into
``%s``), ``append_notes`` and ``LINK_ORDER`` (the column that orders link rows as they were added).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from flexamem.notes import LLMCall, Note
from flexamem.store.base import MergedRecord, StepRow
from flexamem.store.rows import NOTE_COLUMNS, PIECE_COLUMNS, notes_from_rows

MERGED_COLUMNS = "first_seq, last_seq, level, text, tokens, writer, flagged"


def _merged(r: Sequence[Any]) -> MergedRecord:
    return MergedRecord(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]))


class SQLReads:
    LINK_ORDER = "rowid"

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError

    append_notes: Callable[..., None]  # the backend's: notes, links, calls, steps and state in one transaction

    def histories(self) -> list[tuple[str, str]]:
        return [(r[0], r[1]) for r in self._read("SELECT id, kind FROM histories ORDER BY created_at, id")]

    def history_kind(self, history: str) -> str | None:
        rows = self._read("SELECT kind FROM histories WHERE id = ?", (history,))
        return str(rows[0][0]) if rows else None

    def note_count(self, history: str) -> int:
        rows = self._read("SELECT COALESCE(MAX(seq) + 1, 0) FROM notes WHERE history_id = ?", (history,))
        return int(rows[0][0])

    def load_links(self, history: str, start: int = 0) -> list[tuple[int, int]]:
        rows = self._read(
            f"SELECT src, dst FROM links WHERE history_id = ? AND (src >= ? OR dst >= ?) ORDER BY {self.LINK_ORDER}",
            (history, start, start),
        )
        return [(int(a), int(b)) for a, b in rows]

    def load_steps(self, history: str) -> list[StepRow]:
        rows = self._read("SELECT n, step_id, data FROM steps WHERE history_id = ? ORDER BY n", (history,))
        return [StepRow(int(r[0]), r[1], r[2]) for r in rows]

    def load_notes(self, history: str, start: int = 0) -> list[Note]:
        where, args = "WHERE history_id = ? AND seq >= ?", (history, start)
        return notes_from_rows(
            self._read(f"SELECT {NOTE_COLUMNS} FROM notes {where} ORDER BY seq", args),
            self._read(f"SELECT {PIECE_COLUMNS} FROM pieces {where} ORDER BY seq, idx", args),
            self._read(
                f"SELECT src, dst FROM links WHERE history_id = ? AND src >= ? ORDER BY {self.LINK_ORDER}", args
            ),
            self._read(f"SELECT seq, vector FROM piece_vectors {where} ORDER BY seq, idx", args),
        )

    def get_merged(self, history: str, first: int, last: int, level: int) -> MergedRecord | None:
        rows = self._read(
            f"SELECT {MERGED_COLUMNS} FROM merged"
            " WHERE history_id = ? AND first_seq = ? AND last_seq = ? AND level = ?",
            (history, first, last, level),
        )
        return _merged(rows[0]) if rows else None

    def load_merged(self, history: str) -> list[MergedRecord]:
        rows = self._read(
            f"SELECT {MERGED_COLUMNS} FROM merged WHERE history_id = ? ORDER BY first_seq, level", (history,)
        )
        return [_merged(r) for r in rows]

    def llm_calls(self, history: str) -> list[LLMCall]:
        rows = self._read(
            "SELECT purpose, model, prompt_tokens, completion_tokens, seq, cached FROM llm_calls"
            " WHERE history_id = ? ORDER BY id",
            (history,),
        )
        return [LLMCall(r[0], r[1], r[2], r[3], r[4], bool(r[5])) for r in rows]

    def set_state(self, history: str, key: str, value: Any) -> None:
        self.append_notes(history, [], [], state={key: value})

    def get_state(self, history: str, key: str) -> Any:
        rows = self._read("SELECT value FROM state WHERE history_id = ? AND key = ?", (history, key))
        return json.loads(rows[0][0]) if rows else None
