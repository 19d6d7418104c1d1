"""Unit recovery: candidates by seeds, links and time neighbours; fit-or-degrade (SPEC section 4).

``g(j) = max over seeds i reaching j of lambda^[i != j] * c(i)``, where seed ``i`` reaches itself,
its links and its two time neighbours. Candidates are visited in decreasing ``g`` (ties: higher own
cosine, then older). Each takes the highest resolution whose cost fits the room left: raw, else an
excerpt, else it stays a record. A more relevant unit is never degraded to make room for a less
relevant one.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from flexamem.history import History
from flexamem.notes import Note
from flexamem.render import format as fmt
from flexamem.tokens import TokenCounter

Resolution = Literal["raw", "excerpt"]


@dataclass(frozen=True)
class Shown:
    """A recovered unit: its text at one resolution, what it costs, and its rank among candidates."""

    seq: int
    resolution: Resolution
    text: str
    tokens: int
    cost: int
    pieces: tuple[int, ...]
    rank: int


def candidates(
    sims: np.ndarray, links: Sequence[Sequence[int]], k: int, lam: float, *, use_links: bool = True
) -> list[int]:
    """Candidate seqs in decreasing ``g`` (SPEC eq. 2) over the ``len(sims)`` notes."""
    n = len(sims)
    if n == 0:
        return []
    seeds = [int(i) for i in np.argsort(-sims, kind="stable")[:k]]
    g: dict[int, float] = {}
    for i in seeds:
        reach = [i - 1, i + 1] + (list(links[i]) if use_links else [])
        for j in [i, *reach]:
            if 0 <= j < n:
                score = float(sims[i]) if j == i else lam * float(sims[i])
                if score > g.get(j, -np.inf):
                    g[j] = score
    return sorted(g, key=lambda j: (-g[j], -float(sims[j]), j))


def seeded_order(items: Sequence[int], query: str) -> list[int]:
    """A deterministic shuffle seeded by a hash of the query (for the random-order ablations)."""
    seed = int.from_bytes(hashlib.sha256(query.encode("utf-8")).digest()[:8], "big")
    out = list(items)
    random.Random(seed).shuffle(out)
    return out


class Recovery:
    """Builds raw and excerpt texts for candidates, with costs against the current timeline."""

    def __init__(
        self,
        history: History,
        counter: TokenCounter,
        excerpt_query: Sequence[str],
        excerpt_tokens: int,
        record_tokens: Callable[[int], int],
    ) -> None:
        self.history = history
        self.counter = counter
        self.excerpt_query = list(excerpt_query)
        self.excerpt_tokens = excerpt_tokens
        self.record_tokens = record_tokens  # tokens of note seq's timeline line
        self._excerpts: dict[int, tuple[str, int, tuple[int, ...]]] = {}
        self._piece_scores: np.ndarray | None = None  # every piece's BM25 score, the first time one is asked

    def raw_tokens(self, seq: int) -> int:
        """Tokens of the raw block (header + raw text), from the counts cached at write time."""
        key = ("raw-block", seq)
        cache = self.history.token_cache
        if key not in cache:  # notes never change: the header is counted once per history
            note = self.history.notes[seq]
            shown = note.raw_tokens + fmt.marks(note.raw) - (len(note.blocks) - 1)  # blocks begin lines unmarked
            cache[key] = self.counter.count(fmt.raw_header(note)) + 1 + shown
        return cache[key]

    def excerpt(self, seq: int) -> tuple[str, int, tuple[int, ...]]:
        """The record plus the unit's best BM25 pieces within E tokens, in original order.

        Its size comes from cached counts (header, record, pieces, labels, marks); the renderer's one
        exact count of the whole memory catches the rare token a join adds.
        """
        if seq not in self._excerpts:
            note = self.history.notes[seq]
            chosen = self.best_pieces(note, self.excerpt_tokens)
            text = fmt.excerpt_block(note, chosen)
            key = ("excerpt-header", seq)
            cache = self.history.token_cache
            if key not in cache:
                cache[key] = self.counter.count(fmt.excerpt_block(note, []))
                cache["mark"] = self.counter.count(fmt.OMITTED) + 1
            lines = fmt.piece_lines(note, chosen)
            size = cache[key] + sum(
                note.pieces[i].tokens + fmt.marks(note.pieces[i].text) + note.pieces[i].label_tokens + 1 for i in chosen
            )
            size += cache["mark"] * sum(1 for line in lines if line == fmt.OMITTED)
            self._excerpts[seq] = (text, size, tuple(chosen))
        return self._excerpts[seq]

    def best_pieces(self, note: Note, limit: int) -> list[int]:
        """Pieces ranked by BM25 (IDF over the whole history; ties: earlier), taken while they fit."""
        first = self.history.doc_of[note.seq]
        if self._piece_scores is None:  # one pass over the query's postings serves every candidate
            self._piece_scores = self.history.index.score_all(self.excerpt_query)
        scores = self._piece_scores[first : first + len(note.pieces)]
        order = sorted(range(len(note.pieces)), key=lambda i: (-scores[i], i))
        chosen, used = [], 0
        for i in order:
            piece = note.pieces[i]
            cost = piece.tokens + piece.label_tokens + 1
            if used + cost <= limit:
                chosen.append(i)
                used += cost
        return sorted(chosen)

    def cost(self, seq: int, resolution: Resolution, standalone: bool) -> int:
        """``|x^v| - tau * |s|``: a recovered unit replaces its record only while it stands alone."""
        size = self.raw_tokens(seq) if resolution == "raw" else self.excerpt(seq)[1]
        return size - self.record_tokens(seq) if standalone else size + 1  # +1: its own newline

    def shown(self, seq: int, resolution: Resolution, standalone: bool, rank: int) -> Shown:
        if resolution == "raw":
            note = self.history.notes[seq]
            text, tokens, pieces = fmt.raw_block(note), self.raw_tokens(seq), tuple(range(len(note.pieces)))
        else:
            text, tokens, pieces = self.excerpt(seq)
        return Shown(seq, resolution, text, tokens, self.cost(seq, resolution, standalone), pieces, rank)


def fit_or_degrade(
    order: Sequence[int],
    room: int,
    recovery: Recovery,
    standalone: Callable[[int], bool],
    *,
    excerpts: bool = True,
    raw: bool = True,
    raw_first: bool = False,
) -> list[Shown]:
    """Give each candidate, in order, the highest resolution that fits the room left.

    ``raw_first`` is the ablation that first gives raw text to every candidate that fits, and only
    then excerpts to the rest; ``raw=False`` is fixed-length recovery (an excerpt for everyone).
    """
    chosen: list[Shown] = []
    taken: set[int] = set()
    passes: list[tuple[Resolution, ...]]
    if raw_first:
        passes = [("raw",), ("excerpt",)] if excerpts else [("raw",)]
    else:
        options: list[Resolution] = []
        if raw:
            options.append("raw")
        if excerpts:
            options.append("excerpt")
        passes = [tuple(options)]
    for resolutions in passes:
        for rank, seq in enumerate(order):
            if seq in taken:
                continue
            for res in resolutions:
                cost = recovery.cost(seq, res, standalone(seq))
                if cost <= room:
                    chosen.append(recovery.shown(seq, res, standalone(seq), rank))
                    taken.add(seq)
                    room -= cost
                    break
    return sorted(chosen, key=lambda s: s.rank)
