"""mini-swe-agent with FlexA-Mem: wrap the agent's model, and the model sees FlexA-Mem's context.

    from minisweagent.agents.default import DefaultAgent
    model = FlexaMemModel(get_model(...), fm.Memory("swe.db"), budget=16000, session_id="django-1234")
    DefaultAgent(model, env, **config).run(task)

The agent keeps its linear ``messages`` (its trajectory file is unchanged); each ``query`` records the
messages not seen yet and sends the wrapped model the budgeted context instead. Everything else
(formatting, observations, cost, serialisation) is the wrapped model's.
"""

from __future__ import annotations

from typing import Any

from flexamem.adapters.chat import ChatMemory
from flexamem.agent import AgentContext
from flexamem.chat import ROLES
from flexamem.memory import Memory


class FlexaMemModel:
    """A mini-swe-agent ``Model`` that queries ``model`` with FlexA-Mem's context."""

    def __init__(self, model: Any, mem: Memory, *, budget: int, session_id: str | None = None, mode: str = "auto"):
        self.model = model
        self.chat = ChatMemory(mem, budget, session_id=session_id, mode=mode)
        self.last_context: AgentContext | None = None

    def query(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        chat = [m for m in messages if m.get("role") in ROLES]  # mini-swe-agent's own "exit" marks stay out
        self.last_context = self.chat.full_context(chat)
        return self.model.query(self.last_context.messages, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)
