"""The optional LLM reader and judge of the fact-recall harness (through the same client as the writer).

Two protocols. ``project`` (LoCoMo): the reader gets the project's chain-of-note prompt
(``prompts/reader.txt``: notes first, then a last ``Answer:`` line), the rendered memory and the
question; the judge (``prompts/judge.txt``) compares the reader's answer with the gold answer and says
CORRECT or WRONG. ``longmemeval``: LongMemEval's protocol restated in our own words (the benchmark's
prompt texts are not copied, so accuracies are comparable with published ones, not identical): a
chain-of-note reader given the current (question) date (``prompts/lme_reader.txt``), and a judge per
question type that reads the whole response and answers yes or no: the default rule, off-by-one day
counts accepted for temporal questions, the latest value for knowledge updates, a rubric for
preferences, and "cannot be answered" for abstention questions (``prompts/lme_judge*.txt``).
Both go through :class:`~flexamem.llm.client.ChatModel`, so a response cache makes a rerun cost nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from flexamem import InvalidInputError
from flexamem.errors import LLMOutputError
from flexamem.llm.client import ChatModel, Completion

PROMPTS = Path(__file__).parent / "prompts"
READER_PROMPT = (PROMPTS / "reader.txt").read_text(encoding="utf-8")
JUDGE_PROMPT = (PROMPTS / "judge.txt").read_text(encoding="utf-8")
LME_READER_PROMPT = (PROMPTS / "lme_reader.txt").read_text(encoding="utf-8")
LME_JUDGES = {
    name: (PROMPTS / f"lme_judge{suffix}.txt").read_text(encoding="utf-8")
    for name, suffix in (
        ("default", ""),
        ("temporal-reasoning", "_temporal"),
        ("knowledge-update", "_update"),
        ("single-session-preference", "_preference"),
        ("abstention", "_abstention"),
    )
}
PROTOCOLS = ("project", "longmemeval")
_ANSWER = re.compile(r"^\s*\**answer\**\s*:\s*\**\s*(.+)$", re.I | re.M)
_VERDICT = re.compile(r"\b(CORRECT|WRONG)\b")
_YES_NO = re.compile(r"\b(YES|NO)\b")


def lme_judge_prompt(category: str | None) -> str:
    """LongMemEval's judge for a question type (``<type>`` or ``<type>/abstention``)."""
    if category and category.endswith("/abstention"):
        return LME_JUDGES["abstention"]
    return LME_JUDGES.get((category or "").split("/")[0], LME_JUDGES["default"])


@dataclass(frozen=True)
class Judged:
    answer: str
    correct: bool
    prompt_tokens: int  # reader + judge, spent (0 when both came from the cache)
    completion_tokens: int


def final_answer(text: str) -> str:
    """The text of the last ``Answer:`` line, else the last non-empty line."""
    found = _ANSWER.findall(text)
    if found:
        return str(found[-1]).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def verdict(text: str) -> bool:
    """CORRECT or yes -> True, WRONG or no -> False; anything else is an :class:`LLMOutputError`."""
    found = _VERDICT.findall(text.upper()) or _YES_NO.findall(text.upper())
    if not found:
        raise LLMOutputError(f"the judge said neither CORRECT nor WRONG (nor yes or no): {text[:120]!r}")
    return bool(found[0] in ("CORRECT", "YES"))


class LLMReader:
    """Answers a question from a rendered memory, then has the answer judged against the gold one."""

    def __init__(self, model: ChatModel, *, answer_tokens: int = 400, protocol: str = "project") -> None:
        if protocol not in PROTOCOLS:
            raise InvalidInputError(f"unknown reading protocol {protocol!r}: use one of {', '.join(PROTOCOLS)}")
        self.model = model
        self.answer_tokens = answer_tokens
        self.protocol = protocol

    def read(self, memory: str, question: str, date: str | None = None) -> Completion:
        if self.protocol == "longmemeval":
            system = LME_READER_PROMPT
            user = f"Memory:\n{memory}\n\nCurrent date: {date or 'unknown'}\nQuestion: {question}"
        else:
            system, user = READER_PROMPT, f"Memory:\n{memory}\n\nQuestion: {question}"
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        return self.model.complete(messages, max_tokens=self.answer_tokens)

    def judge(self, question: str, gold: str, answer: str, category: str | None = None) -> Completion:
        if self.protocol == "longmemeval":
            system, label = lme_judge_prompt(category), "Correct answer"
        else:
            system, label = JUDGE_PROMPT, "Gold answer"
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Question: {question}\n{label}: {gold}\nCandidate answer: {answer}"},
        ]
        return self.model.complete(messages, max_tokens=8)

    def __call__(
        self, memory: str, question: str, gold: str, *, category: str | None = None, date: str | None = None
    ) -> Judged:
        read = self.read(memory, question, date)
        answer = final_answer(read.text)
        # LongMemEval judges the whole response (notes and reasoning included); the project judge the answer
        judged = self.judge(question, gold, read.text if self.protocol == "longmemeval" else answer, category)
        spent = [c for c in (read, judged) if not c.cached]
        return Judged(
            answer,
            verdict(judged.text),
            sum(c.prompt_tokens for c in spent),
            sum(c.completion_tokens for c in spent),
        )
