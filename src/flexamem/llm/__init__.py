"""Models behind an OpenAI-compatible endpoint: the client, its response cache and configuration."""

from flexamem.llm.cache import ResponseCache
from flexamem.llm.client import ChatModel, Completion, OpenAICompatible, RetryPolicy, ToolCall, ToolModel
from flexamem.llm.config import LLMConfig, load_config

__all__ = [
    "ChatModel",
    "Completion",
    "LLMConfig",
    "OpenAICompatible",
    "ResponseCache",
    "RetryPolicy",
    "ToolCall",
    "ToolModel",
    "load_config",
]
