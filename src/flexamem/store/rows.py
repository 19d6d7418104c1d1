"""Notes to table rows and back: one codec for every SQL store (SQLite, PostgreSQL).

The column order is the tables' (store/schema.py, store/postgres.py): a backend only adds its own
placeholders and connection handling.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flexamem.errors import StoreCorruptError
from flexamem.notes import Block, Fields, Note, Piece, blocks_json

NOTE_COLUMNS = (
    "seq, unit_id, kind, session_id, date, step_first, step_last, raw, raw_tokens, record,"
    " record_tokens, fields, fields_tokens, embedding, blocks, writer, flagged, flag_reason, digest, salt"
)
PIECE_COLUMNS = 'seq, idx, start, "end", tokens, label, label_tokens, block, source_id'


def blocks_from(raw: str, data: str) -> tuple[Block, ...]:
    return tuple(
        Block(kind=k, text=raw[s : s + n], label=lab, start=s, source_id=sid, step=step)
        for k, lab, s, n, sid, step in json.loads(data)
    )


def note_row(history: str, n: Note, now: float) -> tuple[Any, ...]:
    """The ``notes`` row of a note (the table's column order)."""
    return (
        history,
        n.seq,
        n.unit_id,
        n.kind,
        n.session_id,
        n.date,
        n.steps[0] if n.steps else None,
        n.steps[1] if n.steps else None,
        n.raw,
        n.raw_tokens,
        n.record,
        n.record_tokens,
        json.dumps([list(n.fields.keywords), list(n.fields.tags), n.fields.description]),
        n.fields_tokens,
        np.asarray(n.embedding, dtype=np.float32).tobytes(),
        blocks_json(n.blocks),
        n.writer,
        int(n.flagged),
        now,
        n.flag_reason,
        n.digest,
        n.salt,
    )


def piece_rows(history: str, n: Note) -> list[tuple[Any, ...]]:
    return [
        (history, n.seq, p.index, p.start, p.end, p.tokens, p.label, p.label_tokens, p.block, p.source_id)
        for p in n.pieces
    ]


def vector_rows(history: str, n: Note) -> list[tuple[Any, ...]]:
    if n.piece_vectors is None:
        return []
    return [(history, n.seq, i, np.asarray(v, dtype=np.float32).tobytes()) for i, v in enumerate(n.piece_vectors)]


def notes_from_rows(
    rows: Sequence[Sequence[Any]],
    pieces: Sequence[Sequence[Any]],
    links: Sequence[Sequence[Any]],
    vectors: Sequence[Sequence[Any]],
    *,
    where: str = "",
    bad: Callable[[int, str], None] | None = None,
) -> list[Note]:
    """Notes from ``NOTE_COLUMNS`` rows, ``PIECE_COLUMNS`` rows, ``(src, dst)`` link rows and
    ``(seq, vector)`` rows, each in order. A row that cannot be read (a flipped byte: JSON, UTF-8, a
    vector's length) raises :class:`StoreError` naming it and ``where``; with ``bad``, it is reported
    as ``bad(seq, why)`` and left out instead (what ``verify`` does)."""
    by_seq: dict[int, list[Sequence[Any]]] = {}
    for p in pieces:
        by_seq.setdefault(p[0], []).append(p[1:])
    out_links: dict[int, list[int]] = {}
    for a, b in links:
        out_links.setdefault(a, []).append(b)
    blobs: dict[int, list[bytes]] = {}
    for seq, blob in vectors:
        blobs.setdefault(seq, []).append(bytes(blob))
    notes = []
    for r in rows:
        try:
            notes.append(_note(r, by_seq.get(r[0], []), out_links.get(r[0], ()), blobs.get(r[0])))
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:  # JSON and UTF-8 errors too
            why = f"its stored row cannot be read (corrupt: {type(exc).__name__}: {str(exc)[:200]})"
            if bad is None:
                raise StoreCorruptError(f"{where}note {r[0]} {why}; Memory.verify() lists every damaged row") from None
            bad(int(r[0]) if isinstance(r[0], int) else -1, why)
    return notes


def _note(r: Sequence[Any], note_pieces: list[Sequence[Any]], links: Sequence[int], vs: list[bytes] | None) -> Note:
    seq, raw = r[0], r[7]
    if not isinstance(raw, str):
        raise TypeError(f"raw text is {type(raw).__name__}")
    note_vectors = (
        np.frombuffer(b"".join(vs), dtype=np.float32).reshape(len(vs), -1)
        if vs and len(vs) == len(note_pieces)
        else None
    )
    keywords, tags, description = json.loads(r[11])
    return Note(
        seq=seq,
        unit_id=r[1],
        kind=r[2],
        session_id=r[3],
        date=r[4],
        steps=(r[5], r[6]) if r[5] is not None else None,
        raw=raw,
        raw_tokens=r[8],
        record=r[9],
        record_tokens=r[10],
        fields=Fields(tuple(keywords), tuple(tags), description),
        fields_tokens=r[12],
        embedding=np.frombuffer(bytes(r[13]), dtype=np.float32),
        blocks=blocks_from(raw, r[14]),
        writer=r[15],
        flagged=bool(r[16]),
        flag_reason=r[17],
        links=tuple(links),
        pieces=tuple(
            Piece(
                index=i, start=s, end=e, text=raw[s:e], tokens=t, label=lab, label_tokens=lt, block=blk, source_id=sid
            )
            for i, s, e, t, lab, lt, blk, sid in note_pieces
        ),
        piece_vectors=note_vectors,
        digest=r[18],
        salt=r[19],
    )
