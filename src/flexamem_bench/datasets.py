"""Question-answering data sets as histories with questions (LoCoMo, LongMemEval).

A :class:`QAHistory` is what one memory is built from: sessions of turns (each turn with a stable
id) and the questions asked over it. LoCoMo has one history per conversation and many questions;
LongMemEval gives every question its own haystack history.

Mapping to units, as the paper does: LoCoMo keeps one unit per session (dates kept); LongMemEval cuts
sessions before user turns into spans of at most ~2,000 tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flexamem import InvalidInputError
from flexamem_bench.conversation_data import CATEGORIES, load_locomo, read_json_list
from flexamem_bench.conversation_data import Session as LocomoSession


@dataclass(frozen=True)
class QAItem:
    item_id: str
    question: str
    answer: str | None
    evidence: tuple[str, ...]  # turn ids
    category: str
    group: str  # the history it belongs to (bootstrap over groups resamples these)
    date: str | None = None  # when the question is asked (LongMemEval's question_date)
    retrieval_gold: tuple[str, ...] | None = None
    """The turns the benchmark's own retrieval evaluation counts as gold for this question (None: the
    evidence turns; empty: the benchmark does not score its retrieval, e.g. LongMemEval's abstention
    questions and those with no labelled user turn)."""


@dataclass(frozen=True)
class QAHistory:
    history_id: str
    sessions: list[LocomoSession]
    questions: list[QAItem]
    one_unit_per_session: bool
    problems: list[str] = field(default_factory=list)  # items left out, with the reason
    retrieval_corpus: frozenset[str] | None = None
    """The turns the benchmark's retrieval evaluation ranks (None: every turn; LongMemEval: user turns)."""

    def turn_texts(self) -> dict[str, str]:
        return {t["id"]: t["text"] for s in self.sessions for t in s.turns if "id" in t}


def locomo_histories(path: str | Path, categories: tuple[int, ...] = (1, 2, 3, 4)) -> list[QAHistory]:
    """LoCoMo conversations; categories by the official mapping (names in ``CATEGORIES``)."""
    unknown = [c for c in categories if c not in CATEGORIES]
    if unknown:
        raise InvalidInputError(f"unknown LoCoMo categories {unknown}; known: {CATEGORIES}")
    out = []
    for conv in load_locomo(path):
        known = {t["id"] for s in conv.sessions for t in s.turns if "id" in t}
        items, problems = [], []
        for i, q in enumerate(conv.questions):
            item_id = f"{conv.sample_id}/q{i}"
            if q.category not in categories:
                continue
            evidence = tuple(e for e in q.evidence if e in known)
            if not evidence:
                problems.append(f"{item_id}: no evidence turn resolves ({q.evidence!r})")
                continue
            items.append(QAItem(item_id, q.question, q.answer, evidence, CATEGORIES[q.category], conv.sample_id))
        out.append(QAHistory(conv.sample_id, conv.sessions, items, one_unit_per_session=True, problems=problems))
    return out


def _longmemeval_item(raw: dict[str, Any], index: int) -> QAHistory:
    qid = str(raw.get("question_id", f"item{index}"))
    for key in ("question", "haystack_sessions"):
        if key not in raw:
            raise InvalidInputError(f"LongMemEval item {qid}: missing '{key}'")
    session_ids = raw.get("haystack_session_ids") or [f"s{i}" for i in range(len(raw["haystack_sessions"]))]
    dates = raw.get("haystack_dates") or [None] * len(session_ids)
    if not (len(session_ids) == len(dates) == len(raw["haystack_sessions"])):
        raise InvalidInputError(f"LongMemEval item {qid}: sessions, ids and dates differ in length")
    answer_sessions = set(raw.get("answer_session_ids") or [])
    sessions, evidence, fallback, user_turns, user_gold = [], [], [], set(), []
    seen: dict[str, int] = {}
    for raw_sid, date, turns in zip(session_ids, dates, raw["haystack_sessions"], strict=True):
        # a haystack can hold the same session twice: the repeat is kept, under a name of its own
        seen[str(raw_sid)] = seen.get(str(raw_sid), 0) + 1
        sid = str(raw_sid) if seen[str(raw_sid)] == 1 else f"{raw_sid}#{seen[str(raw_sid)]}"
        if not isinstance(turns, list):
            raise InvalidInputError(f"LongMemEval item {qid}: session {sid} is not a list of turns")
        out_turns = []
        for i, t in enumerate(turns):
            if not isinstance(t, dict) or "role" not in t or "content" not in t:
                raise InvalidInputError(f"LongMemEval item {qid}: session {sid} turn {i} needs role and content")
            if not str(t["content"]).strip():
                continue
            tid = f"{sid}:{i}"
            out_turns.append({"speaker": str(t["role"]), "role": str(t["role"]), "text": str(t["content"]), "id": tid})
            user = t["role"] == "user"
            if user:
                user_turns.add(tid)
            if t.get("has_answer"):
                evidence.append(tid)
                if user:
                    user_gold.append(tid)
            if raw_sid in answer_sessions:
                fallback.append(tid)
        if out_turns:
            sessions.append(
                LocomoSession(session_id=str(sid), date=None if date is None else str(date), turns=out_turns)
            )
    category = str(raw.get("question_type", "unknown")) + ("/abstention" if qid.endswith("_abs") else "")
    item = QAItem(
        qid,
        str(raw["question"]),
        None if raw.get("answer") is None else str(raw["answer"]),
        tuple(evidence or fallback),
        category,
        qid,
        None if raw.get("question_date") is None else str(raw["question_date"]),
        # the benchmark's retrieval scores labelled user turns, and no abstention question
        retrieval_gold=() if qid.endswith("_abs") else tuple(user_gold),
    )
    problems = [] if item.evidence else [f"{qid}: no evidence turn (no has_answer label, no answer session)"]
    return QAHistory(
        qid,
        sessions,
        [item] if item.evidence else [],
        one_unit_per_session=False,
        problems=problems,
        retrieval_corpus=frozenset(user_turns),
    )


def longmemeval_histories(path: str | Path) -> list[QAHistory]:
    """LongMemEval ``_s`` / ``_m`` / ``_oracle`` files: each question with its own haystack."""
    data = read_json_list(path, "LongMemEval")
    out = []
    for i, raw in enumerate(data):
        try:
            out.append(_longmemeval_item(raw, i))
        except InvalidInputError as exc:  # one bad item never stops the run
            out.append(QAHistory(f"bad{i}", [], [], False, problems=[str(exc)]))
    return out
