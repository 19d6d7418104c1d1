"""How memory text looks (the paper's Figure 8), in one place.

[u3 · 8 May 2023] record text                       a record on the timeline
[u1-u4 · 8 May 2023 – 3 July 2023 · merged] text    a merged record
[u7 · steps 12-14 · excerpt] record text            an excerpt: the record, then pieces
[step 12] a verbatim piece                          (label only when it does not begin its block)
(…)                                                 omitted text between pieces
[u5 · 9 June 2023 · raw]                            a unit shown as raw text
Caroline: verbatim raw text ...
│its next line                                       a turn's (or a step's) next lines: marked

No stored text can pose as this structure (docs/RENDERING.md): a line of the render begins with ``[``
or ``(…`` (the structure above), with a turn's or a step's first line (``Speaker: ...``, ``[step N]
actor: ...``; speakers and actors are checked when written, ``text.clean_field``), or with
``CONTINUATION`` (every further line of stored text); fields shown inside a header cannot close it
(``field``) nor add a part to it (``part``, ``time_tag``, ``piece_label``); control, bidi and special-token
characters are shown inert (``text.inert``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from flexamem.notes import Note, Piece
from flexamem.text import MIDDLE_DOTS, inert, katakana_dot, reading

OMITTED = "(…)"
PIECES_HEADER = "[verbatim pieces from the history, grouped by unit in time order]"
CONTINUATION = "│"  # U+2502: begins every line of stored text after the first line of its turn or step
_NEXT_LINE = re.compile(r"\n(?=[^\n])")  # a line break before a non-blank line (a blank line forges nothing)
_FIELD = str.maketrans({"[": "［", "]": "］", "\n": "⏎", "\t": " "})


def body(text: str) -> str:
    """Stored text as a render shows it: inert (``text.inert``), and each further non-blank line begun
    with ``CONTINUATION``, so no line of it can read as the memory's structure or another turn."""
    text = inert(text)
    return _NEXT_LINE.sub("\n" + CONTINUATION, text) if "\n" in text else text


def marks(text: str) -> int:
    """How many continuation marks :func:`body` adds to ``text`` (each costs one o200k token, measured
    on LongMemEval's turns: 11,838 tokens for 11,826 marks): what a render's estimates add to the
    counts cached at write time."""
    return len(_NEXT_LINE.findall(text)) if "\n" in text else 0


def field(text: str) -> str:
    """A stored field shown inside a header or a label (a date, a unit id, a speaker label): inert, on
    one line, its square brackets shown as full-width ones so it cannot close the header it sits in."""
    return inert(text).translate(_FIELD)


_DOT = re.compile(f"[{MIDDLE_DOTS}]")
# dashes a reader takes for the en dash between a merged record's first and last dates
_DASHES = str.maketrans(dict.fromkeys("\u2012\u2013\u2014\u2015\u2212\u2e3a\u2e3b\ufe31\ufe32\ufe58\ufe63\uff0d", "-"))
_STEP_SPAN = re.compile(r"\s*steps?\s*\d", re.IGNORECASE)  # an agent unit's time tag: "step 12", "steps 12-14"
_OUTPUT_LABEL = re.compile(r"(step \d+ · output of )(.*)", re.DOTALL)  # write.units.step_blocks


def part(text: str) -> str:
    """A stored value shown as one part of a header or a label: :func:`field`, and the header
    separator's dot and its look-alikes (``text.MIDDLE_DOTS``: · ΄ ∙ ⋅ • ・ ...) shown as ``<U+XXXX>``,
    so the value cannot add a part (``2 May · raw`` is shown ``2 May <U+00B7> raw``). A katakana middle
    dot between two katakana (ジョン・スミス) is the word separator of a name, kept. Unchanged for a value
    holding none, the common case."""
    shown = field(text)
    if _DOT.search(shown) is None:
        return shown
    return _DOT.sub(lambda m: m.group() if katakana_dot(m.string, m.start()) else f"<U+{ord(m.group()):04X}>", shown)


def time_tag(text: str) -> str:
    """A date or a session id shown as a conversation unit's time tag: :func:`part`, its dashes shown
    as ``-`` (the en dash ``–`` between two dates is the render's own mark of a merged span), and in
    double quotes when it reads as an agent unit's step span (``"steps 1-9"``)."""
    shown = part(text).translate(_DASHES)
    return f'"{shown}"' if _STEP_SPAN.match(reading(shown)) else shown


def piece_label(text: str) -> str:
    """A piece's label as shown: a speaker by :func:`part`; an agent output's ``step N · output of
    <command>`` with its command by :func:`part` (the first `` · `` is the label's own); dashes shown as
    ``-`` in either (an en dash between two dates is a merged span's mark)."""
    m = _OUTPUT_LABEL.fullmatch(text)
    return m.group(1) + part(m.group(2)).translate(_DASHES) if m else part(text).translate(_DASHES)


def shown(note: Note, start: int, end: int) -> str:
    """``note.raw[start:end]`` as a render shows it: each block (turn, action, output) that begins
    inside the slice begins a line of its own; every other line is :func:`body`'s."""
    text = note.raw[start:end]
    if "\n" not in text:
        return inert(text)
    parts, prev = [], 0
    for block in note.blocks:
        cut = block.start - start
        if 0 < cut < len(text):
            parts.append(body(text[prev : cut - 1]))  # text[cut - 1] is the line break joining the blocks
            prev = cut
    parts.append(body(text[prev:]))
    return "\n".join(parts)


def when(note: Note) -> str:
    """The time tag of a unit: its date (readers) or its step span (agents), else its unit id."""
    if note.steps:
        a, b = note.steps
        return f"step {a}" if a == b else f"steps {a}-{b}"
    return time_tag(note.date or note.unit_id)


def span_when(first: Note, last: Note) -> str:
    if first.steps and last.steps:
        return f"steps {first.steps[0]}-{last.steps[1]}"
    a, b = when(first), when(last)
    return a if a == b else f"{a} – {b}"


def record_line(note: Note) -> str:
    return f"[{note.label} · {when(note)}] {body(note.record)}"


def merged_line(first: Note, last: Note, text: str) -> str:
    return f"[{first.label}-{last.label} · {span_when(first, last)} · merged] {body(text)}"


def group_header(note: Note) -> str:
    """The header of a unit's group of pieces."""
    return f"[{note.label} · {when(note)}]"


def raw_header(note: Note) -> str:
    return f"[{note.label} · {when(note)} · raw]"


def raw_block(note: Note) -> str:
    return f"{raw_header(note)}\n{shown(note, 0, len(note.raw))}"


def piece_line(piece: Piece) -> str:
    return f"[{piece_label(piece.label)}] {body(piece.text)}" if piece.label else body(piece.text)


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
    text = shown(note, run[0].start, run[-1].end)
    return f"[{piece_label(run[0].label)}] {text}" if run[0].label else text


def excerpt_block(note: Note, chosen: Sequence[int]) -> str:
    head = f"[{note.label} · {when(note)} · excerpt] {body(note.record)}"
    return "\n".join([head, *piece_lines(note, chosen)])
