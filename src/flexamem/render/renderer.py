"""The renderer: timeline + unit recovery or piece recovery, under a hard allowance.

Inputs are what the caller (``Memory.render`` for readers, ``AgentSession`` for agents) already
computed: the allowance ``A`` (budget ceiling minus fixed prompt and recent window), the BM25 terms of
the query and of the excerpt query, and a lazy query embedding. The renderer reads only the in-memory
``History``; its one possible store write is a new merged record (via ``Timeline``).

The result is checked with one exact count of the final text. If it exceeds ``A`` (cached counts
are per part, joins can differ by a token or two), the lowest-ranked recovered element is dropped and
the text rebuilt, as in the paper's final loop; with nothing left to drop, the oldest timeline entry
is hidden; a single line longer than ``A`` is cut with a visible mark. So ``tokens <= A`` always.
"""

from __future__ import annotations

import dataclasses
import functools
import reprlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import numpy as np

from flexamem.config import Settings, refuse_unknown_arguments
from flexamem.errors import InvalidInputError
from flexamem.history import History
from flexamem.recover.hybrid import fuse, hybrid_parts, hybrid_ranking, turn_scores
from flexamem.recover.pieces import pieces_lines, ranked_pieces, select_pieces
from flexamem.recover.signals import AgentRanking, Fusion, Scores
from flexamem.recover.units import Recovery, Shown, candidates, fit_or_degrade, seeded_order
from flexamem.render import format as fmt
from flexamem.render.result import Rendering, UnitView
from flexamem.render.timeline import Entry, Timeline, hide_oldest, total_tokens
from flexamem.text import stemmed
from flexamem.tokens import LineCounts, TokenCounter

Mode = Literal["auto", "units", "pieces"]
_T = TypeVar("_T")
MODES: tuple[str, ...] = ("auto", "pieces", "units")
CUT_MARK = "[… cut to fit the budget]"
CANDIDATE_ORDERS = ("relevant", "random", "shuffled")


@dataclass(frozen=True)
class RenderOptions:
    """Switches for the paper's Table 5 controls; the defaults are FlexA-Mem itself."""

    timeline: bool = True  # False: no timeline, recovered units only
    recovery: bool = True  # False: timeline only
    links: bool = True  # False: candidates from seeds and time neighbours only
    excerpts: bool = True  # False: raw or record, never an excerpt
    candidates: Literal["relevant", "random", "shuffled"] = "relevant"
    after_timeline: bool = False  # show the same selection after the timeline, not in place
    fixed_length: bool = False  # an excerpt for every candidate (never raw)
    raw_first: bool = False  # raw text to every candidate that fits first, excerpts after
    pass_through: bool = True  # show the whole history raw while it fits
    # auto's parts (recover/hybrid.py); they change nothing in the paper's modes
    dense: bool = True  # False: BM25 alone ranks the pieces
    piece_vectors: bool = True  # False: a piece's cosine is its unit's (no piece vectors)
    stemming: bool = True  # False: BM25 over plain content words
    whole_turns: bool = True  # False: pieces ranked one by one
    neighbours: bool = True  # False: no lift for the turns next to a ranked turn
    small_timeline: bool = True  # False: the timeline takes rho of the allowance, as in piece recovery
    identifiers: bool = True  # False: no prior for pieces holding identifiers (agent sessions)
    atomic_turns: bool = True  # False: a ranked turn may be shown in part (those of its pieces that fit)
    adaptive_alpha: bool = True  # False: every query fuses BM25 and cosine with the fixed auto_alpha
    tight_timeline: bool = True  # False: a timeline that cannot merge down to auto_rho keeps up to rho
    commands: bool = True  # False: no command trace in agent sessions (every past command on a line)
    trace_unshown: bool = True  # False: the trace lists every past command, even those shown raw below it
    code_terms: bool = True  # False: no BM25 over names of code kept whole (agent sessions)
    shell_units: bool = True  # False: a shell agent's history gets pieces by BM25, as a tool-call agent's

    @functools.cached_property
    def off(self) -> frozenset[str]:
        """The switches turned off (what ``auto``'s signals read: :class:`flexamem.recover.signals.Scores`)."""
        return frozenset(f.name for f in dataclasses.fields(self) if getattr(self, f.name) is False)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "candidates":
                if not isinstance(value, str) or value not in CANDIDATE_ORDERS:
                    raise InvalidInputError(
                        f"candidates must be one of {', '.join(CANDIDATE_ORDERS)}, got {reprlib.repr(value)}"
                    )
            elif not isinstance(value, bool):
                raise InvalidInputError(f"render option {f.name} must be True or False, got {reprlib.repr(value)}")


refuse_unknown_arguments(RenderOptions)


def check_mode(mode: object, options: object) -> RenderOptions:
    """The one check of a render's ``mode`` and ``options`` (readers and agents alike): the options to
    use, or :class:`InvalidInputError`."""
    if not isinstance(mode, str) or mode not in MODES:
        raise InvalidInputError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    if options is not None and not isinstance(options, RenderOptions):
        raise InvalidInputError(f"options must be RenderOptions, got {type(options).__name__}")
    return options or RenderOptions()


ABLATIONS: dict[str, RenderOptions] = {
    "full": RenderOptions(),
    "no-timeline": RenderOptions(timeline=False),
    "no-recovery": RenderOptions(recovery=False),
    "no-links": RenderOptions(links=False),
    "no-excerpts": RenderOptions(excerpts=False),
    "random-candidates": RenderOptions(candidates="random"),
    "shuffled-candidates": RenderOptions(candidates="shuffled"),
    "after-timeline": RenderOptions(after_timeline=True),
    "fixed-length": RenderOptions(fixed_length=True),
    "raw-first": RenderOptions(raw_first=True),
}

# what each part of ``auto`` adds: each row turns one part off (docs/CALIBRATION.md)
AUTO_ABLATIONS: dict[str, RenderOptions] = {
    "auto": RenderOptions(),
    "auto-bm25-only": RenderOptions(dense=False),
    "auto-unit-vectors": RenderOptions(piece_vectors=False),
    "auto-no-stemming": RenderOptions(stemming=False),
    "auto-no-whole-turns": RenderOptions(whole_turns=False),
    "auto-no-neighbours": RenderOptions(neighbours=False),
    "auto-rho-timeline": RenderOptions(small_timeline=False),
    "auto-part-turns": RenderOptions(atomic_turns=False),
    "auto-fixed-alpha": RenderOptions(adaptive_alpha=False),
    "auto-loose-timeline": RenderOptions(tight_timeline=False),
}


@dataclass(frozen=True)
class Query:
    """Everything a render needs to know about the query."""

    text: str  # seeds the random-order ablations
    terms: Sequence[str]  # BM25 terms for piece recovery
    excerpt_terms: Sequence[str]  # BM25 terms for ranking an excerpt's pieces
    vector: Callable[[], np.ndarray]  # lazy: piece recovery rarely needs it
    agent: bool = False  # an agent session's call: ``auto`` ranks with the agent profile
    order: Sequence[int] | None = None  # unit recovery: the caller's candidate order instead of ``g``
    code: Sequence[str] = ()  # names of code in the query, kept whole (agent ``auto``: text.code_terms)
    shell: bool = False  # a shell agent's call: ``auto`` recovers whole units (fit-or-degrade), see below


class Renderer:
    def __init__(
        self,
        history: History,
        timeline: Timeline,
        counter: TokenCounter,
        settings: Settings,
        piece_vectors: Callable[[Sequence[int]], np.ndarray],
    ) -> None:
        self.history = history
        self.timeline = timeline
        self.counter = counter
        self.settings = settings
        self.piece_vectors = piece_vectors
        self._recovery_memo: tuple[object, tuple[Any, ...], Recovery] | None = None
        self._line_counts = LineCounts()  # a memory line's tokens, by its text

    def render(
        self,
        query: Query,
        allowance: int,
        mode: Mode,
        options: RenderOptions = RenderOptions(),
        *,
        n: int | None = None,
        merge_allowance: int | None = None,
        base: list[Entry] | None = None,
    ) -> Rendering:
        """Render notes ``0..n-1`` within ``allowance`` tokens (``merge_allowance`` sizes merges). The
        merged records the render writes by rule are stored together when it is done (one transaction);
        should another writer have stored a different one for a span meanwhile, it renders again from
        what is stored, so a rendering never shows a merged record other than the stored one."""
        n = len(self.history) if n is None else n
        merges_before = self.timeline.merges_written
        if n == 0 or allowance <= 0:
            return Rendering("", 0, max(allowance, 0), mode)
        if options.pass_through:
            full = self._pass_through(n, allowance, mode)
            if full is not None:
                return full
        result = self._merges_stored(
            lambda: self._render_once(query, allowance, mode, options, n, merge_allowance, base)
        )
        return dataclasses.replace(result, merges_written=self.timeline.merges_written - merges_before)

    def _merges_stored(self, build: Callable[[], _T]) -> _T:
        """``build()``, made again until the merged records it wrote are stored: a batch another writer
        raced (a different record stored for one of its spans) is dropped and built from what is stored."""
        while True:
            out = build()
            if self.timeline.flush():
                return out

    def _render_once(
        self,
        query: Query,
        allowance: int,
        mode: Mode,
        options: RenderOptions,
        n: int,
        merge_allowance: int | None,
        base: list[Entry] | None,
    ) -> Rendering:
        base = base if base is not None else self.timeline.records(n)
        if mode == "auto" and query.agent and query.shell and options.shell_units:
            # a shell agent's outputs (files, test logs) are read whole: unit recovery, its order by
            # MiniLM similarity to the query (docs/EVALUATION_AGENTS.md)
            result = self._units(query, allowance, merge_allowance or allowance, base, n, options)
        elif mode in ("pieces", "auto"):
            result = self._pieces(
                query, allowance, merge_allowance or allowance, base if options.timeline else [], n, mode, options
            )
        else:
            result = self._units(query, allowance, merge_allowance or allowance, base, n, options)
        return result

    # -- pass-through ------------------------------------------------------------------------------
    def _pass_through(self, n: int, allowance: int, mode: str) -> Rendering | None:
        estimate = self.history.raw_upto[n] + 12 * n
        if estimate > allowance * 1.1:
            return None
        notes = self.history.notes[:n]
        text = "\n".join(fmt.raw_block(note) for note in notes)
        tokens = self.counter.count(text)
        if tokens > allowance:
            return None
        history = self.history

        def shown() -> list[UnitView]:
            return [_view(note.seq, note.unit_id, "raw", tuple(range(len(note.pieces))), history) for note in notes]

        return Rendering(text, tokens, allowance, mode, shown, {"raw": tokens}, pass_through=True)

    # -- unit recovery -----------------------------------------------------------------------------
    def raw_units(
        self,
        query: Query,
        allowance: int,
        options: RenderOptions = RenderOptions(),
        *,
        n: int,
        merge_allowance: int,
        base: list[Entry],
    ) -> frozenset[int]:
        """The notes a unit-recovery render of ``0..n-1`` at ``allowance`` plans to show raw: the plan of
        :meth:`render` without its text, assembled and counted (the agent's command trace leaves their
        commands out). A history that would pass through whole is planned like any other (its units
        raw as far as they fit beside the timeline), so no text is counted here."""
        if n == 0 or allowance <= 0:
            return frozenset()
        chosen = self._merges_stored(lambda: self._plan_units(query, allowance, merge_allowance, base, n, options)[2])
        return frozenset(c.seq for c in chosen if c.resolution == "raw")

    def _units(
        self, query: Query, allowance: int, merge_allowance: int, base: list[Entry], n: int, options: RenderOptions
    ) -> Rendering:
        entries, hidden, chosen, spans = self._plan_units(query, allowance, merge_allowance, base, n, options)
        while True:
            lines, parts = self._assemble_units(entries, hidden, chosen, n, options.after_timeline)
            text, tokens = "\n".join(lines), self.counter.count_lines(lines, self._line_counts)
            if tokens <= allowance:
                break
            if chosen:
                chosen = sorted(chosen, key=lambda c: c.rank)[:-1]
            elif entries:
                hidden.append(entries.pop(0))
            else:
                text, tokens = self._cut(text, allowance)
                break
        views = functools.partial(self._views, entries, chosen, n, {})
        return Rendering(text, tokens, allowance, "units", views, parts, timeline_spans=spans)

    def _plan_units(
        self, query: Query, allowance: int, merge_allowance: int, base: list[Entry], n: int, options: RenderOptions
    ) -> tuple[list[Entry], list[Entry], list[Shown], tuple[tuple[int, int, int], ...]]:
        """Unit recovery's plan: the timeline entries shown and hidden, the units chosen (raw, excerpt)
        and the timeline's spans after merging."""
        s = self.settings
        recovery = self.recovery(query.excerpt_terms, s.excerpt_tokens)
        order: list[int] = []
        if options.recovery and query.order is not None:  # a plug-in: another memory's search order
            order = [int(seq) for seq in dict.fromkeys(query.order) if 0 <= int(seq) < n]
        elif options.recovery:
            if options.candidates == "random":
                order = seeded_order(range(n), query.text)
            else:
                sims = self.history.embeddings[:n] @ query.vector()
                order = candidates(sims, self.history.links, s.k, s.lam, use_links=options.links)
                if options.candidates == "shuffled":
                    order = seeded_order(order, query.text)
        d = sum(recovery.cost(seq, "raw", True) for seq in order)
        spans: tuple[tuple[int, int, int], ...] = ()
        if options.timeline:
            entries = self.timeline.fit(base, max(s.rho * merge_allowance, merge_allowance - d))
            spans = tuple((e.first, e.last, e.level) for e in entries)
            entries, hidden = hide_oldest(
                entries, max(s.rho * allowance, allowance - d, 0) if merge_allowance > allowance else allowance
            )
        else:
            entries, hidden = [], list(base)
        standalone = {e.first for e in entries if not e.merged} if not options.after_timeline else set()
        room = allowance - total_tokens(entries) - (1 if entries else 0)
        chosen = (
            fit_or_degrade(
                order,
                room,
                recovery,
                lambda seq: seq in standalone,
                excerpts=options.excerpts,
                raw=not options.fixed_length,
                raw_first=options.raw_first,
            )
            if order
            else []
        )
        return entries, hidden, chosen, spans

    def recovery(self, terms: Sequence[str], excerpt_tokens: int) -> Recovery:
        """Unit recovery's excerpts for these query terms: the last one made is used again while the
        history is unchanged (an agent's call plans twice with one query)."""
        last = self.history.notes[-1] if self.history.notes else None  # notes only grow: the newest names them
        key = (tuple(terms), excerpt_tokens)
        memo = self._recovery_memo
        if memo is not None and memo[0] is last and memo[1] == key:
            return memo[2]
        recovery = Recovery(
            self.history, self.counter, terms, excerpt_tokens, lambda seq: self.timeline.record(seq).tokens
        )
        self._recovery_memo = (last, key, recovery)
        return recovery

    def _assemble_units(
        self, entries: list[Entry], hidden: list[Entry], chosen: list[Shown], n: int, after: bool
    ) -> tuple[list[str], dict[str, int]]:
        by_seq = {c.seq: c for c in chosen}
        lines: list[str] = []
        parts = {"records": 0, "merged": 0, "raw": 0, "excerpts": 0, "other": 0}
        placed: set[int] = set()

        def put(c: Shown) -> None:
            lines.append(c.text)
            parts["raw" if c.resolution == "raw" else "excerpts"] += c.tokens
            placed.add(c.seq)

        if hidden:
            mark = f"(… {len(hidden)} older timeline entries hidden for this call)"
            lines.append(mark)
            parts["other"] += self.counter.count(mark)
            for c in sorted(chosen, key=lambda c: c.seq):
                if not after and any(h.covers(c.seq) for h in hidden):
                    put(c)
        for e in entries:
            if not e.merged and e.first in by_seq and not after:
                put(by_seq[e.first])
                continue
            lines.append(e.line)
            parts["merged" if e.merged else "records"] += e.tokens
            if e.merged and not after:
                for seq in range(e.first, e.last + 1):
                    if seq in by_seq:
                        put(by_seq[seq])
        for c in sorted(chosen, key=lambda c: c.seq):
            if c.seq not in placed:
                put(c)
        return lines, parts

    # -- piece recovery ----------------------------------------------------------------------------
    def _pieces(
        self,
        query: Query,
        allowance: int,
        merge_allowance: int,
        base: list[Entry],
        n: int,
        mode: Mode,
        options: RenderOptions,
    ) -> Rendering:
        s = self.settings
        auto = mode == "auto"
        agent = auto and query.agent  # agent histories: pieces one by one, timeline at rho, identifiers
        if auto and options.small_timeline and not agent:  # merged down to a small share (see tight_timeline)
            entries = self.timeline.fit(base, s.auto_rho * max(allowance, merge_allowance))
            keep = (s.auto_rho if options.tight_timeline else s.rho) * allowance
        else:
            share = s.agent_auto_rho if agent else s.rho
            entries = self.timeline.fit(base, share * max(allowance, merge_allowance))
            keep = allowance if merge_allowance <= allowance else share * allowance
        spans = tuple((e.first, e.last, e.level) for e in entries)
        entries, hidden = hide_oldest(entries, keep)
        room = allowance - total_tokens(entries) - (1 if entries else 0)
        header = self.counter.count(fmt.PIECES_HEADER)
        ranked, scores = self.ranked(query, room, n, mode, options)
        atomic = auto and not agent and options.whole_turns and options.atomic_turns
        chosen = (
            select_pieces(
                self.history,
                ranked,
                room,
                self.counter,
                header,
                whole_turns=atomic,
                scores=scores,
                long_turn=s.auto_long_turn,
            )
            if room > header
            else {}
        )
        rank_of = {d: r for r, d in enumerate(ranked)}
        while True:
            lines = [e.line for e in entries]
            if chosen:  # each piece its own line: one shown before in another choice is not counted again
                lines += pieces_lines(self.history, chosen, join=atomic)
            text, tokens = "\n".join(lines), self.counter.count_lines(lines, self._line_counts)
            if tokens <= allowance:
                break
            if chosen:  # re-render with fewer pieces: drop the lowest-ranked one
                worst = max(
                    ((seq, i) for seq, idx in chosen.items() for i in idx),
                    key=lambda p: rank_of[self.history.doc_of[p[0]] + p[1]],
                )
                chosen[worst[0]].remove(worst[1])
                if not chosen[worst[0]]:
                    del chosen[worst[0]]
            elif entries:
                hidden.append(entries.pop(0))
            else:
                text, tokens = self._cut(text, allowance)
                break
        record_tokens = sum(e.tokens for e in entries)
        parts = {
            "records": sum(e.tokens for e in entries if not e.merged),
            "merged": sum(e.tokens for e in entries if e.merged),
            "pieces": max(tokens - record_tokens, 0) if chosen else 0,
        }
        return Rendering(
            text,
            tokens,
            allowance,
            mode,
            functools.partial(self._views, entries, [], n, chosen),
            parts,
            timeline_spans=spans,
        )

    def ranked(
        self, query: Query, room: int, n: int, mode: Mode, options: RenderOptions = RenderOptions()
    ) -> tuple[list[int], np.ndarray | None]:
        """The pieces of notes ``0..n-1`` (BM25 doc ids) in the order a ``mode`` render takes them, cut
        once they hold well over ``room`` tokens, and ``auto``'s fused score per piece (None for piece
        recovery's BM25 order). What the render shows and what :meth:`Memory.search` lists. ``auto``
        ranks by its signals (:mod:`flexamem.recover.signals`), each with its own settings."""
        s = self.settings
        if mode != "auto":
            return ranked_pieces(self.history, query.terms, query.vector, self.piece_vectors, room, n), None
        agent = query.agent
        rankers = s.rankers
        fixed = rankers[AgentRanking].agent_auto_alpha if agent else rankers[Fusion].auto_alpha
        alpha = fixed if options.dense else 1.0
        signals = list(rankers)
        state = Scores(
            self.history, np.zeros(0), room=room, question=query.text, agent=agent, code_terms=query.code,
            off=options.off,
        )  # fmt: skip
        bm, cos = hybrid_parts(
            self.history,
            stemmed(query.terms) if options.stemming else query.terms,
            query.vector,
            n,
            dense=alpha < 1,
            stemmed=options.stemming,
            piece_vectors=options.piece_vectors,
            signals=signals,
            scores=state,
        )
        scores = fuse(bm, cos, alpha)
        per_turn = None
        if cos is not None and options.adaptive_alpha and options.whole_turns and not agent:
            per_turn = turn_scores(state, signals)
        ranked = hybrid_ranking(
            self.history,
            scores,
            room,
            signals=signals,
            scores=state,
            whole_turns=options.whole_turns and not agent,
            group_scores=per_turn,
        )
        return ranked, scores

    # -- shared ------------------------------------------------------------------------------------
    def _cut(self, text: str, allowance: int) -> tuple[str, int]:
        """Last resort: a single line longer than the allowance, cut at a token boundary with a mark."""
        room = allowance - self.counter.count("\n" + CUT_MARK)
        if room <= 0:
            return "", 0
        ids = self.counter.encode(text)[:room]
        out = _kept_whole(text, self.counter.decode(ids).rstrip("\ufffd")) + "\n" + CUT_MARK
        while self.counter.count(out) > allowance and ids:
            ids = ids[:-1]
            out = _kept_whole(text, self.counter.decode(ids).rstrip("\ufffd")) + "\n" + CUT_MARK
        return out, self.counter.count(out)

    def _views(self, entries: list[Entry], chosen: list[Shown], n: int, pieces: dict[int, list[int]]) -> list[UnitView]:
        resolution: dict[int, str] = {}
        for e in entries:
            for seq in range(e.first, e.last + 1):
                resolution[seq] = "merged" if e.merged else "record"
        shown_pieces: dict[int, tuple[int, ...]] = {seq: tuple(sorted(idx)) for seq, idx in pieces.items()}
        for c in chosen:
            resolution[c.seq] = c.resolution
            shown_pieces[c.seq] = c.pieces
        return [
            _view(
                seq,
                self.history.notes[seq].unit_id,
                resolution.get(seq, "hidden"),
                shown_pieces.get(seq, ()),
                self.history,
            )
            for seq in range(n)
        ]


def _kept_whole(text: str, kept: str) -> str:
    """``kept`` (a prefix of ``text``, cut to fit) without the part of a mark of the render's own that
    the cut fell inside (a line of ``text`` beginning ``(…``: stored text never begins a line so,
    ``format``'s docstring): a mark is shown whole or not at all, never as a fragment such as ``(``."""
    start = kept.rfind("\n") + 1
    end = text.find("\n", start)
    line = text[start:] if end < 0 else text[start:end]
    if line.startswith("(…") and kept[start:] != line:
        return kept[: max(start - 1, 0)]
    return kept


def _view(seq: int, unit_id: str, resolution: str, pieces: tuple[int, ...], history: History) -> UnitView:
    shown = set(pieces)
    turns = tuple(t for t, ps in history.turn_pieces(seq).items() if shown and ps <= shown)
    return UnitView(seq, unit_id, resolution, pieces, turns)  # type: ignore[arg-type]
