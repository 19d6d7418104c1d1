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
