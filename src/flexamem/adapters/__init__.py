"""Adapters from agent frameworks to FlexA-Mem: each feeds an agent session and hands back its context.

* :mod:`flexamem.adapters.chat`: plain OpenAI chat loops (:class:`ChatMemory`, the shared core).
* :mod:`flexamem.adapters.openai_agents`: the OpenAI Agents SDK ``Session`` protocol.
* :mod:`flexamem.adapters.langgraph`: a LangGraph pre-model hook.
* :mod:`flexamem.adapters.miniswe`: a mini-swe-agent model wrapper.
* :mod:`flexamem.adapters.langchain`: a LangChain chat history, retriever and agent middleware.
* :mod:`flexamem.adapters.pydantic_ai`: a Pydantic AI history processor (and capability).
* :mod:`flexamem.adapters.autogen`: an AutoGen ``autogen_core.memory.Memory``.
* :mod:`flexamem.adapters.llama_index`: a memory block for LlamaIndex's ``Memory``.
* :mod:`flexamem.adapters.crewai`: a CrewAI crew ``Memory``.

Each framework is imported only by its own module.
"""

from flexamem.adapters.chat import ChatMemory

__all__ = ["ChatMemory"]
