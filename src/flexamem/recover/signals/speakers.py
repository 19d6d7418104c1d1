"""Speakers (readers' ``auto``): for a question about its asker, what the asker said comes first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from flexamem.knobs import check_knobs, knob
from flexamem.recover.signals.base import Phase, Scores, discounted
from flexamem.text import asks_about_asker


@dataclass(frozen=True)
class AssistantTurns:
    """For a question about its asker (it says "I" or "my" and neither addresses nor names the other
    party, "you", "the assistant": :func:`flexamem.text.asks_about_asker`), the score of every turn whose
    speaker is ``assistant`` is multiplied by ``auto_assistant_turns`` after the neighbours are lifted,
    so such a turn still brings its neighbours, and what the asker said about themselves is shown before
    the assistant's longer answers around it. Whole turns only (the ``whole_turns`` switch)."""

    phase: ClassVar[Phase] = "group"

    auto_assistant_turns: float = knob(0.4, at_most=1, grid=(0.2, 0.4, 0.6, 0.8, 1.0))
    """1.0: no discount. Every fold chooses 0.4 out of fold on evidence (LongMemEval dev + dev2 +4.3 /
    +4.1 / +2.0 / +0.5 points at 4k-32k; LoCoMo, whose speakers are named, unchanged); the answer-string
    folds keep 1.0 for one question whose evidence is all shown either way (docs/CALIBRATION.md)."""

    def __post_init__(self) -> None:
        check_knobs(self)

    def apply(self, scores: Scores) -> None:
        f = self.auto_assistant_turns
        if f >= 1 or scores.agent or not scores.on("whole_turns") or not asks_about_asker(scores.question):
            return
        mask = scores.history.assistant_turns()
        scores.score = discounted(scores.score, np.where(mask[: len(scores.starts)], f, 1.0))
