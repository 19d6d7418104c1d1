"""What every SQL store does the same way (SQLite and PostgreSQL): one copy of each query and write.

The SQL is written once, with ``?`` placeholders and the ``INSERT ... ON CONFLICT`` both databases
speak. A backend provides the plumbing: ``_read(sql, args)``, ``_write()`` (one transaction, its
errors mapped to ours), ``_run(conn, sql, args)`` / ``_run_many(conn, sql, rows)`` inside it
(PostgreSQL's turn ``?`` into ``%s``), ``INTEGRITY`` (its unique-violation error types),
``LINK_ORDER`` (the column that orders link rows as they were added) and ``LOCK_ROW`` / ``SHARE_ROW`` (what
locks a row read in a write: ``FOR UPDATE`` / ``FOR SHARE`` in PostgreSQL; SQLite's write transaction
already holds the lock).
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from flexamem.digests import (
    ERASED_SALT,
    HEAD_VERSION,
    Head,
    chain_problems,
    erased_rows,
    erasure_digest,
    extends,
    history_digest,
    merged_digest,
    merged_set_digest,
    new_salt,
    request_digest,
    rewritten_digest,
    rewritten_step_digest,
    salted_body,
    state_digest,
    step_digest,
    version_of,
)
from flexamem.errors import (
    ConcurrentWriteError,
    DuplicateUnitError,
    HistoryDroppedError,
    InvalidInputError,
    StoreCorruptError,
    StoreError,
)
from flexamem.notes import LLMCall, Note
from flexamem.store.base import Erasure, KeptLoad, MergedRecord, StepRow
from flexamem.store.checks import (
    erasure_from,
    erasures_problems,
    merged_problem,
    read_merged,
    requests_problems,
    steps_problems,
)
from flexamem.store.rows import NOTE_COLUMNS, PIECE_COLUMNS, note_row, notes_from_rows, piece_rows, vector_rows

HISTORY_COLUMNS = "id, kind, meta, created_at, epoch, parent, digest"
NEW_HISTORY = f"INSERT INTO histories ({HISTORY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING"
MERGED_COLUMNS = "m.first_seq, m.last_seq, m.level, m.text, m.tokens, m.writer, m.flagged, m.digest, n.digest"
MERGED_FROM = "merged AS m LEFT JOIN notes AS n ON n.history_id = m.history_id AND n.seq = m.last_seq"
NOTE_MARKS = ",".join("?" * 22)  # the notes table's 22 columns
ERASED = ("pieces", "piece_vectors", "links", "merged", "steps", "state", "llm_calls", "notes", "requests", "heads",
          "legacy", "erasures", "erasing", "load_cache")  # by drop_history  # fmt: skip
ERASURE_COLUMNS = "n, kind, ids, reason, at, digest, notes, steps"
SCRUBBED = ("notes", "pieces", "piece_vectors", "steps", "merged", "load_cache", "requests")  # an erasure rewrites
DUMP_KINDS = {"merged": "merged", "steps": "step", "requests": "request", "state": "state", "llm_calls": "llm_call",
              "erasures": "erasure"}  # fmt: skip
LEGACY_PARTS = ("notes", "steps", "merged records", "history row", "requests")  # a ``legacy`` row's columns


def new_epoch() -> str:
    """A fresh epoch for a history row: random, so a history dropped and started again never gets its
    old epoch back."""
    return uuid.uuid4().hex


def history_row(
    history: str, kind: str, meta: Mapping[str, Any] | None, epoch: str, parent: str | None
) -> tuple[Any, ...]:
    """A new ``histories`` row (``HISTORY_COLUMNS``), its digest included."""
    text = json.dumps(dict(meta or {}))
    return (history, kind, text, time.time(), epoch, parent, history_digest(history, kind, text, epoch, parent))


class SQLStore:
    LINK_ORDER = "rowid"
    LOCK_ROW = ""
    SHARE_ROW = ""
    INTEGRITY: tuple[type[Exception], ...] = ()
    head_key: bytes | None = None  # signs every head this store writes (the server's key file secret)

    # -- the backend's plumbing --------------------------------------------------------------------
    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError

    def _write(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _run(self, conn: Any, sql: str, args: Sequence[Any] = ()) -> Any:
        raise NotImplementedError

    def _run_many(self, conn: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        raise NotImplementedError

    # -- histories ---------------------------------------------------------------------------------
    def ensure_history(
        self, history: str, kind: str, meta: dict[str, Any] | None = None, *, parent: str | None = None
    ) -> dict[str, Any]:
        for _ in range(5):  # another process may create it first (the first meta wins) or drop it between
            found = self.history_meta(history)
            if found is not None:
                if found[0] != kind:
                    raise StoreError(f"history {history!r} is a {found[0]} history, not {kind}")
                return found[1]
            with self._write() as conn:
                self._run(conn, NEW_HISTORY, history_row(history, kind, meta, new_epoch(), parent))
                self._put_head(conn, history)  # a history begun with nothing in it has a head too
        raise ConcurrentWriteError(f"history {history!r} was dropped each time it was created: try again")

    def history_meta(self, history: str) -> tuple[str, dict[str, Any]] | None:
        rows = self._history_rows(history)
        if not rows:
            return None
        problem = self._history_problem(history, rows[0])
        if problem is None and rows[0][4] is None and not self._legacy_part(history, 3):
            problem = f"the row of history {history!r} has no digest, though it was written with one"
        if problem:
            raise StoreCorruptError(f"{problem} (Memory.verify() lists every damaged row)")
        return str(rows[0][0]), dict(json.loads(rows[0][1]))

    def _history_rows(self, history: str) -> list[Any]:
        """The history's row as its digest covers it (kind, meta, epoch, parent, digest)."""
        return self._read(
            "SELECT kind, meta, COALESCE(epoch, ''), parent, digest FROM histories WHERE id = ?", (history,)
        )

    @staticmethod
    def _history_problem(history: str, row: Sequence[Any]) -> str | None:
        kind, meta, epoch, parent, digest = row
        try:
            if digest is not None and history_digest(history, kind, meta, epoch, parent) != digest:
                return f"the row of history {history!r} (its kind and meta) does not match its digest"
            if not isinstance(json.loads(meta), dict):
                raise ValueError("meta is not a JSON object")
        except (TypeError, ValueError) as exc:
            return f"the row of history {history!r} cannot be read (corrupt: {exc})"
        return None

    def sessions(self, parent: str) -> list[str]:
        """The ids of the agent sessions stored under history ``parent``, oldest first."""
        rows = self._read(
            "SELECT id FROM histories WHERE parent = ? AND kind = 'agent' ORDER BY created_at, id", (parent,)
        )
        return [str(r[0]) for r in rows]

    def history_state(self, history: str) -> tuple[str | None, int, int]:
        rows = self._read(
            "SELECT COALESCE(epoch, ''), (SELECT COALESCE(MAX(seq) + 1, 0) FROM notes WHERE history_id = ?),"
            " (SELECT COUNT(*) FROM erasures WHERE history_id = ?) FROM histories WHERE id = ?",
            (history, history, history),
        )
        return (str(rows[0][0]), int(rows[0][1]), int(rows[0][2])) if rows else (None, 0, 0)

    def erase(
        self,
        history: str,
        kind: str,
        ids: Sequence[str],
        reason: str,
        notes: Sequence[Note],
        steps: Sequence[StepRow],
        *,
        epoch: str | None = None,
    ) -> Erasure:
        """Rewrite ``notes`` and ``steps`` (their places and chain digests kept), delete the merged
        records that drew on them, chain the erasure and write the head: one transaction, inside which
        the history is marked in ``erasing`` (the only time the triggers let its words change); then
        :meth:`_scrub` (the store's own clean-up)."""
        at = time.time()
        with self._write() as conn:
            # one erasure of a history at a time, and no write beside it (PostgreSQL: writes hold the row
            # FOR SHARE; SQLite's write lock serialises everything already)
            if not self._run(conn, "SELECT id FROM histories WHERE id = ?" + self.LOCK_ROW, (history,)).fetchone():
                raise HistoryDroppedError(f"history {history!r} was deleted after this view read it")
            if epoch is not None:
                self._check_epoch(conn, history, epoch, False, None, None)
            last = self._run(
                conn, "SELECT n, digest FROM erasures WHERE history_id = ? ORDER BY n DESC LIMIT 1", (history,)
            ).fetchone()
            n, previous = (int(last[0]) + 1, str(last[1])) if last else (0, "")
            self._run(conn, "INSERT INTO erasing VALUES (?) ON CONFLICT DO NOTHING", (history,))
            rewritten_notes = []
            for note in notes:
                row = self._run(
                    conn, "SELECT digest FROM notes WHERE history_id = ? AND seq = ?", (history, note.seq)
                ).fetchone()
                if row is None:
                    raise ConcurrentWriteError(f"note {note.seq} of {history!r} is gone: the history was changed")
                kept = row[0] or ""
                stored = note_row(history, note, at)
                self._run(
                    conn,
                    "UPDATE notes SET raw = ?, raw_tokens = ?, record = ?, record_tokens = ?, fields = ?,"
                    " fields_tokens = ?, embedding = ?, blocks = ?, writer = ?, flagged = ?, flag_reason = ?,"
                    " salt = ? WHERE history_id = ? AND seq = ?",
                    (*stored[8:18], stored[19], note.salt, history, note.seq),
                )
                for table in ("pieces", "piece_vectors"):
                    self._run(conn, f"DELETE FROM {table} WHERE history_id = ? AND seq = ?", (history, note.seq))
                self._run_many(conn, "INSERT INTO pieces VALUES (?,?,?,?,?,?,?,?,?,?)", piece_rows(history, note))
                self._run_many(conn, "INSERT INTO piece_vectors VALUES (?,?,?,?)", vector_rows(history, note))
                self._run(
                    conn,
                    "DELETE FROM merged WHERE history_id = ? AND first_seq <= ? AND last_seq >= ?",
                    (history, note.seq, note.seq),
                )
                now = rewritten_digest(dataclasses.replace(note, digest=row[0]), kept)
                rewritten_notes.append([note.seq, kept, now])
            rewritten_steps = []
            for step in steps:
                row = self._run(
                    conn, "SELECT digest, step_id FROM steps WHERE history_id = ? AND n = ?", (history, step.n)
                ).fetchone()
                if row is None:
                    raise ConcurrentWriteError(f"step {step.n} of {history!r} is gone: the session was changed")
                kept, salt = row[0] or "", new_salt()
                self._run(
                    conn, "UPDATE steps SET data = ?, salt = ? WHERE history_id = ? AND n = ?",
                    (step.data, salt, history, step.n),
                )  # fmt: skip
                rewritten_steps.append([step.n, kept, rewritten_step_digest(step.n, row[1], step.data, salt, kept)])
            self._erase_request_salts(conn, history, {note.unit_id for note in notes})
            ids_json, notes_json, steps_json = (
                json.dumps(list(ids)),
                json.dumps(rewritten_notes),
                json.dumps(rewritten_steps),
            )
            digest = erasure_digest(previous, n, kind, ids_json, reason, at, notes_json, steps_json)
            self._run(
                conn,
                f"INSERT INTO erasures (history_id, {ERASURE_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
                (history, n, kind, ids_json, reason, at, digest, notes_json, steps_json),
            )
            self._run(conn, "DELETE FROM erasing WHERE history_id = ?", (history,))
            self._run(conn, "DELETE FROM load_cache WHERE history_id = ?", (history,))  # it counted the words
            self._put_head(conn, history)
        self._scrub()
        return erasure_from((n, kind, ids_json, reason, at, digest, notes_json, steps_json))

    def _scrub(self) -> None:
        """After an erasure: the backend's own clean-up of freed bytes (nothing by default)."""

    def scrub(self) -> None:
        """Make the bytes of erased and deleted rows leave the store's files, as far as the backend can
        while it serves (SQLite: a WAL checkpoint, secure delete being on; PostgreSQL: VACUUM FULL of the
        tables erasure rewrites, which locks them while it runs)."""
        self._scrub()

    def drop_history(self, history: str, *, parent: str | None = None) -> bool:
        """Delete a whole history (notes, pieces, links, merged records, steps, state, accounting) and
        the agent sessions stored under it (their ``parent`` is its name), in one transaction: the only
        deletion there is (the write-once triggers let it through while a history is marked in
        ``dropping``). No other history goes, whatever its name. With ``parent``, ``history`` is deleted
        only if it is an agent session of that history. Returns whether anything was deleted."""
        with self._write() as conn:
            if parent is None:
                found = self._run(conn, "SELECT id FROM histories WHERE id = ?" + self.LOCK_ROW, (history,))
            else:
                found = self._run(
                    conn,
                    "SELECT id FROM histories WHERE id = ? AND parent = ? AND kind = 'agent'" + self.LOCK_ROW,
                    (history, parent),
                )
            ids = [r[0] for r in found]
            if parent is None:
                ids += [
                    r[0]
                    for r in self._run(
                        conn,
                        "SELECT id FROM histories WHERE parent = ? AND kind = 'agent' AND id <> ?" + self.LOCK_ROW,
                        (history, history),
                    )
                ]
            for hid in ids:
                self._run(conn, "INSERT INTO dropping VALUES (?) ON CONFLICT DO NOTHING", (hid,))
                for table in ERASED:
                    self._run(conn, f"DELETE FROM {table} WHERE history_id = ?", (hid,))
                self._run(conn, "DELETE FROM histories WHERE id = ?", (hid,))
                self._run(conn, "DELETE FROM dropping WHERE history_id = ?", (hid,))
        return bool(ids)

    def _check_epoch(
        self, conn: Any, history: str, epoch: str, create: bool, kind: str | None, meta: Mapping[str, Any] | None
    ) -> None:
        """Inside a write: the history must still be the one the writer read (``epoch``), or, with
        ``create`` (the writer saw no history), be created now with that epoch. A history dropped since
        raises :class:`HistoryDroppedError`, one another writer created first :class:`ConcurrentWriteError`
        (either way the writer catches up and tries again), so a write lands wholly before a drop or
        wholly in the history started after it."""
        head = "SELECT kind, COALESCE(epoch, '') FROM histories WHERE id = ?" + self.SHARE_ROW
        row = self._run(conn, head, (history,)).fetchone()
        if row is None:
            if not create or kind is None:
                raise HistoryDroppedError(f"history {history!r} was deleted after this view read it")
            row = self._start(conn, history, kind, meta, epoch, head)
        if row[1] != epoch:
            if create:
                raise ConcurrentWriteError(f"another writer started history {history!r} first")
            raise HistoryDroppedError(f"history {history!r} was deleted and started again after this view read it")
        if kind is not None and row[0] != kind:
            raise StoreError(f"history {history!r} is a {row[0]} history, not {kind}")

    def _start(self, conn: Any, history: str, kind: str, meta: Mapping[str, Any] | None, epoch: str, read: str) -> Any:
        """Inside a write: the history's row (``read``, by id), inserted first unless one is there. On
        PostgreSQL another writer's row can stop the insert and a drop delete that row before it is
        read: a lost race (:class:`ConcurrentWriteError`, which the writer retries)."""
        self._run(conn, NEW_HISTORY, history_row(history, kind, meta, epoch, None))
        row = self._run(conn, read, (history,)).fetchone()
        if row is None:
            raise ConcurrentWriteError(f"history {history!r} was started and deleted while this write began")
        return row

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
        epoch: str | None = None,
        create: bool = False,
        meta: Mapping[str, Any] | None = None,
        request_id: str | None = None,
        body: str | None = None,
    ) -> None:
        """Notes with their pieces, vectors and links, model calls, steps, state and the caller's
        request id (with ``body``, the digest of what it wrote), then the history's new head: one
        transaction."""
        now = time.time()
        with self._write() as conn:
            kind = notes[0].kind if notes else None
            if epoch is not None:
                self._check_epoch(conn, history, epoch, create, kind, meta)
            elif kind is not None:  # unchecked (a direct caller): the history row lands with its first notes
                stored = self._start(conn, history, kind, meta, new_epoch(), "SELECT kind FROM histories WHERE id = ?")
                if stored[0] != kind:
                    raise StoreError(f"history {history!r} is a {stored[0]} history, not {kind}")
            previous = None
            for step in steps:
                if previous is None:  # the chain goes on from the stored step before (read in this transaction)
                    before = self._run(
                        conn, "SELECT digest FROM steps WHERE history_id = ? AND n = ?", (history, step.n - 1)
                    ).fetchone()
                    previous = (before[0] or "") if before else ""
                salt = new_salt()
                digest = step_digest(previous, step.n, step.step_id, step.data, salt)
                try:
                    self._run(
                        conn,
                        "INSERT INTO steps (history_id, n, step_id, data, digest, salt) VALUES (?,?,?,?,?,?)",
                        (history, step.n, step.step_id, step.data, digest, salt),
                    )
                except self.INTEGRITY as exc:
                    raise ConcurrentWriteError(f"step {step.n} of {history!r} was written by another writer") from exc
                previous = digest
            for key, value in (state or {}).items():
                self._run(
                    conn,
                    "INSERT INTO state VALUES (?,?,?)"
                    " ON CONFLICT (history_id, key) DO UPDATE SET value = excluded.value",
                    (history, key, json.dumps(value)),
                )
            if request_id is not None:  # insert-only: a second write under the id loses the race
                self._put_request(conn, history, request_id, body or "", notes)
            for n in notes:
                try:
                    self._run(conn, f"INSERT INTO notes VALUES ({NOTE_MARKS})", note_row(history, n, now))
                except self.INTEGRITY as exc:
                    if "unit" in str(exc):
                        raise DuplicateUnitError(f"unit {n.unit_id!r} is already in history {history!r}") from exc
                    raise ConcurrentWriteError(f"note {n.seq} of {history!r} was written by another writer") from exc
                self._run_many(conn, "INSERT INTO pieces VALUES (?,?,?,?,?,?,?,?,?,?)", piece_rows(history, n))
                self._run_many(
                    conn, "INSERT INTO piece_vectors VALUES (?,?,?,?) ON CONFLICT DO NOTHING", vector_rows(history, n)
                )
            self._run_many(
                conn,
                "INSERT INTO links (history_id, src, dst) VALUES (?,?,?) ON CONFLICT DO NOTHING",
                [(history, a, b) for a, b in links],
            )
            self._insert_calls(conn, history, calls)
            self._put_head(conn, history)

    def _put_request(self, conn: Any, history: str, request_id: str, body: str, notes: Sequence[Note]) -> None:
        """Inside a write: the request row, chained over the one before and bound to the write's last note."""
        last = self._run(
            conn, "SELECT n, digest FROM requests WHERE history_id = ? ORDER BY n DESC LIMIT 1", (history,)
        ).fetchone()
        n, previous = (int(last[0]) + 1, last[1] or "") if last else (0, "")
        units, salt = json.dumps([note.unit_id for note in notes]), new_salt()
        body = salted_body(body, salt)  # the chain digest covers the salted body, never the salt
        digest = request_digest(previous, n, request_id, units, body, (notes[-1].digest or "") if notes else "")
        try:
            self._run(
                conn,
                "INSERT INTO requests (history_id, n, request_id, units, body, digest, salt) VALUES (?,?,?,?,?,?,?)",
                (history, n, request_id, units, body, digest, salt),
            )
        except self.INTEGRITY as exc:
            raise ConcurrentWriteError(f"request {request_id!r} was stored by another writer") from exc

    def _erase_request_salts(self, conn: Any, history: str, units: set[str]) -> None:
        """Inside an erasure (the history marked in ``erasing``): the salt of every request whose write
        stored one of ``units`` (the rewritten notes) becomes :data:`ERASED_SALT`, so its kept body digest
        (and the chain digest over it) tests no guess of the erased words, and a replay of its id is
        refused whatever its body. The chain digest never covered the salt: ``verify()`` holds."""
        if not units:
            return
        rows = self._run(
            conn,
            "SELECT n, units FROM requests WHERE history_id = ? AND (salt IS NULL OR salt <> ?)",
            (history, ERASED_SALT),
        ).fetchall()
        for n, names in rows:
            try:
                named = {str(u) for u in json.loads(names)}
            except (TypeError, ValueError):
                named = set(units)  # unreadable (verify names it): erase its salt rather than keep an oracle
            if named & units:
                self._run(
                    conn, "UPDATE requests SET salt = ? WHERE history_id = ? AND n = ?", (ERASED_SALT, history, n)
                )

    def _put_head(self, conn: Any, history: str) -> None:
        """Inside a write: the history's head, from the rows as this transaction sees them, signed when
        the store has a key."""
        head = self._head(lambda sql, args: list(self._run(conn, sql, args).fetchall()), history)
        if head is None:
            return
        head = head.signed(self.head_key)
        self._run(
            conn,
            "INSERT INTO heads VALUES (?,?,?) ON CONFLICT (history_id) DO UPDATE"
            " SET head = excluded.head, signature = excluded.signature",
            (history, json.dumps(head.as_json()), head.signature),
        )

    @staticmethod
    def _head(read: Any, history: str) -> Head | None:
        """The head of ``history`` as ``read(sql, args)`` sees its rows (None: no such history)."""
        row = read("SELECT COALESCE(epoch, ''), COALESCE(digest, '') FROM histories WHERE id = ?", (history,))
        if not row:
            return None
        merged = read("SELECT first_seq, last_seq, level, digest FROM merged WHERE history_id = ?", (history,))
        ends = {}
        for table, col in (("notes", "seq"), ("steps", "n"), ("requests", "n")):
            last = read(
                f"SELECT {col}, digest FROM {table} WHERE history_id = ? ORDER BY {col} DESC LIMIT 1", (history,)
            )
            ends[table] = (int(last[0][0]) + 1, last[0][1] or "") if last else (0, "")
        state = read("SELECT key, value FROM state WHERE history_id = ?", (history,))
        legacy = read("SELECT notes, steps, merged, history_row, requests FROM legacy WHERE history_id = ?", (history,))
        erased = read("SELECT n, digest FROM erasures WHERE history_id = ? ORDER BY n DESC LIMIT 1", (history,))
        return Head(
            history=history, epoch=str(row[0][0]), notes=ends["notes"][0], note=ends["notes"][1],
            steps=ends["steps"][0], step=ends["steps"][1], requests=ends["requests"][0], request=ends["requests"][1],
            state=state_digest((str(k), str(v)) for k, v in state),
            legacy=tuple(int(x) for x in legacy[0]) if legacy else None,
            erasures=int(erased[0][0]) + 1 if erased else 0, erasure=str(erased[0][1]) if erased else "",
            version=HEAD_VERSION, row=str(row[0][1]), merges=len(merged), merge=merged_set_digest(merged),
        )  # fmt: skip

    def head(self, history: str) -> Head | None:
        """The history's head as its rows are now, signed when the store has a key (None: no history)."""
        head = self._head(self._read, history)
        return head.signed(self.head_key) if head is not None else None

    def legacy(self, history: str) -> tuple[int, ...] | None:
        """What the history held before its rows carried digests (``LEGACY_PARTS``), or None: a history
        begun with digests, where every row must carry one."""
        rows = self._read(
            "SELECT notes, steps, merged, history_row, requests FROM legacy WHERE history_id = ?", (history,)
        )
        return tuple(int(x) for x in rows[0]) if rows else None

    # -- caches and accounting ---------------------------------------------------------------------
    def put_merged(
        self,
        history: str,
        merged: MergedRecord,
        calls: Sequence[LLMCall] = (),
        *,
        epoch: str | None = None,
        erasures: int | None = None,
    ) -> MergedRecord:
        """Keep a merged record (the first one written wins) and the calls that wrote it; with ``epoch``,
        only while the history is still the one the caller read (else :class:`HistoryDroppedError`);
        with ``erasures``, only while it holds that many erasures (else :class:`ConcurrentWriteError`)."""
        return self.put_merged_many(history, [merged], calls, epoch=epoch, erasures=erasures)[0]

    def put_merged_many(
        self,
        history: str,
        merged: Sequence[MergedRecord],
        calls: Sequence[LLMCall] = (),
        *,
        epoch: str | None = None,
        erasures: int | None = None,
    ) -> list[MergedRecord]:
        """Keep merged records in order, in one transaction (a render's rule-written merges); returns what
        is stored for each span. A span another writer stored first keeps theirs; when theirs differs
        from the one given, the records after it (which may be built on it) are not written and the list
        returned ends with theirs. With ``erasures`` (how many the writer's view of the history had seen),
        nothing is written once another erasure has landed (:class:`ConcurrentWriteError`): records merged
        from words read before it may hold erased words, and the erasure took out those that did."""
        if not merged:
            return []
        kept: list[MergedRecord] = []
        legacy = self._legacy_part(history, 2)  # read before the write: a row another writer kept is checked
        with self._write() as conn:
            if epoch is not None:
                self._check_epoch(conn, history, epoch, False, None, None)
            if erasures is not None:  # an erasure holds the history's row: none lands while this one writes
                count = self._run(conn, "SELECT COUNT(*) FROM erasures WHERE history_id = ?", (history,)).fetchone()
                if int(count[0]) != erasures:
                    raise ConcurrentWriteError(
                        f"history {history!r} had words erased after this view read it: its merges are not kept"
                    )
            self._insert_calls(conn, history, calls)
            wrote = False
            lasts = sorted({m.last for m in merged})
            marks = ",".join("?" * len(lasts))
            found = self._run(conn, f"SELECT seq, digest FROM notes WHERE history_id = ? AND seq IN ({marks})",
                              (history, *lasts)).fetchall()  # fmt: skip
            digests = {seq: digest or "" for seq, digest in found}
            for m in merged:
                digest = merged_digest(m.first, m.last, m.level, m.text, m.tokens, m.writer, m.flagged,
                                       digests.get(m.last, ""))  # fmt: skip
                values = (history, m.first, m.last, m.level, m.text, m.tokens, m.writer, time.time(), int(m.flagged))
                inserted = self._run(
                    conn,
                    "INSERT INTO merged (history_id, first_seq, last_seq, level, text, tokens, writer, created_at,"
                    " flagged, digest) VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
                    (*values, digest),
                ).rowcount
                if inserted:
                    kept.append(m)
                    wrote = True
                    continue
                row = self._run(
                    conn,
                    f"SELECT {MERGED_COLUMNS} FROM {MERGED_FROM}"
                    " WHERE m.history_id = ? AND m.first_seq = ? AND m.last_seq = ? AND m.level = ?",
                    (history, m.first, m.last, m.level),
                ).fetchone()
                theirs = read_merged(history, row, legacy) if row else m
                kept.append(theirs)
                if theirs != m:
                    break
            if wrote:
                self._put_head(conn, history)  # the head covers the merged records
        return kept

    def get_kept_load(self, history: str) -> KeptLoad | None:
        """The history's kept load (:mod:`flexamem.recover.load_cache`), if one was stored."""
        rows = self._read(
            "SELECT epoch, erasures, notes, digest, version, data FROM load_cache WHERE history_id = ?", (history,)
        )
        if not rows:
            return None
        epoch, erasures, notes, digest, version, data = rows[0]
        return KeptLoad(str(epoch), int(erasures), int(notes), str(digest), int(version), bytes(data))

    def put_kept_load(self, history: str, kept: KeptLoad) -> bool:
        """Keep ``kept`` as the history's load, in place of the one before; only while the history still
        has ``kept.epoch`` and ``kept.erasures`` (an erasure holds the history's row while it runs, so none
        lands between the check and the write) and ``kept.notes`` notes at least. Returns whether it was
        kept."""
        with self._write() as conn:
            row = self._run(
                conn,
                "SELECT COALESCE(epoch, ''), (SELECT COUNT(*) FROM erasures WHERE history_id = ?),"
                " (SELECT COALESCE(MAX(seq) + 1, 0) FROM notes WHERE history_id = ?) FROM histories WHERE id = ?"
                + self.SHARE_ROW,
                (history, history, history),
            ).fetchone()
            if row is None or (str(row[0]), int(row[1])) != (kept.epoch, kept.erasures) or int(row[2]) < kept.notes:
                return False
            self._run(
                conn,
                "INSERT INTO load_cache (history_id, epoch, erasures, notes, digest, version, data)"
                " VALUES (?,?,?,?,?,?,?) ON CONFLICT (history_id) DO UPDATE SET epoch = excluded.epoch,"
                " erasures = excluded.erasures, notes = excluded.notes, digest = excluded.digest,"
                " version = excluded.version, data = excluded.data",
                (history, kept.epoch, kept.erasures, kept.notes, kept.digest, kept.version, kept.data),
            )
        return True

    def record_llm_call(self, history: str, call: LLMCall) -> None:
        with self._write() as conn:
            self._insert_calls(conn, history, [call])

    def _insert_calls(self, conn: Any, history: str, calls: Sequence[LLMCall]) -> None:
        now = time.time()
        self._run_many(
            conn,
            "INSERT INTO llm_calls (history_id, seq, purpose, model, prompt_tokens, completion_tokens, cached,"
            " created_at) VALUES (?,?,?,?,?,?,?,?)",
            [(history, c.seq, c.purpose, c.model, c.prompt_tokens, c.completion_tokens, int(c.cached), now)
             for c in calls],
        )  # fmt: skip

    # -- reads -------------------------------------------------------------------------------------

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

    def _step_rows(self, history: str) -> list[Any]:
        return self._read(
            "SELECT n, step_id, data, digest, salt FROM steps WHERE history_id = ? ORDER BY n", (history,)
        )

    def _erasure_rows(self, history: str) -> list[Any]:
        return self._read(f"SELECT {ERASURE_COLUMNS} FROM erasures WHERE history_id = ? ORDER BY n", (history,))

    def erased(self, history: str) -> tuple[dict[int, tuple[str, str]], dict[int, tuple[str, str]]]:
        """The notes and the steps the history's erasures rewrote: for each, the digest its chain keeps
        and the digest of what the last erasure left in it (read where rows are checked)."""
        rows = self._erasure_rows(history)
        return erased_rows(rows, 6), erased_rows(rows, 7)

    def erasures(self, history: str) -> list[Erasure]:
        return [erasure_from(r) for r in self._erasure_rows(history)]

    def _verify_steps(self, history: str) -> list[str]:
        return steps_problems(history, self._step_rows(history), self._legacy_part(history, 1), self.erased(history)[1])

    def load_steps(self, history: str) -> list[StepRow]:
        """The session's steps in order; a step that does not match its digest raises :class:`StoreError`."""
        rows = self._step_rows(history)
        legacy = self.legacy(history)
        problems = steps_problems(history, rows, legacy[1] if legacy else 0, self.erased(history)[1])
        if problems:
            raise StoreCorruptError(f"{problems[0]} (Memory.verify() lists every damaged row)")
        return [StepRow(int(r[0]), r[1], r[2]) for r in rows]

    def _note_rows(
        self, history: str, start: int, end: int | None = None
    ) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
        where, args = "WHERE history_id = ? AND seq >= ?", (history, start)
        args_: tuple[Any, ...] = args
        links = f"SELECT src, dst FROM links WHERE history_id = ? AND src >= ? ORDER BY {self.LINK_ORDER}"
        if end is not None:
            where, args_ = where + " AND seq < ?", (history, start, end)
            links = links.replace("AND src >= ?", "AND src >= ? AND src < ?")
        return (
            self._read(f"SELECT {NOTE_COLUMNS} FROM notes {where} ORDER BY seq", args_),
            self._read(f"SELECT {PIECE_COLUMNS} FROM pieces {where} ORDER BY seq, idx", args_),
            self._read(links, args_),
            self._read(f"SELECT seq, vector FROM piece_vectors {where} ORDER BY seq, idx", args_),
        )

    def load_notes(self, history: str, start: int = 0) -> list[Note]:
        return notes_from_rows(*self._note_rows(history, start), where=f"history {history!r}: ")

    def get_merged(self, history: str, first: int, last: int, level: int) -> MergedRecord | None:
        rows = self._read(
            f"SELECT {MERGED_COLUMNS} FROM {MERGED_FROM}"
            " WHERE m.history_id = ? AND m.first_seq = ? AND m.last_seq = ? AND m.level = ?",
            (history, first, last, level),
        )
        return read_merged(history, rows[0], self._legacy_part(history, 2)) if rows else None

    def load_merged(self, history: str) -> list[MergedRecord]:
        rows = self._read(
            f"SELECT {MERGED_COLUMNS} FROM {MERGED_FROM} WHERE m.history_id = ? ORDER BY m.first_seq, m.level",
            (history,),
        )
        legacy = self._legacy_part(history, 2)
        return [read_merged(history, r, legacy) for r in rows]

    def verify(self, history: str, kept: Head | None = None) -> list[str]:
        """Every problem of the rows a render or a context can show (``[]``: none): the history row,
        each note (digest chain, numbering, a row that cannot be read), the link rows, the merged
        records, the agent steps, the request ids, a digest missing after the history's legacy rows,
        and the stored head against the rows (its signature too when the store has a key); with
        ``kept`` (a head a caller kept), whether the history still extends it. Never raises on a store
        it can open: a part that cannot be read at all is a problem line too."""
        problems: list[str] = []
        for part, check in (
            ("the history row", self._verify_row),
            ("the notes", self._verify_notes),
            ("the merged records", self._verify_merged),
            ("the agent steps", self._verify_steps),
            ("the erasures", lambda h: erasures_problems(h, self._erasure_rows(h))),
            ("the request ids", self._verify_requests),
            ("the head", lambda h: self._verify_head(h, kept)),
        ):
            try:
                problems += check(history)
            except (StoreError, TypeError, ValueError) as exc:
                problems.append(f"{part} of {history!r} cannot be read: {str(exc)[:300]}")
        return problems

    def _legacy_part(self, history: str, part: int) -> int:
        legacy = self.legacy(history)
        return legacy[part] if legacy is not None else 0

    def _verify_row(self, history: str) -> list[str]:
        rows = self._history_rows(history)
        problem = self._history_problem(history, rows[0]) if rows else None
        if rows and rows[0][4] is None and not self._legacy_part(history, 3):
            problem = f"the row of history {history!r} has no digest, though it was written with one"
        return [problem] if problem else []

    def _verify_requests(self, history: str) -> list[str]:
        rows = self._read(
            "SELECT n, request_id, units, body, digest FROM requests WHERE history_id = ? ORDER BY n", (history,)
        )
        if not rows:
            return []
        notes = self._read("SELECT unit_id, digest FROM notes WHERE history_id = ?", (history,))
        digests = {str(u): d or "" for u, d in notes}
        return requests_problems(history, rows, digests, self._legacy_part(history, 4))

    def _verify_head(self, history: str, kept: Head | None) -> list[str]:
        problems: list[str] = []
        now = self._head(self._read, history)
        stored = self._read("SELECT head, signature FROM heads WHERE history_id = ?", (history,))
        if now is None:
            return [f"history {history!r} is not in the store (the kept head names it)"] if kept is not None else []
        if stored:
            try:
                head = Head.from_json({**json.loads(stored[0][0]), "signature": stored[0][1]})
            except (TypeError, ValueError) as exc:
                return [f"the stored head of {history!r} cannot be read (corrupt: {str(exc)[:200]})"]
            if head.digest != now.at_version(head.version).digest:  # a head written before v2 covers less
                problems.append(
                    f"the stored head of {history!r} (notes {head.notes}, steps {head.steps}, requests"
                    f" {head.requests}) does not match its rows (notes {now.notes}, steps {now.steps}, requests"
                    f" {now.requests}): rows were cut off the end, inserted or changed past the library"
                )
            if self.head_key is not None and not head.signed_by(self.head_key):
                problems.append(
                    f"the stored head of {history!r} is not signed by this store's key: rewritten, or written"
                    " without the key"
                )
        elif now.legacy is None or self._written_with_heads(history, now):
            problems.append(f"the head of {history!r} is missing: it was deleted past the library")
        if kept is not None:
            if kept.signature is not None and self.head_key is not None and not kept.signed_by(self.head_key):
                problems.append(f"the kept head of {history!r} is not signed by this store's key")

            def digest_at(chain: str, n: int) -> str | None:
                col = "seq" if chain == "notes" else "n"  # notes, steps, requests, erasures
                rows = self._read(f"SELECT digest FROM {chain} WHERE history_id = ? AND {col} = ?", (history, n))
                return str(rows[0][0]) if rows and rows[0][0] is not None else None

            problems += extends(now, kept, digest_at)
        return problems

    def _written_with_heads(self, history: str, now: Head) -> bool:
        """Whether a history upgraded from before heads (``legacy``) holds rows only code that writes a head
        with every write can have written: a request with a digest (requests were chained with heads, so
        more requests than ``legacy`` counts without one), or a note or step digest of a formula that came
        after heads (salted, ``"v3:"``). Then a missing head was deleted, whatever its ``legacy`` row says
        (that row can be forged to make a history look upgraded from before heads)."""
        legacy = now.legacy or (0, 0, 0, 0, 0)
        if now.requests > legacy[4]:
            return True
        salted = self._read(
            "SELECT 1 FROM notes WHERE history_id = ? AND substr(digest, 1, 3) = 'v3:' UNION ALL"
            " SELECT 1 FROM steps WHERE history_id = ? AND substr(digest, 1, 3) = 'v3:' LIMIT 1",
            (history, history),
        )
        return bool(salted)

    def _verify_notes(self, history: str) -> list[str]:
        problems: list[str] = []

        def bad(seq: int, why: str) -> None:
            problems.append(f"note {seq} of {history!r}: {why}")

        try:
            notes = notes_from_rows(*self._note_rows(history, 0), bad=bad)
        except StoreCorruptError:  # a byte the database cannot even decode: read note by note to name it
            notes = []
            for (seq,) in self._read("SELECT seq FROM notes WHERE history_id = ? ORDER BY seq", (history,)):
                try:
                    notes += notes_from_rows(*self._note_rows(history, int(seq), int(seq) + 1), bad=bad)
                except StoreCorruptError as exc:
                    bad(int(seq), f"its stored row cannot be read ({str(exc)[:200]})")
        problems += chain_problems(notes, legacy=self._legacy_part(history, 0), erased=self.erased(history)[0])
        checked = {n.seq for n in notes if version_of(n.digest or "") >= 2}
        written = {(t, n.seq) for n in notes if n.seq in checked for t in n.links if t < n.seq}
        back = {(int(a), int(b)) for a, b in self._read("SELECT src, dst FROM links WHERE history_id = ?", (history,))}
        seqs = {n.seq for n in notes}
        for a, b in sorted(back - written):
            if a == b or a not in seqs or b not in seqs:  # a self link, or one naming a note the history lacks
                problems.append(f"link {a} -> {b} of {history!r} joins no two notes the library links: added")
            elif a < b and b in checked:
                problems.append(f"link {a} -> {b} of {history!r} was not written with note {b}: added after writing")
        for a, b in sorted(written - back):
            problems.append(f"link {a} -> {b} of {history!r}, written with note {b}, is missing")
        return problems

    def _verify_merged(self, history: str) -> list[str]:
        rows = self._read(f"SELECT {MERGED_COLUMNS} FROM {MERGED_FROM} WHERE m.history_id = ?", (history,))
        problems = [p for p in (merged_problem(history, r) for r in rows) if p]
        bare = sum(1 for r in rows if r[7] is None)
        if bare > self._legacy_part(history, 2):
            problems.append(
                f"{bare} merged records of {history!r} have no digest where {self._legacy_part(history, 2)} were"
                " written before digests: digests were removed"
            )
        return problems

    def llm_calls(self, history: str, start: int | None = None) -> list[LLMCall]:
        rows = self._read(
            "SELECT purpose, model, prompt_tokens, completion_tokens, seq, cached FROM llm_calls"
            " WHERE history_id = ?" + (" AND seq >= ?" if start is not None else "") + " ORDER BY id",
            (history,) if start is None else (history, start),
        )
        return [LLMCall(r[0], r[1], r[2], r[3], r[4], bool(r[5])) for r in rows]

    def written_by(self, history: str, request_id: str) -> tuple[list[str], str | None, str | None] | None:
        """The unit ids a write under ``request_id`` stored, the digest of its body (None for a write
        stored before bodies were kept) and that digest's salt (None before schema v10,
        :data:`~flexamem.digests.ERASED_SALT` once an erasure rewrote one of its notes), or None: no such write."""
        rows = self._read(
            "SELECT units, body, salt FROM requests WHERE history_id = ? AND request_id = ?", (history, request_id)
        )
        if not rows:
            return None
        try:
            return [str(u) for u in json.loads(rows[0][0])], rows[0][1], rows[0][2]
        except (TypeError, ValueError) as exc:
            raise StoreCorruptError(f"request {request_id!r} of {history!r} cannot be read (corrupt: {exc})") from None

    def set_state(self, history: str, key: str, value: Any, *, epoch: str | None = None) -> None:
        self.append_notes(history, [], [], state={key: value}, epoch=epoch)

    def get_state(self, history: str, key: str) -> Any:
        rows = self._read("SELECT value FROM state WHERE history_id = ? AND key = ?", (history, key))
        try:
            return json.loads(rows[0][0]) if rows else None
        except (TypeError, ValueError) as exc:
            raise StoreCorruptError(f"the state {key!r} of {history!r} cannot be read (corrupt: {exc})") from None

    # -- moving a history (store/transfer.py reads and checks the rows) ----------------------------
    def dump(self, history: str, batch: int = 64) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every stored row of one history as stored, in the order an export writes them: its row (and
        what it held before digests), its erasures, its notes (each with its pieces, piece vectors and outgoing links;
        read ``batch`` notes at a time), merged records, steps, requests, state, model calls and its
        stored head. Bytes stay bytes; nothing is checked here (the reader of an export checks)."""
        rows = self._read(
            "SELECT id, kind, meta, created_at, COALESCE(epoch, ''), parent, digest FROM histories WHERE id = ?",
            (history,),
        )
        if not rows:
            return
        row = dict(zip(HISTORY_COLUMNS.split(", "), rows[0], strict=True))
        yield "history", {**row, "legacy": self.legacy(history)}
        for r in self._erasure_rows(history):  # before the notes: an import checks rewritten notes by them
            yield "erasure", dict(zip(ERASURE_COLUMNS.split(", "), r, strict=True))
        names = [*NOTE_COLUMNS.split(", "), "created_at"]
        for start in range(0, self.note_count(history), batch):
            args = (history, start, start + batch)
            where = "WHERE history_id = ? AND seq >= ? AND seq < ?"
            pieces: dict[int, list[list[Any]]] = {}
            for p in self._read(f"SELECT {PIECE_COLUMNS} FROM pieces {where} ORDER BY seq, idx", args):
                pieces.setdefault(int(p[0]), []).append(list(p[1:]))
            vectors: dict[int, list[bytes]] = {}
            for seq, blob in self._read(f"SELECT seq, vector FROM piece_vectors {where} ORDER BY seq, idx", args):
                vectors.setdefault(int(seq), []).append(bytes(blob))
            links: dict[int, list[int]] = {}
            for a, b in self._read(
                f"SELECT src, dst FROM links WHERE history_id = ? AND src >= ? AND src < ? ORDER BY {self.LINK_ORDER}",
                args,
            ):
                links.setdefault(int(a), []).append(int(b))
            for r in self._read(f"SELECT {NOTE_COLUMNS}, created_at FROM notes {where} ORDER BY seq", args):
                note = dict(zip(names, r, strict=True))
                note["embedding"] = bytes(note["embedding"])
                seq = int(r[0])
                yield "note", {**note, "pieces": pieces.get(seq, []), "piece_vectors": vectors.get(seq, []),
                               "links": links.get(seq, [])}  # fmt: skip
        for table, columns, order in (
            ("merged", "first_seq, last_seq, level, text, tokens, writer, flagged, created_at, digest",
             "first_seq, level, last_seq"),
            ("steps", "n, step_id, data, digest, salt", "n"),
            ("requests", "n, request_id, units, body, digest, salt", "n"),
            ("state", "key, value", "key"),
            ("llm_calls", "seq, purpose, model, prompt_tokens, completion_tokens, cached, created_at", "id"),
        ):  # fmt: skip
            for r in self._read(f"SELECT {columns} FROM {table} WHERE history_id = ? ORDER BY {order}", (history,)):
                yield DUMP_KINDS[table], dict(zip(columns.split(", "), r, strict=True))
        head = self._read("SELECT head, signature FROM heads WHERE history_id = ?", (history,))
        yield "head", {"head": head[0][0] if head else None, "signature": head[0][1] if head else None}

    def import_rows(self, rows: Iterable[tuple[str, dict[str, Any]]]) -> list[str]:
        """Write the rows of whole histories (as :meth:`dump` reads them, each history's row first and its
        ``"head"`` last) in ONE transaction: every row as given, then each history's head computed from
        its rows as this transaction sees them (signed with this store's key). A history already in the
        store is refused (:class:`InvalidInputError`), and so is any error ``rows`` raises while it is
        read (the caller checks each row as it goes): either way nothing is written. Returns the
        histories written."""
        written: list[str] = []
        with self._write() as conn:
            for kind, r in rows:
                hid = written[-1] if written else ""
                if kind == "history":
                    hid = str(r["id"])
                    if self._run(conn, "SELECT 1 FROM histories WHERE id = ?", (hid,)).fetchone() is not None:
                        raise InvalidInputError(
                            f"history {hid!r} is already in the store: an import never overwrites a history (drop"
                            " it first, or import under another name)"
                        )
                    try:
                        self._run(
                            conn,
                            f"INSERT INTO histories ({HISTORY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                            [r[c] for c in HISTORY_COLUMNS.split(", ")],
                        )
                    except self.INTEGRITY as exc:
                        raise InvalidInputError(f"history {hid!r} was created while it was imported") from exc
                    written.append(hid)
                elif kind == "note":
                    columns = f"history_id, {NOTE_COLUMNS}, created_at"
                    self._run(
                        conn,
                        f"INSERT INTO notes ({columns}) VALUES ({NOTE_MARKS})",
                        [hid, *(r[c] for c in columns.split(", ")[1:])],
                    )
                    self._run_many(conn, "INSERT INTO pieces VALUES (?,?,?,?,?,?,?,?,?,?)",
                                   [(hid, r["seq"], *p) for p in r["pieces"]])  # fmt: skip
                    self._run_many(conn, "INSERT INTO piece_vectors VALUES (?,?,?,?)",
                                   [(hid, r["seq"], i, v) for i, v in enumerate(r["piece_vectors"])])  # fmt: skip
                    self._run_many(conn, "INSERT INTO links (history_id, src, dst) VALUES (?,?,?)",
                                   [(hid, r["seq"], d) for d in r["links"]])  # fmt: skip
                elif kind == "head":
                    self._put_head(conn, hid)
                else:
                    table = {v: k for k, v in DUMP_KINDS.items()}[kind]
                    self._run(
                        conn,
                        f"INSERT INTO {table} (history_id, {', '.join(r)}) VALUES ({','.join('?' * (len(r) + 1))})",
                        [hid, *r.values()],
                    )
        return written
