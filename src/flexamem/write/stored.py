"""The write-time rules, checked again on a unit that did not come through this library's writer.

A render trusts what the writer guarantees: a speaker that cannot pose as the memory's structure, a
turn block that begins ``"Speaker: "``, a piece without a label only where its block begins (so its
first line is the speaker's), every piece a slice of its own block. An export whose digests are all
consistent can still hold a unit that breaks these (digests are public formulas: anyone can compute
them over any text), so an import checks each unit here before it writes anything
(docs/RELIABILITY.md, "Moving a memory").
"""

from __future__ import annotations

import re

from flexamem.errors import InvalidInputError
from flexamem.notes import Note
from flexamem.text import clean_field
from flexamem.write.units import ERASED_MARK, is_marker

STEP_LABEL = re.compile(r"step \d+")


def unit_problem(note: Note) -> str | None:
    """Why ``note`` is not a unit this library's writer could have stored (None: it could)."""
    where = f"note {note.seq} ({note.unit_id!r})"
    try:
        for value, what in ((note.unit_id, "unit id"), (note.session_id, "session id"), (note.date, "date")):
            if value is not None and clean_field(value, f"its {what}") != value:
                return f"{where}: its {what} {value!r} is not as a write stores it"
        end = 0
        for i, block in enumerate(note.blocks):
            if block.start < end or note.raw[block.start : block.start + len(block.text)] != block.text:
                return f"{where}: block {i} is not the raw text at its place"
            end = block.start + len(block.text)
            if block.source_id is not None and clean_field(block.source_id, f"block {i}'s id") != block.source_id:
                return f"{where}: block {i}'s id is not as a write stores it"
            if is_marker(block):  # where an erasure took words out: the marker and nothing else
                expected = ERASED_MARK if block.kind == "turn" else f"[{block.label}] {ERASED_MARK}"
                if block.text != expected or (block.kind != "turn" and not STEP_LABEL.fullmatch(block.label)):
                    return f"{where}: block {i} is neither words nor an erasure's marker"
            elif block.kind == "turn":
                if clean_field(block.label, f"block {i}'s speaker", speaker=True) != block.label:
                    return f"{where}: block {i}'s speaker {block.label!r} is not as a write stores it"
                if not block.text.startswith(block.label + ": "):
                    return f"{where}: block {i} does not begin with its speaker"
            elif block.step is None or not block.label.startswith(f"step {block.step}") or "\n" in block.label:
                return f"{where}: block {i}'s label {block.label[:60]!r} is not its step's"
        for piece in note.pieces:
            if not 0 <= piece.block < len(note.blocks):
                return f"{where}: piece {piece.index} names block {piece.block}, which the unit lacks"
            block = note.blocks[piece.block]
            inside = block.start <= piece.start < piece.end <= block.start + len(block.text)
            if not inside or note.raw[piece.start : piece.end] != piece.text:
                return f"{where}: piece {piece.index} is not a slice of its block"
            if (piece.label is None) != (piece.start == block.start) or piece.label not in (None, block.label):
                return f"{where}: piece {piece.index} is labelled as no piece of its block is (a label shows where a piece does not begin its block)"  # noqa: E501
            if piece.source_id != block.source_id:
                return f"{where}: piece {piece.index} names another source than its block"
    except InvalidInputError as exc:
        return f"{where}: {exc}"
    return None
