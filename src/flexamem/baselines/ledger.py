"""Every model call a baseline makes, counted: tokens spent building the memory and at read time."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from flexamem.errors import LLMError
from flexamem.llm.client import ChatModel, parse_json_object


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
        try:
            done = self.model.complete(
                [{"role": "user", "content": prompt}], max_tokens=max_tokens, json_mode=json_mode
            )
        except LLMError:
            self.failures += 1
            self.calls[phase] += 1
            return ""
        self.calls[phase] += 1
        self.tokens[phase] += done.prompt_tokens + done.completion_tokens
        if done.cached:
            self.cached[phase] += done.prompt_tokens + done.completion_tokens
        return done.text.strip()

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
