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

The session is thin: it opens, records, erases and hands out contexts; its rooms do the work:
:mod:`.window` (the one list of recorded steps, units, the recent window), :mod:`.trace` (a shell
agent's command trace), :mod:`.query` (what memory is recovered against) and :mod:`.context` (the
context within the ceiling, and the cuts when the newest unit alone does not fit). Everything of
the store goes through the session's :class:`~flexamem.core.HistoryCore`.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from flexamem.agent.context import AgentContext, Assembler
from flexamem.agent.query import AgentQuery
from flexamem.agent.trace import Trace
from flexamem.agent.window import Window
from flexamem.budget import check_budget
from flexamem.chat import Message
from flexamem.core import HistoryCore
from flexamem.digests import Head
from flexamem.errors import HistoryDroppedError, InvalidInputError, NotFoundError
from flexamem.names import session_history
from flexamem.notes import Step
from flexamem.render.renderer import Query, RenderOptions, check_mode
from flexamem.store.base import Erasure, StepRow
from flexamem.telemetry import DELETE, SEARCH, UPDATE, memory_span
from flexamem.text import clean_text
from flexamem.write.units import ERASED_MARK

AGENT_DEFAULT_MODE = "auto"  # BM25 with an identifier prior; the paper's unit recovery is mode="units"


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
        core.sync()  # reads the session's epoch: from here on a drop of it is refused, never started afresh
        meta = core.meta()  # never creates: a session is created by open()
        if core.epoch is None or meta is None:
            raise HistoryDroppedError(f"agent session {session_id!r} was deleted")
        if "task" not in meta:  # only an interrupted open of an older version left such a row
            raise InvalidInputError(f"agent session {session_id!r} was stored without its task: drop it")
        core.pinned = True  # the meta is of the pinned epoch: _alive() below fails if the session was dropped since
        self.task: str = meta["task"]
        self.system: str = meta.get("system", "")
        self.budget: int = int(meta["budget"])
        self.default_mode = AGENT_DEFAULT_MODE  # a context's mode when none is given (the memory's profile's)
        self._window = Window(core, session_id, self.budget)
        self._query = AgentQuery(core, self.task, self._window)
        self._load_steps()
        # session state read once, then kept in memory and written through (no store read per call)
        self._assembler = Assembler(
            core,
            self._window,
            Trace(core),
            self._query,
            task=self.task,
            system=self.system,
            budget=self.budget,
            started=bool(core.state("memory_started")),
            spans=core.state("timeline") or [],
        )
        self._alive()  # the steps and state read above are of the session whose epoch was pinned
        pending = self._window.left_drafts()
        if pending and not core.read_only:  # units of steps stored before a crash
            core.write(pending, retry=False)

    def _load_steps(self) -> None:
        """Read the session's steps (again, after an erasure rewrote some)."""
        self._erasures = self.core.erasures
        self._window.load(self.core.steps())
        self._query.forget_newest()
        self._last: tuple[tuple[Any, ...], AgentContext] | None = None  # the last context and what it was of

    def _alive(self) -> None:
        """Catch up with the store; :class:`HistoryDroppedError` when the session was deleted (the core
        is pinned). A step needs no call of its own: its write catches up first. After an erasure (here
        or in another process) the steps are read again."""
        with self.core.lock:
            self.core.sync()
            if self.core.erasures != self._erasures:
                self._load_steps()

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
        existing = core.kind()
        if existing is None:
            if task is None or budget is None:  # a read of a session that is not there, as a server's 404
                raise NotFoundError(f"no stored agent session {sid!r}: give task= and budget= to start one")
            task = clean_text(task, "task")
            budget = check_budget(budget)
            meta = {"task": task, "system": system, "budget": budget, "embedder": core.embedder.name}
            core.create("agent", meta, parent=parent)
        elif existing != "agent":
            raise InvalidInputError(f"{hid!r} is not an agent session")
        session = cls(core, sid)
        check_resumed(sid, task, budget, session.task, session.budget)
        return session

    def head(self) -> Head:
        """This session's head (see :meth:`flexamem.Memory.head`): keep it, and pass it to the memory's
        ``verify(head=...)`` later."""
        head = self.core.head()
        assert head is not None  # a session's history row is written when it starts
        return head

    # -- steps ---------------------------------------------------------------------------------------
    @property
    def steps(self) -> list[Step]:
        """The session's steps, in order (a copy)."""
        return self._window.steps

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
        already stored under that id is not recorded again and its number is returned; the same id with
        any other content (action, observation, actor or messages) is refused with
        :class:`RequestConflictError`, nothing stored.
        """
        known = self._window.known(step_id, action, observation, actor, messages)
        if known is not None:
            return known
        with (
            memory_span(UPDATE, self.core.history_id, **{"gen_ai.conversation.id": self.session_id}),
            self._window.pending(action, observation, actor, messages, step_id) as (row, drafts),
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
        known = self._window.known(step_id, action, observation, actor, messages)
        if known is not None:
            return known
        await asyncio.to_thread(self._alive)  # before paying for the records of a deleted session
        with (
            memory_span(UPDATE, self.core.history_id, **{"gen_ai.conversation.id": self.session_id}),
            self._window.pending(action, observation, actor, messages, step_id) as (row, drafts),
        ):
            records = await self.core.awrite_records(drafts)
            await asyncio.to_thread(self.core.write, drafts, records, steps=[row], retry=False)
        return row.n + 1

    def erase(self, step: int, *, reason: str = "", marker: bool = True) -> Erasure:
        """Erase agent step ``step`` (its number, as contexts show it): its action, output and messages
        leave the stored step and the unit that holds it (written again from its other steps), in one
        transaction with the erasure's chain row (see :meth:`flexamem.Memory.erase`). ``marker``: the
        step shows as ``(erased)``. A step this session does not hold: :class:`NotFoundError`."""
        self._alive()
        held = len(self._window)
        if isinstance(step, bool) or not isinstance(step, int) or not 1 <= step <= held:
            raise NotFoundError(f"agent session {self.session_id!r} has no step {step!r} (it has {held})")
        reason = clean_text(reason, "reason", allow_empty=True)
        shown = ERASED_MARK if marker else ""
        old = self._window.recorded[step - 1].step
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

    # -- units and the window (see .window) ------------------------------------------------------------
    def units(self) -> list[list[int]]:
        """Step indexes of each unit (packing is prefix-stable: only the newest unit still grows)."""
        return self._window.units()

    def unit_tokens(self, unit: list[int]) -> int:
        """Tokens of the chat messages recorded by a unit's steps (counted once, when recorded)."""
        return self._window.unit_tokens(unit)

    def step_messages(self, steps: Iterable[int]) -> list[Message]:
        """The chat messages recorded by these steps (indexes into ``steps``), in the order given."""
        return self._window.step_messages(steps)

    def window(self, units: list[list[int]]) -> int:
        """Index of the first unit in the recent window (newest units within B/4, at least one)."""
        return self._window.first(units)

    @property
    def message_count(self) -> int:
        """Chat messages recorded by all steps so far (what a chat adapter has already handed over)."""
        return self._window.message_count

    def is_shell(self) -> bool:
        """Whether this is a shell agent's session: at least half of its steps ran a command line
        (:func:`flexamem.write.units.command_text`). ``auto`` then recovers whole units."""
        return self._window.is_shell()

    def newest_text(self) -> str:
        """The newest unit's raw text: with the task, what this call's memory is recovered against."""
        return self._window.newest_text()

    # -- context (see .query and .context) -------------------------------------------------------------
    def query_vector(self, newest: str | None = None) -> np.ndarray:
        """The agent query's embedding (SPEC 4): task vector + newest unit's vector, normalised.
        The task is embedded once; the newest unit once per distinct text (a repeated call embeds nothing)."""
        return self._query.vector(newest)

    def query(self, mode: str, order: Sequence[int] | None = None) -> Query:
        """What this call's memory is recovered against: the task and the newest unit."""
        return self._query.query(mode, order)

    def fixed_messages(self) -> list[Message]:
        """The system message (if any) and the task: the start of every context."""
        return self._assembler.fixed_messages()

    def cut_newest(self, fixed: list[Message], ceiling: int, first: int) -> AgentContext:
        """The newest unit alone does not fit: cut its longest part (a message's text or a tool call's
        arguments) with a visible mark, again until it fits; when nothing is left to cut, the oldest
        message goes. Tool calls and replies stay paired (what breaks a pair becomes text)."""
        return self._assembler.cut_newest(fixed, ceiling, first)

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
        key = (len(self._window), len(self.core.history), mode, options, tuple(positions or ()), self.core.settings)
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        with memory_span(
            SEARCH, self.core.history_id, **{"gen_ai.conversation.id": self.session_id, "flexamem.mode": mode}
        ) as span:
            context = self._assembler.build(options, mode, positions)
            span.set("flexamem.tokens", context.tokens)
        self._last = (key, context)
        return context

    async def acontext(
        self, options: RenderOptions | None = None, mode: str | None = None, order: Sequence[str] | None = None
    ) -> AgentContext:
        """The async twin of :meth:`context` (CPU work, run in a worker thread)."""
        return await asyncio.to_thread(self.context, options, mode, order)


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
