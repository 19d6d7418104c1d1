"""LlamaIndex (``llama-index-core`` 0.14) with FlexA-Mem: a memory block for ``llama_index.core.memory.Memory``.

    memory = Memory.from_defaults(
        session_id="user-7", token_limit=4000,
        memory_blocks=[FlexaMemBlock(mem=fm.Memory("li.db", history="user-7"), budget=1500)],
    )
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)     # or an agent's memory=

LlamaIndex's ``Memory`` keeps the recent messages verbatim (its short-term queue, up to
``token_limit * chat_history_token_ratio`` tokens) and hands the messages it flushes out of the queue to
its memory blocks: this block writes each flushed batch once, as one session of the FlexA-Mem memory.
Before each model call it renders the memory for the latest user message under ``budget`` (the
question and the rendering within ``floor(0.95 * budget)`` tokens), and ``Memory`` puts it in the
system message: old turns come back verbatim when the question needs them. The block is never
truncated by ``Memory`` (priority 0): its budget is its size.
"""

from __future__ import annotations

import asyncio
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock
from llama_index.core.memory.memory import BaseMemoryBlock
from pydantic import Field

from flexamem.memory import Memory

ROLES = {MessageRole.SYSTEM: "system", MessageRole.USER: "user", MessageRole.ASSISTANT: "assistant"}


def to_chat(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """LlamaIndex chat messages as OpenAI chat messages FlexA-Mem writes (text only: images, audio and
    other blocks are shown as ``[kind]``; tool messages keep their call id; empty messages are left out)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        text = "\n".join(b.text if isinstance(b, TextBlock) else f"[{b.block_type}]" for b in m.blocks)
        if not text.strip():
            continue
        role = ROLES.get(m.role, "tool" if m.role in (MessageRole.TOOL, MessageRole.FUNCTION) else "user")
        message: dict[str, Any] = {"role": role, "content": text}
        if role == "tool" and m.additional_kwargs.get("tool_call_id") is not None:
            message["tool_call_id"] = str(m.additional_kwargs["tool_call_id"])
        out.append(message)
    return out


class FlexaMemBlock(BaseMemoryBlock[str]):
    """A memory block whose long-term memory is a FlexA-Mem memory, local or remote (see the module
    docstring). ``mem`` is the memory (one history per user or session), ``budget`` the budget of its
    renders, ``mode`` the render mode (``None``: the memory's profile's)."""

    name: str = Field(default="flexamem", description="The name of the memory block.")
    description: str | None = Field(
        default="What was said before the recent messages, rendered for the latest question (FlexA-Mem).",
        description="A description of the memory block.",
    )
    priority: int = Field(default=0, description="0: never truncated (the budget bounds it).")
    mem: Any = Field(description="A flexamem Memory, local or remote.")
    budget: int = Field(description="The budget of each render.")
    mode: str | None = Field(default=None, description="The render mode; None: the memory's profile's.")

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        users = [m for m in messages or [] if m.role == MessageRole.USER and (m.content or "").strip()]
        if not users:
            return ""
        mem: Memory = self.mem
        rendering = await asyncio.to_thread(mem.render, users[-1].content or "", self.budget, mode=self.mode)
        return rendering.text

    async def _aput(self, messages: list[ChatMessage]) -> None:
        chat = to_chat(messages)
        if chat:
            mem: Memory = self.mem
            await asyncio.to_thread(mem.add_messages, chat)
