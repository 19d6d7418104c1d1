"""The optional LLM reader and judge of the fact-recall harness (through the same client as the writer).

The reader gets the project's chain-of-note prompt (``prompts/reader.txt``: notes first, then a last
``Answer:`` line), the rendered memory and the question; the judge (``prompts/judge.txt``) compares
the reader's answer with the gold answer and says CORRECT or WRONG. Both go through
:class:`~flexamem.llm.client.ChatModel`, so a response cache makes a rerun cost nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from flexamem.errors import LLMOutputError
from flexamem.llm.client import ChatModel, Completion

PROMPTS = Path(__file__).parent / "prompts"
READER_PROMPT = (PROMPTS / "reader.txt").read_text(encoding="utf-8")
JUDGE_PROMPT = (PROMPTS / "judge.txt").read_text(encoding="utf-8")
_ANSWER = re.compile(r"^\s*\**answer\**\s*:\s*\**\s*(.+)$", re.I | re.M)
_VERDICT = re.compile(r"\b(CORRECT|WRONG)\b")


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
    """CORRECT -> True, WRONG -> False; anything else is an :class:`LLMOutputError`."""
    found = _VERDICT.findall(text.upper())
    if not found:
        raise LLMOutputError(f"the judge said neither CORRECT nor WRONG: {text[:120]!r}")
    return bool(found[0] == "CORRECT")


class LLMReader:
    """Answers a question from a rendered memory, then has the answer judged against the gold one."""

    def __init__(self, model: ChatModel, *, answer_tokens: int = 400) -> None:
        self.model = model
        self.answer_tokens = answer_tokens

    def read(self, memory: str, question: str) -> Completion:
        messages = [
            {"role": "system", "content": READER_PROMPT},
            {"role": "user", "content": f"Memory:\n{memory}\n\nQuestion: {question}"},
        ]
        return self.model.complete(messages, max_tokens=self.answer_tokens)

    def judge(self, question: str, gold: str, answer: str) -> Completion:
        messages = [
            {"role": "system", "content": JUDGE_PROMPT},
            {"role": "user", "content": f"Question: {question}\nGold answer: {gold}\nCandidate answer: {answer}"},
        ]
        return self.model.complete(messages, max_tokens=8)

    def __call__(self, memory: str, question: str, gold: str) -> Judged:
        read = self.read(memory, question)
        answer = final_answer(read.text)
        judged = self.judge(question, gold, answer)
        spent = [c for c in (read, judged) if not c.cached]
        return Judged(
            answer,
            verdict(judged.text),
            sum(c.prompt_tokens for c in spent),
            sum(c.completion_tokens for c in spent),
        )
