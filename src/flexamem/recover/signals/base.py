"""The seam of ``auto``'s ranking: a signal is a frozen settings object (its knobs) that changes the
scores of one ranking in its phase.

A ranking runs in phases, in this order, each over :class:`Scores`:

- ``pieces``: per piece, the max-normalised BM25 (``Scores.bm``) may gain priors (agent histories);
- ``cosine``: per turn, the cosine a turn ranks by (``Scores.turn_cos``; the best piece's unless a
  signal sets it);
- ``fuse``: per turn, the score from its BM25 and its cosine (``Scores.score``);
- ``score``: per turn, changes of that score (discounts);
- ``group``: per ranked group (a turn, or a piece), after the turns' scores: lifts and discounts.

Within a phase, signals run in their registered order (:data:`flexamem.recover.signals.SIGNALS`). A
signal reads only what its phase has; the RenderOptions switches that turn one off arrive as
``Scores.off`` (an ablation), so a signal decides itself whether it runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Literal, Protocol

import numpy as np

from flexamem.history import History

Phase = Literal["pieces", "cosine", "fuse", "score", "group"]
PHASES: tuple[Phase, ...] = ("pieces", "cosine", "fuse", "score", "group")


@dataclass(eq=False)
class Scores:
    """One ranking in progress: what the query and the history give, and the scores the phases fill in."""

    history: History
    bm: np.ndarray
    """Per piece (BM25 doc id): BM25 over its maximum (plus what the ``pieces`` phase adds)."""
    cos: np.ndarray | None = None
    """Per piece: the cosine to the query (None when the ranking is BM25 alone)."""
    room: int = 0
    """Tokens the pieces may take in the render."""
    question: str = ""
    agent: bool = False
    code_terms: Sequence[str] = ()
    off: frozenset[str] = frozenset()
    """The render's switches turned off (``RenderOptions`` field names): the ablations."""
    starts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """First piece of each turn (``cosine``..``score``) or of each ranked group (``group``)."""
    best_bm: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Per turn: its best piece's ``bm``."""
    turn_cos: np.ndarray | float | None = None
    """Per turn: its cosine (the ``cosine`` phase)."""
    score: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """Per turn (``fuse``, ``score``) or per group (``group``)."""

    def on(self, switch: str) -> bool:
        """Whether the render's ``switch`` (a ``RenderOptions`` field) is on."""
        return switch not in self.off

    def best_piece_cos(self) -> np.ndarray:
        """Per turn: its best piece's cosine (the turn cosine when no signal sets another)."""
        assert self.cos is not None
        best: np.ndarray = np.maximum.reduceat(self.cos, self.starts)
        return best

    def turn_cosine(self) -> np.ndarray | float:
        """The turn cosine so far: set by an earlier signal, else its best piece's."""
        if self.turn_cos is None:
            self.turn_cos = self.best_piece_cos()
        return self.turn_cos


class Signal(Protocol):
    """One part of ``auto``'s ranking. A frozen dataclass whose fields are knobs
    (:func:`flexamem.knobs.knob`), registered once in ``SIGNALS``; :meth:`apply` changes ``scores`` in
    the signal's ``phase`` (and does nothing when its knobs or the render's switches turn it off)."""

    phase: ClassVar[Phase]

    def apply(self, scores: Scores) -> None: ...


def run_phase(signals: Sequence[Signal], phase: Phase, scores: Scores) -> None:
    """Every signal of ``phase``, in order."""
    for signal in signals:
        if signal.phase == phase:
            signal.apply(scores)


def discounted(scores: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Each score times its ``keep`` (in (0, 1]) when above 0, divided by it otherwise, so a discount
    lowers a negative score too (the long-turn and the assistant-turn discounts)."""
    out: np.ndarray = np.where(scores > 0, scores * keep, scores / keep)
    return out


__all__ = ["PHASES", "Phase", "Scores", "Signal", "discounted", "run_phase"]
