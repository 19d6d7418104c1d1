"""Cutting a unit's raw text into pieces (SPEC section 2), with no LLM call.

Within each block (a turn, an action or an output) lines are packed greedily into pieces of at most
``kappa`` tokens; a piece never crosses a block. A line longer than ``kappa`` is split at token
boundaries, preferring a boundary before whitespace. Each piece is a verbatim slice of the raw text
with leading and trailing whitespace trimmed, so the pieces cover every non-blank character exactly
once. A piece that does not begin its block carries the block's label (its speaker, or its step number
and the first line of its command) so it still reads on its own.
"""

from __future__ import annotations

from collections.abc import Iterator

from flexamem.notes import Block, Piece, UnitDraft
from flexamem.tokens import TokenCounter


def _trim(text: str, a: int, b: int) -> tuple[int, int]:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


def _split_long_line(line: str, base: int, kappa: int, counter: TokenCounter) -> Iterator[tuple[int, int]]:
    """Spans (relative to the block, via ``base``) of <= kappa tokens covering one long line."""
    offsets = counter.token_offsets(line)
    n, s = len(offsets), 0
    while s < n:
        a = offsets[s]
        e = min(s + kappa, n)
        if e < n:  # prefer to end before a token that starts with whitespace
            for cand in range(e, s + max(kappa // 2, 1), -1):
                if line[offsets[cand]].isspace():
                    e = cand
                    break
        while True:
            b = offsets[e] if e < n else len(line)
            ta, tb = _trim(line, a, b)
            if e - s <= 1 or counter.count(line[ta:tb]) <= kappa:
                break
            e -= 1  # re-encoding a slice can add a token at its edges: shrink and retry
        if tb > ta:
            yield base + ta, base + tb
        s = e


def _block_spans(block: Block, kappa: int, counter: TokenCounter) -> Iterator[tuple[int, int]]:
    """Spans within ``block.text``: lines packed while the piece stays within kappa tokens."""
    text = block.text
    cur: tuple[int, int] | None = None
    pos = 0
    for line in text.split("\n"):
        la, lb = pos, pos + len(line)
        pos = lb + 1
        if not line.strip():
            continue
        if cur is not None:
            ca, cb = _trim(text, cur[0], lb)
            if counter.count(text[ca:cb]) <= kappa:
                cur = (ca, cb)
                continue
            yield cur
            cur = None
        ta, tb = _trim(text, la, lb)
        if counter.count(text[ta:tb]) <= kappa:
            cur = (ta, tb)
        else:
            yield from _split_long_line(line, la, kappa, counter)
    if cur is not None:
        yield cur


def cut_pieces(unit: UnitDraft, kappa: int, counter: TokenCounter) -> tuple[Piece, ...]:
    """All pieces of a unit, in order; token counts of texts and labels computed once here."""
    if kappa < 4:
        raise ValueError("kappa must be at least 4 tokens (one character can take 4)")
    pieces: list[Piece] = []
    label_tokens: dict[str, int] = {}
    for bi, block in enumerate(unit.blocks):
        for k, (a, b) in enumerate(_block_spans(block, kappa, counter)):
            label = None if k == 0 and a == 0 else block.label
            if label is not None and label not in label_tokens:
                label_tokens[label] = counter.count(f"[{label}] ")
            start, end = block.start + a, block.start + b
            text = unit.raw[start:end]
            pieces.append(
                Piece(
                    index=len(pieces),
                    start=start,
                    end=end,
                    text=text,
                    tokens=counter.count(text),
                    label=label,
                    label_tokens=label_tokens.get(label, 0) if label else 0,
                    block=bi,
                    source_id=block.source_id,
                )
            )
    return tuple(pieces)
