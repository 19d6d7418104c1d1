"""AutoGen (``autogen-core`` 0.7) with FlexA-Mem: an ``autogen_core.memory.Memory`` backed by a memory.

    memory = FlexaMemMemory(fm.Memory("autogen.db", history="user-7"), budget=2000)
    await memory.add(MemoryContent(content="The user's booking reference is CR-88412.", mime_type="text/plain"))
    agent = AssistantAgent("clerk", model_client=client, memory=[memory])

* ``add`` writes the content once, as a session of one turn (text, Markdown, or JSON as its text;
  ``metadata`` may name its ``speaker`` and ``date``); images and bytes are refused.
* ``query`` returns the turns ``Memory.search`` ranks first, verbatim, each with its unit and turn id.
* ``update_context`` (what ``AssistantAgent`` calls before each model call) renders the memory for the
  context's last user message under ``budget`` and adds it as one system message: old turns come back
  verbatim when the question needs them, and the memory never takes more than ``floor(0.95 * budget)``
  tokens with that question (the agent's own messages come on top).
* ``clear`` drops the whole history (a write-once memory deletes nothing less); ``close`` closes it.

Every call runs the memory in a worker thread (a local memory's work is CPU and SQLite, a remote one's
HTTP), so the agent's event loop is never blocked.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from autogen_core import CancellationToken
from autogen_core.memory import Memory as AutogenMemory
from autogen_core.memory import MemoryContent, MemoryMimeType, MemoryQueryResult, UpdateContextResult
from autogen_core.model_context import ChatCompletionContext
from autogen_core.models import SystemMessage, UserMessage

from flexamem.errors import InvalidInputError
from flexamem.memory import Memory

MEMORY_HEADER = "Memory (records of the past; some turns shown verbatim):\n"
TEXT_TYPES = (MemoryMimeType.TEXT.value, MemoryMimeType.MARKDOWN.value, MemoryMimeType.JSON.value)


def _mime(content: MemoryContent) -> str:
    return content.mime_type.value if isinstance(content.mime_type, MemoryMimeType) else str(content.mime_type)


def content_text(content: MemoryContent) -> str:
    """The text a memory content is stored as: its string, or a dict as JSON; other kinds are refused."""
    if _mime(content) not in TEXT_TYPES:
        raise InvalidInputError(f"FlexA-Mem keeps text: memory content of type {_mime(content)!r} cannot be stored")
    if isinstance(content.content, str):
        return content.content
    if isinstance(content.content, dict):
        return json.dumps(content.content, ensure_ascii=False)
    raise InvalidInputError(f"memory content must be text or a dict, got {type(content.content).__name__}")


def _query_text(query: str | MemoryContent) -> str:
    return query if isinstance(query, str) else content_text(query)


class FlexaMemMemory(AutogenMemory):
    """An AutoGen memory backed by a FlexA-Mem memory, local or remote (see the module docstring).

    Args:
        mem: the memory (one history per user or agent: ``fm.Memory(db, history=...)``).
        budget: the budget of the memory ``update_context`` adds (with the question it renders for).
        limit: how many turns ``query`` returns.
        mode: the render mode (``None``: the memory's profile's).
        name: the memory's name (AutoGen's ``Memory`` has none of its own; shown in events and logs).
    """

    component_type = "memory"

    def __init__(
        self, mem: Memory, *, budget: int, limit: int = 5, mode: str | None = None, name: str = "flexamem"
    ) -> None:
        self.mem, self.budget, self.limit, self.mode, self.name = mem, budget, limit, mode, name

    async def update_context(self, model_context: ChatCompletionContext) -> UpdateContextResult:
        messages = await model_context.get_messages()
        questions = [m.content for m in messages if isinstance(m, UserMessage) and isinstance(m.content, str)]
        if not questions or not questions[-1].strip():
            return UpdateContextResult(memories=MemoryQueryResult(results=[]))
        rendering = await asyncio.to_thread(
            self.mem.render, questions[-1], self.budget, mode=self.mode, prompt=MEMORY_HEADER
        )
        if not rendering.text:
            return UpdateContextResult(memories=MemoryQueryResult(results=[]))
        await model_context.add_message(SystemMessage(content=MEMORY_HEADER + rendering.text))
        meta = {"tokens": rendering.tokens, "allowance": rendering.allowance, "mode": rendering.mode}
        shown = MemoryContent(content=rendering.text, mime_type=MemoryMimeType.TEXT, metadata=meta)
        return UpdateContextResult(memories=MemoryQueryResult(results=[shown]))

    async def query(
        self, query: str | MemoryContent = "", cancellation_token: CancellationToken | None = None, **kwargs: Any
    ) -> MemoryQueryResult:
        text = _query_text(query)
        if not text.strip():  # AutoGen's default query: nothing to rank by
            return MemoryQueryResult(results=[])
        mode = "pieces" if self.mode == "pieces" else "auto"  # a search ranks as auto or piece recovery does
        hits = await asyncio.to_thread(self.mem.search, text, mode=mode, limit=self.limit)
        return MemoryQueryResult(
            results=[
                MemoryContent(
                    content=h.text,
                    mime_type=MemoryMimeType.TEXT,
                    metadata={"unit_id": h.unit_id, "label": h.label, "block": h.block, "turn_id": h.turn_id},
                )
                for h in hits
            ]
        )

    async def add(self, content: MemoryContent, cancellation_token: CancellationToken | None = None) -> None:
        meta = content.metadata or {}
        turn = {"speaker": str(meta.get("speaker", "memory")), "text": content_text(content)}
        await asyncio.to_thread(self.mem.add_session, [turn], date=meta.get("date"))

    async def clear(self) -> None:
        await asyncio.to_thread(self.mem.drop)

    async def close(self) -> None:
        await asyncio.to_thread(self.mem.close)
