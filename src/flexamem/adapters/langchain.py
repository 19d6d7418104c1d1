"""LangChain (``langchain-core`` 1.x) in front of a FlexA-Mem memory: a chat history, a retriever, and an
agent middleware for ``langchain.agents.create_agent``.

    history = FlexaMemChatHistory(fm.Memory("chat.db", history="user-7"), budget=2000)
    retriever = FlexaMemRetriever(mem=fm.Memory("chat.db", history="user-7"), budget=1500)
    agent = create_agent(model, tools, middleware=[FlexaMemMiddleware(fm.Memory("a.db"), budget=8000)])

* :class:`FlexaMemChatHistory` (``BaseChatMessageHistory``, e.g. under ``RunnableWithMessageHistory``):
  every ``add_messages`` call is written as one conversation session (write-once); reading ``messages``
  gives the memory rendered under ``budget`` for the latest question, as one message, instead of the
  whole transcript. ``clear()`` drops the history.
* :class:`FlexaMemRetriever` (``BaseRetriever``): the turns ``Memory.search`` ranks first, as Documents,
  or with ``budget`` the memory rendered for the query, as one Document (``.as_tool()`` makes it a tool).
* :class:`FlexaMemMiddleware` (``AgentMiddleware``): the agent's state keeps every message; each model
  call is sent FlexA-Mem's agent context (system prompt, task, one memory message, the recent window).

``langchain-core`` 1.6.4 deprecated ``BaseChatMessageHistory`` (to go in 2.0) in favour of agents with
middleware; the history is here for chains that still use it. Every class takes a local or a remote
``Memory`` alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.documents import Document
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    convert_to_messages,
    convert_to_openai_messages,
)
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from flexamem.adapters.chat import ChatMemory
from flexamem.chat import Message
from flexamem.errors import InvalidInputError
from flexamem.memory import Memory

HISTORY_HEADER = "Memory of the conversation so far (records of past turns; some shown verbatim):\n"


def openai_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages in the OpenAI chat format FlexA-Mem reads."""
    converted = convert_to_openai_messages(list(messages))
    return [dict(m) for m in converted]


def _text(message: BaseMessage) -> str:
    return message.text if isinstance(message.text, str) else str(message.content)


class FlexaMemChatHistory(BaseChatMessageHistory):
    """A chat history whose messages are written once to ``mem`` and read back as a budgeted memory.

    Args:
        mem: the memory (one history per conversation or user: ``fm.Memory(db, history=session_id)``).
        budget: the budget of each render: the memory message and the question it was rendered for are
            within ``floor(0.95 * budget)`` tokens (the chain's own prompt comes on top).
        query: what ``messages`` renders for; by default the latest human message added through this
            object (after a restart, until one is added: the last turn stored).
        mode: the render mode (``None``: the memory's profile's).
        date: written with every session (e.g. today's date), shown in the memory's timeline.
    """

    def __init__(
        self,
        mem: Memory,
        *,
        budget: int,
        query: str | None = None,
        mode: str | None = None,
        date: str | None = None,
    ) -> None:
        self.mem, self.budget, self.query, self.mode, self.date = mem, budget, query, mode, date
        self._last_question: str | None = None

    def _question(self) -> str | None:
        if self.query is not None:
            return self.query
        if self._last_question is not None:
            return self._last_question
        count = len(self.mem)
        if not count:
            return None
        last = self.mem.notes(count - 1, count)[-1]
        return last.blocks[-1].text if last.blocks else last.raw

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The memory rendered for the latest question, as one message (none while the memory is empty)."""
        question = self._question()
        if question is None:
            return []
        rendering = self.mem.render(question, self.budget, mode=self.mode, prompt=HISTORY_HEADER)
        return [SystemMessage(content=HISTORY_HEADER + rendering.text)] if rendering.text else []

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Write ``messages`` as one session of the memory (system messages are the prompt's: not kept)."""
        kept = [m for m in messages if not isinstance(m, SystemMessage)]
        chat = [m for m in openai_messages(kept) if m.get("content") or m.get("tool_calls")]
        if not chat:
            return
        self.mem.add_messages(chat, date=self.date)
        humans = [m for m in kept if isinstance(m, HumanMessage) and _text(m).strip()]
        if humans:
            self._last_question = _text(humans[-1])

    def clear(self) -> None:
        """Drop the memory's whole history (write-once: nothing less can be deleted)."""
        self.mem.drop()
        self._last_question = None


class FlexaMemRetriever(BaseRetriever):
    """Documents from a FlexA-Mem memory: the ``limit`` turns ``Memory.search`` ranks first (each its text
    verbatim, with its unit, label and turn id), or, with ``budget``, the memory rendered for the query
    under that budget as one Document (its tokens and mode in the metadata)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    mem: Any  # a flexamem Memory (local or remote); Any, as pydantic cannot check a plain class
    limit: int = 5
    budget: int | None = None
    mode: str | None = None

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        mem: Memory = self.mem
        if self.budget is not None:
            r = mem.render(query, self.budget, mode=self.mode)
            meta = {"tokens": r.tokens, "allowance": r.allowance, "mode": r.mode}
            return [Document(page_content=r.text, metadata=meta)] if r.text else []
        if self.mode not in (None, "auto", "pieces"):
            raise InvalidInputError(f"a search ranks in mode 'auto' or 'pieces', not {self.mode!r}")
        hits = mem.search(query, mode=self.mode or "auto", limit=self.limit)
        return [
            Document(
                page_content=h.text,
                metadata={"unit_id": h.unit_id, "label": h.label, "block": h.block, "turn_id": h.turn_id},
            )
            for h in hits
        ]


class FlexaMemMiddleware(AgentMiddleware):
    """An agent middleware: the model sees FlexA-Mem's context, the agent's state keeps every message.

    Each model call records the state's messages not seen yet (write-once, one agent session per
    middleware, resumed by ``session_id`` after a restart) and sends the model the context: the system
    prompt, the task (the first human message), one memory message and the recent window, valid for the
    chat API and within ``floor(0.95 * budget)`` tokens, the system prompt included.
    """

    def __init__(self, mem: Memory, *, budget: int, session_id: str | None = None, mode: str = "auto") -> None:
        super().__init__()
        self.chat = ChatMemory(mem, budget, session_id=session_id, mode=mode)

    def _request(self, request: ModelRequest) -> ModelRequest:
        system = [request.system_message] if request.system_message is not None else []
        context: list[Message] = self.chat.context(openai_messages([*system, *request.messages]))
        fixed = [m for m in context if m["role"] in ("system", "developer")]
        rest = cast("list[AnyMessage]", convert_to_messages(context[len(fixed) :]))
        if not fixed:
            return request.override(messages=rest)
        prompt = SystemMessage(content="\n".join(str(m.get("content") or "") for m in fixed))
        return request.override(messages=rest, system_message=prompt)

    def wrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], ModelResponse],
    ) -> ModelResponse | AIMessage:
        return handler(self._request(request))

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse | AIMessage:
        return await handler(await asyncio.to_thread(self._request, request))
