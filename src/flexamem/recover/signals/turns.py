"""What a turn is as a whole (readers' ``auto``): its head vector, its session's vector, its length."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from flexamem.knobs import check_knobs, knob
from flexamem.recover.signals.base import Phase, Scores, discounted


@dataclass(frozen=True)
class TurnVector:
    """A turn's cosine is ``(1 - auto_turn_vector) * best piece cosine + auto_turn_vector * its head's
    cosine``, the head being the weighted sum of the piece vectors of its first 256 tokens
    (:meth:`History.turn_heads`): a turn about the question whose every line says only part of it ranks
    as the whole turn reads, as a plain retrieval over whole turns would rank it. Needs piece vectors
    (off with the ``piece_vectors`` switch)."""

    phase: ClassVar[Phase] = "cosine"

    auto_turn_vector: float = knob(1.0, zero=True, at_most=1, grid=(0.0, 0.25, 0.5, 0.75, 1.0))
    """1.0 is chosen by every fold out of fold (0.0, the best piece alone, was the rule until
    2026-12-02): LongMemEval dev + dev2 +3.0 / +1.0 / +0.8 / +1.0 points at 4k-32k, LoCoMo unchanged
    (docs/CALIBRATION.md)."""

    def __post_init__(self) -> None:
        check_knobs(self)

    def apply(self, scores: Scores) -> None:
        share = self.auto_turn_vector if scores.on("piece_vectors") else 0.0
        if share <= 0 or scores.cos is None:
            return
        base = scores.best_piece_cos() if share < 1 else 0.0
        weights, norms = scores.history.turn_heads()
        starts, cos = scores.starts, scores.cos
        whole = np.add.reduceat(cos * weights[: len(cos)], starts) / np.maximum(norms[: len(starts)], 1e-12)
        scores.turn_cos = (1.0 - share) * base + share * whole


@dataclass(frozen=True)
class SessionVector:
    """``auto_session_vector`` of a turn's cosine comes from its unit (a session) as a whole: the cosine
    of the token-weighted sum of all the unit's piece vectors (:meth:`History.unit_vectors`), so the
    turns of a session about the question rank above a turn that only sounds like it in a session about
    something else. Needs piece vectors."""

    phase: ClassVar[Phase] = "cosine"

    auto_session_vector: float = knob(0.0, zero=True, at_most=1, grid=(0.0, 0.1, 0.2, 0.3, 0.5))
    """Off by default: out of fold the folds choose 0.3-0.5 and gain on LoCoMo (+0.6 / +1.4 / +0.7
    points of evidence at 2k-8k) but lose on LongMemEval (0 / -0.5 / -0.4 / -0.9 at 4k-32k), and the
    answer string does not move (docs/CALIBRATION.md). Histories of many-topic sessions may set it."""

    def __post_init__(self) -> None:
        check_knobs(self)

    def apply(self, scores: Scores) -> None:
        share = self.auto_session_vector if scores.on("piece_vectors") else 0.0
        if share <= 0 or scores.cos is None:
            return
        turn_cos, cos = scores.turn_cosine(), scores.cos
        weights, norms = scores.history.unit_vectors()
        seqs = scores.history.doc_arrays()[0][: len(cos)]
        unit_cos = np.bincount(seqs, weights=cos * weights[: len(cos)]) / np.maximum(norms[: seqs[-1] + 1], 1e-12)
        scores.turn_cos = (1.0 - share) * turn_cos + share * unit_cos[seqs[scores.starts]]


@dataclass(frozen=True)
class TurnLength:
    """A turn longer than ``auto_turn_room`` of the pieces' room has its score multiplied by
    ``(auto_turn_room * room / tokens) ** auto_turn_length`` (divided, when it is negative), so a long
    turn must be that much more relevant to take its room and several shorter turns can share a small
    budget."""

    phase: ClassVar[Phase] = "score"

    auto_turn_length: float = knob(1.0, zero=True, grid=(0.0, 0.25, 0.5, 1.0, 1.5, 2.0))
    """1.0: its score per token beyond that share; 0: no discount. It helps out of fold: on LongMemEval
    dev + dev2 the folds choose 1.5-2.0 (+2.0 points of evidence at 4k out of fold; 1.0 gives +1.9) and
    0.5 for answer strings (+0.9 out of fold; 1.0 the same); LoCoMo unchanged (docs/CALIBRATION.md)."""

    auto_turn_room: float = knob(0.1, at_most=1, grid=(0.03, 0.05, 0.1, 0.2))
    """The share of the pieces' room above which a turn is discounted. Out of fold the evidence folds
    choose 0.05 (+1.4 points at 4k and 8k on LongMemEval) and the answer-string folds 0.1 (0.05 loses
    one); 0.03 costs LoCoMo 2.6 points at 2k. Kept at 0.1, the value fixed before it was scored
    (docs/CALIBRATION.md)."""

    def __post_init__(self) -> None:
        check_knobs(self)

    def apply(self, scores: Scores) -> None:
        long_from = self.auto_turn_room * scores.room
        if not (self.auto_turn_length > 0 and long_from > 0):
            return
        sizes = scores.history.turn_tokens()[: len(scores.starts)]  # the turns of the docs scored (whole notes)
        keep = np.minimum(1.0, long_from / np.maximum(sizes, 1.0)) ** self.auto_turn_length
        scores.score = discounted(scores.score, keep)
