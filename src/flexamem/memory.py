"""``Memory``: the public entry point. Add history once; (from the rendering issue on) render often.

    import flexamem as fm
    mem = fm.Memory("memory.db")
    mem.add_session([{"speaker": "Caroline", "text": "..."}], session_id="s1", date="8 May 2023")
    mem.notes()

The data flow is one direction: caller input -> :mod:`flexamem.write.units` (validate, cut into
units) -> :class:`~flexamem.write.writer.NoteWriter` (records, embeddings, pieces, links) -> the
:class:`~flexamem.store.base.Store` (one transaction) -> :class:`~flexamem.history.History` (the
in-memory view rendering reads).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flexamem.config import Settings
from flexamem.errors import BudgetError, DuplicateUnitError, InvalidInputError
from flexamem.history import History
from flexamem.notes import Note, Record, Turn, UnitDraft
from flexamem.render.renderer import MODES, Query, Renderer, RenderOptions
from flexamem.render.result import Rendering
from flexamem.render.timeline import Timeline
from flexamem.store.base import Store
from flexamem.store.sqlite import SQLiteStore
from flexamem.text import query_terms
from flexamem.tokens import TokenCounter, counter
from flexamem.write.embed import Embedder, default_embedder
from flexamem.write.records import AsyncRecordWriter, Progress, RecordWriter, RuleWriter
from flexamem.write.units import clean_text, cut_session, parse_turns
from flexamem.write.writer import NoteWriter

if TYPE_CHECKING:
    from flexamem.agent import AgentSession


class Memory:
    """A write-once memory of one history, stored in SQLite (or any :class:`Store`).

    Args:
        path: SQLite file, or ``":memory:"`` for a throwaway memory. Ignored when ``store`` is given.
        history: which history of the store this object reads and writes (a store can hold many).
        settings: writing and rendering settings; defaults are documented in :class:`Settings`.
        writer: writes records and fields; the offline :class:`RuleWriter` by default.
        embedder: sentence embeddings; all-MiniLM-L6-v2 (numpy) by default.
        store: a ready store instance (overrides ``path``).
        read_only: open the file read-only; any write raises :class:`ReadOnlyStoreError`.
    """

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        history: str = "default",
        settings: Settings | None = None,
        writer: RecordWriter | None = None,
        embedder: Embedder | None = None,
        store: Store | None = None,
        read_only: bool = False,
    ) -> None:
        self.settings = settings or Settings()
        self.counter: TokenCounter = counter()
        self.writer: RecordWriter = writer or RuleWriter(self.settings.record_words, self.settings.merged_words)
        self._embedder = embedder
        self.store: Store = store or SQLiteStore(path, read_only=read_only)
        self.history_id = history
        self._lock = threading.RLock()
        self._history: History | None = None
        self._renderer: Renderer | None = None
        self._piece_vectors: dict[int, np.ndarray] = {}
        self._query_vectors: dict[str, np.ndarray] = {}

    # -- lifecycle ---------------------------------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = default_embedder()
        return self._embedder

    @property
    def history(self) -> History:
        """The in-memory view, loaded from the store on first use."""
        if self._history is None:
            self._history = History.from_notes(self.store.load_notes(self.history_id), self.embedder.dim)
        return self._history

    @property
    def renderer(self) -> Renderer:
        if self._renderer is None:
            timeline = Timeline(self.history, self.store, self.history_id, self.writer, self.counter)
            self._renderer = Renderer(self.history, timeline, self.counter, self.settings, self.piece_vectors)
        return self._renderer

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return len(self.history)

    # -- writing -----------------------------------------------------------------------------------
    def add_session(
        self,
        turns: Iterable[Mapping[str, Any] | Turn],
        *,
        session_id: str | None = None,
        date: str | None = None,
    ) -> list[str]:
        """Write one conversation session as notes; returns the new unit ids, in order.

        Turns are ``{"speaker", "text"}`` dicts with optional ``"id"`` (kept on every piece, e.g. a
        LoCoMo ``dia_id``) and ``"role"`` (sessions are cut before ``"user"`` turns). All units of
        the session land in one transaction, or none do.
        """
        with self._lock:
            drafts = self._drafts(turns, session_id, date)
        return self._write(drafts, self.history)

    def add_sessions(
        self, sessions: Iterable[Mapping[str, Any]], *, progress: Progress | None = None
    ) -> list[list[str]]:
        """Write many sessions (``{"turns": [...], "session_id"?, "date"?}``) at once.

        Every session is validated before anything is written; then the records of all their units
        are written as one batch (in parallel by an LLM writer, with ``progress(done, total)``), and
        each session is stored in its own transaction, in order. Returns each session's unit ids.
        """
        with self._lock:
            batches: list[list[UnitDraft]] = []
            seen = set(self.history.unit_ids)
            for i, session in enumerate(sessions):
                if not isinstance(session, Mapping) or "turns" not in session:
                    raise InvalidInputError(f"session {i}: expected a mapping with 'turns'")
                sid = session.get("session_id") or f"s{self._session_count() + len(batches) + 1}"
                drafts = self._drafts(session["turns"], sid, session.get("date"))
                for d in drafts:
                    if d.unit_id in seen:
                        raise DuplicateUnitError(f"session {i}: unit {d.unit_id!r} is already written")
                    seen.add(d.unit_id)
                batches.append(drafts)
        records = self.writer.write_records([d for b in batches for d in b], progress)
        out, start = [], 0
        for drafts in batches:
            out.append(self._write(drafts, self.history, records[start : start + len(drafts)]))
            start += len(drafts)
        return out

    async def aadd_session(
        self,
        turns: Iterable[Mapping[str, Any] | Turn],
        *,
        session_id: str | None = None,
        date: str | None = None,
    ) -> list[str]:
        """The async twin of :meth:`add_session`: the same notes, with records written by
        ``await``-ed model calls (no thread held while the model thinks). Give distinct ``session_id``s
        when adding sessions concurrently."""
        with self._lock:
            drafts = self._drafts(turns, session_id, date)
        self._check_new(drafts, self.history)
        records = await self.awrite_records(drafts)
        return await asyncio.to_thread(self._write, drafts, self.history, records)

    async def awrite_records(self, drafts: Sequence[UnitDraft]) -> list[Record]:
        if isinstance(self.writer, AsyncRecordWriter):
            return await self.writer.awrite_records(drafts)
        return await asyncio.to_thread(self.writer.write_records, drafts)

    def _drafts(
        self, turns: Iterable[Mapping[str, Any] | Turn], session_id: str | None, date: str | None
    ) -> list[UnitDraft]:
        parsed = parse_turns(turns)
        sid = clean_text(session_id, "session_id") if session_id is not None else f"s{self._session_count() + 1}"
        clean_date = clean_text(date, "date").strip() if date is not None else None
        return cut_session(
            parsed,
            self.counter,
            session_id=sid,
            date=clean_date,
            max_unit_tokens=self.settings.max_unit_tokens,
            one_unit=self.settings.one_unit_per_session,
        )

    def _session_count(self) -> int:
        return len({n.session_id for n in self.history.notes})

    def _check_new(self, drafts: Sequence[UnitDraft], history: History) -> None:
        seen = set(history.unit_ids)
        for d in drafts:
            if d.unit_id in seen:
                raise DuplicateUnitError(f"unit {d.unit_id!r} is already in history {self.history_id!r}")
            seen.add(d.unit_id)

    def _write(self, drafts: list[UnitDraft], history: History, records: Sequence[Record] | None = None) -> list[str]:
        """Store drafts as notes. Records are written first and outside the lock (a model may take
        seconds per unit, and renders must not wait for it); the rest runs under the lock."""
        self._check_new(drafts, history)  # before any model call
        if records is None:
            records = self.writer.write_records(drafts)
        with self._lock:
            self._check_new(drafts, history)  # another thread may have written them meanwhile
            self.store.ensure_history(self.history_id, drafts[0].kind if drafts else "conversation")
            notes, links, calls = NoteWriter(self.embedder, self.counter, self.settings).write(
                drafts, len(history), history.embeddings, records
            )
            self.store.append_notes(self.history_id, notes, links, calls)
            history.extend(notes, links)
            return [n.unit_id for n in notes]

    def llm_usage(self) -> dict[str, int]:
        """Model tokens spent on this history's memory (records, repairs, merges), and saved by the cache."""
        out = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cached_calls": 0}
        for c in self.store.llm_calls(self.history_id):
            if c.cached:
                out["cached_calls"] += 1
                continue
            out["calls"] += 1
            out["prompt_tokens"] += c.prompt_tokens
            out["completion_tokens"] += c.completion_tokens
        return out

    # -- reading -----------------------------------------------------------------------------------
    def notes(self) -> list[Note]:
        """Every note, oldest first, with its current links (later notes add back-links)."""
        history = self.history
        return [dataclasses.replace(n, links=tuple(history.links[n.seq])) for n in history.notes]

    def note(self, unit_id: str) -> Note:
        try:
            seq = self.history.unit_ids[unit_id]
        except KeyError:
            raise InvalidInputError(f"no unit {unit_id!r} in history {self.history_id!r}") from None
        return self.notes()[seq]

    # -- rendering ---------------------------------------------------------------------------------
    def render(
        self,
        query: str,
        budget: int,
        *,
        mode: str = "auto",
        prompt: str = "",
        options: RenderOptions | None = None,
        query_vector: np.ndarray | None = None,
    ) -> Rendering:
        """A fresh memory for one question, within the budget.

        The fixed prompt is ``prompt`` plus the query, so ``count(prompt) + count(query) +
        r.tokens <= floor(0.95 * budget)``. ``mode`` is ``"auto"`` (the default: a small timeline plus
        pieces ranked by stemmed BM25 fused with piece vectors, whole turns and their neighbours; see
        docs/RENDERING.md), or one of the paper's modes, ``"pieces"`` (piece recovery) and ``"units"``
        (unit recovery), kept as the paper defines them. No LLM is called
        except to write a merged record the first time it is needed (then stored and reused).
        ``query_vector`` skips embedding the query when the caller already has its MiniLM vector.
        """
        if mode not in MODES:
            raise InvalidInputError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError("the query is empty")
        allowance = self.allowance(budget, self.counter.count(prompt) + self.counter.count(query))
        q = Query(
            text=query,
            terms=query_terms(query),
            excerpt_terms=query_terms(query),
            vector=(lambda: query_vector) if query_vector is not None else (lambda: self.query_vector(query)),
        )
        with self._lock:
            return self.renderer.render(q, allowance, mode, options or RenderOptions())  # type: ignore[arg-type]

    async def arender(self, query: str, budget: int, **kwargs: Any) -> Rendering:
        """The async twin of :meth:`render` (run in a worker thread: rendering is CPU work)."""
        return await asyncio.to_thread(self.render, query, budget, **kwargs)

    def agent(
        self,
        task: str | None = None,
        *,
        budget: int | None = None,
        system: str = "",
        session_id: str | None = None,
    ) -> AgentSession:
        """Start an agent session (``task`` and ``budget`` required) or resume one by ``session_id``.

        The session lives in this memory's store as history ``agent:<session_id>``.
        """
        from flexamem.agent import AgentSession

        def factory(history_id: str) -> Memory:
            return Memory(
                store=self.store,
                history=history_id,
                settings=self.settings,
                writer=self.writer,
                embedder=self._embedder,
            )

        return AgentSession.open(factory, task=task, budget=budget, system=system, session_id=session_id)

    @staticmethod
    def ceiling(budget: int) -> int:
        """``floor(0.95 * B)``: the hard limit on the whole context."""
        if not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0:
            raise BudgetError(f"budget must be a positive number of tokens, got {budget!r}")
        return (budget * 95) // 100

    def allowance(self, budget: int, fixed_tokens: int) -> int:
        allowance = self.ceiling(budget) - fixed_tokens
        if allowance <= 0:
            raise BudgetError(
                f"budget {budget} leaves no room for memory: the fixed prompt takes {fixed_tokens} of the "
                f"{self.ceiling(budget)} tokens allowed (0.95 * budget)"
            )
        return allowance

    def query_vector(self, text: str) -> np.ndarray:
        vector = self._query_vectors.get(text)
        if vector is None:
            vector = self.embedder.embed([text])[0]
            if len(self._query_vectors) > 256:
                self._query_vectors.clear()
            self._query_vectors[text] = vector
        return vector

    def piece_vectors(self, docs: Sequence[int]) -> np.ndarray:
        """Embeddings of pieces (by BM25 doc id): those written with the notes, else computed when
        first needed and kept in memory."""
        history = self.history
        ready = history.piece_vector_ready
        if all(ready[d] for d in docs):
            return history.piece_matrix[list(docs)] if docs else np.zeros((0, self.embedder.dim))
        missing = [d for d in docs if d not in self._piece_vectors]
        if missing:
            texts = [self.history.piece(d)[1].text for d in missing]
            for d, v in zip(missing, self.embedder.embed(texts), strict=True):
                self._piece_vectors[d] = v
        return np.stack([self._piece_vectors[d] for d in docs]) if docs else np.zeros((0, self.embedder.dim))
