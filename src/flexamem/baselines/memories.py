"""The LLM-built memories, each built once per history from its notes (SPEC section 9, paper Appendix C).

Where the papers leave a choice open, ours is marked "guess" and listed in docs/BASELINES.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flexamem.baselines import prompts
from flexamem.baselines.ledger import Ledger
from flexamem.memory import Memory
from flexamem.notes import Note
from flexamem.render import format as fmt
from flexamem.tokens import TokenCounter
from flexamem.write.embed import Embedder

NEIGHBOURS = 5  # A-Mem: earlier notes offered to the link call (guess; A-Mem uses top-k by embedding)


@dataclass
class AMemNote:
    keywords: list[str]
    tags: list[str]
    context: str

    def text(self) -> str:
        return f"{self.context} | keywords: {', '.join(self.keywords)} | tags: {', '.join(self.tags)}"


def _strings(value: Any, limit: int) -> list[str]:
    return [str(v) for v in value][:limit] if isinstance(value, list) else []


@dataclass
class AMem:
    """A-Mem (Xu et al., 2025): an LLM note per unit (keywords, tags, context), LLM-chosen links among
    its nearest earlier notes, and memory evolution: a new note rewrites its linked notes' tags and
    context. Indexed by the notes' metadata and by the raw text's 150-token spans."""

    notes: list[AMemNote] = field(default_factory=list)
    links: list[set[int]] = field(default_factory=list)
    meta_vectors: np.ndarray | None = None

    _vectors: list[np.ndarray] = field(default_factory=list)

    @classmethod
    def build(cls, mem: Memory, ledger: Ledger) -> AMem:
        amem = cls()
        for note in mem.notes():
            amem.add(note, mem.embedder, ledger)
        return amem

    def add(self, note: Note, embedder: Embedder, ledger: Ledger) -> None:
        """Write the next unit's note, link it and let it evolve its neighbours (A-Mem's write path)."""
        got = ledger.ask_json(prompts.NOTE.format(raw=note.raw), "build", {}, max_tokens=200)
        new = AMemNote(
            _strings(got.get("keywords"), 8) or list(note.fields.keywords[:8]),
            _strings(got.get("tags"), 5),
            str(got.get("context") or note.record)[:500],
        )
        v = embedder.embed([new.text()])[0]
        i = len(self.notes)
        self.notes.append(new)
        self.links.append(set())
        if self._vectors:
            sims = np.stack(self._vectors) @ v
            near = [int(j) for j in np.argsort(-sims)[:NEIGHBOURS]]
            listing = "\n".join(f"[{j}] {self.notes[j].text()}" for j in near)
            chosen = ledger.ask_json(
                prompts.LINKS.format(note=new.text(), candidates=listing), "build", {"links": []}, max_tokens=60
            )
            linked = [j for j in _ints(chosen.get("links")) if j in near]
            for j in linked:
                self.links[i].add(j)
                self.links[j].add(i)
            if linked:  # memory evolution: the new note rewrites its neighbours' attributes
                listing = "\n".join(f"[{j}] {self.notes[j].text()}" for j in linked)
                evolved = ledger.ask_json(
                    prompts.EVOLVE.format(note=new.text(), linked=listing), "build", {"updates": []}, max_tokens=300
                )
                for u in evolved.get("updates") or []:
                    k = _int(u.get("id")) if isinstance(u, dict) else None
                    if k is not None and k in linked:
                        old = self.notes[k]
                        tags = _strings(u.get("tags"), 5) or old.tags
                        self.notes[k] = AMemNote(old.keywords, tags, str(u.get("context") or old.context))
                        self._vectors[k] = embedder.embed([self.notes[k].text()])[0]
        self._vectors.append(v)
        self.meta_vectors = np.stack(self._vectors)

    def order(self, query_vector: np.ndarray, spans: list[np.ndarray]) -> list[int]:
        """Units in A-Mem's search order: the best of the metadata and raw-span similarities (guess:
        A-Mem's two indexes fused by taking the max), ties to the older unit."""
        vectors = self.meta_vectors
        meta = vectors @ query_vector if vectors is not None and len(vectors) else np.zeros(0)
        raw = np.array([float((s @ query_vector).max()) if len(s) else -1.0 for s in spans])
        best = np.maximum(meta, raw) if len(meta) else raw
        return [int(i) for i in np.lexsort((np.arange(len(best)), -best))]


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _ints(value: Any) -> list[int]:
    return [i for i in (_int(v) for v in value) if i is not None] if isinstance(value, list) else []


@dataclass
class Summary:
    """A running LLM summary (Summary+A-Mem, after Wang et al., 2025c): updated unit by unit, keeping
    names, numbers, identifiers, paths and errors."""

    text: str = ""

    @classmethod
    def build(cls, notes: list[Note], ledger: Ledger, words: int) -> Summary:
        summary = cls()
        for note in notes:
            summary.add(note, ledger, words)
        return summary

    def add(self, note: Note, ledger: Ledger, words: int) -> None:
        """Fold the next unit into the summary."""
        prompt = prompts.SUMMARY.format(words=words, summary=self.text or "(empty)", raw=note.raw)
        self.text = ledger.ask(prompt, "build", max_tokens=int(words * 1.6))


IMPORTANCE = {"high": 1.0, "medium": 0.6, "low": 0.3}  # guess: AFM's labels as weights


@dataclass
class AFM:
    """AFM (Cruz, 2025): per unit an LLM importance label and an LLM-compressed form (~100 tokens),
    written once; at read time a score (best span similarity x recency x importance) maps each unit to
    full / compressed / placeholder by two thresholds."""

    importance: list[float]
    compressed: list[str]

    @classmethod
    def build(cls, notes: list[Note], ledger: Ledger) -> AFM:
        afm = cls([], [])
        for note in notes:
            afm.add(note, ledger)
        return afm

    def add(self, note: Note, ledger: Ledger) -> None:
        """Label and compress the next unit (once)."""
        label = ledger.ask(prompts.IMPORTANCE.format(raw=note.raw), "build", max_tokens=5).lower()
        self.importance.append(next((w for k, w in IMPORTANCE.items() if k in label), IMPORTANCE["medium"]))
        self.compressed.append(ledger.ask(prompts.COMPRESS.format(raw=note.raw), "build", max_tokens=160))

    def pack(
        self,
        notes: list[Note],
        scores: list[float],
        thresholds: tuple[float, float],
        allowance: int,
        counter: TokenCounter,
    ) -> dict[int, str]:
        """Each unit's form by its score (full / compressed / placeholder), packed oldest first, each
        falling back to the next form when it does not fit: {unit position: line}."""
        shown: dict[int, str] = {}
        used = 0
        for i, note in enumerate(notes):
            forms = [
                fmt.raw_block(note),
                f"[{note.label} · {fmt.when(note)} · compressed] {self.compressed[i]}",
                f"[{note.label} · {fmt.when(note)} · placeholder]",
            ]
            start = 0 if scores[i] >= thresholds[0] else 1 if scores[i] >= thresholds[1] else 2
            for form in forms[start:]:
                size = counter.count(form) + 1
                if used + size <= allowance:
                    shown[i] = form
                    used += size
                    break
        return shown

    def scores(self, query_vector: np.ndarray, spans: list[np.ndarray], half_life: float) -> list[float]:
        n = len(spans)
        sims = [float((s @ query_vector).max()) if len(s) else 0.0 for s in spans]
        return [sims[i] * math.pow(0.5, (n - 1 - i) / half_life) * self.importance[i] for i in range(n)]


@dataclass
class ReadAgent:
    """ReadAgent (Lee et al., 2024): one gist per unit ("page"); at read time one LLM call picks the pages
    whose raw text replaces their gists."""

    gists: list[str]

    @classmethod
    def build(cls, notes: list[Note], ledger: Ledger, words: int = 60) -> ReadAgent:
        agent = cls([])
        for note in notes:
            agent.add(note, ledger, words)
        return agent

    def add(self, note: Note, ledger: Ledger, words: int = 60) -> None:
        """The next page's gist."""
        prompt = prompts.GIST.format(words=words, page=len(self.gists), raw=note.raw)
        self.gists.append(ledger.ask(prompt, "build", max_tokens=words * 2))

    def pack(self, notes: list[Note], picked: list[int], allowance: int, counter: TokenCounter) -> dict[int, str]:
        """The newest gists that fit, then the picked pages raw in place of their gists, in the order
        picked, while they fit: {unit position: line}."""
        gist = [f"[{n.label} · {fmt.when(n)} · gist] {self.gists[i]}" for i, n in enumerate(notes)]
        sizes = [counter.count(g) + 1 for g in gist]
        shown: dict[int, str] = {}
        used = 0
        for i in range(len(notes) - 1, -1, -1):
            if used + sizes[i] <= allowance:
                shown[i] = gist[i]
                used += sizes[i]
        for i in picked:
            raw = fmt.raw_block(notes[i])
            extra = counter.count(raw) + 1 - (sizes[i] if i in shown else 0)
            if used + extra <= allowance:
                shown[i] = raw
                used += extra
        return shown

    def pick(self, question: str, ledger: Ledger, k: int = 5) -> list[int]:
        gists = "\n".join(f"[{i}] {g}" for i, g in enumerate(self.gists))
        got = ledger.ask_json(prompts.PICK.format(k=k, gists=gists, question=question), "read", {}, max_tokens=60)
        return [i for i in dict.fromkeys(_ints(got.get("pages"))) if 0 <= i < len(self.gists)][:k]
