"""Fusion: a turn's score from its BM25 and its cosine, with the BM25 weight set per query (readers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from flexamem.knobs import check_knobs, knob
from flexamem.recover.signals.base import Phase, Scores

TOP_TURNS = 10  # the best turns whose BM25 says how flat a query's matches are


@dataclass(frozen=True)
class Fusion:
    """``a * best bm25 + (1 - a) * cosine`` per turn, ``a = min(auto_alpha, auto_alpha_spread *
    auto_alpha * (1 - flat))``, ``flat`` being the mean of the ``TOP_TURNS`` best turns' normalised BM25
    (1 when they all match as well as the best, near 0 when one turn stands out). A question whose words
    single out a few turns (a name, a code, a rare word) keeps BM25's full weight; one whose words are
    spread evenly over many turns ("any tips for my phone?") is ranked mostly by meaning. Pieces outside
    whole turns (and agent histories, with ``agent_auto_alpha``) fuse with the fixed ``auto_alpha``."""

    phase: ClassVar[Phase] = "fuse"

    auto_alpha: float = knob(0.5, zero=True, at_most=1, grid=(0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7))
    """Weight of the max-normalised BM25 score (stemmed terms) against the piece cosine, ``alpha * bm25
    / max(bm25) + (1 - alpha) * cos`` (0: the cosine alone). 0.4-0.6 within a point on LoCoMo dev."""

    auto_alpha_spread: float = knob(2.0, grid=(1.0, 1.5, 2.0, 3.0, 4.0, 8.0))
    """How fast the BM25 weight falls for a query whose BM25 scores are flat over its best turns.
    Calibrated on LoCoMo and LongMemEval dev together (docs/CALIBRATION.md)."""

    def __post_init__(self) -> None:
        check_knobs(self)

    def apply(self, scores: Scores, top: int = TOP_TURNS) -> None:
        best_bm, turn_cos = scores.best_bm, scores.turn_cosine()
        alpha = self.auto_alpha
        k = min(top, len(best_bm))
        flat = float(np.partition(best_bm, len(best_bm) - k)[len(best_bm) - k :].mean())
        a = min(alpha, max(0.0, self.auto_alpha_spread * alpha * (1.0 - flat)))
        scores.score = a * best_bm + (1.0 - a) * turn_cos
