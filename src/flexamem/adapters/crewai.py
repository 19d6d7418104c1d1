"""CrewAI (1.x) with FlexA-Mem: a crew ``Memory`` whose records are FlexA-Mem turns.

    memory = FlexaMemCrewMemory(fm.Memory("crew.db", history="support"), budget=2000)
    crew = Crew(agents=[...], tasks=[...], memory=memory)

CrewAI 1.x has one memory class (``crewai.memory.Memory``, which replaced the short-term, long-term,
entity and ``ExternalMemory`` classes of 0.x) and hands it to every agent: before a task an agent calls
``recall(task description)`` and puts the matches in its prompt; after it, ``extract_memories`` (an LLM
call) and ``remember_many``. Its storage seam (``StorageBackend``) searches by a query *embedding* only,
so FlexA-Mem, which ranks by the query's words and its own vectors, takes the memory's place instead:

* ``recall(query)``: with ``budget``, one match holding the memory rendered for the query under that
  budget (old turns verbatim when the query needs them, every unit in the timeline); without it, the
  ``limit`` turns ``Memory.search`` ranks first. ``scope``, ``categories`` and ``depth`` are CrewAI's
  own filters and LLM-driven search: not used.
* ``extract_memories(content)``: the content itself, whole and verbatim; no LLM call.
* ``remember`` / ``remember_many``: each content written once as a one-turn session (speaker: the
  agent's role, else the source, else ``crew``), synchronously: acknowledged before the call returns.
* ``reset()`` drops the whole history; ``forget`` and the other scope and record verbs raise
  :class:`~flexamem.errors.WriteOnceError` or :class:`~flexamem.errors.InvalidInputError`.

No LLM and no embedder of CrewAI's is ever called. Needs ``crewai`` (the ``crewai`` extra), whose pins
(``mcp<2``, ``pydantic<2.13``, ``openai<3``) do not install beside the ``mcp`` and ``dev`` extras: give
it its own environment (docs/doors/crewai.md).
"""

from __future__ import annotations

from typing import Any

from crewai.memory.types import MemoryMatch, MemoryRecord
from crewai.memory.unified_memory import Memory as CrewMemory
from pydantic import ConfigDict, Field

from flexamem.errors import InvalidInputError, WriteOnceError
from flexamem.memory import Memory


class FlexaMemStorage:
    """What CrewAI's memory asks of its storage, answered from a FlexA-Mem memory (records are turns:
    a read, a count, a reset, a close); a vector search or a rewrite is refused."""

    def __init__(self, mem: Memory) -> None:
        self.mem = mem

    def _record(self, unit_id: str, text: str, seq: int) -> MemoryRecord:
        return MemoryRecord(id=unit_id, content=text, metadata={"label": f"u{seq + 1}"})

    def list_records(self, scope_prefix: str | None = None, limit: int = 200, offset: int = 0) -> list[MemoryRecord]:
        """The newest ``limit`` units after ``offset``, newest first (their raw text)."""
        count = len(self.mem)
        stop = max(count - offset, 0)
        notes = self.mem.notes(max(stop - limit, 0), stop)
        return [self._record(n.unit_id, n.raw, n.seq) for n in reversed(notes)]

    def get_record(self, record_id: str) -> MemoryRecord | None:
        try:
            note = self.mem.note(record_id)
        except InvalidInputError:  # NotFoundError: no such unit
            return None
        return self._record(note.unit_id, note.raw, note.seq)

    def count(self, scope_prefix: str | None = None) -> int:
        return len(self.mem)

    def reset(self, scope_prefix: str | None = None) -> None:
        self.mem.drop()

    def close(self) -> None:
        self.mem.close()

    def get_scope_info(self, *args: Any, **kwargs: Any) -> Any:
        raise InvalidInputError("a FlexA-Mem memory has no scopes: one history per memory")

    def list_scopes(self, *args: Any, **kwargs: Any) -> list[str]:
        raise InvalidInputError("a FlexA-Mem memory has no scopes: one history per memory")

    def list_categories(self, *args: Any, **kwargs: Any) -> dict[str, int]:
        raise InvalidInputError("a FlexA-Mem memory has no categories")

    def search(self, *args: Any, **kwargs: Any) -> list[tuple[MemoryRecord, float]]:
        raise InvalidInputError("a FlexA-Mem memory is searched by its text: call recall(query)")

    def save(self, records: list[MemoryRecord]) -> None:
        raise InvalidInputError("write to a FlexA-Mem memory with remember() or remember_many()")

    def update(self, record: MemoryRecord) -> None:
        raise WriteOnceError("FlexA-Mem memories are write-once: a record cannot be updated")

    def delete(self, *args: Any, **kwargs: Any) -> int:
        raise WriteOnceError("FlexA-Mem memories are write-once: reset() drops the whole history")


class FlexaMemCrewMemory(CrewMemory):  # type: ignore[misc]  # crewai is untyped here (its own environment)
    """A CrewAI memory backed by a FlexA-Mem memory, local or remote (see the module docstring).

    Args:
        mem: the memory (one history per crew or user: ``fm.Memory(db, history=...)``).
        budget: with it, ``recall`` returns the memory rendered under this budget as one match.
        limit: without ``budget``, at most this many turns (and never more than CrewAI's ``limit``).
        mode: the render mode (``None``: the memory's profile's).
        Any other CrewAI ``Memory`` field (``read_only``, ``root_scope``...) as keyword arguments.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    flexamem: Any = Field(default=None, description="The FlexA-Mem memory, local or remote.")
    budget: int | None = Field(default=None, description="recall's render budget; None: search hits.")
    limit: int = Field(default=5, description="Turns recall returns without a budget.")
    mode: str | None = Field(default=None, description="The render mode; None: the memory's profile's.")

    def __init__(
        self, mem: Memory, *, budget: int | None = None, limit: int = 5, mode: str | None = None, **fields: Any
    ) -> None:
        super().__init__(flexamem=mem, storage=FlexaMemStorage(mem), budget=budget, limit=limit, mode=mode, **fields)

    def recall(self, query: str, *args: Any, limit: int = 10, **kwargs: Any) -> list[MemoryMatch]:
        mem: Memory = self.flexamem
        if self.budget is not None:
            r = mem.render(query, self.budget, mode=self.mode)
            if not r.text:
                return []
            meta = {"tokens": r.tokens, "allowance": r.allowance}
            return [MemoryMatch(record=MemoryRecord(content=r.text, metadata=meta), score=1.0)]
        hits = mem.search(query, mode="pieces" if self.mode == "pieces" else "auto", limit=min(limit, self.limit))
        return [
            MemoryMatch(
                record=MemoryRecord(id=h.unit_id, content=h.text, metadata={"label": h.label, "turn_id": h.turn_id}),
                score=1.0 - i / len(hits),  # by rank: a search gives an order, not a calibrated score
            )
            for i, h in enumerate(hits)
        ]

    def extract_memories(self, content: str) -> list[str]:
        return [content] if content.strip() else []

    def remember_many(
        self,
        contents: list[str],
        *args: Any,
        source: str | None = None,
        agent_role: str | None = None,
        **kwargs: Any,
    ) -> list[MemoryRecord]:
        if self.read_only:
            return []
        mem: Memory = self.flexamem
        speaker = agent_role or source or "crew"
        records = []
        for content in contents:
            if content.strip():
                (unit_id, *_) = mem.add_session([{"speaker": speaker, "text": content}])
                records.append(MemoryRecord(id=unit_id, content=content, source=source))
        return records

    def remember(self, content: str, *args: Any, **kwargs: Any) -> MemoryRecord | None:
        records = self.remember_many([content], *args, **kwargs)
        return records[0] if records else None

    def reset(self, scope: str | None = None) -> None:
        if scope is not None:
            raise WriteOnceError("a FlexA-Mem memory has no scopes to reset: reset() drops the whole history")
        self.flexamem.drop()

    def forget(self, *args: Any, **kwargs: Any) -> int:
        raise WriteOnceError("FlexA-Mem memories are write-once: reset() drops the whole history")
