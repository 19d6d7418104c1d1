"""An agent session's steps as it holds them, their units, and which units are the recent window.

Every step is kept once, in one list of :class:`Recorded` entries: the step, its chat messages and
what is counted of it when it is recorded. Units, the window, a unit's messages and the units that
have left the window are all read from that list, so a step that could not be stored is undone by
taking its one entry off the end (:meth:`Window.pending`).

Steps are packed into units of up to ``agent_unit_tokens`` tokens (prefix-stable: only the newest
unit still grows). The recent window is the longest run of newest units within ``B/4`` tokens (at
least the newest unit); a unit is written as a note when it leaves it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from flexamem.chat import Message, shown_as_text, validate_messages
from flexamem.core import HistoryCore
from flexamem.errors import RequestConflictError
from flexamem.notes import Step, UnitDraft
from flexamem.render.messages import message_tokens
from flexamem.store.base import StepRow
from flexamem.text import clean_field, clean_text
from flexamem.write.units import agent_unit, command_text, pack_steps, step_text_tokens


@dataclass(frozen=True)
class Recorded:
    """One step as its session holds it: the step, its chat messages (shown while it is in the recent
    window), and what is counted of it once, when it is recorded."""

    step: Step
    messages: list[Message]
    raw_tokens: int  # the step's text as a unit holds it (both blocks and their separators)
    msg_tokens: int  # its messages, as the chat API counts them
    command: str | None  # its command (write.units.command_text), or None


class Window:
    """The recorded steps of one session (one list), the ids callers gave them, and the recent window.

    ``core`` is the session's history: its settings (``agent_unit_tokens``) and how many units are
    written as notes."""

    def __init__(self, core: HistoryCore, session_id: str, budget: int) -> None:
        self.core = core
        self.counter = core.counter
        self.session_id = session_id
        self.budget = budget
        self.recorded: list[Recorded] = []  # every step as this session holds it, in order
        self.ids: dict[str, int] = {}  # a caller's step id -> the step's number

    def load(self, rows: Iterable[StepRow]) -> None:
        """Hold the stored steps ``rows`` (again, after an erasure rewrote some) in place of any held."""
        self.recorded, self.ids = [], {}
        for row in rows:
            step, msgs = stored_step(row)
            self.remember(step, msgs)
            if row.step_id is not None:
                self.ids[row.step_id] = row.n + 1

    def __len__(self) -> int:
        return len(self.recorded)

    @property
    def steps(self) -> list[Step]:
        """The steps, in order (a copy)."""
        return [r.step for r in self.recorded]

    def remember(self, step: Step, msgs: list[Message]) -> None:
        self.recorded.append(
            Recorded(
                step,
                msgs,
                step_text_tokens(step, self.counter),
                sum(message_tokens(m, self.counter) for m in msgs),
                command_text(step.action),
            )
        )

    # -- recording a step ------------------------------------------------------------------------------
    def known(
        self,
        step_id: str | None,
        action: str,
        observation: str,
        actor: str = "assistant",
        messages: Sequence[Message] | None = None,
    ) -> int | None:
        """The number of the step already recorded under ``step_id`` (None: none is), after checking it
        was recorded with this very content: its action, observation, actor and chat messages (given,
        or the defaults made from the action and observation) as they are stored; a replay with any
        other is refused (:class:`RequestConflictError`: nothing stored, do not retry)."""
        if step_id is None:
            return None
        step_id = clean_text(step_id, "step_id")
        number = self.ids.get(step_id)
        if number is not None:
            held = self.recorded[number - 1]
            step, msgs, _row = self.new_step(action, observation, actor, messages, step_id)
            for what, stored, given in (
                ("another action", held.step.action, step.action),
                ("another observation", held.step.observation, step.observation),
                ("another actor", held.step.actor, step.actor),
                ("other messages", held.messages, msgs),
            ):
                if stored != given:
                    raise RequestConflictError(
                        f"step id {step_id!r} was already recorded (step {number}) with {what}: "
                        "nothing was stored; give this step an id of its own"
                    )
        return number

    def new_step(
        self, action: str, observation: str, actor: str, messages: Sequence[Message] | None, step_id: str | None
    ) -> tuple[Step, list[Message], StepRow]:
        """Validate one step and build what is stored of it (nothing is stored here)."""
        action = clean_text(action, "action")
        observation = clean_text(observation, "observation", allow_empty=True)
        step = Step(len(self.recorded) + 1, action, observation, clean_field(actor, "actor", speaker=True))
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
            len(self.recorded), clean_text(step_id, "step_id") if step_id is not None else None, json.dumps(data)
        )
        return step, msgs, row

    @contextlib.contextmanager
    def pending(
        self, action: str, observation: str, actor: str, messages: Sequence[Message] | None, step_id: str | None
    ) -> Iterator[tuple[StepRow, list[UnitDraft]]]:
        """Validate the step, take it into the window and yield its stored row with the units it
        pushes out of the window, for the caller to store together; if that fails, the step's one entry
        is taken off again (and nothing of it is stored)."""
        step, msgs, row = self.new_step(action, observation, actor, messages, step_id)
        self.remember(step, msgs)
        try:
            yield row, self.left_drafts()
        except BaseException:
            self.recorded.pop()
            raise
        if row.step_id is not None:
            self.ids[row.step_id] = step.number

    # -- units and the window --------------------------------------------------------------------------
    def units(self) -> list[list[int]]:
        """Step indexes of each unit (packing is prefix-stable: only the newest unit still grows)."""
        return pack_steps([r.raw_tokens for r in self.recorded], self.core.settings.agent_unit_tokens)

    def unit_tokens(self, unit: list[int]) -> int:
        """Tokens of the chat messages recorded by a unit's steps (counted once, when recorded)."""
        return sum(self.recorded[i].msg_tokens for i in unit)

    def step_messages(self, steps: Iterable[int]) -> list[Message]:
        """The chat messages recorded by these steps (indexes into ``steps``), in the order given."""
        return [m for i in steps for m in self.recorded[i].messages]

    def first(self, units: list[list[int]]) -> int:
        """Index of the first unit in the recent window (newest units within B/4, at least one)."""
        limit, total, first = self.budget // 4, 0, len(units)
        for k in range(len(units) - 1, -1, -1):
            total += self.unit_tokens(units[k])
            if total > limit and k < len(units) - 1:
                break
            first = k
        return first

    def left_drafts(self) -> list[UnitDraft]:
        """Units that have left the recent window and are not written yet (in order)."""
        units = self.units()
        first = self.first(units)
        written = len(self.core.history)
        return [
            agent_unit([self.recorded[i].step for i in units[k]], unit_id=f"u{k + 1}", session_id=self.session_id)
            for k in range(written, first)
        ]

    @property
    def message_count(self) -> int:
        """Chat messages recorded by all steps so far."""
        return sum(len(r.messages) for r in self.recorded)

    @property
    def recorded_tokens(self) -> int:
        """Tokens of the chat messages recorded by all steps so far."""
        return sum(r.msg_tokens for r in self.recorded)

    def is_shell(self) -> bool:
        """Whether this is a shell agent's session: at least half of its steps ran a command line."""
        return 2 * sum(r.command is not None for r in self.recorded) >= len(self.recorded) > 0

    def newest_text(self) -> str:
        """The newest unit's raw text."""
        return agent_unit([self.recorded[i].step for i in self.units()[-1]], unit_id="newest").raw


def stored_step(row: StepRow) -> tuple[Step, list[Message]]:
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
