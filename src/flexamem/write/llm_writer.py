"""Records, fields and merged records written by a model (the paper's writer), with the rule writer
as the safety net.

One call per unit asks for strict JSON (record + keywords + tags + description); an answer that is
not that JSON gets one repair call; a unit whose calls still fail (after the client's retries) gets
the rule writer's record, flagged with the reason, so a unit is never lost or half-written. Limits
are enforced after the call: the record is cut at ``record_words`` with a mark, merged records are
asked for ``ask_merged_words`` and cut at ``merged_words`` (120 and 150 in the paper).

Prompts live beside this module in ``prompts/`` (under version control, like the code).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from string import Template
from typing import Any

from flexamem.config import Settings
from flexamem.errors import LLMError
from flexamem.llm.client import ChatModel, Completion, Message, parse_json_object
from flexamem.notes import Fields, LLMCall, Record, UnitDraft
from flexamem.text import cut_words
from flexamem.tokens import TokenCounter, counter
from flexamem.write.records import Forgets, Progress, RuleWriter, write_in_order

PROMPTS = Path(__file__).parent / "prompts"
CUT_MARK = " …"


def _template(name: str) -> Template:
    return Template((PROMPTS / name).read_text(encoding="utf-8"))


class LLMWriter:
    """A :class:`~flexamem.write.records.RecordWriter` backed by a :class:`ChatModel`.

    Args:
        model: any chat model, e.g. :class:`~flexamem.llm.client.OpenAICompatible`.
        record_words: records are cut at this many words (80).
        merged_words: merged records are cut at this many words (150); ``ask_merged_words`` (120)
            is what the prompt asks for.
        max_input_tokens: a longer unit is shown to the model as its head and tail (the note keeps
            all of it; a 2 MB tool output needs no more to be summarised).
        concurrency: units written at once by ``write_records`` (default: the model's own limit).
        fallback: the writer used when the model fails; the rule writer by default.
    """

    def __init__(
        self,
        model: ChatModel,
        *,
        record_words: int = Settings.record_words,
        merged_words: int = Settings.merged_words,
        ask_merged_words: int = 120,
        max_input_tokens: int = 3000,
        concurrency: int | None = None,
        fallback: RuleWriter | None = None,
    ) -> None:
        self.model = model
        self.name = model.name
        self.record_words = record_words
        self.merged_words = merged_words
        self.ask_merged_words = ask_merged_words
        self.max_input_tokens = max_input_tokens
        self.concurrency = concurrency or int(getattr(model, "concurrency", 4))
        self.fallback = fallback or RuleWriter(record_words, merged_words)
        self._counter: TokenCounter = counter()
        self._record_prompt = _template("record.txt")
        self._merge_prompt = _template("merge.txt")
        self._repair_prompt = _template("repair.txt")

    def forget_responses(self) -> None:
        """Drop the model's cached answers, when it keeps any (an erasure calls this)."""
        if isinstance(self.model, Forgets):
            self.model.forget_responses()

    # -- prompts -------------------------------------------------------------------------------------
    def _shown(self, text: str) -> str:
        ids = self._counter.encode(text)
        if len(ids) <= self.max_input_tokens:
            return text
        head = self.max_input_tokens * 2 // 3
        tail = self.max_input_tokens - head
        cut = len(ids) - head - tail
        return f"{self._counter.decode(ids[:head])}\n[… {cut} tokens left out …]\n{self._counter.decode(ids[-tail:])}"

    def record_messages(self, unit: UnitDraft) -> list[Message]:
        if unit.kind == "agent":
            first, last = unit.steps or (0, 0)
            span = f"step {first}" if first == last else f"steps {first} to {last}"
            context = f"The unit is {span} of an agent's work: each action it took and what came back."
        else:
            speakers = " and ".join(dict.fromkeys(b.label for b in unit.blocks))
            when = f" on {unit.date}" if unit.date else ""
            context = f"The unit is part of a conversation between {speakers}{when}."
        prompt = self._record_prompt.substitute(
            context=context, record_words=self.record_words, text=self._shown(unit.raw)
        )
        return [{"role": "user", "content": prompt}]

    def _repair_messages(self, messages: list[Message], answer: str, error: Exception) -> list[Message]:
        return [
            *messages,
            {"role": "assistant", "content": answer},
            {"role": "user", "content": self._repair_prompt.substitute(error=str(error))},
        ]

    def merge_messages(self, records: Sequence[str]) -> list[Message]:
        lines = "\n".join(f"{i}. {' '.join(r.split())}" for i, r in enumerate(records, 1))
        prompt = self._merge_prompt.substitute(count=len(records), ask_words=self.ask_merged_words, records=lines)
        return [{"role": "user", "content": prompt}]

    # -- answers -------------------------------------------------------------------------------------
    def record_from(self, answer: str, calls: Sequence[LLMCall]) -> Record:
        """The record in a JSON answer, limits enforced; ``ValueError`` when the answer is not usable."""
        data = parse_json_object(answer)
        text = _string(data, "record")
        description = _string(data, "description")
        keywords = _strings(data, "keywords")
        tags = _strings(data, "tags")
        if not text:
            raise ValueError('"record" is empty')
        fields = Fields(
            keywords=tuple(dict.fromkeys(cut_words(k, 4, "") for k in keywords if k))[:10],
            tags=tuple(dict.fromkeys(cut_words(t, 3, "") for t in tags if t))[:6],
            description=cut_words(description, 30, CUT_MARK),
        )
        return Record(cut_words(text, self.record_words, CUT_MARK), fields, self.name, calls=tuple(calls))

    def _merged_from(self, answer: str, calls: Sequence[LLMCall]) -> Record:
        text = " ".join(answer.split())
        if not text:
            raise ValueError("the merged record is empty")
        return Record(cut_words(text, self.merged_words, CUT_MARK), Fields(), self.name, calls=tuple(calls))

    def _fallback(self, record: Record, error: Exception, calls: Sequence[LLMCall]) -> Record:
        reason = f"{type(error).__name__}: {error}"[:500]
        return Record(record.text, record.fields, record.writer, True, reason, tuple(calls))

    @staticmethod
    def _call(purpose: str, c: Completion) -> LLMCall:
        return LLMCall(purpose, c.model, c.prompt_tokens, c.completion_tokens, cached=c.cached)

    # -- sync ----------------------------------------------------------------------------------------
    def write_record(self, unit: UnitDraft) -> Record:
        messages = self.record_messages(unit)
        calls: list[LLMCall] = []
        try:
            answer = self.model.complete(messages, max_tokens=self.record_max_tokens, json_mode=True)
            calls.append(self._call("record", answer))
            try:
                return self.record_from(answer.text, calls)
            except ValueError as exc:
                repair = self._repair_messages(messages, answer.text, exc)
                answer = self.model.complete(repair, max_tokens=self.record_max_tokens, json_mode=True)
                calls.append(self._call("repair", answer))
                return self.record_from(answer.text, calls)
        except (LLMError, ValueError) as exc:
            return self._fallback(self.fallback.write_record(unit), exc, calls)

    def write_records(self, units: Sequence[UnitDraft], progress: Progress | None = None) -> list[Record]:
        """One record per unit, in order, ``concurrency`` units at a time."""
        if len(units) <= 1 or self.concurrency <= 1:
            return write_in_order(self.write_record, units, progress)
        out: list[Record | None] = [None] * len(units)
        done = 0
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(units))) as pool:
            futures = {pool.submit(self.write_record, u): i for i, u in enumerate(units)}
            for future in as_completed(futures):
                out[futures[future]] = future.result()
                done += 1
                if progress is not None:
                    progress(done, len(units))
        return [r for r in out if r is not None]

    def merge_records(self, records: Sequence[str]) -> Record:
        calls: list[LLMCall] = []
        try:
            answer = self.model.complete(self.merge_messages(records), max_tokens=self.merge_max_tokens)
            calls.append(self._call("merge", answer))
            return self._merged_from(answer.text, calls)
        except (LLMError, ValueError) as exc:
            return self._fallback(self.fallback.merge_records(records), exc, calls)

    # -- async ---------------------------------------------------------------------------------------
    async def awrite_record(self, unit: UnitDraft) -> Record:
        messages = self.record_messages(unit)
        calls: list[LLMCall] = []
        try:
            answer = await self.model.acomplete(messages, max_tokens=self.record_max_tokens, json_mode=True)
            calls.append(self._call("record", answer))
            try:
                return self.record_from(answer.text, calls)
            except ValueError as exc:
                repair = self._repair_messages(messages, answer.text, exc)
                answer = await self.model.acomplete(repair, max_tokens=self.record_max_tokens, json_mode=True)
                calls.append(self._call("repair", answer))
                return self.record_from(answer.text, calls)
        except (LLMError, ValueError) as exc:
            return self._fallback(self.fallback.write_record(unit), exc, calls)

    async def awrite_records(self, units: Sequence[UnitDraft], progress: Progress | None = None) -> list[Record]:
        """Async twin of :meth:`write_records` (the model's own limit bounds the calls in flight)."""
        done = 0

        async def one(unit: UnitDraft) -> Record:
            nonlocal done
            record = await self.awrite_record(unit)
            done += 1
            if progress is not None:
                progress(done, len(units))
            return record

        return list(await asyncio.gather(*(one(u) for u in units)))

    @property
    def record_max_tokens(self) -> int:
        """Room for the record, up to 8 keywords, 5 tags and a sentence, in JSON."""
        return 2 * self.record_words + 200

    @property
    def merge_max_tokens(self) -> int:
        return 2 * self.merged_words


def _string(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise ValueError(f'"{key}" must be a string')
    return " ".join(value.split())


def _strings(data: dict[str, Any], key: str) -> list[str]:
    value = data.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f'"{key}" must be a list of strings')
    return [" ".join(v.split()) for v in value]
