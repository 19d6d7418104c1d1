"""Records and fields: the ``RecordWriter`` seam and the rule writer, the offline default.

A record is at most 80 words and keeps who, what, names and numbers; the fields (keywords, tags, one
short description) feed the embedding. The paper writes both with one LLM call per unit; without an
LLM a fixed rule does it (the paper's rule-written trace, a strong design on its own).

The rule writer is extractive: it never invents text. For conversations it keeps the sentences
richest in names, numbers and rare content words, each under its speaker. For agents it keeps, for
every step, the call with its key arguments and the first words of what came back, plus the ids and
numbers the output holds.

A rule-written record is a function of its unit alone, the same in every process: nothing it computes
depends on the order of a set (string hashes change with each process), and sums of scores are exact.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from flexamem.config import Settings
from flexamem.notes import Fields, Record, UnitDraft
from flexamem.text import STOP_WORDS, content_words, cut_words
from flexamem.write.units import command_of

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_NAME = re.compile(r"\b[A-Z][\w'’\-]*(?:\s+[A-Z][\w'’\-]*)*")
_NUMBER = re.compile(r"(?<![\w.])[$€£]?\d[\d,.:/\-]*\d%?|(?<![\w.])\d%?")
_JSON_KEY = re.compile(r'"([^"\\\n]{1,64})"\s*:')
_TOKEN = re.compile(r"[\w\-]+")  # linear-time scan; ids are filtered from these tokens
ANALYSIS_CHARS = 20_000  # the rule writer reads at most this much of each block (records are short)
_STEP_HEADER = re.compile(r"^\[step (\d+)\] ([^:]*): ?")
Progress = Callable[[int, int], None]  # (units done, units in all)


@runtime_checkable
class RecordWriter(Protocol):
    """Writes records and fields for units, and merged records for runs of records.

    Implementations may batch or parallelise inside ``write_records``; it returns one record per unit,
    in order, and calls ``progress(done, total)`` as units finish. A writer that fails for a unit must
    not raise: it falls back to the rule writer and sets ``Record.flagged``, so nothing is lost.
    ``merge_records`` returns the merged text as a :class:`Record` with empty fields.
    """

    name: str

    def write_records(self, units: Sequence[UnitDraft], progress: Progress | None = None) -> list[Record]: ...

    def merge_records(self, records: Sequence[str]) -> Record: ...


@runtime_checkable
class Forgets(Protocol):
    """A writer or model that keeps model answers (a response cache) and can drop them all: an erasure
    calls it, since an answer written from erased words cannot be told from the others."""

    def forget_responses(self) -> None: ...


@runtime_checkable
class AsyncRecordWriter(RecordWriter, Protocol):
    """A writer whose records can be awaited (the LLM writer); others run in a worker thread. Merged
    records need no twin: they are written inside a render, which async callers run in a thread."""

    async def awrite_records(self, units: Sequence[UnitDraft], progress: Progress | None = None) -> list[Record]: ...


# Words too common in chat to describe a unit (kept out of keywords only; BM25 keeps them).
_GENERIC = frozenset(
    [
        "good",
        "great",
        "cool",
        "wow",
        "nice",
        "awesome",
        "amazing",
        "glad",
        "sure",
        "since",
        "last",
        "made",
        "make",
        "makes",
        "making",
        "everyone",
        "thing",
        "things",
        "lot",
        "know",
        "think",
        "going",
        "way",
        "something",
        "anything",
        "totally",
        "definitely",
        "super",
        "pretty",
        "kind",
        "also",
        "always",
        "still",
        "even",
        "want",
        "wanted",
        "see",
        "seen",
        "said",
        "say",
        "says",
        "tell",
        "told",
        "let",
        "lets",
        "well",
        "back",
    ]
)


def _plain(word: str) -> str:
    return word.lower().replace("'", "").replace("’", "")


def names_in(text: str) -> list[str]:
    """Capitalised words and phrases not at a sentence start (a cheap named-entity guess)."""
    out = []
    for m in _NAME.finditer(text):
        words = m.group(0).split()
        before = text[: m.start()].rstrip()
        if not before or before[-1] in '.!?:"\n':
            words = words[1:]  # a sentence-initial capital says nothing
        words = [w for w in words if _plain(w) not in STOP_WORDS]
        if words:
            out.append(" ".join(words))
    return list(dict.fromkeys(out))


def numbers_in(text: str) -> list[str]:
    return list(dict.fromkeys(m.group(0) for m in _NUMBER.finditer(text)))


def identifiers_in(text: str) -> list[str]:
    """Ids, codes and snake_case names: the exact strings an agent's next call may need (tokens with
    a digit or an inner underscore, and upper-case codes of 5+ characters such as ``AQLBTL``)."""
    found = []
    for m in _TOKEN.finditer(text):
        tok = m.group(0).strip("-")
        if len(tok) >= 3 and (
            any(ch.isdigit() for ch in tok) or "_" in tok.strip("_") or (len(tok) >= 5 and tok.isupper())
        ):
            found.append(tok)
    return list(dict.fromkeys(found))


def json_keys_in(text: str) -> set[str]:
    """Names used as JSON object keys: the schema of a tool output, not values worth keeping."""
    return set(_JSON_KEY.findall(text))


def keywords_of(text: str, limit: int = 8, skip: Sequence[str] = ()) -> tuple[str, ...]:
    """Most frequent content words (ties: first seen), names and numbers first, ``skip`` left out."""
    banned = {w.lower() for s in skip for w in s.split()} | _GENERIC
    counts = Counter(w for w in content_words(text) if w not in banned and len(w) > 2)
    ranked = [w for w, _ in sorted(counts.items(), key=lambda kv: -kv[1])]
    salient = [n.lower() for n in names_in(text) if n.lower() not in banned][:4] + numbers_in(text)[:2]
    return tuple(dict.fromkeys(salient + ranked))[:limit]


def _body(text: str, label: str) -> str:
    """A block's text without its ``Speaker: `` or ``[step N] who: `` header (at most
    ``ANALYSIS_CHARS`` of it: a 2 MB tool output needs no more to be summarised)."""
    text = text[: ANALYSIS_CHARS + 200]
    m = _STEP_HEADER.match(text)
    if m:
        return text[m.end() :]
    return text[len(label) + 2 :] if text.startswith(label + ": ") else text


def write_in_order(
    write: Callable[[UnitDraft], Record], units: Sequence[UnitDraft], progress: Progress | None
) -> list[Record]:
    """One record per unit, one after the other, reporting progress."""
    out = []
    for u in units:
        out.append(write(u))
        if progress is not None:
            progress(len(out), len(units))
    return out


class RuleWriter:
    """Deterministic, extractive records and fields; no model, no network."""

    name = "rule"

    def __init__(self, record_words: int = Settings.record_words, merged_words: int = Settings.merged_words) -> None:
        self.record_words = record_words
        self.merged_words = merged_words

    def write_records(self, units: Sequence[UnitDraft], progress: Progress | None = None) -> list[Record]:
        return write_in_order(self.write_record, units, progress)

    def write_record(self, unit: UnitDraft) -> Record:
        if unit.kind == "agent":
            text, tags, description = self._agent(unit)
            skip: list[str] = []
        else:
            text, tags, description = self._conversation(unit)
            skip = [b.label for b in unit.blocks]
        bodies = "\n".join(_body(b.text, b.label) for b in unit.blocks)[: 4 * ANALYSIS_CHARS]
        fields = Fields(keywords=keywords_of(bodies, skip=skip), tags=tags, description=description)
        return Record(text=cut_words(text, self.record_words), fields=fields, writer=self.name)

    # -- conversations ---------------------------------------------------------------------------
    def _conversation(self, unit: UnitDraft) -> tuple[str, tuple[str, ...], str]:
        speakers = list(dict.fromkeys(b.label for b in unit.blocks))
        header = " and ".join(speakers[:3]) + (f" ({unit.date})" if unit.date else "") + "."
        budget = self.record_words - len(header.split())
        bodies = "\n".join(_body(b.text, b.label) for b in unit.blocks)
        doc_freq = Counter(content_words(bodies))
        speaker_words = {w.lower() for s in speakers for w in s.split()}
        candidates: list[tuple[float, int, str, str]] = []
        for b in unit.blocks:
            for sentence in _SENTENCE.split(_body(b.text, b.label)):
                sentence = sentence.strip()
                words = set(content_words(sentence)) - speaker_words
                if len(words) < 3:
                    continue
                names = [n for n in names_in(sentence) if n.lower() not in speaker_words]
                rarity = math.fsum(1.0 / doc_freq[w] for w in words)  # exact: never the set's (hash) order
                score = 2.0 * len(names) + 2.0 * len(numbers_in(sentence)) + rarity
                candidates.append((score, len(candidates), b.label, cut_words(sentence, 24)))
        chosen: list[tuple[int, str, str]] = []
        used = 0
        for _score, order, speaker, sentence in sorted(candidates, key=lambda c: (-c[0], c[1])):
            cost = len(sentence.split()) + 1
            if used + cost > budget:
                continue
            chosen.append((order, speaker, sentence))
            used += cost
        body = " ".join(f"{speaker}: {sentence}" for _, speaker, sentence in sorted(chosen))
        if not body:  # every turn was a single word
            body = " ".join(b.text for b in unit.blocks)
        topics = ", ".join(keywords_of(bodies, 4, skip=speakers))
        description = (
            f"Conversation between {' and '.join(speakers[:3])}"
            + (f" on {unit.date}" if unit.date else "")
            + (f" about {topics}." if topics else ".")
        )
        return f"{header} {body}", tuple(["conversation", *speakers[:4]]), description

    # -- agent steps -------------------------------------------------------------------------------
    def _agent(self, unit: UnitDraft) -> tuple[str, tuple[str, ...], str]:
        steps: dict[int, dict[str, str]] = {}
        for b in unit.blocks:
            steps.setdefault(b.step or 0, {})[b.kind] = _body(b.text, b.label)
        per_step = max(self.record_words // max(len(steps), 1), 8)
        lines, calls = [], []
        for number, parts in steps.items():
            command = command_of(parts.get("action", ""))  # the command, not the reasoning around it
            action = " ".join((command or parts.get("action", "")).split())
            output = parts.get("output", "")
            call = cut_words(action, max(per_step // 2, 4), " …")
            calls.append(re.split(r"[(:\s]", action, maxsplit=1)[0] or "?")
            outcome = cut_words(" ".join(output.split()), max(per_step // 4, 3), " …") or "(no output)"
            keys = json_keys_in(output)
            found = [x for x in identifiers_in(output) + numbers_in(output) if x not in outcome and x not in keys][:3]
            extra = f" [{', '.join(found)}]" if found else ""
            lines.append(f"step {number}: {call} -> {outcome}{extra}")
        first, last = unit.steps or (min(steps), max(steps))
        span = f"step {first}" if first == last else f"steps {first}-{last}"
        tools = list(dict.fromkeys(calls))
        description = f"{span.capitalize()}: called {', '.join(tools[:5])}."
        return "; ".join(lines), tuple(["agent", *tools[:4]]), description

    # -- merged records ----------------------------------------------------------------------------
    def merge_records(self, records: Sequence[str]) -> Record:
        return Record(self.merge_text(records), Fields(), self.name)

    def merge_text(self, records: Sequence[str]) -> str:
        """Keep the first half of each record (at least 8 words, at most an equal share of 120), then
        list the names and numbers the cut lost, all within the merged-record word limit."""
        if not records:
            return ""
        share = max(self.merged_words * 4 // 5 // len(records), 8)
        parts = [cut_words(r, max(8, min(share, (len(r.split()) + 1) // 2)), " …") for r in records]
        kept = " ".join(parts)
        lost = [x for r in records for x in names_in(r) + numbers_in(r) if x not in kept]
        text = " | ".join(parts)
        if lost:
            text += " | also: " + ", ".join(dict.fromkeys(lost))
        return cut_words(text, self.merged_words)
