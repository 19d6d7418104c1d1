"""The OpenAI Agents SDK ``Session`` protocol backed by FlexA-Mem (needs ``openai-agents``).

    from agents import Agent, Runner
    session = FlexaMemSession("ticket-42", fm.Memory("agents.db"), budget=8000)
    result = await Runner.run(agent, "Refund order #W4417", session=session)

``get_items`` returns FlexA-Mem's context (the task, one memory message, the recent window) as Responses
API items instead of the whole history, so every turn fits the budget; ``add_items`` records what the
run produced (messages, function calls and their outputs, verbatim). Sessions are write-once:
``pop_item`` raises :class:`~flexamem.errors.WriteOnceError`; ``clear_session`` deletes the session.
The agent's instructions are the SDK's to send; the budget here is for the items.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from flexamem.adapters.chat import ChatMemory
from flexamem.chat import Message
from flexamem.errors import WriteOnceError
from flexamem.memory import Memory


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and "text" in p)
    return "" if content is None else json.dumps(content)


def items_to_messages(items: Sequence[Any]) -> list[Message]:
    """Responses API input items as chat messages (function calls join the assistant message before
    them; reasoning and other item kinds without text for the model are left out)."""
    out: list[Message] = []
    for raw in items:
        item = raw if isinstance(raw, Mapping) else raw.model_dump(exclude_none=True)
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") in ("system", "developer", "user", "assistant"):
            out.append({"role": item["role"], "content": _text(item.get("content"))})
        elif kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item.get("arguments", "")},
            }
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": _text(item.get("output"))})
    return out


def messages_to_items(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Chat messages as Responses API input items."""
    items: list[dict[str, Any]] = []
    for m in messages:
        role = m["role"]
        if role == "tool":
            items.append(
                {"type": "function_call_output", "call_id": m["tool_call_id"], "output": _text(m.get("content"))}
            )
            continue
        text = _text(m.get("content"))
        if text or not m.get("tool_calls"):
            items.append({"role": role, "content": text})
        for call in m.get("tool_calls") or []:
            fn = call.get("function") or {}
            items.append(
                {
                    "type": "function_call",
                    "call_id": call["id"],
                    "name": fn.get("name", ""),
                    "arguments": fn.get("arguments", ""),
                }
            )
    return items


class FlexaMemSession:
    """An Agents SDK session whose history is a FlexA-Mem agent session under ``mem``'s history."""

    session_settings = None

    def __init__(self, session_id: str, mem: Memory, *, budget: int, mode: str = "auto") -> None:
        self.session_id = session_id
        self.mem = mem
        self.chat = ChatMemory(mem, budget, session_id=session_id, mode=mode)

    def _items(self, limit: int | None) -> list[dict[str, Any]]:
        if self.chat.session is None:
            return []
        items = messages_to_items(self.chat.session.context(mode=self.chat.mode).messages)
        return items[-limit:] if limit else items

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return await asyncio.to_thread(self._items, limit)

    async def add_items(self, items: list[Any]) -> None:
        messages = items_to_messages(items)
        if messages:
            await asyncio.to_thread(self.chat.append, messages)

    async def pop_item(self) -> Any:
        raise WriteOnceError("FlexA-Mem sessions are write-once: an item cannot be popped")

    async def clear_session(self) -> None:
        await asyncio.to_thread(self.mem.drop_session, self.session_id)
        self.chat = ChatMemory(self.mem, self.chat.budget, session_id=self.session_id, mode=self.chat.mode)
