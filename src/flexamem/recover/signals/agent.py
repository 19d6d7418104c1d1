"""The agent's ranking (``auto`` in agent sessions): BM25 with priors for what an agent passes back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from flexamem.knobs import check_knobs, knob
from flexamem.recover.signals.base import Phase, Scores


@dataclass(frozen=True)
class AgentRanking:
    """Agent histories rank pieces one by one (a tool output is no conversational turn: no whole turns,
    no neighbours), by BM25 with a prior for pieces holding identifiers and a second BM25 over names of
    code kept whole, fused with the cosine at ``agent_auto_alpha``."""

    phase: ClassVar[Phase] = "pieces"

    agent_auto_alpha: float = knob(1.0, at_most=1, grid=(0.5, 0.75, 1.0))
    """The BM25 weight (1.0: BM25 alone; a sentence embedding of tool output blurs the ids, codes and
    numbers an agent's next call needs, docs/EVALUATION_AGENTS.md). Below 1, agent units are written
    with piece vectors."""

    agent_auto_identifiers: float = knob(3.0, zero=True, grid=(0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0))
    """A piece holding identifier words (4+ characters with a digit: ids, codes, numbers, dates) scores
    up to this much more (a third per identifier, up to three), on top of its max-normalised BM25: the
    values an agent passes back verbatim live in such pieces. 3.0 (it was 0.5, chosen on 36
    trajectories) is chosen out of fold on all 240 tau / tau2 development trajectories
    (docs/CALIBRATION.md): +6 / +7 / +5 points of detail recall at 2k / 3k / 4k. The ``identifiers``
    switch turns it off."""

    agent_auto_code: float = knob(1.0, zero=True, grid=(0.0, 0.5, 1.0, 2.0))
    """The weight of a second BM25 over names of code kept whole (paths, dotted, snake_case and
    CamelCase names: :func:`flexamem.text.code_terms`), max-normalised and added to the piece score;
    BM25 over words splits ``table_alias`` into two common words. The ``code_terms`` switch turns it
    off."""

    def __post_init__(self) -> None:
        check_knobs(self)

    def apply(self, scores: Scores) -> None:
        if not scores.agent:
            return
        bm, history, limit = scores.bm, scores.history, len(scores.bm)
        identifiers = self.agent_auto_identifiers if scores.on("identifiers") else 0.0
        code = self.agent_auto_code if scores.on("code_terms") else 0.0
        if identifiers > 0:  # a prior for pieces holding identifiers (up to 3 of them count)
            bm += identifiers * np.minimum(history.doc_arrays()[2][:limit], 3.0) / 3.0
        if code > 0 and scores.code_terms:  # names of code matched whole: BM25 over them, max-normalised
            code_docs, code_scores = history.code_index.search(scores.code_terms)
            keep = code_docs < limit
            if keep.any():
                exact = np.zeros(limit, dtype=np.float64)
                exact[code_docs[keep]] = code_scores[keep]
                bm += code * exact / float(exact.max())
