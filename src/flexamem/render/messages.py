"""Counting chat messages: the o200k count of each content plus a documented per-message overhead.

OpenAI documents that each chat message costs its content plus a few tokens of framing, and every
reply is primed with a few more. We count ``MESSAGE_OVERHEAD`` (4) tokens per message and
``REPLY_OVERHEAD`` (3) per context; tool calls count their JSON text, and a ``name`` counts its tokens.
The agent budget guarantee is stated on this count.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from flexamem.tokens import TokenCounter

MESSAGE_OVERHEAD = 4
REPLY_OVERHEAD = 3

Message = dict[str, Any]


def message_tokens(message: Mapping[str, Any], counter: TokenCounter) -> int:
    total = MESSAGE_OVERHEAD
    content = message.get("content")
    if isinstance(content, str):
        total += counter.count(content)
    elif content is not None:  # a list of content parts
        total += counter.count(json.dumps(content, ensure_ascii=False))
    if message.get("tool_calls"):
        total += counter.count(json.dumps(message["tool_calls"], ensure_ascii=False))
    if message.get("name"):
        total += counter.count(str(message["name"]))
    return total


def messages_tokens(messages: Sequence[Mapping[str, Any]], counter: TokenCounter) -> int:
    """Tokens of a whole context (every message plus the reply primer)."""
    return REPLY_OVERHEAD + sum(message_tokens(m, counter) for m in messages)


ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def validate_messages(messages: Any) -> list[Message]:
    """Chat messages as given (copied), or :class:`InvalidInputError` naming what is wrong: a list of
    mappings with a known ``role``, string (or content-part list, or absent) ``content``, JSON-storable."""
    from flexamem.errors import InvalidInputError
    from flexamem.write.units import clean_text

    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise InvalidInputError("messages must be a list of chat messages (dicts with 'role' and 'content')")
    out: list[Message] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise InvalidInputError(f"message {i} must be a dict, got {type(m).__name__}")
        if m.get("role") not in ROLES:
            raise InvalidInputError(f"message {i} has no known role (one of {', '.join(sorted(ROLES))})")
        content = m.get("content")
        if isinstance(content, str):
            clean_text(content, f"message {i} content", allow_empty=True)
        elif content is not None and not isinstance(content, list):
            raise InvalidInputError(f"message {i} content must be a string, a list of parts or null")
        try:
            text = json.dumps(dict(m), ensure_ascii=False)
            text.encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(f"message {i} cannot be stored as JSON: {exc}") from exc
        out.append(json.loads(text))
    if not out:
        raise InvalidInputError("messages is empty: give at least one message, or none to use the defaults")
    return out
