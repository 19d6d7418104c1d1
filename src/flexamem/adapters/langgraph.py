"""A LangGraph pre-model hook: the model sees FlexA-Mem's context, the graph state keeps every message.

    hook = pre_model_hook(fm.Memory("g.db"), budget=8000, session_id="thread-1")

    def call_model(state: MessagesState) -> dict:          # the model node of a StateGraph
        return {"messages": [model.invoke(hook(state)["llm_input_messages"])]}

(``create_react_agent(..., pre_model_hook=hook)`` takes it as it is, but is deprecated since LangGraph
1.0; for ``langchain.agents.create_agent`` use :class:`flexamem.adapters.langchain.FlexaMemMiddleware`.)

Each call records the state's messages not seen yet (write-once) and returns them as
``llm_input_messages``: the task, one memory message, the recent window, always valid for the chat API
and within ``floor(0.95 * budget)`` tokens. The graph's own ``messages`` are left as they are. Needs
``langchain-core`` (imported when the hook runs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from flexamem.adapters.chat import ChatMemory
from flexamem.memory import Memory


def pre_model_hook(
    mem: Memory, *, budget: int, session_id: str | None = None, mode: str = "auto"
) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """A pre-model hook: state in, ``{"llm_input_messages": ...}`` out (one agent session per hook)."""
    chat = ChatMemory(mem, budget, session_id=session_id, mode=mode)

    def hook(state: Mapping[str, Any]) -> dict[str, Any]:
        from langchain_core.messages import convert_to_messages, convert_to_openai_messages

        messages = convert_to_openai_messages(list(state["messages"]))
        context = chat.context(messages)
        return {"llm_input_messages": convert_to_messages(context)}

    hook.chat = chat  # type: ignore[attr-defined]
    return hook
