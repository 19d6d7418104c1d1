"""The methods the harnesses compare, all behind one call: ``method(ctx, question, budget)``.

FlexA-Mem (unit recovery, piece recovery, timeline only) and the baselines that need no LLM
(SPEC section 9): full history (no budget), truncation (newest units that fit), piece retrieval (BM25
pieces, no memory written: piece recovery without a timeline) and unit retrieval (raw units ranked by
the best MiniLM similarity of their 150-token spans, shown in time order). Every method sees the same
notes, counter, prompt and allowance, and shows raw text with the same formatting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from flexamem import Memory, Note, RenderOptions
from flexamem.budget import allowance
from flexamem.recover.bm25 import BM25Index
from flexamem.render import format as fmt
from flexamem.render.renderer import AUTO_ABLATIONS
from flexamem.text import content_words, query_terms
from flexamem.tokens import TokenCounter

SPAN_TOKENS = 150


def span_texts(note: Note, counter: TokenCounter) -> list[str]:
    """A unit's raw text cut into spans of ``SPAN_TOKENS`` tokens (what the raw-text indexes embed)."""
    offsets = [*counter.token_offsets(note.raw), len(note.raw)]
    last = len(offsets) - 1
    return [note.raw[offsets[a] : offsets[min(a + SPAN_TOKENS, last)]] for a in range(0, last, SPAN_TOKENS)]


@dataclass
class MethodContext:
    """One history, ready to render: its memory plus caches some baselines need."""

    mem: Memory
    prompt: str
    span_vectors: list[np.ndarray] | None = None
    extra: dict[str, object] = field(default_factory=dict)
    query_vectors: dict[str, np.ndarray] = field(default_factory=dict)  # the harness embeds its questions at once

    def query_vector(self, text: str) -> np.ndarray:
        """The MiniLM vector of a question (embedded once, through the memory's public embedder)."""
        vector = self.query_vectors.get(text)
        if vector is None:
            vector = self.query_vectors[text] = self.mem.embedder.embed([text])[0]
        return vector

    def allowance(self, budget: int, question: str) -> int:
        """The memory's room for this question: the budget's ceiling less the prompt and the question."""
        return allowance(budget, self.mem.counter.count(self.prompt) + self.mem.counter.count(question))

    def turns(self) -> tuple[list[str], np.ndarray, BM25Index]:
        """Every turn (block) as a line ``[turn id] speaker: text`` (stored text shown as a render shows it:
        ``format.field``, ``format.body``), its MiniLM vector and a BM25 index
        over the turns (computed once per history; a turn that is one piece reuses the piece vector)."""
        cached = self.extra.get("turns")
        if cached is None:
            lines, texts, vectors, index = [], [], [], BM25Index()
            todo: list[int] = []
            for note in self.mem.history.notes:
                for b, block in enumerate(note.blocks):
                    lines.append(f"[{fmt.field(block.source_id or note.unit_id)}] {fmt.body(block.text)}")
                    texts.append(block.text)
                    index.add(content_words(block.text))
                    own = [p for p in note.pieces if p.block == b]
                    if note.piece_vectors is not None and len(own) == 1 and own[0].text == block.text.strip():
                        vectors.append(note.piece_vectors[own[0].index])
                    else:
                        vectors.append(None)
                        todo.append(len(vectors) - 1)
            kept = self.extra.get("turn_vectors")  # the same turns' vectors from an earlier run (--keep)
            if todo and isinstance(kept, np.ndarray) and len(kept) == len(vectors):
                for i in todo:
                    vectors[i] = kept[i]
            elif todo:
                for i, v in zip(todo, self.mem.embedder.embed([texts[i] for i in todo]), strict=True):
                    vectors[i] = v
            cached = self.extra["turns"] = (lines, np.stack(vectors), index)
        return cached  # type: ignore[return-value]

    def turn_ids(self) -> list[str]:
        """The id of each turn, in :meth:`turns`' order (the caller's turn id, else ``<unit>#<block>``)."""
        cached = self.extra.get("turn_ids")
        if cached is None:
            cached = self.extra["turn_ids"] = [
                block.source_id or f"{note.unit_id}#{b}"
                for note in self.mem.history.notes
                for b, block in enumerate(note.blocks)
            ]
        return cached  # type: ignore[return-value]

    def spans(self) -> list[np.ndarray]:
        """MiniLM vectors of each unit's 150-token spans (computed once per history)."""
        if self.span_vectors is None:
            per_note = [span_texts(note, self.mem.counter) for note in self.mem.history.notes]
            vectors = self.mem.embedder.embed([t for texts in per_note for t in texts])
            bounds = np.cumsum([len(texts) for texts in per_note])[:-1]
            self.span_vectors = list(np.split(vectors, bounds)) if per_note else []
        return self.span_vectors


@dataclass(frozen=True)
class Output:
    text: str
    tokens: int
    budgeted: bool = True
    composition: dict[str, int] = field(default_factory=dict)
    llm_tokens: dict[str, int] = field(default_factory=dict)  # LLM-built baselines: build / read tokens


Method = Callable[[MethodContext, str, int], Output]


def writer_tokens(mem: Memory) -> int:
    """Every model token the history's record writer has cost so far (cached answers included: the
    method's cost, as the baselines' ledger counts it); 0 with the rule writer."""
    usage = mem.llm_usage()
    return usage["prompt_tokens"] + usage["completion_tokens"] + usage["cached_tokens"]


def _flexamem(mode: str, options: RenderOptions | None = None) -> Method:
    """A FlexA-Mem mode. With an LLM record writer its rows carry ``llm_tokens``: ``build`` the records
    (counted once after ingest, ``ctx.extra["writer_tokens"]``), ``read`` the merged records this
    rendering had written (each written once, then reused)."""

    def run(ctx: MethodContext, question: str, budget: int) -> Output:
        build = int(ctx.extra.get("writer_tokens", 0))  # type: ignore[call-overload]
        before = writer_tokens(ctx.mem) if build else 0  # the rule writer: no bill, no extra reads
        r = ctx.mem.render(
            question, budget, mode=mode, prompt=ctx.prompt, options=options, query_vector=ctx.query_vector(question)
        )
        billed = {"build": build, "read": writer_tokens(ctx.mem) - before} if build else {}
        return Output(r.text, r.tokens, True, dict(r.composition), billed)

    return run


def raw_units(ctx: MethodContext, seqs: list[int]) -> Output:
    notes = ctx.mem.history.notes
    text = "\n".join(fmt.raw_block(notes[s]) for s in sorted(seqs))
    tokens = ctx.mem.counter.count(text)
    return Output(text, tokens, True, {"raw": tokens})


def fit_units(ctx: MethodContext, order: list[int], allowance: int) -> list[int]:
    """Units in the given order while their raw blocks fit (a unit that does not fit is skipped)."""
    counter, notes = ctx.mem.counter, ctx.mem.history.notes
    chosen, used = [], 0
    for seq in order:
        size = counter.count(fmt.raw_header(notes[seq])) + 1 + notes[seq].raw_tokens + 1
        if used + size <= allowance:
            chosen.append(seq)
            used += size
    while chosen and counter.count("\n".join(fmt.raw_block(notes[s]) for s in sorted(chosen))) > allowance:
        chosen.pop()  # joins can add a token: drop the last taken until it fits
    return chosen


def full_history(ctx: MethodContext, question: str, budget: int) -> Output:
    out = raw_units(ctx, list(range(len(ctx.mem.history))))
    return Output(out.text, out.tokens, False, out.composition)


def truncation(ctx: MethodContext, question: str, budget: int) -> Output:
    allowance = ctx.allowance(budget, question)
    return raw_units(ctx, fit_units(ctx, list(range(len(ctx.mem.history) - 1, -1, -1)), allowance))


def unit_retrieval(ctx: MethodContext, question: str, budget: int) -> Output:
    allowance = ctx.allowance(budget, question)
    q = ctx.query_vector(question)
    best = [float((v @ q).max()) if len(v) else -1.0 for v in ctx.spans()]
    order = sorted(range(len(best)), key=lambda s: (-best[s], s))
    return raw_units(ctx, fit_units(ctx, order, allowance))


def _turn_lines(ctx: MethodContext, question: str, budget: int, order: list[int]) -> Output:
    """Turn lines in rank order while they fit the allowance (a line that does not fit is skipped)."""
    counter = ctx.mem.counter
    allowance = ctx.allowance(budget, question)
    lines = ctx.turns()[0]
    chosen, used = [], 0
    for i in order:
        size = counter.count(lines[i]) + 1
        if used + size <= allowance:
            chosen.append(i)
            used += size
    text = "\n".join(lines[i] for i in chosen)
    while chosen and counter.count(text) > allowance:
        chosen.pop()
        text = "\n".join(lines[i] for i in chosen)
    tokens = counter.count(text)
    return Output(text, tokens, True, {"turns": tokens})


def score_ranks(scores: np.ndarray) -> np.ndarray:
    """0-based rank of each entry by score desc (ties: earlier first)."""
    order = np.lexsort((np.arange(len(scores)), -scores))
    ranks = np.empty(len(scores), dtype=np.int64)
    ranks[order] = np.arange(len(scores))
    return ranks


def dense_order(ctx: MethodContext, question: str) -> list[int]:
    """Turns by MiniLM cosine to the question (ties: earlier first)."""
    _, vectors, _ = ctx.turns()
    sims = vectors @ ctx.query_vector(question)
    return [int(i) for i in np.lexsort((np.arange(len(sims)), -sims))]


def hybrid_order(ctx: MethodContext, question: str, k: int = 60) -> list[int]:
    """Turns by reciprocal rank fusion (k=60) of BM25 and MiniLM cosine."""
    _, vectors, index = ctx.turns()
    sims = vectors @ ctx.query_vector(question)
    bm = np.zeros(len(sims))
    docs, scores = index.search(query_terms(question))
    bm[docs] = scores
    fused = 1.0 / (k + score_ranks(sims)) + np.where(bm > 0, 1.0 / (k + score_ranks(bm)), 0.0)
    return [int(i) for i in np.lexsort((np.arange(len(fused)), -fused))]


def dense_turns(ctx: MethodContext, question: str, budget: int) -> Output:
    """Baseline: turns by MiniLM cosine to the question."""
    return _turn_lines(ctx, question, budget, dense_order(ctx, question))


def hybrid_turns(ctx: MethodContext, question: str, budget: int) -> Output:
    """Baseline: turns by reciprocal rank fusion (k=60) of BM25 and MiniLM cosine."""
    return _turn_lines(ctx, question, budget, hybrid_order(ctx, question))


RANKED = 200  # turns a ranking lists for the retrieval measures (user turns of 10 distinct sessions, and more)


def _searched(mode: str) -> Callable[[MethodContext, str], list[str]]:
    def rank(ctx: MethodContext, question: str) -> list[str]:
        hits = ctx.mem.search(question, mode=mode, limit=RANKED, query_vector=ctx.query_vector(question))
        return [h.turn_id or f"{h.unit_id}#{h.block}" for h in hits]

    return rank


def _ordered(order: Callable[[MethodContext, str], list[int]]) -> Callable[[MethodContext, str], list[str]]:
    def rank(ctx: MethodContext, question: str) -> list[str]:
        ids = ctx.turn_ids()
        return [ids[i] for i in order(ctx, question)[:RANKED]]

    return rank


# each method's turn ranking with no budget, for the benchmark's retrieval measures (methods that rank
# turns; unit recovery and the baselines that show whole units have none)
RANKINGS: dict[str, Callable[[MethodContext, str], list[str]]] = {
    "auto": _searched("auto"),
    "piece-recovery": _searched("pieces"),
    "piece-retrieval": _searched("pieces"),
    "dense-turns": _ordered(dense_order),
    "hybrid-turns": _ordered(hybrid_order),
}


METHODS: dict[str, Method] = {
    **{name: _flexamem("auto", options) for name, options in AUTO_ABLATIONS.items()},
    "unit-recovery": _flexamem("units"),
    "piece-recovery": _flexamem("pieces"),
    "timeline-only": _flexamem("units", RenderOptions(recovery=False)),
    "piece-retrieval": _flexamem("pieces", RenderOptions(timeline=False)),
    "unit-retrieval": unit_retrieval,
    "truncation": truncation,
    "full": full_history,
    "dense-turns": dense_turns,
    "hybrid-turns": hybrid_turns,
}
