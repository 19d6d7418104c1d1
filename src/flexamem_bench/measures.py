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
    """DCG as the benchmark's code computes it: the first two ranks both weigh 1, rank ``i`` (from 0)
    ``1 / log2(i + 1)`` after them."""
    return sum(1.0 / math.log2(max(i + 1, 2)) for i, r in enumerate(relevant) if r)


def ranking_measures(ranked: list[str], gold: set[str], k: int) -> tuple[float, float, float]:
    """LongMemEval's retrieval measures over one ranking at ``k`` (its definitions, restated): recall_any
    (any gold item in the top k), recall_all (every gold item in it), ndcg_any (binary relevance, the
    ideal ranking puts every gold item first)."""
    top = ranked[:k]
    hits = [item in gold for item in top]
    ideal = _dcg([True] * min(len(gold), k))
    return float(any(hits)), float(gold <= set(top)), (_dcg(hits) / ideal if ideal else 0.0)


def retrieval_measures(
    ranked_turns: list[str],
    gold: Iterable[str],
    session_of: dict[str, str],
) -> dict[str, float]:
    """recall_any@k, recall_all@k and ndcg_any@k of a turn ranking at turn level and at session level,
    for k in ``RETRIEVAL_KS``, as LongMemEval's retrieval evaluation computes them (restated).

    ``session_of`` maps every turn the benchmark ranks (its corpus) to its session; a ranked turn not in
    it is dropped (LongMemEval ranks user turns only). Session level reads the turn ranking through the
    sessions: the first ``k'`` turns, ``k'`` the shortest prefix holding ``k`` distinct sessions; recall
    over those sessions, nDCG over those turns (the gold turns relevant, the ideal ranking putting them
    first). Only a gold turn stands for its session: the benchmark renames the other turns of an answer
    session, so they count as a session of their own (a ranking that finds the session through one of
    its unlabelled turns has not found it).
    """
    wanted = set(gold)
    ranked = [t for t in ranked_turns if t in session_of]
    gold_sessions = {session_of[t] for t in wanted if t in session_of}

    def stands_for(turn: str) -> str:
        session = session_of[turn]
        return f"{session}\0other" if turn not in wanted and session in gold_sessions else session

    sessions = [stands_for(t) for t in ranked]
    relevant = len(wanted & session_of.keys())  # gold turns in the corpus: the ideal ranking's hits
    out: dict[str, float] = {}
    for k in RETRIEVAL_KS:
        any_, all_, ndcg = ranking_measures(ranked, wanted, k)
        out[f"turn_recall_any@{k}"], out[f"turn_recall_all@{k}"], out[f"turn_ndcg_any@{k}"] = any_, all_, ndcg
        seen: set[str] = set()
        prefix = len(sessions)
        for i, s in enumerate(sessions):
            seen.add(s)
            if len(seen) == k:
                prefix = i + 1
                break
        top = set(sessions[:prefix])
        hits = [t in wanted for t in ranked[:prefix]]
        ideal = _dcg([True] * min(relevant, prefix))
        out[f"session_recall_any@{k}"] = float(bool(top & gold_sessions))
        out[f"session_recall_all@{k}"] = float(bool(gold_sessions) and gold_sessions <= top)
        out[f"session_ndcg_any@{k}"] = _dcg(hits) / ideal if ideal else 0.0
    return out


RETRIEVAL = tuple(
    f"{level}_{name}@{k}"
    for level in ("session", "turn")
    for k in RETRIEVAL_KS
    for name in ("recall_any", "recall_all", "ndcg_any")
)
