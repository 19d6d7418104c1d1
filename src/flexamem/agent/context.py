"""Assembling one call's context: the fixed messages (system, task), one memory message and the
recent window, within the ceiling ``floor(0.95 * B)``.

Until the full history would exceed the ceiling the context is the history itself (pass-through);
from the first call that would exceed it, memory is on (for the rest of the episode): the timeline
of records plus recovery fills the allowance ``A = B_bar - |P| - |W|``, a shell agent's ``auto`` with
the command trace (:mod:`.trace`) ahead of it. Merges are sized by ``max(A, A_ref)`` where ``A_ref``
assumes a full ``B/4`` window, and persist for the episode (their spans kept in the session's state).

If even the fixed prompt plus the newest unit cannot fit, the newest unit's longest message is cut
with a visible mark (``[… N tokens cut to fit the budget]``); the paper's modes then show no memory,
``auto`` cuts deeper to keep ``rho`` of the room for a memory of the past units; if the fixed prompt
alone cannot fit, :class:`BudgetError` is raised. The context never exceeds the ceiling.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from flexamem.agent.query import AgentQuery
from flexamem.agent.trace import Trace
from flexamem.agent.window import Window
from flexamem.chat import Message, chat_safe
from flexamem.core import HistoryCore
from flexamem.errors import BudgetError, ReadOnlyStoreError, StoreFullError
from flexamem.render.messages import MESSAGE_OVERHEAD, message_tokens, messages_tokens
from flexamem.render.renderer import Query, RenderOptions
from flexamem.render.result import Rendering
from flexamem.render.timeline import Entry

MEMORY_HEADER = "Memory of earlier steps (records of past units; some recovered verbatim):\n"


@dataclass(frozen=True)
class AgentContext:
    """One call's context: the messages and how they were made."""

    messages: list[Message]
    tokens: int  # messages_tokens(messages): never above the ceiling
    ceiling: int
    memory: Rendering | None = None
    pass_through: bool = True
    window_units: tuple[int, ...] = ()
    cut: bool = False  # the newest unit had to be cut to fit
    notes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class Assembler:
    """The contexts of one session: its fixed prompt, its steps (``window``), its command trace
    (``trace``) and what it is recovered against (``query``), rendered from its history (``core``).

    ``started`` (memory is on) and ``spans`` (the timeline as last merged) are the session's state as
    stored; they are written through whenever they change."""

    def __init__(
        self,
        core: HistoryCore,
        window: Window,
        trace: Trace,
        query: AgentQuery,
        *,
        task: str,
        system: str,
        budget: int,
        started: bool,
        spans: list[list[int]],
    ) -> None:
        self.core = core
        self.counter = core.counter
        self.window = window
        self.trace = trace
        self.query = query
        self.task = task
        self.system = system
        self.budget = budget
        self.started = started
        self.spans = spans
        self._header_tokens = self.counter.count(MEMORY_HEADER)  # a constant text, counted once
        self._fixed_tokens: tuple[tuple[str | None, str], int] | None = None  # (system, task) and their count

    def fixed_messages(self) -> list[Message]:
        out: list[Message] = []
        if self.system:
            out.append({"role": "system", "content": self.system})
        out.append({"role": "user", "content": self.task})
        return out

    def _keep(self, key: str, value: Any) -> None:
        """Session state (written through; a read-only store keeps it in this process only)."""
        with contextlib.suppress(ReadOnlyStoreError, StoreFullError):  # the context is served all the same
            self.core.set_state(key, value)

    def build(self, options: RenderOptions, mode: str, positions: Sequence[int] | None = None) -> AgentContext:
        """This call's context (see the module docstring); ``positions``: unit recovery's order."""
        ceiling = self.core.ceiling(self.budget)
        fixed = self.fixed_messages()
        if self._fixed_tokens is None or self._fixed_tokens[0] != (self.system, self.task):
            self._fixed_tokens = ((self.system, self.task), messages_tokens(fixed, self.counter))
        p = self._fixed_tokens[1]
        if p >= ceiling:
            raise BudgetError(f"budget {self.budget} leaves no room: system and task take {p} of {ceiling} tokens")
        win = self.window
        units = win.units()
        history, history_tokens = self._chat_safe(win.step_messages(range(len(win))), win.recorded_tokens)
        if not self.started and p + history_tokens <= ceiling:
            return AgentContext(
                fixed + history,
                p + history_tokens,
                ceiling,
                window_units=tuple(range(len(units))),
                notes=len(self.core.history),
            )
        if not self.started:
            self._keep("memory_started", True)
            self.started = True
        first = min(win.first(units), len(self.core.history))  # units not written (read-only) stay raw
        window, w = self._chat_safe(
            win.step_messages(i for k in range(first, len(units)) for i in units[k]),
            sum(win.unit_tokens(units[k]) for k in range(first, len(units))),
        )
        header = self._header_tokens
        overhead = MESSAGE_OVERHEAD + header + 1  # the memory message's framing, header and line break
        allowance = ceiling - p - w - overhead
        reference = ceiling - p - self.budget // 4 - overhead
        if allowance <= 0:
            if mode == "auto" and first > 0:
                return self._cut_with_memory(fixed, ceiling, p, overhead, first, options)
            return self.cut_newest(fixed, ceiling, first)
        query = self.query.query(mode, positions)
        trace, trace_tokens, shown = "", 0, set[int]()
        upto = units[first][0] if first < len(units) else len(win)
        if mode == "auto" and options.commands and first > 0:
            if options.trace_unshown and query.shell and options.shell_units:
                planned = self._raw_planned(query, allowance, reference, first, options)
                shown = {i for k in planned for i in units[k]}  # steps whose units are raw: no trace line
            trace, trace_tokens = self.trace.lines(win.recorded, upto, allowance, shown)
        rendering = self._render(query, allowance - trace_tokens, reference - trace_tokens, first, options, mode)

        def compose(trace: str, trace_tokens: int) -> tuple[list[Message], int]:
            """The context and its tokens, from counts made already (the fixed part, the window, the
            header, ``trace`` with its line break, the rendering) where their joins cannot merge tokens."""
            c, text = self.counter, rendering.text
            if not text:
                if not trace:
                    return [*fixed, *window], p + w
                content, content_tokens = MEMORY_HEADER + trace, c.count(MEMORY_HEADER + trace)
            else:
                head, head_tokens = MEMORY_HEADER, header
                if trace:
                    head, head_tokens = head + trace + "\n", c.count_joined(head, header, trace + "\n", trace_tokens)
                content, content_tokens = head + text, c.count_joined(head, head_tokens, text, rendering.tokens)
            return [*fixed, {"role": "user", "content": content}, *window], p + w + MESSAGE_OVERHEAD + content_tokens

        messages, tokens = compose(trace, trace_tokens)
        if shown and trace:  # a unit the trace's room took out of raw: its command joins it when it fits
            now = {i for v in rendering.shown if v.resolution == "raw" for i in units[v.seq]}
            if not shown <= now:
                fuller = compose(*self.trace.lines(win.recorded, upto, allowance, now))
                messages, tokens = fuller if fuller[1] <= ceiling else (messages, tokens)
        if tokens > ceiling:  # the join cost a token more than counted: leave the trace out
            messages, tokens = compose("", 0)
        return AgentContext(messages, tokens, ceiling, rendering, False, tuple(range(first, len(units))), notes=first)

    def _chat_safe(self, messages: list[Message], tokens: int) -> tuple[list[Message], int]:
        """``messages`` valid for the OpenAI chat API (a window can begin with a tool reply whose call
        left with an older unit, or end with a call not answered yet) and their tokens (recounted only
        when something had to change)."""
        safe = chat_safe(messages)
        if all(a is b for a, b in zip(safe, messages, strict=False)) and len(safe) == len(messages):
            return safe, tokens
        return safe, sum(message_tokens(m, self.counter) for m in safe)

    # -- the memory message ----------------------------------------------------------------------------
    def _raw_planned(
        self, query: Query, allowance: int, reference: int, n: int, options: RenderOptions
    ) -> frozenset[int]:
        """The units a shell agent's memory at ``allowance`` would show raw (unit recovery's plan only)."""
        renderer = self.core.renderer
        raw, _ = self.core.with_merges(
            lambda: renderer.raw_units(
                query, allowance, options, n=n, merge_allowance=max(allowance, reference), base=self._base(n)
            ),
            locked=False,
        )
        return raw

    def _base(self, n: int) -> list[Entry]:
        """The timeline of notes ``0..n-1`` as this session last merged it (its stored spans)."""
        return self.core.renderer.timeline.restore(self.spans, n)

    def _render(
        self,
        query: Query,
        allowance: int,
        reference: int,
        n: int,
        options: RenderOptions,
        mode: str,
        *,
        keep_spans: bool = True,
    ) -> Rendering:
        renderer = self.core.renderer
        rendering = self.core.render(  # a merge a model writes is written between attempts, outside the lock
            lambda: renderer.render(
                query,
                allowance,
                mode,  # type: ignore[arg-type]
                options,
                n=n,
                merge_allowance=max(allowance, reference),
                base=self._base(n),
            ),
            locked=False,
        )
        merged = [list(s) for s in rendering.timeline_spans if s[2] > 0]
        if merged != self.spans and options.timeline and keep_spans:
            self._keep("timeline", merged)
            self.spans = merged
        return rendering

    # -- when the newest unit alone does not fit -------------------------------------------------------
    def _cut_with_memory(
        self,
        fixed: list[Message],
        ceiling: int,
        p: int,
        overhead: int,
        first: int,
        options: RenderOptions,
    ) -> AgentContext:
        """``auto``: the newest unit alone does not fit. It is cut to leave ``rho`` of the room to a
        memory of the past units (merged further for this call only), so the agent keeps its trace."""
        reserve = int(self.core.settings.rho * (ceiling - p)) - overhead
        cut = self.cut_newest(fixed, ceiling - reserve - overhead, first)
        if reserve <= 0:
            return dataclasses.replace(cut, ceiling=ceiling)
        query = self.query.query("auto")
        rendering = self._render(query, reserve, reserve, first, options, "auto", keep_spans=False)
        messages = list(fixed)
        if rendering.text:
            messages.append({"role": "user", "content": MEMORY_HEADER + rendering.text})
        messages += cut.messages[len(fixed) :]
        tokens = messages_tokens(messages, self.counter)
        if tokens > ceiling:  # cannot happen by construction; the plain cut is the safe answer
            return self.cut_newest(fixed, ceiling, first)
        return AgentContext(messages, tokens, ceiling, rendering, False, cut.window_units, cut=True, notes=first)

    def cut_newest(self, fixed: list[Message], ceiling: int, first: int) -> AgentContext:
        """The newest unit alone does not fit: cut its longest part (a message's text or a tool call's
        arguments) with a visible mark, again until it fits; when nothing is left to cut, the oldest
        message goes. Tool calls and replies stay paired (what breaks a pair becomes text)."""
        units = self.window.units()
        messages = chat_safe(self.window.step_messages(units[-1]))
        messages = [json.loads(json.dumps(m)) for m in messages]  # cut copies, never the stored step
        while messages and messages_tokens(fixed + messages, self.counter) > ceiling:
            over = messages_tokens(fixed + messages, self.counter) - ceiling
            size, where, call = max(_parts(messages), key=lambda part: part[0])
            if size == 0:  # nothing left to cut: drop the oldest message, keep the rest valid
                del messages[where]
                messages = chat_safe(messages)
                continue
            target = messages[where]["tool_calls"][call]["function"] if call >= 0 else messages[where]
            key = "arguments" if call >= 0 else "content"
            target[key] = self._cut_text(_text_of(target.get(key)), over)
        out = fixed + messages
        return AgentContext(
            out, messages_tokens(out, self.counter), ceiling, None, False, (len(units) - 1,), cut=True, notes=first
        )

    def _cut_text(self, text: str, over: int) -> str:
        """``text`` less at least ``over`` tokens (plus the mark's), ending in a visible mark."""
        ids = self.counter.encode(text)
        keep = max(len(ids) - over - 16, 0)
        mark = f"[… {len(ids) - keep} tokens cut to fit the budget]"
        return self.counter.decode(ids[:keep]).rstrip("\ufffd") + "\n" + mark if keep else mark


def _text_of(value: Any) -> str:
    if isinstance(value, str) or value is None:
        return value or ""
    return json.dumps(value, ensure_ascii=False)


_MARK = "tokens cut to fit the budget]"


def _parts(messages: list[Message]) -> Iterator[tuple[int, int, int]]:
    """(characters, message index, tool call index or -1) of every part that can still be cut: a
    message's content and each tool call's arguments (a part already reduced to its mark cannot)."""
    for i, m in enumerate(messages):
        text = _text_of(m.get("content"))
        yield (0 if text.startswith("[… ") and text.endswith(_MARK) else len(text)), i, -1
        for c, call in enumerate(m.get("tool_calls") or []):
            args = _text_of((call.get("function") or {}).get("arguments")) if isinstance(call, dict) else ""
            if isinstance(call, dict) and isinstance(call.get("function"), dict):
                yield (0 if args.startswith("[… ") and args.endswith(_MARK) else len(args)), i, c
