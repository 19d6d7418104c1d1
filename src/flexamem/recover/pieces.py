"""Piece recovery: the best BM25 pieces of the whole history, within the room (SPEC section 5).

Every piece is ranked by BM25 against the query (reader: the question; agent: the task with the
newest unit). Ties go to the cosine between piece and query, then to the earlier piece; piece
vectors are computed only for the tie run that straddles the room's edge and are kept in memory for
later calls (the paper: pieces are embedded when first needed, then reused); a run of more than
``MAX_TIE_VECTORS`` pieces is ordered by its units' cosines instead.

Decision: pieces no query word matches (BM25 score 0) all tie; ordering them by their own cosine
would mean embedding most of the history at read time, so they follow the matched pieces ordered by
the cosine of their *unit's* embedding, then position. They are only reached when the matched pieces
leave room.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from flexamem.history import History
from flexamem.render import format as fmt
from flexamem.tokens import TokenCounter

MAX_TIE_VECTORS = 16  # a tie run longer than this is ordered by unit cosine (no read-time embedding of it)


def ranked_pieces(
    history: History,
    terms: Sequence[str],
    query_vector: Callable[[], np.ndarray],
    piece_vectors: Callable[[Sequence[int]], np.ndarray],
    room: int,
    n: int,
) -> list[int]:
    """BM25 doc ids of notes ``0..n-1`` in rank order: score desc, cosine desc, position asc.

    Cosines are computed only for the run of equal scores that straddles the first ``room`` tokens of
    the ranking (a tie wholly inside or beyond the room cannot change what fits).
    """
    docs, scores = history.index.search(terms)
    limit = history.doc_of[n] if n < len(history.doc_of) else len(history.piece_of)
    keep = docs < limit
    docs, scores = docs[keep], scores[keep]
    order = np.lexsort((docs, -scores))  # score desc, then earlier piece
    ranked = [int(d) for d in docs[order]]
    ranked_scores = scores[order]
    out: list[int] = []
    used, i = 0, 0
    vector: np.ndarray | None = None
    while i < len(ranked):
        j = i + 1
        while j < len(ranked) and ranked_scores[j] == ranked_scores[i]:
            j += 1
        run = ranked[i:j]
        size = sum(history.piece(d)[1].tokens for d in run) if used <= room else 0
        if j - i > 1 and used <= room < used + size:  # only a run that straddles the cut needs ordering
            if vector is None:
                vector = query_vector()
            if len(run) <= MAX_TIE_VECTORS:
                sims = piece_vectors(run) @ vector
            else:  # a huge tie (e.g. repeated text): the unit's cosine stands in for the piece's
                unit_sims = history.embeddings[:n] @ vector
                sims = np.array([unit_sims[history.piece_of[d][0]] for d in run])
            run = [run[k] for k in sorted(range(len(run)), key=lambda k: (-sims[k], run[k]))]
        used += size
        out.extend(run)
        i = j
    if used < room:  # room to spare: the pieces no query word matches, from the most similar units
        if vector is None:
            vector = query_vector()
        sims = history.embeddings[:n] @ vector
        matched = set(out)
        for seq in np.argsort(-sims, kind="stable"):
            first = history.doc_of[int(seq)]
            out.extend(d for d in range(first, first + len(history.notes[int(seq)].pieces)) if d not in matched)
    return out


def marks_delta(present: set[int], idx: int, size: int) -> int:
    """How many omission marks (see ``format.piece_lines``) adding piece ``idx`` adds to a unit.

    For a non-empty set S: marks = runs(S) - [0 in S] + [size-1 not in S].
    """
    if not present:
        return 1 - (idx == 0) + (idx != size - 1)
    runs = 1 - ((idx - 1) in present) - ((idx + 1) in present)
    return runs - (idx == 0) - (idx == size - 1)


def select_pieces(
    history: History,
    ranked: Sequence[int],
    room: int,
    counter: TokenCounter,
    header_tokens: int,
    *,
    whole_turns: bool = False,
    scores: np.ndarray | None = None,
    long_turn: float = 0.5,
) -> dict[int, list[int]]:
    """Take pieces in rank order while they fit ``room``: {seq: [piece indexes]}.

    The cost of a piece is what it adds to the pieces section: its line and label, the change in
    omission marks around it, and the one-line unit header the first piece of a unit brings. Counts
    come from the write-time cache, so the section's size is known without tokenizing it. A piece
    that does not fit is skipped, not a stop.

    ``whole_turns`` (``auto`` for readers): ``ranked`` comes as runs of consecutive pieces of one turn
    (:func:`~flexamem.recover.hybrid.hybrid_ranking`), and a turn is taken whole or not at all, so the
    reader gets the evidence turns entire; a turn longer than ``long_turn`` of the room could crowd out
    every other, so its pieces are taken one by one, best ``scores`` first. The section is then rendered with
    runs joined (:func:`pieces_section` ``join=True``): a piece following a chosen one costs no label.
    """
    mark = counter.count(fmt.OMITTED) + 1
    floor = history.piece_cost_floor(mark)  # no piece can cost less: skip cheaply what cannot fit
    chosen: dict[int, set[int]] = {}
    used = header_tokens + 1

    def cost(doc: int, extra: set[int] | None = None) -> int:
        seq, idx = history.piece_of[doc]
        note = history.notes[seq]
        piece = note.pieces[idx]
        present = (chosen.get(seq) or set()) | (extra or set())
        joined = whole_turns and (idx - 1) in present
        label = 0 if joined else piece.label_tokens  # joined to the one before: no label, a continuation mark
        shown = piece.tokens + fmt.marks(piece.text) + (1 if joined and piece.label else 0)
        c = shown + label + 1 + mark * marks_delta(present, idx, len(note.pieces))
        if not present:
            key = ("group-header", seq)
            if key not in history.token_cache:
                history.token_cache[key] = counter.count(fmt.group_header(note))
            c += history.token_cache[key] + 1
        return c

    def take(doc: int) -> None:
        nonlocal used
        if room - used < 4 or floor[doc] > room - used:
            return
        c = cost(doc)
        if used + c <= room:
            seq, idx = history.piece_of[doc]
            chosen.setdefault(seq, set()).add(idx)
            used += c

    if not whole_turns:
        for doc in ranked:
            if room - used < 4:
                break
            take(doc)
        return {seq: sorted(idx) for seq, idx in chosen.items()}
    for turn in _turns(history, ranked):
        if room - used < 4:
            break
        size = sum(floor[d] for d in turn)
        if size > long_turn * (room - header_tokens):  # too long to take whole: its best pieces, one by one
            for doc in sorted(turn, key=lambda d: -float(scores[d])) if scores is not None else turn:
                take(doc)
            continue
        if size > room - used:
            continue
        seq = history.piece_of[turn[0]][0]
        tentative: set[int] = set()
        total = 0
        for doc in turn:  # the turn's pieces are consecutive pieces of one note: cost them together
            total += cost(doc, tentative)
            tentative.add(history.piece_of[doc][1])
        if used + total <= room:
            chosen.setdefault(seq, set()).update(tentative)
            used += total
    return {seq: sorted(idx) for seq, idx in chosen.items()}


def _turns(history: History, ranked: Sequence[int]) -> list[list[int]]:
    """``ranked`` cut into its runs of consecutive pieces of one turn (a run ends where the next doc
    starts a turn or does not follow on)."""
    turn_start = history.doc_arrays()[1]
    runs: list[list[int]] = []
    for doc in ranked:
        if runs and doc == runs[-1][-1] + 1 and not turn_start[doc]:
            runs[-1].append(doc)
        else:
            runs.append([doc])
    return runs


def pieces_section(history: History, chosen: dict[int, list[int]], *, join: bool = False) -> str:
    """The pieces after the timeline: a one-line header, then groups by unit in time order (``join``:
    runs of consecutive pieces as the raw text they cover, see :func:`~flexamem.render.format.piece_lines`)."""
    return "\n".join(pieces_lines(history, chosen, join=join))


def pieces_lines(history: History, chosen: dict[int, list[int]], *, join: bool = False) -> list[str]:
    """:func:`pieces_section` as its lines (to be joined by line breaks): its header, then each group's
    header and its pieces one by one, so a renderer's kept line counts find a piece it showed before
    beside other pieces of its unit."""
    lines = [fmt.PIECES_HEADER]
    for seq, idx in sorted(chosen.items()):
        note = history.notes[seq]
        lines += [fmt.group_header(note), *fmt.piece_lines(note, sorted(idx), join=join)]
    return lines
