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
import datetime
import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar

import numpy as np

from flexamem.budget import allowance as budget_allowance
from flexamem.chat import message_turn
from flexamem.config import ClientSettings, Settings, write_settings
from flexamem.core import HistoryCore, Relabel, kept_load_problems, request_body
from flexamem.digests import Head, state_digest
from flexamem.errors import DuplicateUnitError, InvalidInputError, NotFoundError
from flexamem.history import History
from flexamem.names import reserved, session_history, session_prefix
from flexamem.notes import Note, Turn, UnitDraft
from flexamem.profiles import DEFAULT, Profile
from flexamem.profiles import profile as named_profile
from flexamem.render.renderer import Query, Renderer, RenderOptions, check_mode
from flexamem.render.result import Hit, Rendering
from flexamem.store import transfer
from flexamem.store.base import Erasure, Store
from flexamem.store.sqlite import SQLiteStore
from flexamem.telemetry import DELETE, DELETE_STORE, SEARCH, UPDATE, memory_span
from flexamem.text import clean_field, clean_text, query_terms
from flexamem.tokens import TokenCounter, counter
from flexamem.write.embed import Embedder
from flexamem.write.records import Progress, RecordWriter, RuleWriter
from flexamem.write.units import cut_session, free_session_id, is_marker, parse_turns, relabel_drafts

if TYPE_CHECKING:
    from flexamem.agent import AgentSession


def check_file_path(path: str | Path) -> None:
    """A SQLite path must name a file in an existing directory (``":memory:"`` and URLs pass), in
    valid text (no NUL, no lone surrogate) the file system accepts."""
    text = str(path)
    if "\x00" in text:
        raise InvalidInputError("path holds a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"path {text!r} is not valid text (a lone surrogate)") from None
    if text == ":memory:" or text.startswith(("postgresql://", "postgres://", "file:")):
        return
    try:
        p = Path(text).expanduser()
        if p.is_dir():
            raise InvalidInputError(f"{text!r} is a directory: give a file path, e.g. {str(p / 'memory.db')!r}")
        if not p.parent.exists():
            raise InvalidInputError(f"cannot create {text!r}: the directory {str(p.parent)!r} does not exist")
    except OSError as exc:  # a name too long, a path through a file, no permission ...
        shown = text if len(text) <= 120 else f"{text[:60]}...{text[-40:]} ({len(text)} characters)"
        raise InvalidInputError(f"cannot use {shown!r} as a memory file: {exc.strerror or exc}") from None


def check_request_id(request_id: object) -> str | None:
    """A write's request id: None, or a non-empty string of at most 200 characters."""
    if request_id is None:
        return None
    if not isinstance(request_id, str) or not request_id.strip() or len(request_id) > 200:
        raise InvalidInputError(f"request_id must be a non-empty string of at most 200 characters, got {request_id!r}")
    return clean_text(request_id, "request_id").strip()


def open_store(path: str | Path, *, read_only: bool = False) -> Store:
    """The store a path names: ``postgresql://...`` (or ``postgres://``) a PostgreSQL database, anything
    else a SQLite file (``":memory:"``: a throwaway one)."""
    if isinstance(path, str) and path.startswith(("postgresql://", "postgres://")):
        from flexamem.store.postgres import PostgresStore

        return PostgresStore(path, read_only=read_only)
    return SQLiteStore(path, read_only=read_only)


class Memory:
    """A write-once memory of one history, stored in SQLite (or any :class:`Store`), or served by a
    FlexA-Mem server.

    Args:
        path: SQLite file, ``":memory:"`` for a throwaway memory, or a ``postgresql://`` URL (shared by
            many processes and machines; the ``postgres`` extra). Ignored when ``store`` is given.
            An ``http://`` or ``https://`` URL (several, comma-separated, for servers of one store) gives
            the same API over ``flexamem serve`` (:class:`flexamem.client.RemoteMemory`; ``key=`` or
            ``FLEXAMEM_API_KEY``, ``client=`` :class:`~flexamem.config.ClientSettings`).
        history: which history of the store this object reads and writes (a store can hold many).
        settings: writing and rendering settings on top of the profile: a :class:`Settings`, or a mapping
            of the fields to change (``{"k": 3}``); defaults are documented in :class:`Settings`.
        profile: a named, versioned choice of mode and settings (:mod:`flexamem.profiles`:
            ``"auto-v1"``, ``"paper-units-v1"``, ``"paper-pieces-v1"``, or an alias such as ``"auto"``);
            the default is ``"auto"``. Renders without a ``mode`` use the profile's, and every
            :class:`Rendering` names the profile and the overrides that produced it.
        writer: writes records and fields; the offline :class:`RuleWriter` by default.
        embedder: sentence embeddings; by default all-MiniLM-L6-v2 (``FLEXAMEM_EMBEDDER``), or, for a
            stored history, the one it was written with (recorded in the store); a given embedder other
            than a history's recorded one is refused (:class:`InvalidInputError`).
        store: a ready store instance (overrides ``path``).
        read_only: open the file read-only; any write raises :class:`ReadOnlyStoreError`.
        head_key: a secret kept outside the database (bytes, or text): every head the store writes is
            signed with it and :meth:`verify` checks the signatures, so rows rewritten with the database
            alone are caught (``flexamem serve`` passes its key file's). Without it heads are unsigned.
        key, client: only for a server URL (above).
    """

    remote: ClassVar[type[Memory] | None] = None  # what a server URL opens (set by flexamem.client)

    def __new__(cls, path: str | Path = ":memory:", *args: Any, **kwargs: Any) -> Memory:
        if cls is Memory and isinstance(path, str) and path.lstrip().startswith(("http://", "https://")):
            if Memory.remote is None:  # pragma: no cover - flexamem/__init__ registers it
                raise InvalidInputError("a memory at a URL needs flexamem.client (import flexamem)")
            return super().__new__(Memory.remote)
        return super().__new__(cls)

    def __init__(
        self,
        path: str | Path = ":memory:",
        *,
        history: str = "default",
        settings: Settings | Mapping[str, Any] | None = None,
        profile: str | None = None,
        writer: RecordWriter | None = None,
        embedder: Embedder | None = None,
        store: Store | None = None,
        read_only: bool = False,
        head_key: bytes | str | None = None,
        key: str | None = None,
        client: ClientSettings | None = None,
    ) -> None:
        if key is not None or client is not None:
            raise InvalidInputError("key= and client= are for a memory at a server URL (http:// or https://)")
        self.profile: Profile = named_profile(DEFAULT if profile is None else profile)
        resolved, self.overrides = self.profile.with_overrides(settings)  # refuses what is not settings
        for name, value, kind in (
            ("writer", writer, RecordWriter),
            ("embedder", embedder, Embedder),
            ("store", store, Store),
        ):
            if value is not None and not isinstance(value, kind):
                raise InvalidInputError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
        if not isinstance(read_only, bool):
            raise InvalidInputError(f"read_only must be True or False, got {read_only!r}")
        settings = resolved
        self.counter: TokenCounter = counter()
        self.writer: RecordWriter = writer or RuleWriter(settings.record_words, settings.merged_words)
        if store is None:
            if not isinstance(path, str | Path) or isinstance(path, bool):
                raise InvalidInputError(f"path must be a file path or ':memory:', got {path!r}")
            check_file_path(path)
        self.store: Store = store or open_store(path, read_only=read_only)
        if head_key is not None:
            if not isinstance(head_key, bytes | str) or not head_key:
                raise InvalidInputError("head_key must be non-empty bytes or text")
            self.store.head_key = head_key.encode() if isinstance(head_key, str) else bytes(head_key)
        self.history_id = clean_text(history, "history").strip() if isinstance(history, str) else history
        if not isinstance(self.history_id, str) or not self.history_id:
            raise InvalidInputError(f"history must be a non-empty string, got {history!r}")
        if reserved(self.history_id) and self.store.history_kind(self.history_id) != "conversation":
            raise InvalidInputError(
                f"history {self.history_id!r}: a history name may not start with 'agent:' or hold '/agent:' "
                "(agent sessions are stored under such names: use mem.agent(session_id=...))"
            )
        self.core = HistoryCore(self.store, self.history_id, settings, self.writer, self.counter, embedder)
        self._given_embedder = embedder  # None: each history (and agent session) takes its recorded one

    # -- lifecycle ---------------------------------------------------------------------------------
    @property
    def settings(self) -> Settings:
        """Writing and rendering settings. Assigning new ones takes effect at the next call: rendering
        settings for every render from then on, writing settings (``kappa``, piece vectors, unit sizes)
        for notes written from then on (stored notes are write-once). The history is not reloaded."""
        return self.core.settings

    @settings.setter
    def settings(self, value: Settings) -> None:
        if not isinstance(value, Settings):
            raise InvalidInputError(f"settings must be a Settings, got {type(value).__name__}")
        resolved, self.overrides = self.profile.with_overrides(value)
        self.core.use_settings(resolved)

    @property
    def embedder(self) -> Embedder:
        return self.core.embedder

    @property
    def history(self) -> History:
        """The in-memory view of the history (what this process has seen; renders catch up first)."""
        return self.core.history

    @property
    def renderer(self) -> Renderer:
        return self.core.renderer

    def sync(self) -> int:
        """Catch up with notes other processes wrote; returns how many (renders and writes do it too)."""
        return self.core.sync()

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def aclose(self) -> None:
        """:meth:`close` for async code (a memory at a URL closes its async connections on their loop)."""
        self.close()

    async def __aenter__(self) -> Memory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __len__(self) -> int:
        self.core.sync()
        return len(self.history)

    # -- writing -----------------------------------------------------------------------------------
    def add_session(
        self,
        turns: Iterable[Mapping[str, Any] | Turn],
        *,
        session_id: str | None = None,
        date: str | datetime.date | None = None,
        request_id: str | None = None,
    ) -> list[str]:
        """Write one conversation session as notes; returns the new unit ids, in order.

        Turns are ``{"speaker", "text"}`` dicts with optional ``"id"`` (kept on every piece, e.g. a
        LoCoMo ``dia_id``) and ``"role"`` (sessions are cut before ``"user"`` turns). All units of
        the session land in one transaction, or none do. Without ``session_id`` the session is named
        ``s<n>``, the first such name no other session of the history holds when it is stored.
        ``request_id`` (the caller's, e.g. a UUID) makes a retry store nothing more: a write under an id
        the history already holds returns that write's unit ids (the HTTP client sends one per call).
        """
        with memory_span(UPDATE, self.history_id) as span:
            units = self._add_session(turns, session_id, date, request_id)
            span.set("flexamem.units", len(units))
        return units

    def _add_session(
        self, turns: Iterable[Mapping[str, Any] | Turn], session_id: Any, date: Any, request_id: Any
    ) -> list[str]:
        drafts, relabel = self._drafts(turns, session_id, date)
        rid = check_request_id(request_id)
        return [n.unit_id for n in self.core.write(drafts, relabel=relabel, request_id=rid)]

    def add_messages(
        self,
        messages: Iterable[Mapping[str, Any]],
        *,
        session_id: str | None = None,
        date: str | datetime.date | None = None,
        request_id: str | None = None,
    ) -> list[str]:
        """Write an OpenAI-format chat history (``{"role", "content"}``, assistant ``tool_calls``,
        ``tool`` replies) as one session; returns the new unit ids. Each message is a turn spoken by its
        ``name`` or role; tool calls are kept verbatim as ``[tool call <id>] name(arguments)`` lines and a
        tool reply keeps its ``tool_call_id``. Messages with neither content nor tool calls are skipped.
        ``request_id``: as for :meth:`add_session`."""
        if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Iterable):
            raise InvalidInputError("messages must be a list of chat messages ({'role': ..., 'content': ...})")
        turns = []
        for i, m in enumerate(messages):
            if not isinstance(m, Mapping):
                raise InvalidInputError(f"message {i} must be a dict, got {type(m).__name__}")
            if m.get("content") in (None, "") and not m.get("tool_calls"):
                continue
            turns.append(message_turn(m, f"message {i}"))
        if not turns:
            raise InvalidInputError("messages holds no message with content or tool calls")
        with memory_span(UPDATE, self.history_id) as span:
            units = self._add_session(turns, session_id, date, request_id)
            span.set("flexamem.units", len(units))
        return units

    def add_sessions(
        self,
        sessions: Iterable[Mapping[str, Any]],
        *,
        progress: Progress | None = None,
        request_id: str | None = None,
    ) -> list[list[str]]:
        """Write many sessions (``{"turns": [...], "session_id"?, "date"?}``) at once.

        Every session is validated before anything is written; then the records of all their units
        are written as one batch (in parallel by an LLM writer), and each session is stored in its own
        transaction, in order. ``progress(done, total)`` follows both stages: ``total`` is twice the
        units (each counts once when its record is written, once when it is stored). Returns each
        session's unit ids.
        """
        with memory_span(UPDATE, self.history_id) as span:
            out = self._add_sessions(sessions, progress, request_id)
            span.set("flexamem.units", sum(len(u) for u in out))
        return out

    def _add_sessions(
        self, sessions: Iterable[Mapping[str, Any]], progress: Progress | None, request_id: str | None
    ) -> list[list[str]]:
        if isinstance(sessions, str | bytes | Mapping) or not isinstance(sessions, Iterable):
            raise InvalidInputError("sessions must be a list of sessions")
        rid = check_request_id(request_id)
        batches: list[tuple[list[UnitDraft], Relabel | None, str | None]] = []
        stored: dict[int, list[str]] = {}  # sessions a retried request already stored
        seen = set(self.history.unit_ids)
        for i, session in enumerate(sessions):
            if not isinstance(session, Mapping) or "turns" not in session:
                raise InvalidInputError(f"session {i}: expected a mapping with 'turns'")
            drafts, relabel = self._drafts(session["turns"], session.get("session_id"), session.get("date"))
            sub = None if rid is None else f"{rid}#{i}"
            done = None if sub is None else self.core.stored_request(sub, request_body(drafts))
            if done is not None:
                stored[i] = done
                drafts = []
            elif relabel is None:
                for d in drafts:
                    if d.unit_id in seen:
                        raise DuplicateUnitError(f"session {i}: unit {d.unit_id!r} is already written")
                    seen.add(d.unit_id)
            batches.append((drafts, relabel, sub))
        total = sum(len(b) for b, _, _ in batches)
        records = self.writer.write_records(
            [d for b, _, _ in batches for d in b], (lambda done, _: progress(done, 2 * total)) if progress else None
        )
        out, start = [], 0
        for i, (drafts, relabel, sub) in enumerate(batches):
            if i in stored:
                out.append(stored[i])
                continue
            notes = self.core.write(drafts, records[start : start + len(drafts)], relabel=relabel, request_id=sub)
            out.append([n.unit_id for n in notes])
            start += len(drafts)
            if progress:
                progress(total + start, 2 * total)
        return out

    async def aadd_session(
        self,
        turns: Iterable[Mapping[str, Any] | Turn],
        *,
        session_id: str | None = None,
        date: str | datetime.date | None = None,
        request_id: str | None = None,
    ) -> list[str]:
        """The async twin of :meth:`add_session`: the same notes, with records written by
        ``await``-ed model calls (no thread held while the model thinks)."""
        with memory_span(UPDATE, self.history_id):
            return await self._aadd_session(turns, session_id, date, request_id)

    async def _aadd_session(
        self, turns: Iterable[Mapping[str, Any] | Turn], session_id: Any, date: Any, request_id: Any
    ) -> list[str]:
        drafts, relabel = self._drafts(turns, session_id, date)
        rid = check_request_id(request_id)
        done = None if rid is None else self.core.stored_request(rid, request_body(drafts))
        if done is not None:  # a retry: stored before, nothing to pay for
            return done
        if relabel is None:
            self.core.check_new(drafts)
        records = await self.core.awrite_records(drafts)
        notes = await asyncio.to_thread(self.core.write, drafts, records, relabel=relabel, request_id=rid)
        return [n.unit_id for n in notes]

    def _drafts(
        self, turns: Iterable[Mapping[str, Any] | Turn], session_id: Any, date: Any
    ) -> tuple[list[UnitDraft], Relabel | None]:
        """The session's units and, for a library-named session, how to re-name them at write time."""
        parsed = parse_turns(turns)
        with self.core.lock:
            self.core.sync()  # the history's recorded write settings cut its units
        if isinstance(date, datetime.date):  # a date or datetime: its ISO form
            date = date.isoformat()
        clean_date = clean_field(date, "date") if date is not None else None
        named = session_id is not None
        drafts = cut_session(
            parsed,
            self.counter,
            session_id=clean_field(session_id, "session_id") if named else "s",  # "s": renamed at write
            date=clean_date,
            max_unit_tokens=self.settings.max_unit_tokens,
            one_unit=self.settings.one_unit_per_session,
        )
        if named:
            return drafts, None

        def relabel(history: History) -> list[UnitDraft]:
            return relabel_drafts(drafts, free_session_id(history))

        return drafts, relabel

    def verify(self, head: Head | Mapping[str, Any] | Sequence[Head | Mapping[str, Any]] | None = None) -> list[str]:
        """Re-check every stored row a render or an agent context of this history can show, against the
        digests written with it: the history's notes (raw text, record, fields, pieces, vectors, links;
        chained over the notes before), its merged records, its request ids, and its agent sessions'
        steps and task; a digest missing from a row written after digests existed; and each history's
        stored head against its rows (signed, with ``head_key``). The problems found (each names the
        row), or ``[]``. Write-once is enforced by triggers; this detects a change made past them (a
        dropped trigger, a flipped byte), unless every later digest and the head were recomputed too:
        that, cutting rows off the end and rolling back to an older state are caught against a ``head``
        kept from :meth:`head` (or a list of them: this history's and its sessions'), which the history
        must still extend. A render or context that meets a damaged row refuses with
        :class:`StoreCorruptError`. What this proves, and against whom: docs/RELIABILITY.md."""
        kept = self._kept_heads(head)
        problems = self.store.verify(self.history_id, kept.pop(self.history_id, None))
        problems += kept_load_problems(self.store, self.history_id)
        for hid in self.store.sessions(self.history_id):
            problems += self.store.verify(hid, kept.pop(hid, None))
            problems += kept_load_problems(self.store, hid)
        return problems + [f"history {h!r} of the kept head is not this memory's or its sessions'" for h in kept]

    def head(self) -> Head:
        """This history's head now: how many notes, steps and request ids it holds and the digest each
        chain ends with, the digest of its state (signed with ``head_key``). Keep it outside the
        database and pass it to :meth:`verify` later: rows cut off the end, a chain rewritten or a
        rollback to an older state no longer extend it. An agent session's: ``agent.head()``."""
        with self.core.lock:
            head = self.store.head(self.history_id)
        if head is None:  # nothing written yet: the empty head of the history's name
            return Head(self.history_id, "", 0, "", 0, "", 0, "", state_digest([])).signed(self.store.head_key)
        return head

    def export(self, out: str | Path | IO[str]) -> int:
        """Write this history and its agent sessions to ``out`` (a path, or an open text file) as the JSON
        Lines :func:`import_history` reads back: every stored row with its digest, so the file can be
        checked on its own (docs/RELIABILITY.md, "Moving a memory"). Returns the lines written."""
        with self.core.lock:
            histories = transfer.family(self.store, self.history_id)
            if not histories:
                raise InvalidInputError(f"history {self.history_id!r} has nothing stored to export")
            return transfer.export(self.store, histories, out)

    def _kept_heads(self, head: object) -> dict[str, Head]:
        if head is None:
            return {}
        heads = [head] if isinstance(head, Head | Mapping) else head
        if isinstance(heads, str | bytes) or not isinstance(heads, Sequence):
            raise InvalidInputError("head must be a head (Memory.head()) or a list of them")
        out = {}
        for h in heads:
            one = Head.from_json(h)
            out[one.history] = one
        return out

    def sessions(self) -> list[str]:
        """The ids of this history's agent sessions (only its own: sessions are scoped by history)."""
        prefix = session_prefix(self.history_id)
        return [h[len(prefix) :] for h in self.store.sessions(self.history_id) if h.startswith(prefix)]

    def drop(self) -> bool:
        """Delete this whole history and its agent sessions from the store, in one transaction (a
        privacy request): the only deletion there is, and it deletes nothing else, whatever its name.
        Returns whether anything was stored. The memory is empty afterwards; so is every other
        ``Memory`` of this history, in any process, from its next call on (it finds the history's epoch
        gone and starts afresh), and agent sessions of it refuse to continue (:class:`HistoryDroppedError`)."""
        with memory_span(DELETE_STORE, self.history_id), self.core.lock:
            dropped = self.store.drop_history(self.history_id)
            self.core.reset()
        return dropped

    def erase(
        self,
        *,
        turn: str | None = None,
        session: str | None = None,
        reason: str = "",
        marker: bool = True,
    ) -> Erasure:
        """Erase one turn (by its id, or ``"<unit id or label>#<n>"``: the unit's n-th turn) or a whole
        session (by its id) from every stored copy: raw text, pieces, the record and fields written
        from it (written again by the rule writer from what is left), the unit's embedding and piece
        vectors, merged records that drew on it; in one transaction, then the store's clean-up (SQLite:
        zeroed and checkpointed: the words are in no file of it). ``verify()`` still passes and
        :meth:`erasures` lists it (kind, ids, when, ``reason``; never the words). ``marker``: renders
        show ``(erased)`` where the words were (a whole unit erased keeps its place on the timeline as
        ``(erased)``); without it nothing shows. Every ``Memory`` of this history, in any process, reads it
        again on its next call. Nothing named: :class:`NotFoundError`, nothing changes."""
        if (turn is None) == (session is None):
            raise InvalidInputError("erase takes one of turn= or session=")
        reason = clean_text(reason, "reason", allow_empty=True)
        with memory_span(DELETE, self.history_id):
            if session is not None:
                sid = clean_text(session, "session").strip()
                return self.core.erase("session", [sid], reason, lambda note, _b: note.session_id == sid, marker=marker)
            name = clean_text(turn, "turn").strip()
            return self.core.erase("turn", [name], reason, self._turn_named(name), marker=marker)

    def _turn_named(self, name: str) -> Callable[[Note, Any], bool]:
        """Which block a turn name names: a turn id given when it was written, else ``unit#n``."""
        with self.core.lock:
            self.core.sync()
            places = [
                f"{n.unit_id}#{k}"
                for n in self.core.history.notes
                for k, b in enumerate((b for b in n.blocks if b.kind == "turn"), 1)
                if b.source_id == name
            ]
            if len(places) > 1:  # ids are the writer's: two turns may share one (ids restarting each session)
                raise InvalidInputError(
                    f"turn id {name!r} names {len(places)} turns ({', '.join(places[:10])}): name the one to erase"
                    " by its place, unit#n; nothing was erased"
                )
            if places:
                return lambda _note, b: b.kind == "turn" and b.source_id == name
            unit, _, index = name.rpartition("#")
            if not unit or not index.isascii() or not index.isdigit() or int(index) < 1:
                raise NotFoundError(f"no turn {name!r} in history {self.history_id!r} (a turn id, or unit#n)")
            seq = self.core.position(unit)
            turns = [b for b in self.core.history.notes[seq].blocks if b.kind == "turn"]  # an erased one: its marker
            if int(index) > len(turns):
                raise NotFoundError(f"unit {unit!r} has {len(turns)} turns, not {index}")
            chosen = turns[int(index) - 1]
            if is_marker(chosen):  # a retried erasure must not take the next turn
                raise NotFoundError(f"turn {name!r} of history {self.history_id!r} was erased already")
            return lambda note, b: note.seq == seq and b is chosen

    def correct(
        self,
        turn: str,
        turns: Iterable[Mapping[str, Any] | Turn],
        *,
        reason: str = "corrected",
        session_id: str | None = None,
        date: str | datetime.date | None = None,
        marker: bool = False,
    ) -> tuple[Erasure, list[str]]:
        """Replace a wrong turn: erase it (:meth:`erase`; no marker by default, so the wrong fact is not
        hinted at) and write ``turns`` (the right fact) as a new session; returns the erasure and the new
        unit ids. The new turns are checked before anything is erased; the two writes are two
        transactions (an erasure that landed stays if the write then fails: write again)."""
        turns = list(turns)
        self._check_session(turns, session_id, date)  # refused input erases nothing
        erasure = self.erase(turn=turn, reason=reason, marker=marker)
        return erasure, self.add_session(turns, session_id=session_id, date=date)

    def _check_session(self, turns: Sequence[Mapping[str, Any] | Turn], session_id: Any, date: Any) -> None:
        """Refuse a session :meth:`add_session` would refuse, writing nothing."""
        self._drafts(turns, session_id, date)

    def write_settings(self) -> dict[str, Any]:
        """The settings this history is written with (``kappa``, unit sizes, links, record sizes, piece
        vectors: :func:`flexamem.config.write_setting_names`): recorded with its first write and used on every
        later open whatever settings it is opened with (a :class:`WriteSettingsWarning` when they
        differ); for a history written before they were recorded, what its notes show (else the
        defaults), recorded by its next write; for a history not written yet, the given ones."""
        with self.core.lock:
            self.core.sync()
            return write_settings(self.core.settings)

    def erasures(self) -> list[Erasure]:
        """The erasures of this history and of its agent sessions, oldest first and each chain in the
        order of its numbers (what each named, why, when, the units and steps it rewrote; a step's ids
        are ``"<session>:<step>"``)."""
        chains = [self.store.erasures(self.history_id)]
        chains += [self.store.erasures(sid) for sid in self.store.sessions(self.history_id)]
        # each chain keeps its own order (its numbers): two racing erasures may carry clocks read
        # before the one that waited took the next number
        return list(heapq.merge(*chains, key=lambda e: e.at))

    def drop_session(self, session_id: str) -> bool:
        """Delete one agent session of this history (its steps and notes). Returns whether it existed."""
        sid = clean_text(session_id, "session_id").strip()
        with memory_span(DELETE, self.history_id, **{"gen_ai.conversation.id": sid}):
            return self.store.drop_history(session_history(self.history_id, sid), parent=self.history_id)

    def llm_usage(self) -> dict[str, int]:
        """Model tokens spent on this history's memory (records, repairs, merges), and saved by the cache
        (``cached_tokens``: what the calls the cache answered would have cost)."""
        out = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cached_calls": 0, "cached_tokens": 0}
        for c in self.store.llm_calls(self.history_id):
            if c.cached:
                out["cached_calls"] += 1
                out["cached_tokens"] += c.prompt_tokens + c.completion_tokens
                continue
            out["calls"] += 1
            out["prompt_tokens"] += c.prompt_tokens
            out["completion_tokens"] += c.completion_tokens
        return out

    # -- reading -----------------------------------------------------------------------------------
    def notes(self, start: int = 0, stop: int | None = None) -> list[Note]:
        """Every note (or positions ``start..stop``), oldest first, with its current links (later notes
        add back-links)."""
        return self.core.notes(start, stop)

    def note(self, unit_id: str) -> Note:
        """The note of a unit, by its id (``note.unit_id``) or by the label renders show (``note.label``,
        ``u<position>``)."""
        with self.core.lock:
            self.core.sync()
            return self.core.note(self.core.position(unit_id))

    # -- rendering ---------------------------------------------------------------------------------
    def render(
        self,
        query: str,
        budget: int,
        *,
        mode: str | None = None,
        prompt: str = "",
        options: RenderOptions | None = None,
        query_vector: np.ndarray | None = None,
        order: Sequence[str] | None = None,
    ) -> Rendering:
        """A fresh memory for one question, within the budget.

        The fixed prompt is ``prompt`` plus the query, so ``count(prompt) + count(query) +
        r.tokens <= floor(0.95 * budget)``. ``mode`` is ``"auto"`` (the default: a small timeline plus
        pieces ranked by stemmed BM25 fused with piece vectors, whole turns and their neighbours; see
        docs/RENDERING.md), or one of the paper's modes, ``"pieces"`` (piece recovery) and ``"units"``
        (unit recovery), kept as the paper defines them; without it, the profile's. No LLM is called
        except to write a merged record the first time it is needed (then stored and reused).
        ``query_vector`` skips embedding the query when the caller already has its MiniLM vector.
        ``order`` (unit ids or labels, most relevant first) replaces unit recovery's candidate order: another
        memory's search results rendered with fit-or-degrade (``mode="units"``; a plug-in).
        """
        mode = self.profile.mode if mode is None else mode
        options, q, allowance = self._render_args(query, budget, mode, prompt, options, query_vector)

        def attempt() -> Rendering:  # under the history's lock, just caught up
            ordered = q if order is None else dataclasses.replace(q, order=self.core.positions(order))
            return self.renderer.render(ordered, allowance, mode, options)  # type: ignore[arg-type]

        with memory_span(
            SEARCH, self.history_id, query=q.text, **{"flexamem.budget": budget, "flexamem.mode": mode}
        ) as span:
            r = self.core.render(attempt)
            span.set("flexamem.tokens", r.tokens)
        return dataclasses.replace(r, profile=self.profile.name, overrides=dict(self.overrides))

    def _render_args(
        self, query: object, budget: int, mode: str, prompt: object, options: RenderOptions | None, vector: object
    ) -> tuple[RenderOptions, Query, int]:
        """A render's arguments checked in the order every door checks them (a memory at a URL too, before
        it sends them): mode, query, prompt, then the budget and the allowance the fixed prompt leaves."""
        options = check_mode(mode, options)
        q = self._query(query, vector)
        text = clean_text(prompt, "prompt", allow_empty=True)
        return options, q, budget_allowance(budget, self.counter.count(text) + self.counter.count(q.text))

    def _query(self, query: object, query_vector: object) -> Query:
        """A checked query (text and optional MiniLM vector) as renders and searches take it."""
        if not isinstance(query, str):
            raise InvalidInputError(f"query must be a string (the question to render for), got {type(query).__name__}")
        if not query.strip():
            raise InvalidInputError("the query is empty")
        text = clean_text(query, "query")
        vector: np.ndarray | None = None
        if query_vector is not None:
            try:
                vector = np.asarray(query_vector, dtype=np.float32)
            except (TypeError, ValueError) as exc:
                raise InvalidInputError(f"query_vector must be {self.embedder.dim} numbers: {exc}") from None
            if vector.shape != (self.embedder.dim,) or not np.all(np.isfinite(vector)):
                raise InvalidInputError(f"query_vector must be {self.embedder.dim} finite numbers")
        given, terms = vector, query_terms(text)  # ``given``: the narrowed type the lambda needs
        return Query(
            text=text,
            terms=terms,
            excerpt_terms=terms,
            vector=(lambda: given) if given is not None else (lambda: self.core.query_vector(text)),
        )

    def search(
        self, query: str, *, mode: str = "auto", limit: int = 10, query_vector: np.ndarray | None = None
    ) -> list[Hit]:
        """The turns a render in ``mode`` would recover first for ``query``, best first (at most
        ``limit``), with no budget: what ``auto`` (its stemmed BM25 fused with piece vectors, whole
        turns, neighbours) or piece recovery (``mode="pieces"``, BM25 over pieces) ranks highest. For
        inspecting a memory and for retrieval measures (recall@k); no LLM, nothing written."""
        q = self._search_query(query, mode, limit, query_vector)
        with memory_span(SEARCH, self.history_id, query=q.text, **{"flexamem.mode": mode}) as span:
            hits = self._search(q, mode, limit)
            span.set("gen_ai.memory.search.result.count", len(hits))
        return hits

    def _search_query(self, query: object, mode: object, limit: object, query_vector: object) -> Query:
        """A search's arguments checked (by a memory at a URL too, before it sends them): its query."""
        if mode not in ("auto", "pieces"):
            raise InvalidInputError(f"search ranks turns in mode 'auto' or 'pieces', not {mode!r}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise InvalidInputError(f"limit must be a positive whole number, got {limit!r}")
        return self._query(query, query_vector)

    def _search(self, q: Query, mode: str, limit: int) -> list[Hit]:
        with self.core.lock:
            self.core.sync()
            history, n = self.history, len(self.history)
            room = int(history.raw_upto[n]) + 1 if n else 0
            ranked, _ = self.renderer.ranked(q, room, n, mode)  # type: ignore[arg-type]
            hits: list[Hit] = []
            seen: set[tuple[int, int]] = set()
            for doc in ranked:
                note, piece = history.piece(doc)
                key = (note.seq, piece.block)
                if key in seen:
                    continue
                seen.add(key)
                block = note.blocks[piece.block]
                hits.append(Hit(note.seq, note.unit_id, piece.block, block.source_id, block.text))
                if len(hits) == limit:
                    break
        return hits

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

        A session belongs to this memory's history (its tenant): it is stored as history
        ``<history>/agent:<session_id>`` (``agent:<session_id>`` under the default history), so another
        history's memory can neither see nor resume it.
        """
        from flexamem.agent import AgentSession

        def factory(history_id: str) -> HistoryCore:
            return HistoryCore(
                self.store, history_id, self.core.requested, self.writer, self.counter, self._given_embedder
            )

        session = AgentSession.open(
            factory, self.history_id, task=task, budget=budget, system=system, session_id=session_id
        )
        session.default_mode = self.profile.mode
        return session


def import_history(
    source: str | Path | IO[bytes] | IO[str], db: str | Path | Store, *, history: str | None = None
) -> list[str]:
    """Import an export (:meth:`Memory.export`, ``flexamem export``) into the store ``db`` names (a SQLite
    path, a ``postgresql://`` URL, or a store): every line is checked against its digests and the heads
    before anything is written, then written in one transaction. ``history`` stores the file's history
    (and its agent sessions) under that name. A tampered file raises :class:`InvalidInputError` naming
    its line, a history the store already holds is refused; either way nothing is written. Returns the
    histories written (open one with ``Memory(db, history=...)``)."""
    if isinstance(db, Store):
        return transfer.import_history(db, source, history)
    check_file_path(db)
    store = open_store(db)
    try:
        return transfer.import_history(store, source, history)
    finally:
        store.close()
