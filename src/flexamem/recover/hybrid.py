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
from flexamem.recover.signals import Scores, Signal, run_phase

TOP = 2048  # groups sorted first; the rest only if the room needs them (rarely)


def hybrid_parts(
    history: History,
    terms: Sequence[str],
    vector: Callable[[], np.ndarray],
    n: int,
    *,
    dense: bool,
    stemmed: bool = True,
    piece_vectors: bool = True,
    signals: Sequence[Signal] = (),
    scores: Scores | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """The two halves of the fused score of every piece of notes ``0..n-1`` (by BM25 doc id): BM25
    divided by its maximum (plus what the ``pieces`` phase of ``signals`` adds: the agent's priors),
    and the cosine to the query (None unless ``dense``; ``vector`` is only asked for then). ``scores``
    gives those signals the query's side (agent or reader, code terms, switches) and is filled in.

    ``terms`` must already be stemmed when ``stemmed`` is set. ``piece_vectors=False`` scores every
    piece by its note's embedding (the ablation, and what a history written without vectors gets).
    """
    limit = history.doc_of[n] if n < len(history.doc_of) else history.pieces_count
    bm = np.zeros(limit, dtype=np.float64)
    docs, found = (history.stem_index if stemmed else history.index).search(terms)
    keep = docs < limit
    bm[docs[keep]] = found[keep]
    top = float(bm.max()) if limit else 0.0
    if top > 0:
        bm /= top
    scores = scores or Scores(history, bm)
    scores.bm = bm
    run_phase(signals, "pieces", scores)
    if not dense:
        return bm, None
    first = history.first_piece_vector
    if piece_vectors and first is not None and first < limit:
        cos = history.piece_matrix[:limit] @ vector()
    else:  # no piece among them has a vector of its own: each one's cosine is its note's, read per note
        unit_cos = history.embeddings[:n] @ vector()
        cos = unit_cos[history.doc_arrays()[0][:limit]]
    scores.cos = cos.astype(np.float64)
    return bm, scores.cos


def fuse(bm: np.ndarray, cos: np.ndarray | None, alpha: float) -> np.ndarray:
    """``alpha * bm + (1 - alpha) * cos``, per piece (BM25 alone when there is no cosine)."""
    if cos is None:
        return bm
    fused: np.ndarray = alpha * bm + (1.0 - alpha) * cos
    return fused


def turn_scores(scores: Scores, signals: Sequence[Signal]) -> np.ndarray:
    """Readers' ``auto``: one score per turn, from ``scores.bm`` and ``scores.cos`` (both set), by the
    ``cosine``, ``fuse`` and ``score`` phases of ``signals`` (:mod:`flexamem.recover.signals`): a turn's
    cosine (its best piece's, its head's, its session's), its fused score, its discounts."""
    assert scores.cos is not None
    scores.starts = scores.history.turn_starts(len(scores.bm))
    if len(scores.starts) == 0:
        return np.zeros(0)
    scores.best_bm = np.maximum.reduceat(scores.bm, scores.starts)
    scores.turn_cos = None
    for phase in ("cosine", "fuse", "score"):
        run_phase(signals, phase, scores)
    return scores.score


def hybrid_ranking(
    history: History,
    fused: np.ndarray,
    room: int,
    *,
    signals: Sequence[Signal] = (),
    scores: Scores | None = None,
    whole_turns: bool = True,
    group_scores: np.ndarray | None = None,
) -> list[int]:
    """Doc ids in rank order (turns together), cut once the ranked pieces hold well over ``room`` tokens
    (a piece that does not fit is skipped, so some spare ones are kept). A group (a turn, or a piece
    without ``whole_turns``) scores its best piece's ``fused`` score, or its ``group_scores`` (one per
    turn, :func:`turn_scores`); the ``group`` phase of ``signals`` then changes those (neighbours lifted,
    the assistant's turns discounted), ``scores`` giving them the query's side."""
    limit = len(fused)
    if limit == 0:
        return []
    starts = history.turn_starts(limit) if whole_turns else np.arange(limit)
    ends = np.append(starts[1:], limit)
    scores = scores or Scores(history, fused)
    scores.starts = starts
    scores.score = np.maximum.reduceat(fused, starts) if group_scores is None else group_scores
    run_phase(signals, "group", scores)
    out: list[int] = []
    used, cap = 0, 3 * room + 2048
    for g in ranked_groups(scores.score):
        for d in range(int(starts[g]), int(ends[g])):
            out.append(d)
            used += history.piece(d)[1].tokens
        if used > cap:
            break
    return out


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
