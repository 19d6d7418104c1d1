"""The LLM-built memories, each built unit by unit from its notes (SPEC section 9, paper Appendix C):
one ``add(note, ledger)`` per unit, called for every note of a history by ``build`` (readers) or as
units leave the window (agents).

Where the papers leave a choice open, ours is marked "guess" and listed in docs/BASELINES.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np

from flexamem import Note
from flexamem.render import format as fmt
from flexamem.tokens import TokenCounter
from flexamem.write.embed import Embedder
from flexamem_bench.baselines import prompts
from flexamem_bench.baselines.ledger import Ledger

NEIGHBOURS = 5  # A-Mem: earlier notes offered to the link call (guess; A-Mem uses top-k by embedding)


class Incremental:
    """A memory written one unit at a time."""

    def add(self, note: Note, ledger: Ledger) -> None:
        raise NotImplementedError

    def build(self, notes: Iterable[Note], ledger: Ledger) -> Self:
        """Add every note, oldest first (a reader's memory of a whole history)."""
        for note in notes:
            self.add(note, ledger)
        return self


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
class AMem(Incremental):
    """A-Mem (Xu et al., 2025): an LLM note per unit (keywords, tags, context), LLM-chosen links among
    its nearest earlier notes, and memory evolution: a new note rewrites its linked notes' tags and
    context. Indexed by the notes' metadata and by the raw text's 150-token spans."""

    embedder: Embedder = field(repr=False)
    notes: list[AMemNote] = field(default_factory=list)
    links: list[set[int]] = field(default_factory=list)
    meta_vectors: list[np.ndarray] = field(default_factory=list)  # each note's metadata vector

    def add(self, note: Note, ledger: Ledger) -> None:
        """Write the next unit's note, link it and let it evolve its neighbours (A-Mem's write path)."""
        got = ledger.ask_json(prompts.NOTE.format(raw=note.raw), "build", {}, max_tokens=200)
        new = AMemNote(
            _strings(got.get("keywords"), 8) or list(note.fields.keywords[:8]),
            _strings(got.get("tags"), 5),
            str(got.get("context") or note.record)[:500],
        )
        v = self.embedder.embed([new.text()])[0]
        i = len(self.notes)
        self.notes.append(new)
        self.links.append(set())
        if self.meta_vectors:
            sims = np.stack(self.meta_vectors) @ v
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
                        self.meta_vectors[k] = self.embedder.embed([self.notes[k].text()])[0]
        self.meta_vectors.append(v)

    def order(self, query_vector: np.ndarray, spans: list[np.ndarray]) -> list[int]:
        """Units in A-Mem's search order: the best of the metadata and raw-span similarities (guess:
        A-Mem's two indexes fused by taking the max), ties to the older unit."""
        meta = np.stack(self.meta_vectors) @ query_vector if self.meta_vectors else np.zeros(0)
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
class Summary(Incremental):
    """A running LLM summary (Summary+A-Mem, after Wang et al., 2025c): updated unit by unit, keeping
    names, numbers, identifiers, paths and errors, in at most ``words`` words."""

    words: int
    text: str = ""

    def add(self, note: Note, ledger: Ledger) -> None:
        """Fold the next unit into the summary."""
        prompt = prompts.SUMMARY.format(words=self.words, summary=self.text or "(empty)", raw=note.raw)
        self.text = ledger.ask(prompt, "build", max_tokens=int(self.words * 1.6))


IMPORTANCE = {"high": 1.0, "medium": 0.6, "low": 0.3}  # guess: AFM's labels as weights


@dataclass
class AFM(Incremental):
    """AFM (Cruz, 2025): per unit an LLM importance label and an LLM-compressed form (~100 tokens),
    written once; at read time a score (best span similarity x recency x importance) maps each unit to
    full / compressed / placeholder by two thresholds."""

    importance: list[float] = field(default_factory=list)
    compressed: list[str] = field(default_factory=list)

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
class ReadAgent(Incremental):
    """ReadAgent (Lee et al., 2024): one gist per unit ("page"); at read time one LLM call picks the pages
    whose raw text replaces their gists."""

    words: int = 60  # a gist's length
    gists: list[str] = field(default_factory=list)

    def add(self, note: Note, ledger: Ledger) -> None:
        """The next page's gist."""
        prompt = prompts.GIST.format(words=self.words, page=len(self.gists), raw=note.raw)
        self.gists.append(ledger.ask(prompt, "build", max_tokens=self.words * 2))

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


def gmm_threshold(values: np.ndarray, iterations: int = 50) -> float:
    """The similarity above which a value belongs to the upper of two 1-D Gaussian components (EM)."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) < 4 or float(v.std()) < 1e-9:
        return float("inf")
    mu = np.array([np.percentile(v, 25), np.percentile(v, 90)])
    sd = np.array([v.std(), v.std()]) + 1e-6
    pi = np.array([0.5, 0.5])
    for _ in range(iterations):
        dens = pi * np.exp(-0.5 * ((v[:, None] - mu) / sd) ** 2) / sd
        resp = dens / np.maximum(dens.sum(1, keepdims=True), 1e-300)
        weight = resp.sum(0) + 1e-9
        pi, mu = weight / len(v), (resp * v[:, None]).sum(0) / weight
        sd = np.sqrt((resp * (v[:, None] - mu) ** 2).sum(0) / weight) + 1e-6
    hi = int(np.argmax(mu))
    grid = np.linspace(float(v.min()), float(v.max()), 256)
    dens = pi * np.exp(-0.5 * ((grid[:, None] - mu) / sd) ** 2) / sd
    upper = grid[dens[:, hi] >= dens[:, 1 - hi]]
    return float(upper.min()) if len(upper) else float("inf")


PPR_SEEDS = 5  # units that personalize PageRank (guess)


@dataclass
class MemGAS(Incremental):
    """MemGAS (Xu et al., 2026a): every unit at four granularities (raw 150-token spans, turns or steps,
    an LLM summary, LLM keywords); units linked where their similarity falls in the upper component of a
    Gaussian mixture; per query, granularity weights from how sharply each granularity separates the
    units; personalized PageRank over the links; one LLM call filters the top candidates."""

    embedder: Embedder = field(repr=False)
    summaries: list[str] = field(default_factory=list)
    keywords: list[str] = field(default_factory=list)
    vectors: dict[str, list[np.ndarray]] = field(default_factory=lambda: {"turns": [], "summary": [], "keywords": []})
    _graph: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)  # of the units so far

    def add(self, note: Note, ledger: Ledger) -> None:
        got = ledger.ask_json(prompts.SUMMARIZE.format(raw=note.raw), "build", {}, max_tokens=200)
        summary = str(got.get("summary") or note.record)
        words = ", ".join(_strings(got.get("keywords"), 10)) or ", ".join(note.fields.keywords)
        self.summaries.append(summary)
        self.keywords.append(words)
        texts = [b.text for b in note.blocks] or [note.raw]
        vectors = self.embedder.embed([summary, words, *texts])
        self.vectors["summary"].append(vectors[0])
        self.vectors["keywords"].append(vectors[1])
        self.vectors["turns"].append(vectors[2:])
        self._graph = None

    def graph(self) -> tuple[np.ndarray, np.ndarray]:
        """``(transition matrix, whether each unit has no link)``: units linked where the similarity of
        their summaries falls in the upper Gaussian component; the same for every query (built once per
        set of units)."""
        if self._graph is None:
            units = np.stack(self.vectors["summary"])
            pair = units @ units.T
            np.fill_diagonal(pair, -np.inf)
            off = pair[np.isfinite(pair)]
            n = len(units)
            adjacency = (pair >= gmm_threshold(off)).astype(np.float64) if len(off) else np.zeros((n, n))
            out_degree = adjacency.sum(1, keepdims=True)
            transition = np.divide(adjacency, out_degree, out=np.zeros_like(adjacency), where=out_degree > 0)
            self._graph = (transition, out_degree[:, 0] == 0)
        return self._graph

    def rank(self, query_vector: np.ndarray, spans: list[np.ndarray], damping: float = 0.5) -> list[int]:
        """Units by personalized PageRank from the granularity-weighted query similarities."""
        n = len(self.summaries)
        if n == 0:
            return []
        sims = {
            "raw": np.array([float((s @ query_vector).max()) if len(s) else 0.0 for s in spans]),
            "turns": np.array([float((t @ query_vector).max()) for t in self.vectors["turns"]]),
            "summary": np.stack(self.vectors["summary"]) @ query_vector,
            "keywords": np.stack(self.vectors["keywords"]) @ query_vector,
        }
        # a granularity that separates the units sharply (top well above the mean) weighs more (guess)
        sharp = np.array([float(v.max() - v.mean()) / (float(v.std()) + 1e-6) for v in sims.values()])
        weights = np.exp(sharp - sharp.max())
        weights /= weights.sum()
        relevance = sum(w * np.maximum(v, 0.0) for w, v in zip(weights, sims.values(), strict=True))
        transition, dangling = self.graph()
        # seeds: the few most relevant units (the whole relevance vector is nearly flat, which would let
        # the graph's hubs outrank the query's own matches)
        seeds = np.zeros(n)
        top = np.argsort(-relevance, kind="stable")[:PPR_SEEDS]
        seeds[top] = relevance[top]
        personal = seeds / max(float(seeds.sum()), 1e-12)
        rank = personal.copy()
        for _ in range(30):
            rank = (1 - damping) * personal + damping * (transition.T @ rank + personal * float(rank[dangling].sum()))
        return [int(i) for i in np.lexsort((np.arange(n), -rank))]

    def filter(self, order: list[int], question: str, ledger: Ledger, k: int = 10) -> list[int]:
        """The LLM's pick among the top ``k`` (in rank order), then the units ranked below them (those it
        rejected stay out); when it keeps none, the rank order."""
        top = order[:k]
        listing = "\n".join(f"[{i}] {self.summaries[i]}" for i in top)
        got = ledger.ask_json(prompts.FILTER.format(candidates=listing, question=question), "read", {}, max_tokens=60)
        keep = [i for i in _ints(got.get("keep")) if i in top]
        return [*keep, *order[k:]] if keep else order
