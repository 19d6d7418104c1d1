"""The data that flows from ``add`` to ``render``: turns and steps in, units, pieces and notes out.

Plain frozen dataclasses, no behaviour: every module reads them, none owns them.

A *unit* is the grain of history (a conversation span or a run of agent steps). Its raw text is made
of *blocks* (one conversation turn, or one agent action or output) joined by newlines. A *note* is a
unit once written: raw text, record, fields, embedding, links and pieces, with token counts cached.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

UnitKind = Literal["conversation", "agent"]
BlockKind = Literal["turn", "action", "output"]


@dataclass(frozen=True)
class Turn:
    """One conversation turn as the caller gave it (after validation)."""

    speaker: str
    text: str
    id: str | None = None
    role: str | None = None  # "user" / "assistant" when known: sessions are cut before user turns


@dataclass(frozen=True)
class Step:
    """One agent step: an action and what the environment (or the user) answered."""

    number: int
    action: str
    observation: str
    actor: str = "assistant"


@dataclass(frozen=True)
class Block:
    """A turn or an agent block inside a unit's raw text; pieces never cross one."""

    kind: BlockKind
    text: str  # exactly as it appears in the raw text (speaker or step header included)
    label: str  # shown before a piece that does not begin this block
    start: int  # character offset of the block in the unit's raw text
    source_id: str | None = None  # e.g. LoCoMo dia_id "D1:3", or "step 12"
    step: int | None = None


@dataclass(frozen=True)
class UnitDraft:
    """A unit before it is written: what the writer, embedder and piece cutter read."""

    unit_id: str
    kind: UnitKind
    raw: str
    blocks: tuple[Block, ...]
    session_id: str | None = None
    date: str | None = None
    steps: tuple[int, int] | None = None  # first and last step number (agents)

    @property
    def turn_ids(self) -> tuple[str, ...]:
        return tuple(b.source_id for b in self.blocks if b.source_id is not None)


@dataclass(frozen=True)
class Piece:
    """A verbatim slice ``raw[start:end]`` of one block, at most ``kappa`` tokens."""

    index: int  # position in the unit
    start: int
    end: int
    text: str
    tokens: int
    label: str | None  # set when the piece does not begin its block
    label_tokens: int
    block: int
    source_id: str | None  # the turn (or step) the piece came from


@dataclass(frozen=True)
class Fields:
    """Retrieval fields written with the record."""

    keywords: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    description: str = ""

    def as_text(self) -> str:
        parts = []
        if self.keywords:
            parts.append("keywords: " + ", ".join(self.keywords))
        if self.tags:
            parts.append("tags: " + ", ".join(self.tags))
        if self.description:
            parts.append(self.description)
        return "\n".join(parts)


@dataclass(frozen=True)
class LLMCall:
    """One memory call to a model, for accounting (paper Table 14)."""

    purpose: str  # "record" | "repair" | "merge" | "reader" | "judge"
    model: str
    prompt_tokens: int
    completion_tokens: int
    seq: int | None = None  # the note it was for (records), or the merged span's last note (merges)
    cached: bool = False  # served from the response cache: nothing spent


@dataclass(frozen=True)
class Record:
    """What a :class:`~flexamem.write.records.RecordWriter` returns for one unit (or one merge).

    ``calls`` are the model calls that produced it (none for the rule writer); they are stored with
    the note, in the same transaction, for accounting.
    """

    text: str
    fields: Fields
    writer: str  # e.g. "rule" or "llm:qwen2.5"; kept with the note
    flagged: bool = False  # True when the preferred writer failed and a fallback wrote it
    flag_reason: str | None = None  # why the preferred writer failed
    calls: tuple[LLMCall, ...] = ()


@dataclass(frozen=True)
class Note:
    """A written unit. ``links`` is a snapshot: later notes may add back-links."""

    seq: int  # position in the history, 0-based, time order
    unit_id: str
    kind: UnitKind
    raw: str
    raw_tokens: int
    record: str
    record_tokens: int
    fields: Fields
    fields_tokens: int
    embedding: np.ndarray = field(repr=False)
    pieces: tuple[Piece, ...] = field(repr=False)
    blocks: tuple[Block, ...] = field(repr=False)
    links: tuple[int, ...] = ()
    session_id: str | None = None
    date: str | None = None
    steps: tuple[int, int] | None = None
    writer: str = "rule"
    flagged: bool = False
    flag_reason: str | None = None
    # MiniLM vectors of the pieces, (len(pieces), dim), written with the note (None when written without them:
    # dense ranking then uses the note's embedding for its pieces)
    piece_vectors: np.ndarray | None = field(default=None, repr=False, compare=False)
    digest: str | None = None  # chained over the notes before it (flexamem.digests); None: written before v0.4
    salt: str | None = field(default=None, repr=False)  # random, in the digest (v3); erased with the words

    @property
    def label(self) -> str:
        """How renders name this unit: ``u<position>`` (1-based, time order); ``unit_id`` is the
        caller's (or the library's) id. ``Memory.note`` accepts either."""
        return unit_label(self.seq)

    @property
    def turn_ids(self) -> tuple[str, ...]:
        return tuple(b.source_id for b in self.blocks if b.source_id is not None)


def note_json(note: Note, full: bool = False) -> dict[str, Any]:
    """A note as JSON: what ``notes`` lists, and with ``full`` the raw text, the pieces and ``exact``
    (:func:`note_exact` without the raw text, which is carried once, here)."""
    out: dict[str, Any] = {
        "unit_id": note.unit_id,
        "label": note.label,
        "kind": note.kind,
        "session_id": note.session_id,
        "date": note.date,
        "record": note.record,
        "keywords": list(note.fields.keywords),
        "raw_tokens": note.raw_tokens,
        "record_tokens": note.record_tokens,
        "pieces": len(note.pieces),
        "links": [unit_label(s) for s in note.links],
        "writer": note.writer,
    }
    if full:
        out["raw"] = note.raw
        out["fields"] = note.fields.as_text()
        out["pieces"] = [
            {"index": p.index, "text": p.text, "tokens": p.tokens, "turn": p.source_id} for p in note.pieces
        ]
        out["digest"] = note.digest
        out["exact"] = note_exact(note, raw=False)
    return out


def note_exact(note: Note, *, raw: bool = True) -> dict[str, Any]:
    """Every field of a note as JSON (the embedding as base64 float32), so :func:`note_from_json`
    gives back an equal note on the other side of a wire. A piece is written without its text (the
    slice ``raw[start:end]``); ``raw=False`` leaves the raw text out too, for a message that carries it
    beside. Piece vectors stay out (they are large, and no caller of a note reads them)."""
    out = {
        "seq": note.seq,
        "unit_id": note.unit_id,
        "kind": note.kind,
        "raw_tokens": note.raw_tokens,
        "record": note.record,
        "record_tokens": note.record_tokens,
        "fields": {"keywords": list(note.fields.keywords), "tags": list(note.fields.tags),
                   "description": note.fields.description},
        "fields_tokens": note.fields_tokens,
        "embedding": base64.b64encode(np.asarray(note.embedding, dtype="<f4").tobytes()).decode("ascii"),
        "pieces": [[p.index, p.start, p.end, p.tokens, p.label, p.label_tokens, p.block, p.source_id]
                   for p in note.pieces],
        "blocks": [dataclasses.astuple(b) for b in note.blocks],
        "links": list(note.links),
        "session_id": note.session_id,
        "date": note.date,
        "steps": list(note.steps) if note.steps else None,
        "writer": note.writer,
        "flagged": note.flagged,
        "flag_reason": note.flag_reason,
        "digest": note.digest,
    }  # fmt: skip
    if raw:
        out["raw"] = note.raw
    return out


def note_from_json(data: Mapping[str, Any], raw: str | None = None) -> Note:
    """The note :func:`note_exact` wrote; ``raw``: its raw text when ``data`` was written without it
    (a ``KeyError``, ``TypeError`` or ``ValueError`` when it is not one). Pieces written with their
    text (by servers before 2026-12-02) are read as they are."""
    f = data["fields"]
    steps = data["steps"]
    text = str(data["raw"]) if "raw" in data or raw is None else raw
    return Note(
        seq=int(data["seq"]),
        unit_id=str(data["unit_id"]),
        kind=data["kind"],
        raw=text,
        raw_tokens=int(data["raw_tokens"]),
        record=str(data["record"]),
        record_tokens=int(data["record_tokens"]),
        fields=Fields(tuple(f["keywords"]), tuple(f["tags"]), str(f["description"])),
        fields_tokens=int(data["fields_tokens"]),
        embedding=np.frombuffer(base64.b64decode(data["embedding"]), dtype="<f4").astype(np.float32),
        pieces=tuple(_piece(p, text) for p in data["pieces"]),
        blocks=tuple(Block(*b) for b in data["blocks"]),
        links=tuple(int(x) for x in data["links"]),
        session_id=data["session_id"],
        date=data["date"],
        steps=(int(steps[0]), int(steps[1])) if steps else None,
        writer=str(data["writer"]),
        flagged=bool(data["flagged"]),
        flag_reason=data["flag_reason"],
        digest=data["digest"],
    )


def _piece(fields: Sequence[Any], raw: str) -> Piece:
    if len(fields) == 9:  # written with its text
        return Piece(*fields)
    index, start, end, tokens, label, label_tokens, block, source_id = fields
    return Piece(
        int(index), int(start), int(end), raw[int(start) : int(end)], tokens, label, label_tokens, block, source_id
    )


def blocks_json(blocks: Sequence[Block]) -> str:
    """How a note's blocks are stored (their text is a slice of the raw text, so only its length)."""
    return json.dumps([[b.kind, b.label, b.start, len(b.text), b.source_id, b.step] for b in blocks])


def unit_label(seq: int) -> str:
    """The label renders give the unit at position ``seq``: ``u<seq + 1>``."""
    return f"u{seq + 1}"
