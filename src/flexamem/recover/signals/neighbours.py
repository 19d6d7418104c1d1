"""Neighbours (readers' ``auto``): the turns around a relevant turn come with it, the nearer first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from flexamem.knobs import check_knobs, knob
from flexamem.recover.signals.base import Phase, Scores

SOURCES = 4096  # the best groups that lift turns two or more away (every group lifts the next one)


@dataclass(frozen=True)
class Neighbours:
    """A turn scores at least ``auto_neighbour ** d`` times the score of a turn ``d`` turns before or
    after it in the same unit, up to ``auto_neighbour_reach`` turns away: an answer's question (or a
    question's answer) follows when room allows, then the turns around them. Off in agent histories (a
    tool output is no conversational turn) and with the ``neighbours`` switch."""

    phase: ClassVar[Phase] = "group"

    auto_neighbour: float = knob(0.7, below=1, grid=(0.3, 0.5, 0.7))
    """0.7 is chosen by every fold out of fold, on evidence turns and on answer strings alike (it was
    0.5; docs/CALIBRATION.md). Off: the variant ``auto-no-neighbours``."""

    auto_neighbour_reach: int = knob(5, grid=(1, 2, 3, 5))
    """How many turns away a turn lifts the turns of its unit. 5 is chosen out of fold (three folds of
    four; 1, the next turn only, was the rule until 2026-12-03): evidence +0.19 points, the answer string
    level (docs/CALIBRATION.md)."""

    def __post_init__(self) -> None:
        check_knobs(self)

    def apply(self, scores: Scores) -> None:
        if scores.agent or not scores.on("neighbours") or len(scores.starts) <= 1:
            return
        seqs = scores.history.doc_arrays()[0][scores.starts]
        scores.score = lifted_neighbours(seqs, scores.score, self.auto_neighbour, self.auto_neighbour_reach)


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
