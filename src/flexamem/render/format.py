"""How memory text looks (the paper's Figure 8), in one place.

[u3 · 8 May 2023] record text                       a record on the timeline
[u1-u4 · 8 May 2023 – 3 July 2023 · merged] text    a merged record
[u7 · steps 12-14 · excerpt] record text            an excerpt: the record, then pieces
[step 12] a verbatim piece                          (label only when it does not begin its block)
(…)                                                 omitted text between pieces
[u5 · 9 June 2023 · raw]                            a unit shown as raw text
Caroline: verbatim raw text ...
"""

from __future__ import annotations

from collections.abc import Sequence

from flexamem.notes import Note, Piece

OMITTED = "(…)"
PIECES_HEADER = "[verbatim pieces from the history, grouped by unit in time order]"


def when(note: Note) -> str:
    """The time tag of a unit: its date (readers) or its step span (agents), else its unit id."""
    if note.steps:
        a, b = note.steps
        return f"step {a}" if a == b else f"steps {a}-{b}"
    return note.date or note.unit_id


def span_when(first: Note, last: Note) -> str:
    if first.steps and last.steps:
        return f"steps {first.steps[0]}-{last.steps[1]}"
    a, b = when(first), when(last)
    return a if a == b else f"{a} – {b}"


def record_line(note: Note) -> str:
    return f"[{note.label} · {when(note)}] {note.record}"


def merged_line(first: Note, last: Note, text: str) -> str:
    return f"[{first.label}-{last.label} · {span_when(first, last)} · merged] {text}"


def raw_header(note: Note) -> str:
    return f"[{note.label} · {when(note)} · raw]"


def raw_block(note: Note) -> str:
    return f"{raw_header(note)}\n{note.raw}"


def piece_line(piece: Piece) -> str:
    return f"[{piece.label}] {piece.text}" if piece.label else piece.text


def piece_lines(note: Note, chosen: Sequence[int], *, join: bool = False) -> list[str]:
    """Chosen pieces of one unit in original order, with a mark wherever text is left out. ``join``:
    each run of consecutive pieces is shown as the raw text it covers (``raw[first.start:last.end]``,
    so a turn shown whole reads exactly as it was written), labelled as its first piece."""
    lines: list[str] = []
    prev = -1
    run: list[Piece] = []
    for idx in sorted(chosen):
        if idx != prev + 1:
            if run:
                lines.append(_run_line(note, run))
                run = []
            lines.append(OMITTED)
        run.append(note.pieces[idx])
        if not join:
            lines.append(piece_line(run.pop()))
        prev = idx
    if run:
        lines.append(_run_line(note, run))
    if chosen and prev != len(note.pieces) - 1:
        lines.append(OMITTED)
    return lines


def _run_line(note: Note, run: Sequence[Piece]) -> str:
    text = note.raw[run[0].start : run[-1].end]
    return f"[{run[0].label}] {text}" if run[0].label else text


def excerpt_block(note: Note, chosen: Sequence[int]) -> str:
    head = f"[{note.label} · {when(note)} · excerpt] {note.record}"
    return "\n".join([head, *piece_lines(note, chosen)])


def pieces_group(note: Note, chosen: Sequence[int], *, join: bool = False) -> str:
    return "\n".join([f"[{note.label} · {when(note)}]", *piece_lines(note, chosen, join=join)])
