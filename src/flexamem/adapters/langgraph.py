"""A LangGraph pre-model hook: the model sees FlexA-Mem's context, the graph state keeps every message.

    from langgraph.prebuilt import create_react_agent
    agent = create_react_agent(model, tools, pre_model_hook=pre_model_hook(fm.Memory("g.db"), budget=8000,
                                                                           session_id="thread-1"))

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
    """A ``pre_model_hook`` for ``create_react_agent`` (one agent session per hook)."""
    chat = ChatMemory(mem, budget, session_id=session_id, mode=mode)

    def hook(state: Mapping[str, Any]) -> dict[str, Any]:
        from langchain_core.messages import convert_to_messages, convert_to_openai_messages

        messages = convert_to_openai_messages(list(state["messages"]))
        context = chat.context(messages)
        return {"llm_input_messages": convert_to_messages(context)}

    hook.chat = chat  # type: ignore[attr-defined]
    return hook
