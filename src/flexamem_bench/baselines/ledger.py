"""Every model call a baseline makes, counted: tokens spent building the memory and at read time."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from flexamem import InvalidInputError, LLMError
from flexamem.llm.client import ChatModel, Completion, ToolCall, ToolModel, parse_json_object


class Ledger:
    """A model with its bill: ``tokens["build"]`` / ``tokens["read"]`` (prompt + completion of every
    call, as the method costs; answers served by the response cache are also counted in ``cached``)."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        self.tokens: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self.cached: Counter[str] = Counter()  # tokens of calls the response cache answered (not spent again)
        self.failures = 0  # answers that were not the JSON asked for (a default was used)

    def ask(self, prompt: str, phase: str, *, max_tokens: int = 256, json_mode: bool = False) -> str:
        messages = [{"role": "user", "content": prompt}]
        done = self._bill(phase, lambda: self.model.complete(messages, max_tokens=max_tokens, json_mode=json_mode))
        return done.text.strip() if done else ""

    def ask_tools(
        self, prompt: str, tools: list[dict[str, Any]], phase: str = "read", *, max_tokens: int = 200
    ) -> tuple[ToolCall, ...]:
        """The tool calls the model asks for (none when it fails or answers in words)."""
        model = self.model
        if not isinstance(model, ToolModel):
            raise InvalidInputError(f"this method needs a model that takes tools; {model.name} does not")
        messages = [{"role": "user", "content": prompt}]
        done = self._bill(phase, lambda: model.complete_tools(messages, tools, max_tokens=max_tokens))
        return done.tool_calls if done else ()

    def _bill(self, phase: str, call: Callable[[], Completion]) -> Completion | None:
        self.calls[phase] += 1
        try:
            done = call()
        except LLMError:
            self.failures += 1
            return None
        self.tokens[phase] += done.prompt_tokens + done.completion_tokens
        if done.cached:
            self.cached[phase] += done.prompt_tokens + done.completion_tokens
        return done

    def ask_json(self, prompt: str, phase: str, default: dict[str, Any], *, max_tokens: int = 256) -> dict[str, Any]:
        """The answer's JSON object, or ``default`` (counted in ``failures``) when there is none."""
        text = self.ask(prompt, phase, max_tokens=max_tokens, json_mode=True)
        try:
            return parse_json_object(text)
        except (ValueError, json.JSONDecodeError):
            found = re.search(r"\{.*\}", text, re.S)  # small models wrap JSON in prose
            if found:
                try:
                    return parse_json_object(found.group(0))
                except (ValueError, json.JSONDecodeError):
                    pass
        self.failures += 1
        return default
