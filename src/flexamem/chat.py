"""OpenAI chat messages: validating them, keeping tool calls paired with their replies, and reading them
as conversation turns.

The chat API refuses a ``tool`` message that does not follow the assistant message holding its
``tool_call_id``, and an assistant call left without its reply; :func:`chat_safe` turns what would break
those rules into plain text (every word kept), so every context FlexA-Mem returns is accepted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from flexamem.errors import InvalidInputError
from flexamem.text import clean_text

Message = dict[str, Any]

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


MAX_DEPTH = 32  # nesting of lists and dicts inside one message (content parts, tool arguments)
MAX_MESSAGES = 1024  # messages one step may record


def json_problem(value: Any, max_depth: int = MAX_DEPTH) -> str | None:
    """Why ``value`` cannot be stored as JSON and read back: nested deeper than ``max_depth``, a key
    that is not a string, a value of another type, NaN or infinity, or a string that is not valid
    UTF-8 (a lone surrogate). Checked without recursion, so any depth is refused cleanly; None: fine.
    The one such check (step messages here, MCP requests in ``server/mcp.py``)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return f"is nested deeper than {max_depth} levels"
        if isinstance(item, Mapping):
            for k, v in item.items():
                if not isinstance(k, str):
                    return f"has a key that is not a string ({type(k).__name__})"
                stack.append((k, depth + 1))
                stack.append((v, depth + 1))
        elif isinstance(item, list | tuple):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "holds text that is not valid Unicode (a lone surrogate)"
        elif item is not None and not isinstance(item, int | float | bool):
            return f"holds a {type(item).__name__}, which JSON cannot store"
        elif isinstance(item, float) and not math.isfinite(item):
            return "holds a number JSON cannot store (NaN or infinity)"
    return None


def depth_problem(value: Any, max_depth: int = MAX_DEPTH) -> str | None:
    """``"is nested deeper than <max_depth> levels"`` when lists and dicts nest deeper than ``max_depth``
    inside ``value`` (``value`` itself is level 0), else None. Checked without recursion, so any depth
    is refused cleanly: the check to make before any code that walks a caller's free-form JSON (a
    message's parts, tool arguments, fields this library ignores) recursively."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > max_depth:
            return f"is nested deeper than {max_depth} levels"
        if isinstance(item, Mapping):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list | tuple):
            stack.extend((v, depth + 1) for v in item)
    return None


def _tool_call_problem(call: Any) -> str | None:
    """What is wrong with one entry of ``tool_calls`` (the OpenAI shape: ``{"id": str, "type":
    "function", "function": {"name": str, "arguments": str}}``; arguments may also be a JSON object)."""
    if not isinstance(call, Mapping):
        return f"must be a dict, got {type(call).__name__}"
    if not isinstance(call.get("id"), str) or not call["id"]:
        return "needs a string 'id'"
    if call.get("type", "function") != "function":
        return "must be of type 'function'"
    fn = call.get("function")
    if not isinstance(fn, Mapping):
        return f"needs a 'function' dict, got {type(fn).__name__}"
    if not isinstance(fn.get("name"), str) or not fn["name"]:
        return "needs a string function 'name'"
    if not isinstance(fn.get("arguments", ""), str | Mapping):
        return f"function arguments must be a string (or a JSON object), got {type(fn.get('arguments')).__name__}"
    return None


def message_problem(m: Any) -> str | None:
    """What makes ``m`` unusable as a chat message FlexA-Mem stores and shows again, or None: a dict
    with a known string ``role``; ``content`` a string, a list of parts (dicts) or null; well-formed
    ``tool_calls``; string ``tool_call_id`` and ``name``; JSON-storable, nested at most ``MAX_DEPTH``
    deep, valid UTF-8 throughout (:func:`json_problem`)."""
    if not isinstance(m, Mapping):
        return f"must be a dict, got {type(m).__name__}"
    role = m.get("role")
    if not isinstance(role, str) or role not in ROLES:
        return f"has no known role (one of {', '.join(sorted(ROLES))})"
    problem = json_problem(m)
    if problem:
        return problem
    content = m.get("content")
    if isinstance(content, list):
        if not all(isinstance(p, Mapping) for p in content):
            return "content parts must be dicts (e.g. {'type': 'text', 'text': ...})"
    elif content is not None and not isinstance(content, str):
        return "content must be a string, a list of parts or null"
    calls = m.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list):
            return f"tool_calls must be a list, got {type(calls).__name__}"
        for c, call in enumerate(calls):
            problem = _tool_call_problem(call)
            if problem:
                return f"tool call {c} {problem}"
    for key in ("tool_call_id", "name"):
        if m.get(key) is not None and not isinstance(m[key], str):
            return f"{key} must be a string"
    return None


def validate_messages(messages: Any) -> list[Message]:
    """Chat messages as given (copied), or :class:`InvalidInputError` naming what is wrong (see
    :func:`message_problem`); every message is checked completely before anything is stored."""

    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise InvalidInputError("messages must be a list of chat messages (dicts with 'role' and 'content')")
    if len(messages) > MAX_MESSAGES:
        raise InvalidInputError(f"one step records at most {MAX_MESSAGES} messages, got {len(messages)}")
    out: list[Message] = []
    for i, m in enumerate(messages):
        problem = message_problem(m)
        if problem:
            raise InvalidInputError(f"message {i} {problem}")
        if isinstance(m.get("content"), str):
            clean_text(m["content"], f"message {i} content", allow_empty=True)
        out.append(json.loads(json.dumps(dict(m), ensure_ascii=False)))
    if not out:
        raise InvalidInputError("messages is empty: give at least one message, or none to use the defaults")
    return out


def shown_as_text(messages: Any) -> list[Message]:
    """Messages read back from the store, each usable: one that breaks :func:`message_problem` (stored
    by an older version that checked less) becomes a user message holding its JSON as text, so a
    session renders instead of failing. Valid messages come back unchanged."""
    if not isinstance(messages, list):
        messages = [messages]
    out: list[Message] = []
    for m in messages:
        if message_problem(m) is None:
            out.append(m)
            continue
        try:
            text = json.dumps(m, ensure_ascii=False, default=str)
            text.encode("utf-8")
        except (TypeError, ValueError, RecursionError):
            text = "(a message that could not be shown: nested too deep or not valid text)"
        role = m.get("role") if isinstance(m, Mapping) else None
        head = f"[a message stored in a form chat APIs refuse, shown as text; role {role!r}]"
        out.append({"role": "user", "content": head + "\n" + text})
    return out


def _call_ids(message: Mapping[str, Any]) -> list[str]:
    return [str(c.get("id")) for c in message.get("tool_calls") or [] if isinstance(c, Mapping)]


def chat_problems(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the OpenAI chat API would refuse about this message list's tool-call structure: a ``tool``
    message must follow (with only tool messages between) the assistant message holding its
    ``tool_call_id``, and every call of an assistant message must be answered by the tool messages
    right after it. ``[]`` when valid."""
    problems: list[str] = []
    open_ids: list[str] = []  # calls of the last assistant message not answered yet
    answering = False  # inside the run of tool messages after an assistant message with calls
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "tool":
            tid = str(m.get("tool_call_id"))
            if not answering or tid not in open_ids:
                problems.append(f"message {i}: tool reply {tid!r} does not follow the assistant call it answers")
            else:
                open_ids.remove(tid)
            continue
        if open_ids:
            problems.append(f"message {i - 1}: tool call(s) {open_ids} left without a reply")
        open_ids = _call_ids(m) if role == "assistant" else []
        answering = bool(open_ids)
    if open_ids:
        problems.append(f"message {len(messages) - 1}: tool call(s) {open_ids} left without a reply")
    return problems


def _as_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str) or content is None:
        return content or ""
    return "\n".join(str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content)


def call_line(call: Mapping[str, Any]) -> str:
    """One tool call as a line of text (its id, name and arguments verbatim)."""
    fn = call.get("function")
    if not isinstance(fn, Mapping):
        fn = {}
    return f"[tool call {call.get('id')}] {fn.get('name')}({fn.get('arguments', '')})"


def chat_safe(messages: Sequence[Message]) -> list[Message]:
    """``messages`` made valid for the OpenAI chat API (see :func:`chat_problems`), keeping every word:
    a tool reply whose call is not just before it becomes a user message ``[tool result <id>] ...``;
    a call with no reply right after it moves into its assistant message's text as ``[tool call <id>]
    name(arguments)``. Valid lists come back unchanged (the same objects)."""
    if not chat_problems(messages):
        return list(messages)
    out: list[Message] = []
    open_ids: set[str] = set()  # calls of the assistant message before this run of tool replies
    for i, m in enumerate(messages):
        if m.get("role") == "tool":
            tid = str(m.get("tool_call_id"))
            if tid in open_ids:
                open_ids.discard(tid)
                out.append(m)
            else:  # as text; the run of replies ends here
                out.append({"role": "user", "content": f"[tool result {m.get('tool_call_id')}]\n{_as_text(m)}"})
                open_ids = set()
            continue
        open_ids = set()
        if m.get("role") == "assistant" and m.get("tool_calls"):
            calls = [c for c in m["tool_calls"] if isinstance(c, Mapping)]
            ids, answered = {str(c.get("id")) for c in calls}, set()
            for later in messages[i + 1 :]:  # the replies right after it, up to the first that is not one
                tid = str(later.get("tool_call_id"))
                if later.get("role") != "tool" or tid not in ids or tid in answered:
                    break
                answered.add(tid)
            kept = [c for c in calls if str(c.get("id")) in answered]
            moved = [c for c in calls if str(c.get("id")) not in answered]
            if moved:
                text = _as_text(m)
                m = {k: v for k, v in m.items() if k != "tool_calls"}
                m["content"] = "\n".join(([text] if text else []) + [call_line(c) for c in moved])
                if kept:
                    m["tool_calls"] = kept
            open_ids = {str(c.get("id")) for c in kept}
        out.append(m)
    return out


def message_turn(message: Mapping[str, Any], where: str = "message") -> dict[str, str]:
    """One chat message as a conversation turn: the speaker is its ``name`` or role, the text its content
    (text parts joined; other parts as ``[<type>]``) followed by one ``[tool call <id>] name(arguments)``
    line per tool call; a tool reply keeps its ``tool_call_id`` as the turn id. Strings are kept verbatim.
    A message nested deeper than ``MAX_DEPTH`` levels (in any field) is refused (``InvalidInputError``)."""
    problem = depth_problem(message)  # before anything below formats its parts or arguments (recursion)
    if problem:
        raise InvalidInputError(f"{where} {problem}")
    role = message.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise InvalidInputError(f"{where} has no known role (one of {', '.join(sorted(ROLES))})")
    content = message.get("content")
    if isinstance(content, list):
        parts = [
            str(p.get("text", ""))
            if isinstance(p, Mapping) and p.get("type", "text") == "text"
            else f"[{p.get('type', 'part')}]"
            if isinstance(p, Mapping)
            else str(p)
            for p in content
        ]
        content = "\n".join(parts)
    elif content is not None and not isinstance(content, str | bytes):
        raise InvalidInputError(f"{where} content must be a string, a list of parts or null")
    text = clean_text(content, f"{where} content", allow_empty=True) if content is not None else ""
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list) or not all(isinstance(c, Mapping) for c in calls):
        raise InvalidInputError(f"{where} tool_calls must be a list of tool calls")
    lines = ([text] if text.strip() else []) + [call_line(c) for c in calls]
    if not lines:
        raise InvalidInputError(f"{where} has no content and no tool calls")
    turn = {"speaker": str(message.get("name") or role), "text": "\n".join(lines), "role": role}
    if role == "tool" and message.get("tool_call_id") is not None:
        turn["id"] = str(message["tool_call_id"])
    return turn
