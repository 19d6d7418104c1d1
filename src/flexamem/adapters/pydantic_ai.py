"""Pydantic AI with FlexA-Mem: a history processor, and the model sees FlexA-Mem's context.

    history = FlexaMemHistory(fm.Memory("pai.db"), budget=8000, session_id="ticket-42")
    agent = Agent(model, tools=[...], capabilities=[history.capability()])
    result = agent.run_sync("Refund order #W4417")

``history`` itself is a plain history processor (``capabilities=[ProcessHistory(history)]``; Pydantic AI
2.x took ``history_processors=`` into capabilities); ``capability()`` is that processor and, after each
run, the recording of the run's final response.

Before each model request the processor records the messages it has not seen (write-once, as agent
steps, resumed by ``session_id`` after a restart) and returns FlexA-Mem's context in their place: the
system prompt and the task, one memory message, the recent window, always a valid exchange of requests
and responses (each tool return after its call) within ``floor(0.95 * budget)`` tokens. As with every
Pydantic AI history processor, what it returns becomes the run's history (``result.all_messages()``);
the whole history is in the memory. A run's final response is recorded after the run (by the
capability), else by the next request that sees it or by ``history.record(result.all_messages())``.
The agent's ``instructions`` are sent apart from the messages, on top of the budget.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai import AgentRunResult, RunContext
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    BaseToolCallPart,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryFeedbackPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from flexamem.adapters.chat import ChatMemory
from flexamem.agent import AgentContext
from flexamem.chat import Message
from flexamem.memory import Memory


def _user_text(part: UserPromptPart) -> str:
    if isinstance(part.content, str):
        return part.content
    return "\n".join(c if isinstance(c, str) else f"[{type(c).__name__}]" for c in part.content)


def to_chat(messages: Sequence[ModelMessage]) -> list[Message]:
    """Pydantic AI messages as OpenAI chat messages (thinking and parts with nothing for the model's
    history, such as tool-availability notes, are left out)."""
    out: list[Message] = []
    for message in messages:
        if isinstance(message, ModelResponse):
            text = "\n".join(p.content for p in message.parts if isinstance(p, TextPart) and p.content)
            calls = [
                {
                    "id": p.tool_call_id,
                    "type": "function",
                    "function": {"name": p.tool_name, "arguments": p.args_as_json_str()},
                }
                for p in message.parts
                if isinstance(p, BaseToolCallPart)
            ]
            if text or calls:
                reply: Message = {"role": "assistant", "content": text or None}
                if calls:
                    reply["tool_calls"] = calls
                out.append(reply)
            continue
        for part in message.parts:
            if isinstance(part, SystemPromptPart):
                out.append({"role": "system", "content": part.content})
            elif isinstance(part, UserPromptPart):
                out.append({"role": "user", "content": _user_text(part)})
            elif isinstance(part, ToolReturnPart):
                out.append({"role": "tool", "tool_call_id": part.tool_call_id, "content": part.model_response_str()})
            elif isinstance(part, RetryFeedbackPart):  # a retry that answers no call: the app speaking
                out.append({"role": "user", "content": part.model_response()})
    return out


def to_model_messages(messages: Sequence[Message]) -> list[ModelMessage]:
    """OpenAI chat messages as Pydantic AI messages: each run of system, user and tool messages one
    request, each assistant message one response."""
    names: dict[str, str] = {}
    out: list[ModelMessage] = []
    parts: list[ModelRequestPart] = []
    for m in messages:
        content = m.get("content")
        text = content if isinstance(content, str) else "" if content is None else json.dumps(content)
        if m["role"] == "assistant":
            if parts:
                out.append(ModelRequest(parts=parts))
                parts = []
            reply: list[ModelResponsePart] = [TextPart(content=text)] if text else []
            for call in m.get("tool_calls") or []:
                fn = call.get("function") or {}
                names[call["id"]] = fn.get("name", "")
                reply.append(ToolCallPart(fn.get("name", ""), fn.get("arguments") or None, tool_call_id=call["id"]))
            out.append(ModelResponse(parts=reply))
        elif m["role"] == "tool":
            call_id = m["tool_call_id"]
            parts.append(ToolReturnPart(names.get(call_id, ""), text, tool_call_id=call_id))
        elif m["role"] in ("system", "developer"):
            parts.append(SystemPromptPart(content=text))
        else:
            parts.append(UserPromptPart(content=text))
    if parts:
        out.append(ModelRequest(parts=parts))
    return out


@dataclass
class RecordingHistory(ProcessHistory[Any]):
    """:class:`FlexaMemHistory` as a capability: the processor before each model request, and the run's
    final response recorded after the run."""

    processor: FlexaMemHistory

    async def after_run(self, ctx: RunContext[Any], *, result: AgentRunResult[Any]) -> AgentRunResult[Any]:
        await asyncio.to_thread(self.processor.record, result.all_messages())
        return result


class FlexaMemHistory:
    """A ``history_processors`` entry backed by one FlexA-Mem agent session (see the module docstring)."""

    def __init__(self, mem: Memory, *, budget: int, session_id: str | None = None, mode: str = "auto") -> None:
        self.chat = ChatMemory(mem, budget, session_id=session_id, mode=mode)
        self.last_context: AgentContext | None = None
        self._given: list[ModelMessage] = []  # what it returned last: the head of the history it is handed next

    def _new(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        """The messages after those it saw or returned last (all of them when they do not begin with
        those: a new run without that history)."""
        given = self._given
        if (
            given
            and len(messages) >= len(given)
            and all(a is b or a == b for a, b in zip(given, messages, strict=False))
        ):
            return messages[len(given) :]
        return messages

    def capability(self) -> RecordingHistory:
        """This processor as an agent capability that also records each run's final response."""
        return RecordingHistory(self)

    def record(self, messages: Sequence[ModelMessage]) -> None:
        """Record the messages not seen yet. The processor does it before each model request; call it
        with ``result.all_messages()`` after a run to record the run's final response too (else the
        next run handed that history records it)."""
        chat = to_chat(self._new(list(messages)))
        if self.chat.session is not None:  # a session under way: its system prompt and task are stored
            while chat and chat[0]["role"] in ("system", "developer"):
                chat.pop(0)
        if chat or self.chat.session is None:
            self.chat.append(chat)
        self._given = list(messages)

    def __call__(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        self.record(messages)
        session: Any = self.chat.session
        self.last_context = session.context(mode=self.chat.mode)
        self._given = to_model_messages(self.last_context.messages)
        return list(self._given)
