"""Every digest FlexA-Mem writes, and the checks that read them back: one home for the formulas.

Write-once is enforced by the database's triggers; digests make a change made past them (by someone
who can drop the triggers, or a flipped byte on disk) visible. Each stored row a render or an agent
context can show carries one, written in the same transaction as the row:

- a **note** (``notes.digest``): SHA-256 chained over the note before it. Version 1 (notes written
  before schema v6: 64 hex digits) covers the ids, raw text, record, fields, session, date and seq;
  version 2 (``"v2:"`` + hex) adds the token counts, blocks, pieces, writer flags, the embedding, the
  piece vectors and the links the note was written with, so every byte a render can draw on is covered;
- a **merged record** (``merged.digest``): its span, text and writer, chained to the digest of the
  last note it merges (which covers every note before it);
- an **agent step** (``steps.digest``): chained over the step before it;
- a **history row** (``histories.digest``): its id, kind, meta (an agent session's task, system
  prompt and budget), epoch and parent.

Rows written before their digest existed carry none and are not checked (docs/RELIABILITY.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from flexamem.notes import Note, blocks_json

SEP = "\x1f"
V2 = "v2:"


def _sha(parts: Iterable[Any]) -> str:
    return hashlib.sha256(SEP.join(str(p) for p in parts).encode("utf-8", "surrogatepass")).hexdigest()


def _bytes_sha(arrays: Iterable[Any]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.asarray(a, dtype=np.float32).tobytes())
    return h.hexdigest()


def note_digest(note: Note, previous: str, *, version: int = 2) -> str:
    """The digest ``note`` must carry after a note whose digest is ``previous`` (``""`` for the first).
    ``version=1`` is the formula of notes written before schema v6 (checked, never written)."""
    parts: list[Any] = [previous, note.unit_id, note.kind, note.raw, note.record, note.fields.as_text()]
    parts += [note.session_id or "", note.date or "", note.seq]
    if version == 1:
        return _sha(parts)
    parts += [note.raw_tokens, note.record_tokens, note.fields_tokens, note.writer, int(note.flagged)]
    parts += [note.flag_reason or "", json.dumps(list(note.steps) if note.steps else None)]
    parts += [blocks_json(note.blocks)]
    parts += [json.dumps([[p.index, p.start, p.end, p.tokens, p.label, p.label_tokens, p.block, p.source_id]
                          for p in note.pieces])]  # fmt: skip
    parts += [json.dumps(sorted(d for d in note.links if d < note.seq))]
    parts += [_bytes_sha([note.embedding]), _bytes_sha(note.piece_vectors if note.piece_vectors is not None else [])]
    parts += [-1 if note.piece_vectors is None else len(note.piece_vectors)]
    return V2 + _sha(parts)


def note_problem(note: Note, previous: str) -> str | None:
    """What is wrong with a stored note read back after a note with digest ``previous`` (``None``:
    nothing, or a note written before digests). ``note.links`` must hold its stored outgoing links."""
    if note.digest is None:
        return None
    version = 2 if note.digest.startswith(V2) else 1
    if note_digest(note, previous, version=version) != note.digest:
        return f"note {note.seq} ({note.unit_id!r}) does not match its digest: changed after writing"
    return None


def merged_digest(first: int, last: int, level: int, text: str, tokens: int, writer: str, flagged: bool,
                  last_note_digest: str) -> str:  # fmt: skip
    """A merged record's digest: its span and content, chained to the last note it merges."""
    return _sha(["merged", first, last, level, text, tokens, writer, int(flagged), last_note_digest])


def step_digest(previous: str, n: int, step_id: str | None, data: str) -> str:
    """An agent step's digest, chained over the step before it (``""`` for step 0)."""
    return _sha(["step", previous, n, step_id if step_id is not None else "\x00", data])


def history_digest(history: str, kind: str, meta: str, epoch: str, parent: str | None) -> str:
    """A history row's digest (``meta`` as stored: its JSON text)."""
    return _sha(["history", history, kind, meta, epoch, parent if parent is not None else "\x00"])


def chain_problems(notes: Sequence[Note], previous: str = "", first_seq: int = 0) -> list[str]:
    """Problems of notes read back in order (numbering gaps and digest mismatches); ``previous`` is the
    digest of the note before ``notes[0]``, ``first_seq`` the seq it must have. The chain starts again
    after a note written before digests."""
    problems: list[str] = []
    expected = first_seq
    for note in notes:
        if note.seq != expected:
            problems.append(f"note {note.seq} ({note.unit_id!r}) follows note {expected - 1}: seqs missing")
        expected = note.seq + 1
        problem = note_problem(note, previous)
        if problem:
            problems.append(problem)
        previous = note.digest or ""
    return problems
