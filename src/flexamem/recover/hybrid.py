"""``auto``'s ranking of pieces: stemmed BM25 fused with piece cosines, whole turns, neighbouring turns.

The paper's piece recovery ranks pieces by BM25 alone. On LoCoMo dev a dense retrieval over turns
beat it by 6-14 points (docs/EVALUATION.md), so ``auto`` ranks by a hybrid:

1. **Score** each piece ``alpha * bm25 / max(bm25) + (1 - alpha) * cos(piece, query)``. BM25 runs
   over Snowball stems (the same on both sides; words holding a digit kept whole, so codes, ids and
   dates stay exact terms). The piece vectors are written with the notes; a piece without one takes
   its note's embedding.
2. **Whole turns**: a turn (or agent block) is scored as one and its pieces are ranked together, in
   text order, so a long turn is shown whole when room allows. For readers its cosine is its head's
   (the token-weighted sum of its first 256 tokens' piece vectors, ``auto_turn_vector``), not its
   best piece's: a turn ranks as a retrieval over whole turns would see it.
   Optionally a share of it comes from its session's vector (``auto_session_vector``, off by default).
3. **Neighbours**: a turn scores at least ``neighbour ** d`` times the score of a turn ``d`` turns
   before or after it in the same unit, up to ``reach`` turns away (``auto_neighbour_reach``); an
   answer's question (or a question's answer) follows when room allows, then the turns around them.
4. **Long turns pay for their room**: for readers, a turn longer than a share of the room
   (``auto_turn_room``) is discounted by its length (``auto_turn_length``), so several shorter turns
   can share a small budget.

All of it is numpy over arrays the history keeps, so its cost grows with the number of pieces only
through a matrix-vector product and a sort. What each part adds (its ``RenderOptions`` switch off)
is measured in docs/EVALUATION.md; its numbers are calibrated in docs/CALIBRATION.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from flexamem.history import History


def hybrid_parts(
    history: History,
    terms: Sequence[str],
    vector: Callable[[], np.ndarray],
    n: int,
    *,
    dense: bool,
    stemmed: bool = True,
    piece_vectors: bool = True,
    identifiers: float = 0.0,
    code: float = 0.0,
    code_terms: Sequence[str] = (),
) -> tuple[np.ndarray, np.ndarray | None]:
    """The two halves of the fused score of every piece of notes ``0..n-1`` (by BM25 doc id): BM25
    divided by its maximum (plus the identifier prior), and the cosine to the query (None unless
    ``dense``; ``vector`` is only asked for then).

    ``code`` weighs a second BM25 over names of code kept whole (``code_terms`` against the history's
    ``code_index``), for agent histories where the next call reuses exact paths and names.
    ``terms`` must already be stemmed when ``stemmed`` is set. ``piece_vectors=False`` scores every
    piece by its note's embedding (the ablation, and what a history written without vectors gets).
    """
    limit = history.doc_of[n] if n < len(history.doc_of) else history.pieces_count
    bm = np.zeros(limit, dtype=np.float64)
    docs, scores = (history.stem_index if stemmed else history.index).search(terms)
    keep = docs < limit
    bm[docs[keep]] = scores[keep]
    top = float(bm.max()) if limit else 0.0
    if top > 0:
        bm /= top
    if identifiers > 0:  # a prior for pieces holding identifiers (up to 3 of them count)
        bm += identifiers * np.minimum(history.doc_arrays()[2][:limit], 3.0) / 3.0
    if code > 0 and code_terms:  # names of code matched whole: BM25 over them, max-normalised
        code_docs, code_scores = history.code_index.search(code_terms)
        keep = code_docs < limit
        if keep.any():
            exact = np.zeros(limit, dtype=np.float64)
            exact[code_docs[keep]] = code_scores[keep]
            bm += code * exact / float(exact.max())
    if not dense:
        return bm, None
    first = history.first_piece_vector
    if piece_vectors and first is not None and first < limit:
        cos = history.piece_matrix[:limit] @ vector()
    else:  # no piece among them has a vector of its own: each one's cosine is its note's, read per note
        unit_cos = history.embeddings[:n] @ vector()
        cos = unit_cos[history.doc_arrays()[0][:limit]]
    return bm, cos.astype(np.float64)


def hybrid_scores(
    history: History,
    terms: Sequence[str],
    vector: Callable[[], np.ndarray],
    n: int,
    *,
    alpha: float,
    stemmed: bool = True,
    piece_vectors: bool = True,
    identifiers: float = 0.0,
) -> np.ndarray:
    """The fused score ``alpha * bm25 / max(bm25) + (1 - alpha) * cos`` of every piece of notes
    ``0..n-1`` (indexed by BM25 doc id); see :func:`hybrid_parts`."""
    bm, cos = hybrid_parts(
        history, terms, vector, n, dense=alpha < 1, stemmed=stemmed, piece_vectors=piece_vectors,
        identifiers=identifiers,
    )  # fmt: skip
    return fuse(bm, cos, alpha)


def fuse(bm: np.ndarray, cos: np.ndarray | None, alpha: float) -> np.ndarray:
    """``alpha * bm + (1 - alpha) * cos``, per piece (BM25 alone when there is no cosine)."""
    if cos is None:
        return bm
    fused: np.ndarray = alpha * bm + (1.0 - alpha) * cos
    return fused


def turn_scores(
    history: History,
    bm: np.ndarray,
    cos: np.ndarray,
    *,
    alpha: float,
    spread: float,
    top: int = 10,
    turn_vector: float = 0.0,
    long_from: float = 0.0,
    length: float = 0.0,
    session: float = 0.0,
) -> np.ndarray:
    """Readers' ``auto``: one score per turn, ``a * best bm25 + (1 - a) * best cosine`` of its pieces,
    with the BM25 weight ``a`` set per query by how much BM25 sets its best turns apart.

    ``flat`` is the mean of the ``top`` best turns' normalised BM25 (1 when they all match as well as
    the best, near 0 when one turn stands out); ``a = min(alpha, spread * alpha * (1 - flat))``. A
    question whose words single out a few turns (a name, a code, a rare word) keeps BM25's full weight;
    one whose words are spread evenly over many turns ("any tips for my phone?") is ranked mostly by
    meaning. Calibrated in docs/CALIBRATION.md.

    A turn's cosine is ``(1 - turn_vector) * best piece cosine + turn_vector * its head's cosine``, the
    head being the weighted sum of the piece vectors of its first ``TURN_HEAD`` tokens
    (:meth:`History.turn_heads`): a turn about the question whose every line says only part of it
    ranks as the whole turn reads, as a plain retrieval over whole turns would rank it.

    ``session`` of the turn's cosine then comes from its unit (a session) as a whole: the cosine of
    the token-weighted sum of all the unit's piece vectors (:meth:`History.unit_vectors`), so the turns
    of a session about the question rank above a turn that only sounds like it in a session about
    something else (``auto_session_vector``).

    A turn longer than ``long_from`` tokens has its score multiplied by ``(long_from / tokens) **
    length`` (divided, when it is negative): a long turn must be that much more relevant to take its
    room (``auto_turn_room`` of the room, ``auto_turn_length``).
    """
    starts = history.turn_starts(len(bm))
    if len(starts) == 0:
        return np.zeros(0)
    best_bm = np.maximum.reduceat(bm, starts)
    turn_cos = np.maximum.reduceat(cos, starts) if turn_vector < 1 else 0.0  # the best piece's
    if turn_vector > 0:  # the turn as a whole: its head vector's cosine (History.turn_heads)
        weights, norms = history.turn_heads()
        whole = np.add.reduceat(cos * weights[: len(cos)], starts) / np.maximum(norms[: len(starts)], 1e-12)
        turn_cos = (1.0 - turn_vector) * turn_cos + turn_vector * whole
    if session > 0:  # the turn's unit as a whole: its pieces' cosines weighted by tokens, over its norm
        weights, norms = history.unit_vectors()
        seqs = history.doc_arrays()[0][: len(cos)]
        unit_cos = np.bincount(seqs, weights=cos * weights[: len(cos)]) / np.maximum(norms[: seqs[-1] + 1], 1e-12)
        turn_cos = (1.0 - session) * turn_cos + session * unit_cos[seqs[starts]]
    k = min(top, len(best_bm))
    flat = float(np.partition(best_bm, len(best_bm) - k)[len(best_bm) - k :].mean())
    a = min(alpha, max(0.0, spread * alpha * (1.0 - flat)))
    out: np.ndarray = a * best_bm + (1.0 - a) * turn_cos
    if length > 0 and long_from > 0:
        sizes = history.turn_tokens()[: len(starts)]  # the turns of the docs scored (whole notes)
        out = discounted(out, np.minimum(1.0, long_from / np.maximum(sizes, 1.0)) ** length)
    return out


def discounted(scores: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Each score times its ``keep`` (in (0, 1]) when above 0, divided by it otherwise, so a discount
    lowers a negative score too (the long-turn and the assistant-turn discounts)."""
    out: np.ndarray = np.where(scores > 0, scores * keep, scores / keep)
    return out


def hybrid_ranking(
    history: History,
    scores: np.ndarray,
    room: int,
    *,
    neighbour: float,
    reach: int,
    whole_turns: bool = True,
    group_scores: np.ndarray | None = None,
    discount: tuple[np.ndarray, float] | None = None,
) -> list[int]:
    """Doc ids in rank order (turns together, neighbours up to ``reach`` turns away lifted), cut once the
    ranked pieces hold well over ``room`` tokens (a piece that does not fit is skipped, so some spare
    ones are kept).
    ``neighbour`` and ``reach`` are the caller's settings (``auto_neighbour``, ``auto_neighbour_reach``:
    no default here, so the rule has one home). ``group_scores`` (one per turn, :func:`turn_scores`)
    replaces a turn's best piece score. ``discount`` ``(mask, f)``: after the neighbours are lifted, the
    score of each group the mask marks is multiplied by ``f`` (divided, when it is 0 or below), so a
    discounted group still lifts its neighbours by its own relevance."""
    limit = len(scores)
    if limit == 0:
        return []
    doc_seq = history.doc_arrays()[0]
    starts = history.turn_starts(limit) if whole_turns else np.arange(limit)
    ends = np.append(starts[1:], limit)
    group_score = np.maximum.reduceat(scores, starts) if group_scores is None else group_scores
    if neighbour > 0 and len(starts) > 1:
        group_score = lifted_neighbours(doc_seq[starts], group_score, neighbour, reach)
    if discount is not None:
        group_score = discounted(group_score, np.where(discount[0][: len(starts)], discount[1], 1.0))
    out: list[int] = []
    used, cap = 0, 3 * room + 2048
    for g in ranked_groups(group_score):
        for d in range(int(starts[g]), int(ends[g])):
            out.append(d)
            used += history.piece(d)[1].tokens
        if used > cap:
            break
    return out


TOP = 2048  # groups sorted first; the rest only if the room needs them (rarely)
SOURCES = 4096  # the best groups that lift turns two or more away (every group lifts the next one)


def lifted_neighbours(seqs: np.ndarray, scores: np.ndarray, neighbour: float, reach: int) -> np.ndarray:
    """Each group's score raised to at least ``neighbour ** d`` times the positive score of a group ``d``
    places before or after it in the same note (``seqs``: each group's note), for ``d`` up to ``reach``.
    A group scoring 0 or less lifts nothing (the neighbour of an unrelated turn is not raised by it).

    Distance 1 is lifted from every group. Further lifts come from the ``SOURCES`` best groups only, so a
    render's cost does not grow with ``reach`` times the history: a lift from any other group is below
    its own score, so below the ``SOURCES``-th best, and the first ``SOURCES`` groups of the ranking are
    as if every group lifted (with fewer positive groups than that, the scores are exactly those)."""
    gift = np.where(scores > 0, neighbour * scores, -np.inf)  # what a group gives the next one
    same = seqs[1:] == seqs[:-1]  # group g and g+1 are in one note
    lifted = scores.copy()
    lifted[1:] = np.where(same, np.maximum(lifted[1:], gift[:-1]), lifted[1:])
    lifted[:-1] = np.where(same, np.maximum(lifted[:-1], gift[1:]), lifted[:-1])
    if reach > 1:
        n = len(scores)
        best = scores > 0
        if np.count_nonzero(best) > SOURCES:  # the best SOURCES (and any tying the last), by a threshold
            best &= scores >= np.partition(scores, n - SOURCES)[n - SOURCES]  # (cheaper than argpartition)
        sources = np.flatnonzero(best)
        for d in range(2, reach + 1):
            for targets in (sources - d, sources + d):
                ok = (targets >= 0) & (targets < n)
                src, tgt = sources[ok], targets[ok]
                ok = seqs[tgt] == seqs[src]  # notes are contiguous: every group between is in it too
                tgt = tgt[ok]  # distinct (one shift of distinct sources): a plain assignment, not ufunc.at
                lifted[tgt] = np.maximum(lifted[tgt], neighbour**d * scores[src[ok]])
    return lifted


def ranked_groups(scores: np.ndarray) -> Iterator[int]:
    """Group indexes by score desc, ties to the earlier group: the order of a full stable sort, but
    only the top ``TOP`` (with every group tying the last of them) are sorted unless more are read."""
    if len(scores) <= 2 * TOP:
        yield from (int(g) for g in np.lexsort((np.arange(len(scores)), -scores)))
        return
    threshold = np.partition(scores, len(scores) - TOP)[len(scores) - TOP]
    head = np.flatnonzero(scores >= threshold)
    yield from (int(g) for g in head[np.lexsort((head, -scores[head]))])
    rest = np.flatnonzero(scores < threshold)
    yield from (int(g) for g in rest[np.lexsort((rest, -scores[rest]))])
