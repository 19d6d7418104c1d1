"""Agent sessions (SPEC sections 1, 3, 4): steps in, a budgeted chat context out, at every call.

    agent = mem.agent(task="Reset friends on venmo ...", budget=4096, system="You are ...")
    agent.step(action="...", observation="...")
    messages = agent.messages()   # system, task, one memory message, the recent window

Steps are packed into units of up to 1,000 tokens. The recent window is the longest run of newest
units within ``B/4`` tokens (always the newest unit) and is shown unchanged. A unit is written as a
note when it leaves the window. Until the full history would exceed ``floor(0.95 * B)`` the context
is the history itself (pass-through); from the first call that would exceed it, memory is on: the
timeline of records plus unit recovery fills the allowance ``A = B_bar - |P| - |W|``. Merges are sized
by ``max(A, A_ref)`` where ``A_ref`` assumes a full ``B/4`` window, and persist for the episode; when
the newest unit alone exceeds ``B/4`` the oldest entries are hidden for that call only.

Everything (task, steps, merged records, whether memory started) lives in the store, so a restarted
process continues the same session with ``mem.agent(session_id=...)``.

If even the fixed prompt plus the newest unit cannot fit, the newest unit's longest message is cut
with a visible mark (``[… N tokens cut to fit the budget]``); the paper's modes then show no memory,
``auto`` cuts deeper to keep ``rho`` of the room for a memory of the past units; if the fixed
prompt alone cannot fit, :class:`BudgetError` is raised. The context never exceeds the ceiling.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flexamem.budget import check_budget
from flexamem.chat import Message, chat_safe, shown_as_text, validate_messages
from flexamem.core import HistoryCore
from flexamem.digests import Head
from flexamem.errors import (
    BudgetError,
    HistoryDroppedError,
    InvalidInputError,
    NotFoundError,
    ReadOnlyStoreError,
    RequestConflictError,
    StoreFullError,
)
from flexamem.names import session_history
from flexamem.notes import Step, UnitDraft
from flexamem.render import format as fmt
from flexamem.render.messages import MESSAGE_OVERHEAD, message_tokens, messages_tokens
from flexamem.render.renderer import Query, RenderOptions, check_mode
from flexamem.render.result import Rendering
from flexamem.render.timeline import Entry
from flexamem.store.base import Erasure, StepRow
from flexamem.telemetry import DELETE, SEARCH, UPDATE, memory_span
from flexamem.text import clean_field, clean_text, code_terms, joined_query_terms, query_terms
from flexamem.tokens import LineCounts
from flexamem.write.units import ERASED_MARK, agent_unit, command_text, first_line, pack_steps, step_text_tokens

AGENT_DEFAULT_MODE = "auto"  # BM25 with an identifier prior; the paper's unit recovery is mode="units"
MEMORY_HEADER = "Memory of earlier steps (records of past units; some recovered verbatim):\n"
TRACE_HEADER = "Commands run before the recent steps, oldest first:\n"
TRACE_FIRST_LINE_TOKENS = 40  # a command's first line in the trace is cut to this


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


@dataclass(frozen=True)
class Recorded:
    """One step as its session holds it: the step, its chat messages (shown while it is in the recent
    window), and what is counted of it once, when it is recorded."""

    step: Step
    messages: list[Message]
    raw_tokens: int  # the step's text as a unit holds it (both blocks and their separators)
    msg_tokens: int  # its messages, as the chat API counts them
    command: str | None  # its command (write.units.command_text), or None


class AgentSession:
    """A persistent agent episode: its own history of the store, under the memory's history (tenant).

    ``core`` is the session history's :class:`~flexamem.core.HistoryCore` (shared with ``Memory``).
    A step and any unit it pushes out of the recent window are stored in one transaction; a caller's
    ``step_id`` makes a retried step a no-op. One process drives a session at a time: a second
    driver's step fails with :class:`ConcurrentWriteError` and nothing of it is stored.
    """

    def __init__(self, core: HistoryCore, session_id: str) -> None:
        self.core = core
        self.session_id = session_id
        self.counter = core.counter
        self._memory_header_tokens = self.counter.count(MEMORY_HEADER)  # constant texts, counted once
        self._trace_header_tokens = self.counter.count(TRACE_HEADER)
        core.sync()  # reads the session's epoch: from here on a drop of it is refused, never started afresh
        found = core.store.history_meta(core.history_id)  # never creates: a session is created by open()
        if core.epoch is None or found is None:
            raise HistoryDroppedError(f"agent session {session_id!r} was deleted")
        if "task" not in found[1]:  # only an interrupted open of an older version left such a row
            raise InvalidInputError(f"agent session {session_id!r} was stored without its task: drop it")
        core.pinned = True
        meta = found[1]  # of the pinned epoch: _alive() below fails if the session was dropped since
        self.task: str = meta["task"]
        self.system: str = meta.get("system", "")
        self.budget: int = int(meta["budget"])
        self._fixed_tokens: tuple[tuple[str | None, str], int] | None = None  # (system, task) and their count
        self.default_mode = AGENT_DEFAULT_MODE  # a context's mode when none is given (the memory's profile's)
        self._load_steps()
        self._task_vector: np.ndarray | None = None
        self._task_terms: list[str] | None = None
        self._line_counts = LineCounts()  # trace lines' tokens, kept across calls
        # session state read once, then kept in memory and written through (no store read per call)
        self._started = bool(core.store.get_state(core.history_id, "memory_started"))
        self._spans: list[list[int]] = core.store.get_state(core.history_id, "timeline") or []
        self._alive()  # the steps and state read above are of the session whose epoch was pinned
        pending = self._left_drafts()
        if pending and not core.store.read_only:  # units of steps stored before a crash
            core.write(pending, retry=False)

    @property
    def steps(self) -> list[Step]:
        """The session's steps, in order (a copy)."""
        return [r.step for r in self._recorded]

    def _load_steps(self) -> None:
        """Read the session's steps (again, after an erasure rewrote some): everything kept of them."""
        self._recorded: list[Recorded] = []  # every step as this session holds it, in order (one list)
        self._step_ids: dict[str, int] = {}
        self._trace_lines: dict[int, tuple[str, int, str, int]] = {}  # step index -> its trace forms
        self._last: tuple[tuple[Any, ...], AgentContext] | None = None  # the last context and what it was of
        self._newest_vector: tuple[str, np.ndarray] | None = None  # the query vector, until the newest unit changes
        self._erasures = self.core.erasures
        for row in self.core.store.load_steps(self.core.history_id):
            step, msgs = _stored_step(row)
            self._remember(step, msgs)
            if row.step_id is not None:
                self._step_ids[row.step_id] = row.n + 1

    def _alive(self) -> None:
        """Catch up with the store; :class:`HistoryDroppedError` when the session was deleted (the core
        is pinned). A step needs no call of its own: its write catches up first. After an erasure (here
        or in another process) the steps are read again."""
        with self.core.lock:
            self.core.sync()
            if self.core.erasures != self._erasures:
                self._load_steps()

    def erase(self, step: int, *, reason: str = "", marker: bool = True) -> Erasure:
        """Erase agent step ``step`` (its number, as contexts show it): its action, output and messages
        leave the stored step and the unit that holds it (written again from its other steps), in one
        transaction with the erasure's chain row (see :meth:`flexamem.Memory.erase`). ``marker``: the
        step shows as ``(erased)``. A step this session does not hold: :class:`NotFoundError`."""
        self._alive()
        if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step <= len(self._recorded):
            raise NotFoundError(
                f"agent session {self.session_id!r} has no step {step!r} (it has {len(self._recorded)})"
            )
        reason = clean_text(reason, "reason", allow_empty=True)
        shown = ERASED_MARK if marker else ""
        old = self._recorded[step - 1].step
        data = {
            "action": shown,
            "observation": "",
            "actor": old.actor,
            "messages": [{"role": "assistant", "content": shown}],
        }
        row = StepRow(step - 1, None, json.dumps(data))
        with memory_span(DELETE, self.core.history_id, **{"gen_ai.conversation.id": self.session_id}):
            done = self.core.erase(
                "step", [f"{self.session_id}:{step}"], reason, lambda _n, b: b.step == step, marker=marker, steps=[row]
            )
        with self.core.lock:
            self.core.sync()
            self._load_steps()
        return done

    def _set_state(self, key: str, value: Any) -> None:
        """Session state (written through; a read-only store keeps it in this process only)."""
        with contextlib.suppress(ReadOnlyStoreError, StoreFullError):  # the context is served all the same
            self.core.store.set_state(self.core.history_id, key, value, epoch=self.core.epoch)

    @classmethod
    def open(
        cls,
        core_factory: Callable[[str], HistoryCore],
        parent: str,
        *,
        task: str | None,
        budget: int | None,
        system: str,
        session_id: str | None,
    ) -> AgentSession:
        """Create a new session or resume a stored one (``core_factory(history_id)`` -> its core)."""
        if session_id is None and (task is None or budget is None):
            raise InvalidInputError("give task= and budget= to start an agent session, or session_id= to resume one")
        sid = clean_text(session_id, "session_id").strip() if session_id is not None else uuid.uuid4().hex[:12]
        system = clean_text(system, "system", allow_empty=True)
        hid = session_history(parent, sid)
        core = core_factory(hid)
        existing = core.store.history_kind(hid)
        if existing is None:
            if task is None or budget is None:  # a read of a session that is not there, as a server's 404
                raise NotFoundError(f"no stored agent session {sid!r}: give task= and budget= to start one")
            task = clean_text(task, "task")
            budget = check_budget(budget)
            meta = {"task": task, "system": system, "budget": budget, "embedder": core.embedder.name}
            core.store.ensure_history(hid, "agent", meta, parent=parent)
        elif existing != "agent":
            raise InvalidInputError(f"{hid!r} is not an agent session")
        session = cls(core, sid)
        check_resumed(sid, task, budget, session.task, session.budget)
        return session

    def head(self) -> Head:
        """This session's head (see :meth:`flexamem.Memory.head`): keep it, and pass it to the memory's
        ``verify(head=...)`` later."""
        with self.core.lock:
            head = self.core.store.head(self.core.history_id)
        assert head is not None  # a session's history row is written when it starts
        return head

    # -- steps ---------------------------------------------------------------------------------------
    def step(
        self,
        action: str,
        observation: str = "",
        *,
        actor: str = "assistant",
        messages: Sequence[Message] | None = None,
        step_id: str | None = None,
    ) -> int:
        """Record one step: the agent's action and what came back. Returns the step number.

        ``messages`` (optional) are the step's original chat messages, shown unchanged while the step
        is in the recent window; by default an assistant message with the action and a user message
        with the observation. ``step_id`` (optional, the caller's) makes a retry idempotent: a step
        already stored under that id is not recorded again and its number is returned.
        """
        known = self._known(step_id, action, observation)
        if known is not None:
            return known
        with (
            memory_span(UPDATE, self.core.history_id, **{"gen_ai.conversation.id": self.session_id}),
            self._pending(action, observation, actor, messages, step_id) as (row, drafts),
        ):
            self.core.write(drafts, [] if not drafts else None, steps=[row], retry=False)
        return row.n + 1

    async def astep(
        self,
        action: str,
        observation: str = "",
        *,
        actor: str = "assistant",
        messages: Sequence[Message] | None = None,
        step_id: str | None = None,
    ) -> int:
        """The async twin of :meth:`step`: the same notes, records written by awaited model calls.
        Await each step before the next (steps are ordered)."""
        known = self._known(step_id, action, observation)
        if known is not None:
            return known
        await asyncio.to_thread(self._alive)  # before paying for the records of a deleted session
        with (
            memory_span(UPDATE, self.core.history_id, **{"gen_ai.conversation.id": self.session_id}),
            self._pending(action, observation, actor, messages, step_id) as (row, drafts),
        ):
            records = await self.core.awrite_records(drafts)
            await asyncio.to_thread(self.core.write, drafts, records, steps=[row], retry=False)
        return row.n + 1

    def _known(self, step_id: str | None, action: str, observation: str) -> int | None:
        if step_id is None:
            return None
        step_id = clean_text(step_id, "step_id")
        number = self._step_ids.get(step_id)
        if number is not None:
            stored = self._recorded[number - 1].step
            if (stored.action, stored.observation) != (clean_text(action, "action"), observation):
                raise RequestConflictError(
                    f"step id {step_id!r} was already recorded with another action or observation"
                )
        return number

    def _new_step(
        self, action: str, observation: str, actor: str, messages: Sequence[Message] | None, step_id: str | None
    ) -> tuple[Step, list[Message], StepRow]:
        """Validate one step and build what is stored of it (nothing is stored here)."""
        action = clean_text(action, "action")
        observation = clean_text(observation, "observation", allow_empty=True)
        step = Step(len(self._recorded) + 1, action, observation, clean_field(actor, "actor", speaker=True))
        msgs = (
            validate_messages(messages)
            if messages is not None
            else [
                {"role": "assistant", "content": action},
                {"role": "user", "content": observation},
            ]
        )
        data = {"action": step.action, "observation": step.observation, "actor": step.actor, "messages": msgs}
        row = StepRow(
            len(self._recorded), clean_text(step_id, "step_id") if step_id is not None else None, json.dumps(data)
        )
        return step, msgs, row

    @contextlib.contextmanager
    def _pending(
        self, action: str, observation: str, actor: str, messages: Sequence[Message] | None, step_id: str | None
    ) -> Iterator[tuple[StepRow, list[UnitDraft]]]:
        """Validate the step, take it into the session's view and yield its stored row with the units
        it pushes out of the window, for the caller to store together; if that fails, the view is as
        before (and nothing of the step is stored)."""
        step, msgs, row = self._new_step(action, observation, actor, messages, step_id)
        self._remember(step, msgs)
        try:
            yield row, self._left_drafts()
        except BaseException:
            self._recorded.pop()
            self._trace_lines.pop(len(self._recorded), None)
            raise
        if row.step_id is not None:
            self._step_ids[row.step_id] = step.number

    async def acontext(
        self, options: RenderOptions | None = None, mode: str | None = None, order: Sequence[str] | None = None
    ) -> AgentContext:
        """The async twin of :meth:`context` (CPU work, run in a worker thread)."""
        return await asyncio.to_thread(self.context, options, mode, order)

    def _remember(self, step: Step, msgs: list[Message]) -> None:
        self._recorded.append(
            Recorded(
                step,
                msgs,
                step_text_tokens(step, self.counter),
                sum(message_tokens(m, self.counter) for m in msgs),
                command_text(step.action),
            )
        )

    def units(self) -> list[list[int]]:
        """Step indexes of each unit (packing is prefix-stable: only the newest unit still grows)."""
        return pack_steps([r.raw_tokens for r in self._recorded], self.core.settings.agent_unit_tokens)

    def unit_tokens(self, unit: list[int]) -> int:
        """Tokens of the chat messages recorded by a unit's steps (counted once, when recorded)."""
        return sum(self._recorded[i].msg_tokens for i in unit)

    def step_messages(self, steps: Iterable[int]) -> list[Message]:
        """The chat messages recorded by these steps (indexes into ``steps``), in the order given."""
        return [m for i in steps for m in self._recorded[i].messages]

    def window(self, units: list[list[int]]) -> int:
        """Index of the first unit in the recent window (newest units within B/4, at least one)."""
        limit, total, first = self.budget // 4, 0, len(units)
        for k in range(len(units) - 1, -1, -1):
            total += self.unit_tokens(units[k])
            if total > limit and k < len(units) - 1:
                break
            first = k
        return first

    def _left_drafts(self) -> list[UnitDraft]:
        """Units that have left the recent window and are not written yet (in order)."""
        units = self.units()
        first = self.window(units)
        written = len(self.core.history)
        return [
            agent_unit([self._recorded[i].step for i in units[k]], unit_id=f"u{k + 1}", session_id=self.session_id)
            for k in range(written, first)
        ]

    @property
    def message_count(self) -> int:
        """Chat messages recorded by all steps so far (what a chat adapter has already handed over)."""
        return sum(len(r.messages) for r in self._recorded)

    # -- context ---------------------------------------------------------------------------------------
    def fixed_messages(self) -> list[Message]:
        out: list[Message] = []
        if self.system:
            out.append({"role": "system", "content": self.system})
        out.append({"role": "user", "content": self.task})
        return out

    def messages(self, options: RenderOptions | None = None, mode: str | None = None) -> list[Message]:
        return self.context(options, mode).messages

    def context(
        self, options: RenderOptions | None = None, mode: str | None = None, order: Sequence[str] | None = None
    ) -> AgentContext:
        """Build this call's context within ``floor(0.95 * budget)`` (see the module docstring).

        ``mode`` is ``"auto"`` (the default: pieces ranked by stemmed BM25 against the task with the
        newest unit, lifted when they hold identifiers, under a timeline at ``rho``; the best measured on
        the development trajectories, docs/EVALUATION_AGENTS.md), ``"units"`` (the paper's unit
        recovery) or ``"pieces"`` (the paper's piece recovery). ``order`` (unit ids or labels, most
        relevant first) replaces unit recovery's candidate order, as in :meth:`Memory.render`: another
        memory's ranking rendered with the timeline and fit-or-degrade. A repeated call with no new
        step returns the same context without rendering again. Without ``mode``, the memory's profile's
        (:attr:`default_mode`).
        """
        mode = self.default_mode if mode is None else mode
        options = check_mode(mode, options)
        self._alive()
        with self.core.lock:  # resolved against the notes as just caught up with
            positions = self.core.positions(order) if order is not None else None
        key = (len(self._recorded), len(self.core.history), mode, options, tuple(positions or ()), self.core.settings)
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        with memory_span(
            SEARCH, self.core.history_id, **{"gen_ai.conversation.id": self.session_id, "flexamem.mode": mode}
        ) as span:
            context = self._context(options, mode, positions)
            span.set("flexamem.tokens", context.tokens)
        self._last = (key, context)
        return context

    def _context(self, options: RenderOptions, mode: str, positions: Sequence[int] | None = None) -> AgentContext:
        ceiling = self.core.ceiling(self.budget)
        fixed = self.fixed_messages()
        if self._fixed_tokens is None or self._fixed_tokens[0] != (self.system, self.task):
            self._fixed_tokens = ((self.system, self.task), messages_tokens(fixed, self.counter))
        p = self._fixed_tokens[1]
        if p >= ceiling:
            raise BudgetError(f"budget {self.budget} leaves no room: system and task take {p} of {ceiling} tokens")
        units = self.units()
        history, history_tokens = self._chat_safe(
            self.step_messages(range(len(self._recorded))), sum(r.msg_tokens for r in self._recorded)
        )
        started = self._started
        if not started and p + history_tokens <= ceiling:
            return AgentContext(
                fixed + history,
                p + history_tokens,
                ceiling,
                window_units=tuple(range(len(units))),
                notes=len(self.core.history),
            )
        if not started:
            self._set_state("memory_started", True)
            self._started = True
        first = min(self.window(units), len(self.core.history))  # units not written (read-only) stay raw
        window, w = self._chat_safe(
            self.step_messages(i for k in range(first, len(units)) for i in units[k]),
            sum(self.unit_tokens(units[k]) for k in range(first, len(units))),
        )
        header = self._memory_header_tokens
        overhead = MESSAGE_OVERHEAD + header + 1  # the memory message's framing, header and line break
        allowance = ceiling - p - w - overhead
        reference = ceiling - p - self.budget // 4 - overhead
        if allowance <= 0:
            if mode == "auto" and first > 0:
                return self._cut_with_memory(fixed, ceiling, p, overhead, first, options)
            return self.cut_newest(fixed, ceiling, first)
        query = self.query(mode, positions)
        trace, trace_tokens, shown = "", 0, set[int]()
        upto = units[first][0] if first < len(units) else len(self._recorded)
        if mode == "auto" and options.commands and first > 0:
            if options.trace_unshown and query.shell and options.shell_units:
                planned = self._raw_planned(query, allowance, reference, first, options)
                shown = {i for k in planned for i in units[k]}  # steps whose units are raw: no trace line
            trace, trace_tokens = self._trace(upto, allowance, shown)
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
                fuller = compose(*self._trace(upto, allowance, now))
                messages, tokens = fuller if fuller[1] <= ceiling else (messages, tokens)
        if tokens > ceiling:  # the join cost a token more than counted: leave the trace out
            messages, tokens = compose("", 0)
        return AgentContext(messages, tokens, ceiling, rendering, False, tuple(range(first, len(units))), notes=first)

    def _trace(self, upto: int, allowance: int, skip: set[int] | frozenset[int] = frozenset()) -> tuple[str, int]:
        """The command trace of steps ``0..upto-1`` but ``skip`` (steps the memory shows raw) within
        ``agent_trace_share`` of the allowance: every command's first
        line (``step N: command``), newest first while they fit; then, newest first, whole
        commands (up to ``agent_trace_line_tokens`` each) in place of first lines while room is left.
        Shown oldest first; with its tokens and the line break after it (``("", 0)`` when empty),
        counted from its lines' kept counts."""
        s = self.core.settings
        room = int(s.agent_trace_share * allowance) - self._trace_header_tokens
        chosen: list[list[Any]] = []  # [line shown, its tokens, the whole command, its tokens], newest first
        for i in range(upto - 1, -1, -1):
            if self._recorded[i].command is None or i in skip:
                continue
            entry = self._trace_entry(i)
            if entry[1] + 1 > room:
                break
            chosen.append(list(entry))
            room -= entry[1] + 1
        for line in chosen:
            if 0 < line[3] - line[1] <= room:
                room -= line[3] - line[1]
                line[0] = line[2]
        if not chosen:
            return "", 0
        lines = [TRACE_HEADER[:-1], *(line[0] for line in reversed(chosen))]
        return "\n".join(lines), self.counter.count_lines([*lines, ""], self._line_counts)

    def _trace_entry(self, i: int) -> tuple[str, int, str, int]:
        """Step ``i``'s trace forms and their tokens (first line, tokens, whole command, tokens); the
        step must have a command."""
        if i not in self._trace_lines:
            whole, s = self._recorded[i].command, self.core.settings
            assert whole is not None
            head = f"step {self._recorded[i].step.number}: "
            short = self._cut_to(
                head + fmt.body(first_line(whole) or ""),  # the command read once, when the step was recorded
                min(TRACE_FIRST_LINE_TOKENS, s.agent_trace_line_tokens),
                " …",
            )
            # cut as written, then marked: the marks (one token a line) do not shorten what is shown
            long = head + fmt.body(self._cut_to(whole, s.agent_trace_line_tokens - self.counter.count(head), " …"))
            self._trace_lines[i] = (short, self.counter.count(short), long, self.counter.count(long))
        return self._trace_lines[i]

    def _cut_to(self, text: str, limit: int, mark: str = "") -> str:
        """``text`` cut to at most ``limit`` tokens (``mark`` appended, within the limit, when cut)."""
        ids = self.counter.head(text, limit + 1)  # enough to tell whether it is longer, and where to cut
        if len(ids) <= limit:
            return text
        keep = max(limit - 2, 1) if mark else limit  # room for the mark, whatever it merges with
        return self.counter.decode(ids[:keep]).rstrip("\ufffd") + mark

    def _chat_safe(self, messages: list[Message], tokens: int) -> tuple[list[Message], int]:
        """``messages`` valid for the OpenAI chat API (a window can begin with a tool reply whose call
        left with an older unit, or end with a call not answered yet) and their tokens (recounted only
        when something had to change)."""
        safe = chat_safe(messages)
        if all(a is b for a, b in zip(safe, messages, strict=False)) and len(safe) == len(messages):
            return safe, tokens
        return safe, sum(message_tokens(m, self.counter) for m in safe)

    def is_shell(self) -> bool:
        """Whether this is a shell agent's session: at least half of its steps ran a command line
        (:func:`flexamem.write.units.command_text`). ``auto`` then recovers whole units."""
        return 2 * sum(r.command is not None for r in self._recorded) >= len(self._recorded) > 0

    def newest_text(self) -> str:
        """The newest unit's raw text: with the task, what this call's memory is recovered against."""
        return agent_unit([self._recorded[i].step for i in self.units()[-1]], unit_id="newest").raw

    def query_vector(self, newest: str | None = None) -> np.ndarray:
        """The agent query's embedding (SPEC 4): task vector + newest unit's vector, normalised.
        The task is embedded once; the newest unit once per distinct text (a repeated call embeds nothing)."""
        newest = self.newest_text() if newest is None else newest
        if self._newest_vector is None or self._newest_vector[0] != newest:
            if self._task_vector is None:
                self._task_vector = self.core.embedder.embed([self.task])[0]
            v = self._task_vector + self.core.embedder.embed([newest])[0]
            self._newest_vector = (newest, np.asarray(v / max(float(np.linalg.norm(v)), 1e-12), dtype=np.float32))
        return self._newest_vector[1]

    def query(self, mode: str, order: Sequence[int] | None = None) -> Query:
        """What this call's memory is recovered against: the task and the newest unit."""
        newest = self.newest_text()
        shell = mode == "auto" and self.is_shell()
        # the shell path embeds the newest unit's head only, and ranks no pieces (no names of code needed)
        head = self._cut_to(newest, self.core.settings.agent_query_tokens) if shell else newest
        if self._task_terms is None:
            self._task_terms = query_terms(self.task)
        newest_terms = query_terms(newest)
        return Query(
            text=self.task + "\n" + newest,
            terms=joined_query_terms((self.task, newest), (self._task_terms, newest_terms)),
            excerpt_terms=newest_terms,
            vector=lambda: self.query_vector(head),
            agent=True,
            order=order,
            code=() if shell else list(dict.fromkeys(code_terms(self.task + "\n" + newest))),
            shell=shell,
        )

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
        return self.core.renderer.timeline.restore(self._spans, n)

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
        if merged != self._spans and options.timeline and keep_spans:
            self._set_state("timeline", merged)
            self._spans = merged
        return rendering

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
        rendering = self._render(self.query("auto"), reserve, reserve, first, options, "auto", keep_spans=False)
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
        units = self.units()
        messages = chat_safe(self.step_messages(units[-1]))
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


def check_resumed(sid: str, task: object, budget: object, started_task: str, started_budget: int) -> None:
    """Resuming session ``sid`` (started with ``started_task`` and ``started_budget``) with a ``task`` or
    ``budget`` given: refused (:class:`InvalidInputError`) unless they are those it was started with."""
    if task is not None and task != started_task:
        raise InvalidInputError(f"agent session {sid!r} was started with another task")
    if budget is not None and check_budget(budget) != started_budget:
        raise InvalidInputError(
            f"agent session {sid!r} was started with budget {started_budget}: resume it without budget= "
            "(or with the same), or start a new session for another budget"
        )


def _stored_step(row: StepRow) -> tuple[Step, list[Message]]:
    """A stored step and its messages. Messages an older version stored without checking them fully
    are shown as text (:func:`flexamem.chat.shown_as_text`), so such a session renders."""
    try:
        data = json.loads(row.data)
    except RecursionError:
        data = {"action": "(a step nested too deep to be read back)", "observation": "", "actor": "assistant"}
    step = Step(row.n + 1, data["action"], data["observation"], data["actor"])
    try:
        msgs = shown_as_text(data.get("messages"))
    except RecursionError:  # nested too deep to even look at: the step's own text stands in
        msgs = [{"role": "assistant", "content": step.action}, {"role": "user", "content": step.observation}]
    return step, msgs


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
