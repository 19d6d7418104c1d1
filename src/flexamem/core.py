"""One history of a store as every process sees it: the per-history core that ``Memory``, agent
sessions and the server share.

The core keeps the in-memory view (:class:`~flexamem.history.History`: notes, BM25 indexes, vectors)
and follows the store: before a render it asks the store how many notes the history holds (one
indexed look-up) and, when another process or object wrote more, loads just those notes and the new
link edges and extends the view (never a full reload). A write prepares everything costly first
(embeddings, pieces, token counts), then, under the lock, catches up, numbers the notes after the
last stored one and appends them in one transaction; if another writer took those numbers first, the
store refuses (:class:`~flexamem.errors.ConcurrentWriteError`) and the core catches up and tries
again. Merged records are stored once per span, whoever computes them first (the timeline keeps the
stored one).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from flexamem import budget
from flexamem.config import Settings, WriteSettingsWarning, with_write_settings, write_settings
from flexamem.digests import ERASED_SALT, Head, body_digest, chain_problems, salted_body
from flexamem.errors import (
    ConcurrentWriteError,
    DuplicateUnitError,
    FlexaMemError,
    HistoryDroppedError,
    InvalidInputError,
    NotFoundError,
    RequestConflictError,
    StoreCorruptError,
)
from flexamem.history import History
from flexamem.notes import Block, Fields, Note, Record, UnitDraft
from flexamem.recover import load_cache
from flexamem.render.renderer import Renderer
from flexamem.render.result import Rendering
from flexamem.render.timeline import MergeNeeded, Timeline
from flexamem.store.base import Erasure, KeptLoad, StepRow, Store
from flexamem.store.sql import new_epoch
from flexamem.text import content_words
from flexamem.tokens import TokenCounter
from flexamem.write.default_embed import FP32, default_embedder
from flexamem.write.embed import Embedder
from flexamem.write.records import AsyncRecordWriter, Forgets, RecordWriter, RuleWriter
from flexamem.write.units import ERASED_MARK, erased_draft, is_marker
from flexamem.write.writer import NoteWriter

T = TypeVar("T")

WRITE_ATTEMPTS = 200  # a writer that keeps losing races gives up (with ConcurrentWriteError) after this many

Relabel = Callable[[History], Sequence[UnitDraft]]


_UNCHECKED = object()
WRITE_KEY = "write"  # the state row holding a history's write settings


def inferred_write_settings(notes: Sequence[Note]) -> dict[str, Any]:
    """The write settings of a history written before they were recorded: today's defaults, unless its
    notes show otherwise (a piece longer than ``kappa``; fewer or more links than ``links`` on notes with
    that many before them). Piece vectors are not inferred: notes with and without them already render
    together (a piece without one is scored by its unit's embedding), and older versions wrote none."""
    base = Settings()
    out = write_settings(base)
    longest = max((p.tokens for n in notes for p in n.pieces), default=0)
    if longest > base.kappa:
        out["kappa"] = longest
    later = [n for n in notes if n.seq >= base.links]
    if later:
        out["links"] = max(max(len([d for d in n.links if d < n.seq]) for n in later), 1)
    return out


def request_body(drafts: Sequence[UnitDraft]) -> str:
    """The digest of what a write stores (its units as cut from the caller's input, before a library
    name is given): what a request id is bound to."""
    return body_digest([[d.unit_id, d.kind, d.session_id, d.date, d.raw] for d in drafts])


def kept_load_problems(store: Store, history_id: str) -> list[str]:
    """A history's kept load against its notes: one a load would use (it fits the history's epoch,
    erasures and notes, :meth:`HistoryCore._first_load`) must be what counting those notes gives."""
    kept = store.get_kept_load(history_id)
    epoch, stored, erasures = store.history_state(history_id)
    if kept is None or kept.version != load_cache.VERSION or not 0 < kept.notes <= stored:
        return []
    try:
        notes = store.load_notes(history_id)[: kept.notes]
    except StoreCorruptError:
        return []  # a damaged note: store.verify names it, and no load reads past it
    if (kept.epoch, kept.erasures, kept.digest) != (epoch, erasures, notes[-1].digest or ""):
        return []  # never used: a load counts afresh
    counted = load_cache.count_words([content_words(p.text) for n in notes for p in n.pieces])
    if load_cache.encode(counted) == kept.data:
        return []
    return [
        f"the kept load of history {history_id!r} (the words of its first {kept.notes} notes' pieces, counted)"
        " does not match those notes: it was changed past the store (it only ranks pieces; delete its"
        " load_cache row and the next open counts afresh)"
    ]


def _alive(view: weakref.ref[HistoryCore]) -> HistoryCore:
    """The view a renderer was made for (it holds it weakly: see ``HistoryCore.renderer``)."""
    core = view()
    if core is None:
        raise RuntimeError("this renderer's history view was closed")
    return core


class HistoryCore:
    """The view of one history that follows its store, and the only way notes are written to it."""

    def __init__(
        self,
        store: Store,
        history_id: str,
        settings: Settings,
        writer: RecordWriter,
        counter: TokenCounter,
        embedder: Embedder | None = None,
    ) -> None:
        self.store = store
        self.history_id = history_id
        self.requested = settings  # as given; ``settings`` is what is used: the recorded write settings in
        self.settings = settings  # place of the given ones once the history has them (follow_recorded)
        self._write_for: object = _UNCHECKED  # the epoch whose recorded write settings are in ``settings``
        self._write_stored = False  # whether the history holds its record (else the next write stores it)
        self._warned = False
        self._differs = ""  # the given write settings the recorded ones replace (warned at the first write)
        self.writer = writer
        self.counter = counter
        self._embedder = embedder
        self._embedder_epoch: object = _UNCHECKED  # the epoch (None: no history) whose embedder was checked
        self.lock = threading.RLock()
        self.epoch: str | None = None  # the stored history's epoch as last read (None: no history seen)
        self.erasures = 0  # how many erasures the stored history held when last read
        self.pinned = False  # an agent session's core: a dropped history raises instead of starting afresh
        self._history: History | None = None
        self._renderer: Renderer | None = None
        self._piece_vectors: dict[int, np.ndarray] = {}
        self._query_vectors: dict[str, np.ndarray] = {}

    # -- the view --------------------------------------------------------------------------------------
    @property
    def embedder(self) -> Embedder:
        """The history's embedder: the one it was written with (recorded in its row), else the one given,
        else the default. A given embedder other than the recorded one is refused."""
        with self.lock:
            if self._embedder is None:
                epoch = self.epoch
                self._embedder = default_embedder(self.recorded_embedder())
                self._embedder_epoch = epoch
            else:
                self.check_embedder()
            return self._embedder

    def recorded_embedder(self) -> str | None:
        """The name of the embedder the stored history was written with (None: no history yet; a
        history written before names were recorded has the only default there was then)."""
        found = self.store.history_meta(self.history_id)
        return None if found is None else str(found[1].get("embedder", FP32))

    def check_embedder(self) -> None:
        """Refuse to write or query with vectors of another model than the stored history's (checked
        once per stored history this view sees)."""
        if self._embedder is None or self._embedder_epoch == self.epoch:
            return
        epoch = self.epoch
        recorded = self.recorded_embedder()
        if recorded is not None and recorded != self._embedder.name:
            raise InvalidInputError(
                f"history {self.history_id!r} was written with the embedder {recorded!r}, not "
                f"{self._embedder.name!r}: its vectors would be compared with another model's"
            )
        self._embedder_epoch = epoch

    @property
    def history(self) -> History:
        """The in-memory view, loaded from the store on first use (call :meth:`sync` to catch up)."""
        with self.lock:
            if self._history is None:
                self.sync()
            assert self._history is not None
            return self._history

    @property
    def renderer(self) -> Renderer:
        with self.lock:
            if self._renderer is None:
                # the renderer and its timeline reach back to this view only weakly: a view dropped from a
                # cache (a server's least recently used) is freed at once, not left to the cyclic collector
                view = weakref.ref(self)
                timeline = Timeline(
                    self.history,
                    self.store,
                    self.history_id,
                    self.writer,
                    self.counter,
                    epoch=lambda: _alive(view).epoch,
                    erasures=lambda: _alive(view).erasures,
                    merged_words=self.settings.merged_words,
                )
                piece_vectors = lambda docs: _alive(view).piece_vectors(docs)  # noqa: E731
                self._renderer = Renderer(self.history, timeline, self.counter, self.settings, piece_vectors)
            return self._renderer

    def use_settings(self, settings: Settings) -> None:
        """Render with ``settings`` from the next call on, and write with them where the history has
        recorded no write settings of its own (the view is kept; the renderer, which holds the settings
        and the timeline's cache, is built again when next used)."""
        with self.lock:
            self.requested = self.settings = settings
            self._write_for = _UNCHECKED
            self._renderer = None

    def render(self, attempt: Callable[[], Rendering], *, locked: bool = True) -> Rendering:
        """Run ``attempt`` (a render of this view; under the lock, after a catch-up, when ``locked``)
        by :meth:`with_merges`; the rendering counts the merged records written for it."""
        result, written = self.with_merges(attempt, locked=locked)
        return dataclasses.replace(result, merges_written=result.merges_written + written) if written else result

    def with_merges(self, attempt: Callable[[], T], *, locked: bool = True) -> tuple[T, int]:
        """``attempt()`` and how many merged records were written for it. A merged record a model must
        write (:class:`~flexamem.render.timeline.MergeNeeded`) is written between attempts with the
        lock released, so a slow endpoint stalls only this call, never the other renders and writes of
        the history; each round stores one more merged record."""
        written = 0
        while True:
            try:
                if locked:
                    with self.lock:
                        self.sync()
                        return attempt(), written
                return attempt(), written
            except MergeNeeded as need:
                self.renderer.timeline.write_merge(need.group)
                written += 1

    def reset(self) -> None:
        """Forget the view (the history was dropped, or erased in): the next use starts afresh from the store."""
        with self.lock:
            self.epoch = None
            self.erasures = 0
            self._history = History(self.embedder.dim)
            self._renderer = None
            self._piece_vectors = {}

    def sync(self) -> int:
        """Catch up with the store (:meth:`catch_up`) and write with the settings the history recorded
        (:meth:`follow_recorded`); returns how many notes were loaded."""
        with self.lock:
            loaded = self.catch_up()
            self.follow_recorded()
            return loaded

    def follow_recorded(self) -> None:
        """Once per stored history this view sees: its recorded write settings (``state`` key
        ``write``, written with its first write; for a history written before they were recorded, what
        its notes show, else today's defaults) replace the given ones, so a history is never written
        with two sets. Given ones that differ are named by a :class:`WriteSettingsWarning` when this
        view first writes (a render reads what is stored, whatever the write settings)."""
        if self._write_for == self.epoch:
            return
        self._write_for = self.epoch
        recorded: dict[str, Any] | None = None
        self._write_stored = False
        if self.epoch is not None:
            stored = self.store.get_state(self.history_id, WRITE_KEY)
            self._write_stored = isinstance(stored, dict)
            if isinstance(stored, dict):
                recorded = stored
            elif self._history is not None and len(self._history):
                recorded = inferred_write_settings(self._history.notes)
        target = with_write_settings(self.requested, recorded) if recorded is not None else self.requested
        given, kept = write_settings(self.requested), write_settings(target)
        self._differs = ", ".join(f"{k}={kept[k]!r} (given {given[k]!r})" for k in kept if kept[k] != given[k])
        if target != self.settings:
            self.settings = target
            self._renderer = None
        if type(self.writer) is RuleWriter and (self.writer.record_words, self.writer.merged_words) != (
            target.record_words,
            target.merged_words,
        ):
            self.writer = RuleWriter(target.record_words, target.merged_words)

    def catch_up(self) -> int:
        """Catch up with the store's notes; returns how many notes were loaded.

        One read of the history's head (epoch and note count). A view whose history was dropped since
        it read it (no history, or another epoch) starts afresh: it forgets everything and loads the new
        history, if any, so nothing deleted is shown or written on. Otherwise only the notes other
        writers stored since are loaded, with their link edges. A ``pinned`` core (an agent session's)
        raises :class:`HistoryDroppedError` instead."""
        with self.lock:
            for _ in range(WRITE_ATTEMPTS):
                epoch, stored, erasures = self.store.history_state(self.history_id)
                if self.epoch is not None and epoch != self.epoch:
                    if self.pinned:
                        raise HistoryDroppedError(
                            f"{self.history_id!r} was deleted (Memory.drop, drop_session or DELETE): "
                            "this agent session cannot go on, start a new one"
                        )
                    self.reset()
                elif self._history is None or erasures != self.erasures:
                    self.reset()  # an erasure rewrote notes this view holds: it forgets them all and reads again
                history = self._history
                assert history is not None
                self.epoch, self.erasures = epoch, erasures
                if stored <= len(history):
                    return 0
                start = len(history)
                notes = self.store.load_notes(self.history_id, start)
                if self.store.history_state(self.history_id)[::2] != (epoch, erasures):
                    continue  # dropped or erased in while we read: start again
                end = start + len(notes)  # more may land between the reads: their links wait for the next sync
                legacy = self.store.legacy(self.history_id)  # a digest missing past these notes is reported
                previous = (history.notes[-1].digest or "") if start else ""
                erased = self.store.erased(self.history_id)[0] if erasures else None
                problems = chain_problems(
                    notes, previous, start, legacy=legacy[0] if legacy is not None else 0, erased=erased
                )
                if problems:  # a render never shows a row verify() would flag: it refuses, naming the row
                    raise StoreCorruptError(
                        f"history {self.history_id!r} is damaged: {problems[0]} (Memory.verify() lists every problem)"
                    )
                links = [(a, b) for a, b in self.store.load_links(self.history_id, start) if a < end and b < end]
                if start == 0:
                    self._first_load(history, notes, links)
                else:
                    history.extend(notes, links)
                return len(notes)
            raise ConcurrentWriteError(f"history {self.history_id!r} kept being dropped while it was read")

    def _first_load(self, history: History, notes: list[Note], links: list[tuple[int, int]]) -> None:
        """Load ``notes`` into the empty ``history``: the words of their pieces from the history's kept
        load where it still fits (:mod:`flexamem.recover.load_cache`), the notes written since counted;
        else all counted, and the count kept for the next open (a small history, a read-only store or a
        failed write keeps nothing; the render goes on)."""
        pieces = sum(len(n.pieces) for n in notes)
        if pieces < load_cache.MIN_PIECES:
            history.extend(notes, links)
            return
        kept = self.store.get_kept_load(self.history_id)
        if kept is not None and kept.version == load_cache.VERSION and 0 < kept.notes <= len(notes):
            covered = sum(len(n.pieces) for n in notes[: kept.notes])
            fits = (kept.epoch, kept.erasures, kept.digest) == (
                self.epoch,
                self.erasures,
                notes[kept.notes - 1].digest or "",
            )
            if fits and pieces - covered <= max(load_cache.MIN_PIECES, covered // 4):
                try:
                    words = load_cache.decode(kept.data, covered)
                except ValueError:
                    words = None
                if words is not None:
                    whole = kept.notes == len(notes)
                    history.extend(notes[: kept.notes], links if whole else (), words=words)
                    if not whole:
                        history.extend(notes[kept.notes :], links)
                    return
        history.extend(notes, links, keep_count=True)
        counted, history.loaded_words = history.loaded_words, None  # the store keeps it, not every open view
        if counted is None or self.store.read_only or self.epoch is None:
            return
        data = load_cache.encode(counted)
        last = notes[-1].digest or ""
        with contextlib.suppress(FlexaMemError):
            self.store.put_kept_load(
                self.history_id, KeptLoad(self.epoch, self.erasures, len(notes), last, load_cache.VERSION, data)
            )

    def notes(self, start: int = 0, stop: int | None = None) -> list[Note]:
        """Notes ``start..stop`` (every note by default), oldest first, with their current links (later
        notes add back-links); a page copies only its own notes."""
        with self.lock:
            self.sync()
            history = self.history
            return [dataclasses.replace(n, links=tuple(history.links[n.seq])) for n in history.notes[start:stop]]

    def note(self, seq: int) -> Note:
        """Note ``seq`` with its current links (one note: O(1), where :meth:`notes` copies them all)."""
        with self.lock:
            self.sync()
            return dataclasses.replace(self.history.notes[seq], links=tuple(self.history.links[seq]))

    def position(self, unit_id: object) -> int:
        """The position of a unit named by its id or by the label renders show (``u<n>``), in the view
        as last caught up."""
        if not isinstance(unit_id, str):
            raise InvalidInputError(f"unit ids must be strings, got {type(unit_id).__name__}")
        history = self.history
        seq = history.unit_ids.get(unit_id)
        label = unit_id[1:]  # ``u<ASCII digits>``: "u²" and "u٣" are digits to str.isdigit, not labels
        if (
            seq is None
            and unit_id[:1] == "u"
            and label.isascii()
            and label.isdigit()
            and 0 < int(label) <= len(history)
        ):
            seq = int(label) - 1
        if seq is None:
            raise NotFoundError(f"no unit {unit_id!r} in history {self.history_id!r}")  # as a server's 404
        return seq

    def positions(self, order: object) -> list[int]:
        """``order`` (unit ids or labels, most relevant first) as positions; call under ``lock`` after
        :meth:`sync`, so the names resolve against the view the rendering uses."""
        if isinstance(order, str | bytes) or not isinstance(order, Sequence):
            raise InvalidInputError("order must be a list of unit ids or labels")
        return [self.position(u) for u in order]

    # -- the history's row, state and agent steps -------------------------------------------------------
    # what an agent session reads and writes of the store besides notes: through here, so that nothing
    # above the core names the store's calls or the history's id in them
    @property
    def read_only(self) -> bool:
        """Whether the store refuses writes (renders still work)."""
        return self.store.read_only

    def kind(self) -> str | None:
        """The stored history's kind (``"agent"`` for an agent session), or None: the store has none."""
        return self.store.history_kind(self.history_id)

    def create(self, kind: str, meta: dict[str, Any], *, parent: str | None = None) -> dict[str, Any]:
        """Create the history's row with ``meta`` if it has none; returns its stored meta."""
        return self.store.ensure_history(self.history_id, kind, meta, parent=parent)

    def meta(self) -> dict[str, Any] | None:
        """The stored history's meta (an agent session's task, system and budget), or None: no history
        (never creates one)."""
        found = self.store.history_meta(self.history_id)
        return None if found is None else found[1]

    def state(self, key: str) -> Any:
        """The history's state under ``key`` (None when unset)."""
        return self.store.get_state(self.history_id, key)

    def set_state(self, key: str, value: Any) -> None:
        """Write the history's state under ``key``, checked against the epoch this view read."""
        self.store.set_state(self.history_id, key, value, epoch=self.epoch)

    def steps(self) -> list[StepRow]:
        """The agent steps stored in this history, in order."""
        return self.store.load_steps(self.history_id)

    def head(self) -> Head | None:
        """The history's head as its rows are now, or None: no such history."""
        with self.lock:
            return self.store.head(self.history_id)

    # -- writing ---------------------------------------------------------------------------------------
    def check_new(self, drafts: Sequence[UnitDraft]) -> None:
        seen = set(self.history.unit_ids)
        for d in drafts:
            if d.unit_id in seen:
                raise DuplicateUnitError(f"unit {d.unit_id!r} is already in history {self.history_id!r}")
            seen.add(d.unit_id)

    def write(
        self,
        drafts: Sequence[UnitDraft],
        records: Sequence[Record] | None = None,
        *,
        relabel: Relabel | None = None,
        steps: Sequence[StepRow] = (),
        state: Mapping[str, Any] | None = None,
        retry: bool = True,
        request_id: str | None = None,
    ) -> list[Note]:
        """Store ``drafts`` as notes (with agent ``steps`` and session ``state`` in the same transaction).

        Records are written first, outside the lock (a model may take seconds per unit and renders
        must not wait). ``relabel(history)`` re-names the drafts after a catch-up (a library-chosen
        session id another writer took meanwhile). ``retry=False``: a lost race raises
        :class:`ConcurrentWriteError` instead (an agent session whose steps another process advanced).
        ``request_id``: the caller's id of this write, stored with it: when a write under that id is
        already stored (a retry), nothing is written and its notes are returned.
        """
        body = request_body(drafts)
        if drafts:
            with self.lock:
                self.sync()
                done = self._written(request_id, body)
                if done is not None:
                    return done
                self.check_new(relabel(self.history) if relabel else drafts)  # before any model call
                self.warn_if_overridden()
        if records is None:
            records = self.writer.write_records(drafts)
        prepared = NoteWriter(self.embedder, self.counter, self.settings, self.known_piece).prepare(drafts, records)
        for attempt in range(WRITE_ATTEMPTS):
            with self.lock:
                self.sync()
                history = self.history  # a new view when the sync found the history dropped
                done = self._written(request_id, body)  # another attempt of this request won a race meanwhile
                if done is not None:
                    return done
                if relabel is not None:
                    prepared = prepared.relabel(relabel(history))
                self.check_new(prepared.drafts)
                previous = (history.notes[-1].digest or "") if history.notes else ""
                notes, links, calls = NoteWriter(self.embedder, self.counter, self.settings).assign(
                    prepared, len(history), history.embeddings, previous
                )
                epoch, create = (self.epoch, False) if self.epoch is not None else (new_epoch(), True)
                recorded = {"embedder": self.embedder.name}  # checked against a history another process began
                try:
                    self.store.append_notes(
                        self.history_id,
                        notes,
                        links,
                        calls,
                        steps=steps,
                        state=self._recorded_with(state),
                        epoch=epoch,
                        create=create,
                        meta=recorded,
                        request_id=request_id,
                        body=body,
                    )
                except ConcurrentWriteError:
                    if not retry:
                        raise
                except DuplicateUnitError:
                    if relabel is None or not retry:
                        raise  # a name the caller chose is taken; a library-chosen one is chosen again
                else:
                    self.epoch = epoch
                    self._write_for, self._write_stored = epoch, True
                    history.extend(notes, links)
                    return notes
            time.sleep(min(0.001 * (attempt + 1), 0.05))  # another process is writing: let it finish
        raise ConcurrentWriteError(f"gave up writing to {self.history_id!r} after {WRITE_ATTEMPTS} lost races")

    def erase(
        self,
        kind: str,
        ids: Sequence[str],
        reason: str,
        erased: Callable[[Note, Block], bool],
        *,
        marker: bool,
        steps: Sequence[StepRow] = (),
    ) -> Erasure:
        """Erase the blocks ``erased(note, block)`` names from every note holding one, and ``steps``
        (their stored data rewritten): each such note is written again from its other blocks (the rule
        writer's record, new pieces and vectors; an empty note when none is left), in one store
        transaction with the erasure's chain row. Nothing named: :class:`NotFoundError`, nothing changes.
        Every view of the history, here and in other processes, reads it again from its next call."""
        with self.lock:
            self.sync()
            history = self.history
            rule = RuleWriter(self.settings.record_words, self.settings.merged_words)
            note_writer = NoteWriter(self.embedder, self.counter, self.settings)
            rewritten = []
            for note in history.notes:
                if not any(erased(note, b) for b in note.blocks if not is_marker(b)):
                    continue
                left = erased_draft(note, lambda b, n=note: erased(n, b))  # type: ignore[misc]
                shown = erased_draft(note, lambda b, n=note: erased(n, b), marker=marker)  # type: ignore[misc]
                if any(not is_marker(b) for b in left.blocks):
                    record = rule.write_record(left)
                else:
                    record = Record(text=ERASED_MARK if marker else "", fields=Fields(), writer="erasure")
                rewritten.append(note_writer.rewrite(note, shown, record))
            if not rewritten and not steps:
                raise NotFoundError(f"nothing named {', '.join(map(repr, ids))} in history {self.history_id!r}")
            done = self.store.erase(self.history_id, kind, ids, reason, rewritten, steps, epoch=self.epoch)
            self.reset()
        if isinstance(self.writer, Forgets):  # model answers written from the erased words go too
            self.writer.forget_responses()
        return done

    def warn_if_overridden(self) -> None:
        """Before a write: name the given write settings the history's recorded ones replace (once)."""
        if self._differs and not self._warned:
            self._warned = True
            warnings.warn(
                f"history {self.history_id!r} is written with the settings it recorded: {self._differs}",
                WriteSettingsWarning,
                stacklevel=4,
            )

    def _recorded_with(self, state: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        """``state`` and, for a history that holds no record of its write settings yet, that record."""
        if self._write_stored:
            return state
        return {**(state or {}), WRITE_KEY: write_settings(self.settings)}

    def stored_request(self, request_id: str, body: str) -> list[str] | None:
        """The unit ids a write under ``request_id`` stored, None when there is none, or
        :class:`RequestConflictError` when that write had another body (``body``: :func:`request_body`
        of this one): a request id names one request, as payment APIs' idempotency keys do. Once an
        erasure rewrote a note that write stored, every body is refused alike (no oracle of the words)."""
        found = self.store.written_by(self.history_id, request_id)
        if found is None:
            return None
        units, stored, salt = found
        if salt == ERASED_SALT:  # the same answer for every body: a replay must not test guesses of the words
            raise RequestConflictError(
                f"request id {request_id!r} names a write of {self.history_id!r} that had words erased since: it is"
                " refused whatever its body (nothing was stored; send the write under a new id)"
            )
        if stored is not None and stored != salted_body(body, salt):
            raise RequestConflictError(
                f"request id {request_id!r} already names another write of {self.history_id!r}: the same id with"
                " another body is refused (send the same body to retry it, or use a new id); nothing was stored"
            )
        return units

    def _written(self, request_id: str | None, body: str | None) -> list[Note] | None:
        """The notes a write under ``request_id`` stored (under the lock, just caught up), or None.

        Another writer may commit between our catch-up and this read: its notes and its request id
        commit together, so once the id is seen a second catch-up loads the notes."""
        if request_id is None or body is None:
            return None
        for _ in range(WRITE_ATTEMPTS):
            units = self.stored_request(request_id, body)
            if units is None:
                return None
            history = self.history
            if all(u in history.unit_ids for u in units):
                return [history.notes[history.unit_ids[u]] for u in units]
            self.sync()
        raise ConcurrentWriteError(f"the notes of request {request_id!r} in {self.history_id!r} could not be read")

    def known_piece(self, text: str) -> np.ndarray | None:
        """The vector of a piece of this history with exactly ``text``, if one was embedded."""
        with self.lock:
            return self.history.piece_vector(text)

    async def awrite_records(self, drafts: Sequence[UnitDraft]) -> list[Record]:
        if isinstance(self.writer, AsyncRecordWriter):
            return await self.writer.awrite_records(drafts)
        return await asyncio.to_thread(self.writer.write_records, drafts)

    # -- budgets and vectors ---------------------------------------------------------------------------
    ceiling = staticmethod(budget.ceiling)
    allowance = staticmethod(budget.allowance)

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
            texts = [history.piece(d)[1].text for d in missing]
            for d, v in zip(missing, self.embedder.embed(texts), strict=True):
                self._piece_vectors[d] = v
        return np.stack([self._piece_vectors[d] for d in docs]) if docs else np.zeros((0, self.embedder.dim))
