"""Piece recovery: the best BM25 pieces of the whole history, within the room (SPEC section 5).

Every piece is ranked by BM25 against the query (reader: the question; agent: the task with the
newest unit). Only pieces that match at least one query term are candidates (a piece with score 0
carries no evidence for this query). Ties go to the cosine between piece and query, then to the
earlier piece; piece vectors are computed only for a tie group that straddles the cut and are kept
in memory for later calls (the paper: pieces are embedded when first needed, then reused).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from flexamem.history import History
from flexamem.render import format as fmt
from flexamem.tokens import TokenCounter


def ranked_pieces(
    history: History,
    terms: Sequence[str],
    query_vector: Callable[[], np.ndarray],
    piece_vectors: Callable[[Sequence[int]], np.ndarray],
    room: int,
    n: int,
) -> list[int]:
    """BM25 doc ids of notes ``0..n-1`` in rank order: score desc, cosine desc, position asc.

    Cosines are computed only for runs of equal scores that start within the first ``room`` tokens
    of the ranking (a tie further down cannot change what fits).
    """
    docs, scores = history.index.search(terms)
    if len(docs) == 0:
        return []
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
        if j - i > 1 and used <= room:
            if vector is None:
                vector = query_vector()
            sims = piece_vectors(run) @ vector
            run = [run[k] for k in sorted(range(len(run)), key=lambda k: (-sims[k], run[k]))]
        used += sum(history.piece(d)[1].tokens for d in run) if used <= room else 0
        out.extend(run)
        i = j
    return out


def piece_cost(history: History, doc: int) -> int:
    _, piece = history.piece(doc)
    return piece.tokens + piece.label_tokens + 1


def select_pieces(
    history: History, ranked: Sequence[int], room: int, counter: TokenCounter, header_tokens: int
) -> dict[int, list[int]]:
    """Take pieces in rank order while they fit ``room``: {seq: [piece indexes]}.

    Costs count each piece's line, its label, an omission mark it may need, and the one-line unit
    header the first piece of a unit brings. A piece that does not fit is skipped, not a stop.
    """
    mark = counter.count(fmt.OMITTED) + 1
    chosen: dict[int, list[int]] = {}
    used = header_tokens + 1
    for doc in ranked:
        seq, idx = history.piece_of[doc]
        cost = piece_cost(history, doc) + mark
        if seq not in chosen:
            cost += counter.count(f"[u{seq + 1} · {fmt.when(history.notes[seq])}]") + 1 + mark
        if used + cost > room:
            continue
        chosen.setdefault(seq, []).append(idx)
        used += cost
    return chosen


def pieces_section(history: History, chosen: dict[int, list[int]]) -> str:
    """The pieces after the timeline: a one-line header, then groups by unit in time order."""
    groups = [fmt.pieces_group(history.notes[seq], sorted(idx)) for seq, idx in sorted(chosen.items())]
    return "\n".join([fmt.PIECES_HEADER, *groups])
