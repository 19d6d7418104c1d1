"""The ``Store`` seam: what any backend (SQLite by default, others later) must provide.

A store holds *histories* (one conversation record, or one agent session); each history holds notes
in time order (``seq`` 0, 1, 2, ...) with their pieces and piece vectors, an append-only set of links,
cached merged records and LLM-call accounting. Raw text and records are write-once: no method changes
or deletes them, and backends must refuse such writes even when asked directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from flexamem.notes import LLMCall, Note

__all__ = ["LLMCall", "MergedRecord", "Store"]


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


@runtime_checkable
class Store(Protocol):
    """Persistence for notes. Every write method is atomic: all of it lands, or none of it."""

    def ensure_history(self, history: str, kind: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
        """Create the history if new; return its stored meta (which the first call fixed)."""
        ...

    def histories(self) -> list[tuple[str, str]]:
        """(id, kind) of every history, oldest first."""
        ...

    def append_notes(
        self,
        history: str,
        notes: Sequence[Note],
        links: Sequence[tuple[int, int]],
        calls: Sequence[LLMCall] = (),
    ) -> None:
        """Add notes, their links and the model calls that wrote them in one transaction; a duplicate
        unit id raises and adds nothing."""
        ...

    def load_notes(self, history: str) -> list[Note]:
        """All notes of a history in time order, with their links."""
        ...

    def put_merged(self, history: str, merged: MergedRecord, calls: Sequence[LLMCall] = ()) -> None:
        """Cache a merged record (and account its model calls); writing the same span twice keeps the first."""
        ...

    def load_merged(self, history: str) -> list[MergedRecord]: ...

    def record_llm_call(self, history: str, call: LLMCall) -> None: ...

    def llm_calls(self, history: str) -> list[LLMCall]: ...

    def set_state(self, history: str, key: str, value: Any) -> None:
        """Mutable session state (e.g. an agent's open window); never note content."""
        ...

    def get_state(self, history: str, key: str) -> Any: ...

    def close(self) -> None: ...
