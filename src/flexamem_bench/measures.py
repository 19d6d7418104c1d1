"""Measures that need no LLM: what a rendering shows of the evidence.

``evidence_verbatim``: share of evidence turns whose whole text is shown (every piece of the turn in
the rendering, by provenance). ``evidence_partial``: at least one piece of the turn shown.
``answer_contained``: the normalised gold answer string occurs in the normalised context.
``retrieval_measures``: the benchmark's own ranking measures (LongMemEval's recall_any@k, recall_all@k,
ndcg_any@k at turn and session level) of a method's turn ranking, with no budget.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable

from flexamem import Rendering


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


RETRIEVAL_KS = (5, 10)


def _dcg(relevant: list[bool]) -> float:
    return sum(1.0 / math.log2(i + 2) for i, r in enumerate(relevant) if r)


def ranking_measures(ranked: list[str], gold: set[str], k: int) -> tuple[float, float, float]:
    """LongMemEval's retrieval measures over one ranking at ``k`` (its definitions, restated): recall_any
    (any gold item in the top k), recall_all (every gold item in it), ndcg_any (binary relevance, the
    ideal ranking puts every gold item first)."""
    top = ranked[:k]
    hits = [item in gold for item in top]
    ideal = _dcg([True] * min(len(gold), k))
    return float(any(hits)), float(gold <= set(top)), (_dcg(hits) / ideal if ideal else 0.0)


def retrieval_measures(
    ranked_turns: list[str], evidence: Iterable[str], session_of: dict[str, str]
) -> dict[str, float]:
    """recall_any@k, recall_all@k and ndcg_any@k of a turn ranking, at turn level and at session level
    (turns mapped to their sessions, each session counted at its first turn; k counts sessions, as the
    benchmark's turn-to-session evaluation does), for k in ``RETRIEVAL_KS``."""
    gold = set(evidence)
    sessions = list(dict.fromkeys(session_of.get(t, t) for t in ranked_turns))
    gold_sessions = {session_of.get(t, t) for t in gold}
    out: dict[str, float] = {}
    for k in RETRIEVAL_KS:
        for level, ranking, wanted in (("turn", ranked_turns, gold), ("session", sessions, gold_sessions)):
            any_, all_, ndcg = ranking_measures(ranking, wanted, k)
            out[f"{level}_recall_any@{k}"] = any_
            out[f"{level}_recall_all@{k}"] = all_
            out[f"{level}_ndcg_any@{k}"] = ndcg
    return out


RETRIEVAL = tuple(
    f"{level}_{name}@{k}"
    for level in ("session", "turn")
    for k in RETRIEVAL_KS
    for name in ("recall_any", "recall_all", "ndcg_any")
)
