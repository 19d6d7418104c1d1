"""A drop-in for plain OpenAI chat loops: keep your linear message list, send FlexA-Mem's context instead.

    memory = ChatMemory(fm.Memory("agent.db"), budget=8000, session_id="ticket-42")
    while True:
        reply = client.chat.completions.create(model=..., messages=memory.context(messages), tools=...)
        messages.append(reply.choices[0].message.model_dump(exclude_none=True))
        messages += run_tools(reply)            # tool results, as usual

``context(messages)`` records every message it has not seen yet (write-once, as agent steps: an
assistant message with the messages after it) and returns the budgeted context: always valid for the
chat API and never above ``floor(0.95 * budget)`` tokens. The leading system message(s) and the first
user message are the session's fixed prompt (system and task).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from flexamem.agent import AgentContext, AgentSession
from flexamem.chat import Message, call_line, validate_messages
from flexamem.errors import InvalidInputError
from flexamem.memory import Memory


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    lines = [content] if isinstance(content, str) and content.strip() else []
    lines += [call_line(c) for c in message.get("tool_calls") or [] if isinstance(c, Mapping)]
    return "\n".join(lines)


CHAT_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")


def _chat(messages: Sequence[Mapping[str, Any]]) -> list[Message]:
    """The chat API's keys of each message (frameworks add their own), validated."""
    if isinstance(messages, str | bytes | Mapping):
        raise InvalidInputError("messages must be a list of chat messages")
    return validate_messages(
        [{k: m[k] for k in CHAT_KEYS if k in m} if isinstance(m, Mapping) else m for m in messages]
    )


class ChatMemory:
    """One agent session fed from an OpenAI-format message list (see the module docstring)."""

    def __init__(self, mem: Memory, budget: int, *, session_id: str | None = None, mode: str = "auto") -> None:
        self.mem, self.budget, self.mode = mem, budget, mode
        self.session_id = session_id
        self.session: AgentSession | None = None
        self._prefix = 0  # messages of the fixed prompt
        if session_id is not None and session_id in mem.sessions():
            self.session = mem.agent(session_id=session_id)

    def _start(self, messages: list[Message]) -> int:
        """Start (or attach to) the session from the fixed prompt at the head of ``messages``: the
        leading system message(s) and the first user message. Returns how many messages that took."""
        system = []
        i = 0
        while i < len(messages) and messages[i]["role"] in ("system", "developer"):
            system.append(_text(messages[i]))
            i += 1
        if i >= len(messages) or messages[i]["role"] != "user":
            raise InvalidInputError("the messages must begin with system message(s) and then the user's task")
        if self.session is None:
            task, prompt = _text(messages[i]), "\n".join(system)
            self.session = self.mem.agent(task, budget=self.budget, system=prompt, session_id=self.session_id)
            self.session_id = self.session.session_id
        self._prefix = i + 1
        return i + 1

    def record(self, messages: Sequence[Mapping[str, Any]]) -> AgentSession:
        """Record the messages of the full list ``messages`` not seen yet; returns the session."""
        msgs = _chat(messages)
        if not self._prefix:
            self._start(msgs)
        assert self.session is not None
        seen = self._prefix + self.session.message_count
        if len(msgs) < seen:
            raise InvalidInputError(f"the messages are shorter than what was recorded ({len(msgs)} < {seen})")
        return self.append(msgs[seen:])

    def append(self, messages: Sequence[Mapping[str, Any]]) -> AgentSession:
        """Record new messages (only the new ones; the first call's must begin with the fixed prompt)."""
        msgs = _chat(messages) if messages else []
        if self.session is None:
            msgs = msgs[self._start(msgs) :]
        assert self.session is not None
        groups: list[list[Message]] = []
        for m in msgs:  # a step: an assistant message and what came back after it
            if m["role"] == "assistant" or not groups:
                groups.append([m])
            else:
                groups[-1].append(m)
        for group in groups:
            head, rest = group[0], group[1:]
            action = _text(head) or json.dumps(head)
            observation = "\n".join(f"[{m['role']}] {_text(m)}" for m in rest)
            actor = "assistant" if head["role"] == "assistant" else str(head["role"])
            self.session.step(action, observation, actor=actor, messages=group)
        return self.session

    def context(self, messages: Sequence[Mapping[str, Any]]) -> list[Message]:
        """Record what is new in ``messages`` and return the context to send to the model."""
        return self.full_context(messages).messages

    def full_context(self, messages: Sequence[Mapping[str, Any]]) -> AgentContext:
        """:meth:`context` with how it was made (tokens, ceiling, the rendering)."""
        return self.record(messages).context(mode=self.mode)
