"""Measures that need no LLM: what a rendering shows of the evidence.

``evidence_verbatim``: share of evidence turns whose whole text is shown (every piece of the turn in
the rendering, by provenance). ``evidence_partial``: at least one piece of the turn shown.
``answer_contained``: the normalised gold answer string occurs in the normalised context.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from flexamem.render.result import Rendering


def shown_pieces_by_turn(rendering: Rendering, turn_pieces: dict[str, set[tuple[int, int]]]) -> dict[str, float]:
    """For each turn id, the share of its pieces that the rendering shows."""
    shown = {(v.seq, p) for v in rendering.shown for p in v.pieces}
    return {t: len(ps & shown) / len(ps) for t, ps in turn_pieces.items() if ps}


def evidence_verbatim(rendering: Rendering, evidence: Iterable[str]) -> tuple[int, int]:
    """(evidence turns shown whole, evidence turns) for one question."""
    ev = list(dict.fromkeys(evidence))
    return sum(1 for t in ev if t in rendering.verbatim_turns), len(ev)


def evidence_partial(
    rendering: Rendering, evidence: Iterable[str], turn_pieces: dict[str, set[tuple[int, int]]]
) -> tuple[int, int]:
    ev = list(dict.fromkeys(evidence))
    shown = {(v.seq, p) for v in rendering.shown for p in v.pieces}
    return sum(1 for t in ev if turn_pieces.get(t, set()) & shown), len(ev)


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    text = re.sub(r"[^\w\s]", " ", text)
    return " ".join(text.split())


def answer_contained(context: str, answer: str | None) -> bool:
    if not answer:
        return False
    a = normalise(answer)
    return bool(a) and f" {a} " in f" {normalise(context)} "
