"""The ``Store`` seam: what any backend (SQLite by default, others later) must provide.

A store holds *histories* (one conversation record, or one agent session); each history holds notes
in time order (``seq`` 0, 1, 2, ...) with their pieces and piece vectors, an append-only set of links,
cached merged records and LLM-call accounting. Raw text and records are write-once: no method changes
or deletes them, and backends must refuse such writes even when asked directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from flexamem.digests import Head
from flexamem.notes import LLMCall, Note

__all__ = ["Erasure", "LLMCall", "MergedRecord", "StepRow", "Store"]


@dataclass(frozen=True)
class StepRow:
    """One stored agent step: its number (0-based), the caller's id for idempotent retries, its JSON."""

    n: int
    step_id: str | None
    data: str


@dataclass(frozen=True)
class Erasure:
    """One erasure as the chain keeps it (``Memory.erase``): what it named (``kind``: ``"turn"``,
    ``"session"`` or ``"step"``; ``ids``), why, when (Unix time), and the notes (by position, 0-based) and
    agent steps (by number, as contexts show them) whose words it removed. It keeps no word of what it
    erased."""

    n: int
    kind: str
    ids: tuple[str, ...]
    reason: str
    at: float
    notes: tuple[int, ...]
    steps: tuple[int, ...]
    digest: str

    def as_json(self) -> dict[str, Any]:
        units = [f"u{s + 1}" for s in self.notes]
        return {"n": self.n, "kind": self.kind, "ids": list(self.ids), "reason": self.reason, "at": self.at,
                "units": units, "steps": list(self.steps), "digest": self.digest}  # fmt: skip


@dataclass(frozen=True)
class MergedRecord:
    """A merged record covering notes ``first..last`` (a merge of records or of merged records)."""

    first: int
    last: int
    level: int  # 1: merges records; 2+: merges merged records
    text: str
    tokens: int
    writer: str
    flagged: bool = False  # the preferred writer failed; a fallback wrote it


@dataclass(frozen=True)
class KeptLoad:
    """A history's kept load (:mod:`flexamem.recover.load_cache`) as the store keeps it: what it covers
    (the history's epoch and erasures; its first ``notes`` notes, the last with digest ``digest``) and
    its bytes."""

    epoch: str
    erasures: int
    notes: int
    digest: str
    version: int
    data: bytes


@runtime_checkable
class Store(Protocol):
    """Persistence for notes. Every write method is atomic: all of it lands, or none of it."""

    read_only: bool  # writes raise ReadOnlyStoreError (renders still work: merges stay in memory)

    def ensure_history(
        self, history: str, kind: str, meta: dict[str, Any] | None = None, *, parent: str | None = None
    ) -> dict[str, Any]:
        """Create the history if new; return its stored meta (which the first call fixed). ``parent``:
        the history an agent session belongs to (its drop deletes the session too)."""
        ...

    def sessions(self, parent: str) -> list[str]:
        """The ids of the agent sessions stored under history ``parent``, oldest first."""
        ...

    head_key: bytes | None  # signs the heads this store writes (None: unsigned)

    def verify(self, history: str, kept: Head | None = None) -> list[str]:
        """Every problem of the history's stored rows that a render or a context can show (digests,
        numbering, unreadable rows, a digest missing after its legacy rows, the stored head against the
        rows), and, with ``kept``, whether the history still extends that head; ``[]`` when none; never
        raises on a store it can read."""
        ...

    def head(self, history: str) -> Head | None:
        """The history's head as its rows are now (signed with ``head_key``), or None: no such history."""
        ...

    def legacy(self, history: str) -> tuple[int, ...] | None:
        """How many notes, steps, merged records, history rows and requests the history held before its
        rows carried digests (None: begun with digests)."""
        ...

    def history_meta(self, history: str) -> tuple[str, dict[str, Any]] | None:
        """``(kind, meta)`` of one history, or None when the store has none (never creates one)."""
        ...

    def histories(self) -> list[tuple[str, str]]:
        """(id, kind) of every history, oldest first."""
        ...

    def history_kind(self, history: str) -> str | None:
        """The kind of one history, or None when the store has no such history (one indexed read)."""
        ...

    def erase(
        self,
        history: str,
        kind: str,
        ids: Sequence[str],
        reason: str,
        notes: Sequence[Note],
        steps: Sequence[StepRow],
        *,
        epoch: str | None = None,
    ) -> Erasure:
        """In one transaction: rewrite ``notes`` (same seq, unit id and digest; new words, pieces, piece
        vectors and salt) and ``steps`` (same number and digest; new data), delete the merged records that
        drew on a rewritten note, append the erasure to the history's erasure chain and write its head.
        Then the store's own clean-up, so the old words are in no file of it (SQLite: secure delete and a
        WAL checkpoint; PostgreSQL: VACUUM of the touched tables). ``epoch``: as for :meth:`append_notes`."""
        ...

    def erasures(self, history: str) -> list[Erasure]:
        """The history's erasures, oldest first."""
        ...

    def erased(self, history: str) -> tuple[dict[int, tuple[str, str]], dict[int, tuple[str, str]]]:
        """The notes (by position) and steps (by number) the history's erasures rewrote: for each, the
        digest its chain keeps and the digest of what the last erasure left in it."""
        ...

    def scrub(self) -> None:
        """Make the bytes of erased and deleted rows leave the store's files as far as the backend can
        (SQLite: done by each erasure; PostgreSQL: VACUUM FULL of the rewritten tables)."""
        ...

    def history_state(self, history: str) -> tuple[str | None, int, int]:
        """``(epoch, note count, erasure count)`` of a history, ``(None, 0, 0)`` when the store has none:
        one indexed read, made before every render. The epoch is a random id given when the history row
        is created (``""`` for rows older than epochs), so a view that read another epoch knows the
        history was dropped; one that read fewer erasures reads the history again."""
        ...

    def drop_history(self, history: str, *, parent: str | None = None) -> bool:
        """Delete a whole history, everything under it and its agent sessions (no other history, whatever
        its name), in one transaction (the only deletion); whether any existed. With ``parent``: only
        when ``history`` is an agent session of that history."""
        ...

    def append_notes(
        self,
        history: str,
        notes: Sequence[Note],
        links: Sequence[tuple[int, int]],
        calls: Sequence[LLMCall] = (),
        *,
        steps: Sequence[StepRow] = (),
        state: Mapping[str, Any] | None = None,
        epoch: str | None = None,
        create: bool = False,
        meta: Mapping[str, Any] | None = None,
        request_id: str | None = None,
        body: str | None = None,
    ) -> None:
        """Add notes, their links, the model calls that wrote them, agent steps and session state in
        one transaction (``meta``: the history row's, when these notes create it). ``request_id``: the
        caller's id of this write, kept with it (with the unit ids) so a retried write is stored once
        (:meth:`written_by`); an id another write kept first raises :class:`ConcurrentWriteError`. A duplicate unit id
        raises :class:`DuplicateUnitError`; a sequence number or step number another writer took first
        raises :class:`ConcurrentWriteError`; either adds nothing. ``epoch``: the history must still have
        the epoch the writer read (else :class:`HistoryDroppedError`), or, with ``create``, the writer saw
        no history and it is created with this epoch (one another writer created first raises
        :class:`ConcurrentWriteError`)."""
        ...

    def written_by(self, history: str, request_id: str) -> tuple[list[str], str | None, str | None] | None:
        """The unit ids a write with this ``request_id`` stored in the history, the digest of its body
        (None when stored before bodies were kept) and that digest's salt (None before schema v10,
        :data:`~flexamem.digests.ERASED_SALT` once an erasure rewrote one of its notes), or None when none did."""
        ...

    def note_count(self, history: str) -> int:
        """How many notes the history holds (its next ``seq``): cheap, read before every render."""
        ...

    def load_notes(self, history: str, start: int = 0) -> list[Note]:
        """Notes ``start..`` of a history in time order, with their outgoing links."""
        ...

    def load_links(self, history: str, start: int = 0) -> list[tuple[int, int]]:
        """Link edges touching a note ``>= start`` (a new note adds back-links to older ones)."""
        ...

    def load_steps(self, history: str) -> list[StepRow]: ...

    def put_merged(
        self,
        history: str,
        merged: MergedRecord,
        calls: Sequence[LLMCall] = (),
        *,
        epoch: str | None = None,
        erasures: int | None = None,
    ) -> MergedRecord:
        """Cache a merged record (and account its model calls); when another writer stored the same
        span first, that one is kept and returned, so every process shows the same text. With
        ``epoch``, only while the history has that epoch (else :class:`HistoryDroppedError`); with
        ``erasures``, only while it holds that many erasures (else :class:`ConcurrentWriteError`: a
        record merged before an erasure may hold the words it erased)."""
        ...

    def put_merged_many(
        self,
        history: str,
        merged: Sequence[MergedRecord],
        calls: Sequence[LLMCall] = (),
        *,
        epoch: str | None = None,
        erasures: int | None = None,
    ) -> list[MergedRecord]:
        """:meth:`put_merged` for several spans in one transaction, in order; returns what is stored for
        each. When a span another writer stored first differs from the one given, the records after it
        are not written and the list ends with theirs (the caller merges again from what is stored)."""
        ...

    def get_merged(self, history: str, first: int, last: int, level: int) -> MergedRecord | None: ...

    def load_merged(self, history: str) -> list[MergedRecord]: ...

    def get_kept_load(self, history: str) -> KeptLoad | None:
        """The history's kept load, if one was stored (:mod:`flexamem.recover.load_cache`)."""
        ...

    def put_kept_load(self, history: str, kept: KeptLoad) -> bool:
        """Keep ``kept`` in place of the history's kept load while the history still has its epoch, its
        erasures and its notes; returns whether it was kept."""
        ...

    def record_llm_call(self, history: str, call: LLMCall) -> None: ...

    def llm_calls(self, history: str, start: int | None = None) -> list[LLMCall]:
        """The model calls that wrote the history, in order; with ``start``, only those of notes
        ``>= start`` (merges, which belong to no note, are left out then)."""
        ...

    def set_state(self, history: str, key: str, value: Any, *, epoch: str | None = None) -> None:
        """Mutable session state (e.g. an agent's open window); never note content."""
        ...

    def get_state(self, history: str, key: str) -> Any: ...

    def close(self) -> None: ...
