"""Agent trajectories from public formats, as steps (SPEC section 1) for replay.

A *step* is one agent action (an assistant message: its text and its tool calls) plus what came back
before the agent acted again (tool results, and the user's reply in conversational tasks). Messages
before the first assistant action that has a reply are the fixed prompt ``P``: the system policy and
the task (the first user message).

Formats: tau-bench (``[{task_id, trial, traj: [messages]}]``), tau2-bench (``{info, simulations}``),
plain OpenAI chat messages (a list, or ``{"messages": [...]}``), mini-swe-agent (``{"messages": [...],
"info": ...}``: the same reader) and SWE-agent ``.traj`` files (``{"trajectory": [{action,
observation, thought}], ...}``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flexamem import InvalidInputError
from flexamem.chat import ROLES

MAX_OBSERVATION_CHARS = 200_000  # a larger tool output is kept, cut, with a mark


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] | str  # the raw string when it does not parse as JSON
    id: str | None = None

    def signature(self) -> str:
        args = self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments, sort_keys=True)
        return f"{self.name}({args})"


@dataclass
class TrajStep:
    number: int
    action: str
    observation: str
    calls: list[ToolCall]
    messages: list[dict[str, Any]]
    outputs: list[str] = field(default_factory=list)  # each tool result's text, in order


@dataclass
class Trajectory:
    traj_id: str
    system: str
    task: str
    steps: list[TrajStep]
    problems: list[str] = field(default_factory=list)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def _calls(message: dict[str, Any], problems: list[str], where: str) -> list[ToolCall]:
    out = []
    for raw in message.get("tool_calls") or []:
        fn = raw.get("function", raw) if isinstance(raw, dict) else {}
        name = str(fn.get("name", "?"))
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                parsed = json.loads(args) if args.strip() else {}
                args = parsed if isinstance(parsed, dict) else args
            except json.JSONDecodeError:
                problems.append(f"{where}: unparsable arguments for {name}: {args[:80]!r}")
        out.append(ToolCall(name, args, raw.get("id") if isinstance(raw, dict) else None))
    return out


def _openai_message(m: dict[str, Any]) -> dict[str, Any]:
    """A message as an OpenAI chat message (tool calls with JSON-string arguments)."""
    out: dict[str, Any] = {"role": m.get("role"), "content": _text(m.get("content")) or None}
    if m.get("tool_calls"):
        calls = []
        for c in m["tool_calls"]:
            fn = c.get("function", c)
            args = fn.get("arguments", {})
            calls.append(
                {
                    "id": c.get("id"),
                    "type": "function",
                    "function": {
                        "name": fn.get("name"),
                        "arguments": args if isinstance(args, str) else json.dumps(args),
                    },
                }
            )
        out["tool_calls"] = calls
    if m.get("role") == "tool":
        out["tool_call_id"] = m.get("tool_call_id") or m.get("id")
    return out


def from_messages(traj_id: str, messages: list[dict[str, Any]], system: str = "") -> Trajectory:
    """Steps from OpenAI-style messages (tool calls as OpenAI ``function`` or tau2 flat dicts)."""
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise InvalidInputError(f"trajectory {traj_id}: messages must be a list of objects")
    messages = [m for m in messages if m.get("role") in ROLES]  # e.g. mini-swe-agent 2's closing "exit" mark
    problems: list[str] = []
    system_parts = [system] if system else []
    task = ""
    i = 0
    while i < len(messages) and messages[i].get("role") != "assistant":  # the fixed prompt
        m = messages[i]
        if m.get("role") == "system":
            system_parts.append(_text(m.get("content")))
        elif not task:
            task = _text(m.get("content"))
        i += 1
    if (
        not task
        and i + 1 < len(messages)
        and not messages[i].get("tool_calls")
        and messages[i + 1].get("role") == "user"
    ):  # tau2: the agent greets, then the user asks
        task = _text(messages[i + 1].get("content"))
        i += 2
    steps: list[TrajStep] = []
    pre: list[dict[str, Any]] = []
    while i < len(messages):
        m = messages[i]
        if m.get("role") != "assistant":
            pre.append(m)  # stray message before any action (e.g. a greeting's reply)
            i += 1
            continue
        where = f"trajectory {traj_id} message {i}"
        calls = _calls(m, problems, where)
        action_lines = [t for t in [_text(m.get("content"))] if t.strip()] + [c.signature() for c in calls]
        replies, j = [], i + 1
        while j < len(messages) and messages[j].get("role") != "assistant":
            replies.append(messages[j])
            j += 1
        outputs, obs_lines = [], []
        for r in replies:
            text = _text(r.get("content"))
            if len(text) > MAX_OBSERVATION_CHARS:
                problems.append(f"{where}: output of {len(text):,} characters cut to {MAX_OBSERVATION_CHARS:,}")
                text = text[:MAX_OBSERVATION_CHARS] + "\n[… cut]"
            if r.get("role") == "tool":
                outputs.append(text)
                obs_lines.append(text if text.strip() else "(empty output)")
            else:
                obs_lines.append(f"{r.get('role')}: {text}")
        steps.append(
            TrajStep(
                len(steps) + 1,
                "\n".join(action_lines) or "(no action)",
                "\n".join(obs_lines),
                calls,
                [_openai_message(x) for x in [*pre, m, *replies]],
                outputs,
            )
        )
        pre = []
        i = j
    return Trajectory(traj_id, "\n\n".join(p for p in system_parts if p), task, steps, problems)


def from_swe_agent(traj_id: str, data: dict[str, Any]) -> Trajectory:
    """SWE-agent ``.traj``: ``trajectory`` entries with ``action`` and ``observation``."""
    entries = data.get("trajectory")
    if not isinstance(entries, list):
        raise InvalidInputError(f"trajectory {traj_id}: no 'trajectory' list")
    history = data.get("history") or []
    system = next((_text(h.get("content")) for h in history if isinstance(h, dict) and h.get("role") == "system"), "")
    task = next((_text(h.get("content")) for h in history if isinstance(h, dict) and h.get("role") == "user"), "")
    steps = []
    for n, e in enumerate(entries, start=1):
        action = str(e.get("action", "")).strip() or "(no action)"
        obs = str(e.get("observation", ""))
        calls = [ToolCall(action.split()[0], action)] if action.split() else []
        msgs = [{"role": "assistant", "content": str(e.get("response") or action)}, {"role": "user", "content": obs}]
        steps.append(TrajStep(n, action, obs, calls, msgs, [obs]))
    return Trajectory(traj_id, system, task, steps)


def load_trajectories(path: str | Path, fmt: str = "auto") -> list[Trajectory]:
    """All trajectories of a file; ``fmt`` is tau, tau2, openai, mini-swe-agent, swe-agent or auto."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidInputError(f"cannot read trajectory file {path}: {exc}") from exc
    stem = Path(path).stem
    if fmt == "auto":
        if isinstance(data, dict) and "simulations" in data:
            fmt = "tau2"
        elif isinstance(data, dict) and "trajectory" in data:
            fmt = "swe-agent"
        elif isinstance(data, list) and data and isinstance(data[0], dict) and "traj" in data[0]:
            fmt = "tau"
        else:
            fmt = "openai"
    out: list[Trajectory] = []

    def add(traj_id: str, make: Any) -> None:
        try:
            out.append(make())
        except (InvalidInputError, AttributeError, TypeError, KeyError) as exc:
            out.append(Trajectory(traj_id, "", "", [], [f"{traj_id}: malformed ({exc})"]))

    if fmt == "tau2":
        policy = str(data.get("info", {}).get("environment_info", {}).get("policy", ""))
        for k, sim in enumerate(data.get("simulations", [])):
            tid = f"{stem}/{sim.get('task_id', k)}/{sim.get('trial', 0)}"
            add(tid, lambda sim=sim, tid=tid: from_messages(tid, sim["messages"], policy))
    elif fmt == "tau":
        for k, entry in enumerate(data):
            tid = f"{stem}/{entry.get('task_id', k)}/{entry.get('trial', 0)}"
            add(tid, lambda entry=entry, tid=tid: from_messages(tid, entry["traj"]))
    elif fmt in ("openai", "mini-swe-agent"):
        many = isinstance(data, list) and data and (isinstance(data[0], list) or "messages" in data[0])
        items = data if many else [data]  # a list of runs (message lists or {"messages": ...}), or one run
        for k, item in enumerate(items):
            messages = item.get("messages") if isinstance(item, dict) else item
            add(f"{stem}/{k}", lambda messages=messages, k=k: from_messages(f"{stem}/{k}", messages))
    elif fmt == "swe-agent":
        add(stem, lambda: from_swe_agent(stem, data))
    else:
        raise InvalidInputError(f"unknown trajectory format {fmt!r}")
    return out
