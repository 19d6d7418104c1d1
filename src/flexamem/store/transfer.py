"""Moving a memory: export a history (and its agent sessions) as JSON Lines, import such a file, back
up a live SQLite store. One module for the format, its checks and the backup; the CLI verbs
(``flexamem export / import / backup``), ``Memory.export`` and ``flexamem.import_history`` call it.

The file (docs/RELIABILITY.md, "Moving a memory"): a first line naming the format and its version and
listing the histories it holds, then for each history, in order, its row (kind, meta, epoch, parent,
digest), every note as stored (every column, its pieces, piece vectors and embedding in base64, its
outgoing links, its digest), its merged records, agent steps, request rows, state rows, model calls, and
its stored head; a last line counting the lines. Rows are written and read one at a time, so a long
history never has to be held whole.

An import reads the file twice: first it checks everything (the note chain with
:func:`flexamem.digests.chain_problems`, the links each note was written with, merged records, steps,
requests, each history row's digest, each head against the rows before it, the line count), writing
nothing; then it checks each row again as it writes it, all histories in one transaction, so a file
changed between the two reads is refused too. A problem raises :class:`InvalidInputError` naming the
line. The epoch is kept: the chains, and a head kept before the export, still match the imported rows.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import sqlite3
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from flexamem.digests import (
    Head,
    chain_problems,
    erased_rows,
    history_digest,
    merged_digest,
    merged_set_digest,
    request_digest,
    state_digest,
)
from flexamem.errors import FlexaMemError, InvalidInputError, StoreCorruptError, StoreError
from flexamem.names import reserved, session_prefix
from flexamem.store.checks import erasures_problems, step_problem
from flexamem.store.rows import NOTE_COLUMNS, notes_from_rows
from flexamem.store.sql import ERASURE_COLUMNS, SQLStore
from flexamem.write.stored import unit_problem

FORMAT = "flexamem-export"
VERSION = 1
PHASES = ("history", "erasure", "note", "merged", "step", "request", "state", "llm_call", "head")
COLUMNS = {  # what each kind of line holds besides its "type" and "history" (a store's columns, in order)
    "history": ("id", "kind", "meta", "created_at", "epoch", "parent", "digest", "legacy"),
    "erasure": tuple(ERASURE_COLUMNS.split(", ")),
    "note": (*NOTE_COLUMNS.split(", "), "created_at", "pieces", "piece_vectors", "links"),
    "merged": ("first_seq", "last_seq", "level", "text", "tokens", "writer", "flagged", "created_at", "digest"),
    "step": ("n", "step_id", "data", "digest", "salt"),
    "request": ("n", "request_id", "units", "body", "digest", "salt"),
    "state": ("key", "value"),
    "llm_call": ("seq", "purpose", "model", "prompt_tokens", "completion_tokens", "cached", "created_at"),
    "head": ("head", "signature"),
}
OPTIONAL = {("request", "salt")}  # columns a file written before them lacks (read as None: the old formula)


def _store(store: object) -> SQLStore:
    if not isinstance(store, SQLStore):
        raise InvalidInputError(f"export and import need a SQLite or PostgreSQL store, not {type(store).__name__}")
    return store


# -- export ----------------------------------------------------------------------------------------
def family(store: object, history: str) -> list[str]:
    """A history and its agent sessions, as an export holds them (nothing when the store lacks it)."""
    s = _store(store)
    if s.history_kind(history) is None:
        return []
    return [history, *(h for h in s.sessions(history) if h != history)]


def everything(store: object) -> list[str]:
    """Every history of the store, each conversation history followed by its agent sessions."""
    s = _store(store)
    ids = [h for h, _ in s.histories()]
    out: list[str] = []
    for hid in ids:
        if hid not in out and (s.history_kind(hid) != "agent" or not _parent_in(s, hid, ids)):
            out += [h for h in family(s, hid) if h not in out]
    return out + [h for h in ids if h not in out]


def _parent_in(store: SQLStore, history: str, ids: Sequence[str]) -> bool:
    return any(history in store.sessions(p) for p in ids if p != history)


def _json_value(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def export_lines(store: object, histories: Sequence[str]) -> Iterator[str]:
    """The lines of an export of ``histories`` (each a JSON text, without its newline), one row at a time."""
    s = _store(store)
    missing = [h for h in histories if s.history_kind(h) is None]
    if missing:
        raise InvalidInputError(f"no history {missing[0]!r} in the store")
    yield json.dumps({"format": FORMAT, "version": VERSION, "histories": list(histories)}, ensure_ascii=False)
    count = 1
    for hid in histories:
        for kind, row in s.dump(hid):
            line: dict[str, Any] = {"type": kind, "history": hid}
            for column in COLUMNS[kind]:
                value = row[column]
                if column == "piece_vectors":
                    value = [_json_value(v) for v in value]
                elif column == "legacy" and value is not None:
                    value = list(value)
                line[column] = _json_value(value)
            count += 1
            yield json.dumps(line, ensure_ascii=False)
    yield json.dumps({"type": "end", "lines": count + 1})


def export(store: object, histories: Sequence[str], out: str | Path | IO[str]) -> int:
    """Write an export of ``histories`` to a path (written beside it, then renamed into place: never half
    a file) or an open text file; returns the lines written."""
    lines = export_lines(store, histories)
    if not isinstance(out, str | Path):
        n = 0
        for line in lines:
            out.write(line + "\n")
            n += 1
        return n
    target = Path(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            n = export(store, histories, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return n


# -- import ----------------------------------------------------------------------------------------
class _History:
    """What the check of one history keeps while its lines go by: the ends of its chains, not its rows."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.id: str = row["id"]
        self.epoch: str = row["epoch"]
        self.row: str = row["digest"] or ""  # the history row's digest (a head of version 2 covers it)
        self.merged: list[tuple[int, int, int, str]] = []  # (first, last, level, digest) of its merged records
        self.digests: list[str] = []  # every note's digest, by seq (merged records are chained to them)
        self.units: dict[str, str] = {}  # unit id -> its note's digest (requests are bound to them)
        self.back: dict[int, set[int]] = {}  # note -> the earlier notes that link forward to it
        self.step, self.steps = "", 0
        self.request, self.requests = "", 0
        self.state: list[tuple[str, str]] = []
        self.erasures: list[list[Any]] = []  # its erasure rows, as stored (rewritten notes and steps)
        self.erased_notes: dict[int, tuple[str, str]] = {}
        self.erased_steps: dict[int, tuple[str, str]] = {}


class _Check:
    """Checks an export line by line and gives each row as the store writes it (renamed when asked)."""

    def __init__(self, name: str, rename: str | None) -> None:
        self.name, self.rename = name, rename
        self.listed: list[str] = []
        self.seen: list[str] = []
        self.names: dict[str, str] = {}  # the file's history ids -> the ids they are stored under
        self.tops: list[str] = []
        self.now: _History | None = None
        self.phase = -1
        self.ended = False

    def fail(self, n: int, why: str) -> InvalidInputError:
        return InvalidInputError(f"{self.name} line {n}: {why}; nothing was imported")

    def rows(self, lines: Iterable[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        n = 0
        for n, text in enumerate(lines, 1):
            if not text.strip():
                if self.ended:
                    continue
                raise self.fail(n, "an empty line")
            if self.ended:
                raise self.fail(n, "a line after the last one (the end line)")
            try:
                data = json.loads(text)
            except (ValueError, RecursionError) as exc:
                raise self.fail(n, f"not JSON ({str(exc)[:100]})") from None
            if not isinstance(data, dict):
                raise self.fail(n, "not a JSON object")
            try:
                yield from self.line(n, data)
            except FlexaMemError as exc:
                raise self.fail(n, str(exc)) from None
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
                raise self.fail(
                    n, f"a malformed {data.get('type', 'header')} line ({type(exc).__name__}: {exc})"
                ) from None
        if n == 0:
            raise InvalidInputError(f"{self.name}: empty, not an export")
        if not self.ended:
            raise self.fail(n + 1, "the file ends before its end line: it was cut short")

    def line(self, n: int, data: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        if n == 1:
            if data.get("format") != FORMAT:
                raise InvalidInputError(f"not a FlexA-Mem export (its first line must name format {FORMAT!r})")
            if data.get("version") != VERSION:
                raise InvalidInputError(
                    f"export version {data.get('version')!r}; this FlexA-Mem reads version {VERSION}"
                )
            self.listed = [str(h) for h in data["histories"]]
            if len(set(self.listed)) != len(self.listed) or not self.listed:
                raise InvalidInputError("the first line must list each history the file holds once")
            return
        kind = data.get("type")
        if kind == "end":
            self.close_history()
            if data.get("lines") != n:
                raise InvalidInputError(f"the end line counts {data.get('lines')!r} lines where the file has {n}: lines"
                                        " were removed or added")  # fmt: skip
            if self.seen != self.listed:
                raise InvalidInputError(
                    f"the file holds histories {self.seen} where its first line lists {self.listed}"
                )
            self.ended = True
            return
        if kind not in COLUMNS:
            raise InvalidInputError(f"unknown line type {kind!r}")
        phase = PHASES.index(kind)
        if kind == "history":
            self.close_history()
        elif self.now is None or data.get("history") != self.now.id or phase < self.phase:
            raise InvalidInputError(f"a {kind} line out of place (each history's lines follow its row, in order)")
        self.phase = phase
        row = {c: data.get(c) if (kind, c) in OPTIONAL else data[c] for c in COLUMNS[kind]}
        yield kind, getattr(self, kind)(row)

    def close_history(self) -> None:
        if self.now is not None and self.phase != PHASES.index("head"):
            raise InvalidInputError(f"history {self.now.id!r} has no head line: its lines were cut short")
        self.now, self.phase = None, -1

    def history(self, row: dict[str, Any]) -> dict[str, Any]:
        hid, kind, parent = str(row["id"]), str(row["kind"]), row["parent"]
        if len(self.seen) >= len(self.listed) or self.listed[len(self.seen)] != hid:
            raise InvalidInputError(f"history {hid!r} is not the next one the first line lists")
        if row["legacy"] is not None:
            raise InvalidInputError(
                f"history {hid!r} holds rows written before digests (upgraded from schema < 7): they cannot be"
                " checked, so it cannot be imported (copy the whole store: flexamem backup)"
            )
        if row["digest"] is None or history_digest(hid, kind, row["meta"], row["epoch"], parent) != row["digest"]:
            raise InvalidInputError(f"the row of history {hid!r} does not match its digest: changed after export")
        if not isinstance(json.loads(row["meta"]), dict):
            raise InvalidInputError(f"the meta of history {hid!r} is not a JSON object")
        self.seen.append(hid)
        self.now = _History(row)
        if kind == "agent" and parent is not None and parent not in self.names:
            raise InvalidInputError(
                f"agent session {hid!r} belongs to history {parent!r}, which the file does not hold: an import"
                " writes the file's histories with their own sessions, never a session into another history"
            )
        if kind == "agent" and parent in self.names:  # a session of a history in the file: named after it
            old, new = session_prefix(parent), session_prefix(self.names[parent])
            if not hid.startswith(old):
                raise InvalidInputError(f"agent session {hid!r} is not named after its history {parent!r}")
            self.names[hid] = new + hid[len(old) :]
            parent = self.names[parent]
        else:
            self.tops.append(hid)
            if self.rename is not None and len(self.tops) > 1:
                raise InvalidInputError("--history renames one history: the file holds several (import it whole)")
            self.names[hid] = self.rename if self.rename is not None else hid
        out = {**row, "id": self.names[hid], "parent": parent}
        if out["id"] != hid:
            out["digest"] = history_digest(out["id"], kind, row["meta"], row["epoch"], parent)
        return out

    def note(self, row: dict[str, Any]) -> dict[str, Any]:
        h = self.now
        assert h is not None
        seq = row["seq"]
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise ValueError(f"seq {seq!r} is not a number")
        row["embedding"] = base64.b64decode(row["embedding"], validate=True)
        row["piece_vectors"] = [base64.b64decode(v, validate=True) for v in row["piece_vectors"]]
        pieces = [[seq, *p] for p in row["pieces"]]
        if any(len(p) != 9 for p in pieces):
            raise ValueError("a piece row has the wrong number of columns")
        links = [(seq, int(d)) for d in row["links"]]
        note_cols = [row[c] for c in NOTE_COLUMNS.split(", ")]
        try:
            notes = notes_from_rows([note_cols], pieces, links, [(seq, v) for v in row["piece_vectors"]])
        except StoreCorruptError as exc:
            raise InvalidInputError(f"note {seq} cannot be read: {exc}") from None
        note = notes[0]
        if row["piece_vectors"] and note.piece_vectors is None:
            raise InvalidInputError(
                f"note {seq} has {len(row['piece_vectors'])} piece vectors for {len(pieces)} pieces"
            )
        problems = chain_problems(
            [note], h.digests[-1] if h.digests else "", len(h.digests), legacy=0, erased=h.erased_notes
        )
        if problems:
            raise InvalidInputError(problems[0])
        problem = unit_problem(note)  # the digests hold: is it a unit a write could have stored?
        if problem is not None:
            raise InvalidInputError(problem)
        earlier = {d for _, d in links if d < seq}
        if earlier != h.back.pop(seq, set()):
            raise InvalidInputError(f"the links between note {seq} and the notes before it are not the ones written")
        for _, d in links:
            if d > seq:
                h.back.setdefault(d, set()).add(seq)
            elif d == seq:
                raise InvalidInputError(f"note {seq} links to itself")
        if note.unit_id in h.units:
            raise InvalidInputError(f"unit {note.unit_id!r} is in the history twice")
        h.digests.append(note.digest or "")
        h.units[note.unit_id] = note.digest or ""
        return row

    def erasure(self, row: dict[str, Any]) -> dict[str, Any]:
        h = self.now
        assert h is not None
        values = [row[c] for c in ERASURE_COLUMNS.split(", ")]
        problems = erasures_problems(h.id, [*h.erasures, values])
        if problems:
            raise InvalidInputError(problems[0])
        h.erasures.append(values)
        h.erased_notes, h.erased_steps = erased_rows(h.erasures, 6), erased_rows(h.erasures, 7)
        return row

    def merged(self, row: dict[str, Any]) -> dict[str, Any]:
        h = self.now
        assert h is not None
        first, last = int(row["first_seq"]), int(row["last_seq"])
        if not 0 <= first <= last < len(h.digests):
            raise InvalidInputError(f"the merged record of notes {first}..{last} merges notes the history lacks")
        digest = merged_digest(first, last, row["level"], row["text"], row["tokens"], row["writer"],
                               bool(row["flagged"]), h.digests[last])  # fmt: skip
        if row["digest"] != digest:
            raise InvalidInputError(f"the merged record of notes {first}..{last} does not match its digest")
        h.merged.append((first, last, int(row["level"]), digest))
        return row

    def step(self, row: dict[str, Any]) -> dict[str, Any]:
        h = self.now
        assert h is not None
        if row["n"] != h.steps:
            raise InvalidInputError(f"step {row['n']} follows step {h.steps - 1}: steps missing or out of order")
        if row["digest"] is None:
            raise InvalidInputError(f"step {row['n']} has no digest: it was removed")
        values = [row["n"], row["step_id"], row["data"], row["digest"], row["salt"]]
        if step_problem(h.id, values, h.step, h.erased_steps) is not None:
            raise InvalidInputError(f"step {row['n']} does not match its digest: changed after writing")
        h.step, h.steps = row["digest"], h.steps + 1
        return row

    def request(self, row: dict[str, Any]) -> dict[str, Any]:
        h = self.now
        assert h is not None
        rid = row["request_id"]
        if row["n"] != h.requests:
            raise InvalidInputError(f"request {rid!r} follows request {h.requests - 1}: requests missing")
        names = [str(u) for u in json.loads(row["units"])]
        if any(u not in h.units for u in names):
            raise InvalidInputError(f"request {rid!r} names notes the history does not hold")
        last = h.units[names[-1]] if names else ""
        if (
            row["digest"] is None
            or request_digest(h.request, row["n"], rid, row["units"], row["body"] or "", last) != row["digest"]
        ):
            raise InvalidInputError(f"request {rid!r} does not match its digest: changed after writing")
        h.request, h.requests = row["digest"], h.requests + 1
        return row

    def state(self, row: dict[str, Any]) -> dict[str, Any]:
        assert self.now is not None
        if not isinstance(row["key"], str) or not isinstance(row["value"], str):
            raise ValueError("a state row holds a key and a value as text")
        json.loads(row["value"])
        self.now.state.append((row["key"], row["value"]))
        return row

    def llm_call(self, row: dict[str, Any]) -> dict[str, Any]:
        return row

    def head(self, row: dict[str, Any]) -> dict[str, Any]:
        h = self.now
        assert h is not None
        if h.back:
            raise InvalidInputError(f"note {min(h.back)} is linked to by earlier notes but missing")
        if row["head"] is None:
            if h.digests or h.steps or h.requests or h.state or h.merged:
                raise InvalidInputError(f"history {h.id!r} holds rows but no head")
            return row
        stored = Head.from_json({**json.loads(row["head"]), "signature": row["signature"]})
        rows = Head(
            history=h.id, epoch=h.epoch, notes=len(h.digests), note=h.digests[-1] if h.digests else "",
            steps=h.steps, step=h.step, requests=h.requests, request=h.request, state=state_digest(h.state),
            erasures=len(h.erasures), erasure=str(h.erasures[-1][5]) if h.erasures else "",
            version=stored.version, row=h.row, merges=len(h.merged), merge=merged_set_digest(h.merged),
        )  # fmt: skip
        if stored.digest != rows.digest:  # a head of version 1 (exported before) covers neither row nor merges
            raise InvalidInputError(
                f"the head of history {h.id!r} (notes {stored.notes}, steps {stored.steps}, requests {stored.requests})"
                f" does not match the rows before it (notes {rows.notes}, steps {rows.steps}, requests"
                f" {rows.requests}; its state): rows were removed, added or changed"
            )
        return row


def _lines(f: IO[bytes]) -> Iterator[str]:
    for raw in f:
        try:
            yield raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            yield "\x00not utf-8"  # refused as not JSON, with its line number


@contextlib.contextmanager
def _opened(source: str | Path | IO[bytes] | IO[str]) -> Iterator[tuple[str, IO[bytes]]]:
    """The source as a file that can be read twice (a stream is spooled to a temporary file first)."""
    if isinstance(source, str | Path):
        if str(source) == "-":
            source = sys.stdin.buffer
        else:
            try:
                f = open(source, "rb")  # noqa: SIM115 - closed below
            except OSError as exc:
                raise InvalidInputError(f"cannot read {source}: {exc.strerror or exc}") from None
            with f:
                yield str(source), f
            return
    name = str(getattr(source, "name", "the export"))
    with tempfile.TemporaryFile() as spool:
        while chunk := source.read(1 << 20):
            spool.write(chunk.encode("utf-8") if isinstance(chunk, str) else chunk)
        spool.seek(0)
        yield name, spool


def check(source: str | Path | IO[bytes] | IO[str]) -> list[str]:
    """Check an export without writing anything; returns the histories it holds (raises
    :class:`InvalidInputError` naming the first line that fails)."""
    with _opened(source) as (name, f):
        checker = _Check(name, None)
        for _ in checker.rows(_lines(f)):
            pass
        return checker.seen


def import_history(store: object, source: str | Path | IO[bytes] | IO[str], history: str | None = None) -> list[str]:
    """Import an export into ``store``: every line checked before anything is written, then checked again
    as each row is written, all of it in one transaction (see the module's doc). ``history``: store the
    file's one history (and its sessions) under this name instead. Returns the histories written; a
    history the store already holds is refused, and nothing is written."""
    s = _store(store)
    if history is not None:
        if not isinstance(history, str) or not history.strip() or reserved(history.strip()):
            raise InvalidInputError(f"cannot import under the name {history!r} (empty, or an agent session's form)")
        history = history.strip()
    with _opened(source) as (name, f):
        first = _Check(name, history)
        for _ in first.rows(_lines(f)):
            pass
        taken = [new for new in first.names.values() if s.history_kind(new) is not None]
        if taken:
            raise InvalidInputError(
                f"history {taken[0]!r} is already in the store: an import never overwrites a history (drop it"
                " first, or import under another name with --history)"
            )
        f.seek(0)
        return s.import_rows(_Check(name, history).rows(_lines(f)))


# -- backup ----------------------------------------------------------------------------------------
def backup(path: str | Path, out: str | Path) -> list[str]:
    """Copy a live SQLite store to ``out`` with SQLite's online backup API (one consistent snapshot,
    writers go on meanwhile), written beside it and renamed into place; then verify every history of
    the copy. Returns the copy's problems (``[]``: none). ``out`` must not exist."""
    src_path, target = str(path), Path(out)
    if src_path.startswith(("postgresql://", "postgres://")):
        raise InvalidInputError(
            "backup copies a SQLite file; for PostgreSQL use pg_dump / pg_restore (docs/RELIABILITY.md) or"
            " flexamem export"
        )
    if not Path(src_path).is_file():
        raise InvalidInputError(f"no database at {src_path}")
    if target.exists():
        raise InvalidInputError(f"{target} exists: a backup never overwrites a file")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent if str(target.parent) else ".")
    os.close(fd)
    try:
        source = sqlite3.connect(f"file:{Path(src_path).resolve()}?mode=ro", uri=True)
        copy = sqlite3.connect(tmp)
        try:
            source.execute("PRAGMA busy_timeout = 5000")
            source.backup(copy)  # every page in one step: one snapshot, whatever writers do meanwhile
            copy.execute("PRAGMA journal_mode = DELETE")  # one self-contained file
        finally:
            copy.close()
            source.close()
        os.replace(tmp, target)
    except sqlite3.Error as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise StoreError(f"cannot back up {src_path}: {exc}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    from flexamem.store.sqlite import SQLiteStore

    store = SQLiteStore(target, read_only=True)
    try:
        return [p for h, _ in store.histories() for p in store.verify(h)]
    finally:
        store.close()


__all__ = ["backup", "check", "everything", "export", "export_lines", "family", "import_history"]
