"""The LLM-built baselines as memories of the agent harness (trajectory replay).

Each keeps the recent window as every method does and builds its memory of the units that left it,
incrementally, as they are written (one note, summary update, label and compression, or gist per unit);
the query is the task with the newest unit. The memory is one user message before the window, and the
context never exceeds the ceiling (lines of the memory are dropped, oldest first, until it fits).
Summary+A-Mem gives the summary 70% of the allowance here (the paper's agent setting). Sculptor's tool
schemas are counted in the context's tokens (they would sit in the agent's request).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from flexamem import Note
from flexamem.chat import Message
from flexamem.llm.client import ChatModel
from flexamem.render import format as fmt
from flexamem.render.messages import message_tokens, messages_tokens
from flexamem_bench.baselines.ledger import Ledger
from flexamem_bench.baselines.memories import AFM, AMem, Incremental, MemGAS, ReadAgent, Summary
from flexamem_bench.baselines.reader import AFM_HALF_LIFE, AFM_THRESHOLDS, SUMMARY_WORDS
from flexamem_bench.baselines.sculptor import Fragments, manage, with_tools
from flexamem_bench.replay import Method, StepContext
from flexamem_bench.trajectories import Trajectory

HEADER = "Memory of earlier steps:\n"
AGENT_SUMMARY_SHARE = 0.7


class Baseline(Method):
    """The shared part: the window, the written notes, the spans, the ledger, fitting the memory."""

    def __init__(self, traj: Trajectory, budget: int, model: ChatModel) -> None:
        super().__init__(traj, budget)
        self.ledger = Ledger(model)
        self.built = 0  # notes already folded into this baseline's memory
        self.memories: list[Incremental] = []  # what each unit that leaves the window is added to
        self.embedder = self.session.core.embedder

    def notes(self, first: int) -> list[Note]:
        notes = self.session.core.notes()[:first]
        for note in notes[self.built :]:
            self.add(note)
        self.built = max(self.built, len(notes))
        return notes

    def add(self, note: Note) -> None:
        for memory in self.memories:
            memory.add(note, self.ledger)

    def question(self) -> str:
        """What a read-time model call is asked about: the task and the newest unit (its first 300 tokens)."""
        s = self.session
        return s.task + "\n" + s.counter.decode(s.counter.encode(s.newest_text())[:300])

    def note_spans(self, notes: list[Note]) -> list[np.ndarray]:
        """MiniLM vectors of each note's 150-token spans (computed once per note)."""
        return [self.spans(n) for n in notes]

    def compose(self, lines: list[str], represented: set[int]) -> StepContext:
        """Fixed prompt, one memory message of ``lines`` (oldest dropped while over the ceiling), window."""
        fixed, _, ceiling = self.fixed()
        units, first, window = self.window()
        represented = represented | set(range(first, len(units)))

        def build(kept: list[str]) -> list[Message]:
            memory = [{"role": "user", "content": HEADER + "\n".join(kept)}] if kept else []
            return [*fixed, *memory, *window]

        msgs = build(lines)
        while lines and messages_tokens(msgs, self.session.counter) > ceiling:
            lines = lines[1:]
            msgs = build(lines)
        return StepContext(msgs, messages_tokens(msgs, self.session.counter), represented)

    def allowance(self) -> int:
        fixed, _, ceiling = self.fixed()
        _, _, window = self.window()
        overhead = message_tokens({"role": "user", "content": HEADER}, self.session.counter) + 1
        return ceiling - messages_tokens([*fixed, *window], self.session.counter) - overhead

    def raw_fit(self, notes: list[Note], order: list[int], allowance: int) -> list[int]:
        counter, chosen, used = self.session.counter, [], 0
        for seq in order:
            size = counter.count(fmt.raw_block(notes[seq])) + 1
            if used + size <= allowance:
                chosen.append(seq)
                used += size
        return sorted(chosen)


class AMemAgent(Baseline):
    def __init__(self, traj: Trajectory, budget: int, model: ChatModel, fod: bool = False, summary: bool = False):
        super().__init__(traj, budget, model)
        self.amem, self.fod, self.summary = AMem(self.embedder), fod, Summary(SUMMARY_WORDS) if summary else None
        self.memories = [self.amem] + ([self.summary] if self.summary else [])

    def context(self) -> StepContext:
        _, first, _ = self.window()
        notes = self.notes(first)
        if not notes:
            return self.compose([], set())
        order = self.amem.order(self.session.query_vector(), self.note_spans(notes))
        if self.fod:  # A-Mem's order through FlexA-Mem's unit recovery (timeline + fit-or-degrade)
            ctx = self.session.context(mode="units", order=[notes[s].unit_id for s in order])
            shown = {v.seq for v in ctx.memory.shown if v.resolution != "hidden"} if ctx.memory else set()
            return StepContext(ctx.messages, ctx.tokens, shown | set(ctx.window_units))
        allowance, lines = self.allowance(), []
        if self.summary is not None and self.summary.text:
            counter = self.session.counter
            ids = counter.encode(f"[summary] {self.summary.text}")[: int(AGENT_SUMMARY_SHARE * allowance)]
            if ids:
                lines.append(counter.decode(ids).rstrip("\ufffd"))
                allowance -= counter.count(lines[0]) + 1
        chosen = self.raw_fit(notes, order, allowance)
        lines += [fmt.raw_block(notes[s]) for s in chosen]
        return self.compose(lines, set(chosen))


class AFMAgent(Baseline):
    def __init__(self, traj: Trajectory, budget: int, model: ChatModel) -> None:
        super().__init__(traj, budget, model)
        self.afm = AFM()
        self.memories = [self.afm]

    def context(self) -> StepContext:
        _, first, _ = self.window()
        notes = self.notes(first)
        scores = self.afm.scores(self.session.query_vector(), self.note_spans(notes), AFM_HALF_LIFE)
        shown = self.afm.pack(notes, scores, AFM_THRESHOLDS, self.allowance(), self.session.counter)
        lines = [shown[i] for i in sorted(shown)]
        return self.compose(lines, set(shown))


class ReadAgentAgent(Baseline):
    def __init__(self, traj: Trajectory, budget: int, model: ChatModel) -> None:
        super().__init__(traj, budget, model)
        self.reader = ReadAgent()
        self.memories = [self.reader]

    def context(self) -> StepContext:
        notes = self.notes(self.window()[1])
        if not notes:
            return self.compose([], set())
        picked = self.reader.pick(self.question(), self.ledger)  # one model call per agent call
        shown = self.reader.pack(notes, picked, self.allowance(), self.session.counter)
        return self.compose([shown[i] for i in sorted(shown)], set(shown))


class MemGASAgent(Baseline):
    def __init__(self, traj: Trajectory, budget: int, model: ChatModel) -> None:
        super().__init__(traj, budget, model)
        self.memory = MemGAS(self.embedder)
        self.memories = [self.memory]

    def context(self) -> StepContext:
        notes = self.notes(self.window()[1])
        if not notes:
            return self.compose([], set())
        ranked = self.memory.rank(self.session.query_vector(), self.note_spans(notes))
        order = self.memory.filter(ranked, self.question(), self.ledger)
        chosen = self.raw_fit(notes, order, self.allowance())
        return self.compose([fmt.raw_block(notes[i]) for i in chosen], set(chosen))


class SculptorAgent(Baseline):
    """Fragments persist from call to call (what the model folded stays folded); units that leave the
    window arrive full, the oldest are folded to make room, and before each agent call the model gets
    its rounds of tool calls with the task and the newest unit as the goal."""

    def __init__(self, traj: Trajectory, budget: int, model: ChatModel) -> None:
        super().__init__(traj, budget, model)
        self.fragments = Fragments(self.session.counter)

    def add(self, note: Note) -> None:
        self.fragments.add([note])

    def context(self) -> StepContext:
        self.notes(self.window()[1])
        allowance, schemas = with_tools(self.allowance(), self.session.counter)
        if self.fragments.items and schemas:
            manage(self.fragments, self.ledger, f"choose the next step of this task: {self.question()}", allowance)
        shown = self.fragments.fit(allowance)
        ctx = self.compose([line for _, line in shown], {seq for seq, _ in shown})
        return StepContext(ctx.messages, ctx.tokens + schemas, ctx.represented)


AGENT_BASELINES: dict[str, Callable[[Trajectory, int, ChatModel], Method]] = {
    "a-mem": lambda t, b, m: AMemAgent(t, b, m),
    "a-mem-fod": lambda t, b, m: AMemAgent(t, b, m, fod=True),
    "summary-a-mem": lambda t, b, m: AMemAgent(t, b, m, summary=True),
    "afm": AFMAgent,
    "readagent": ReadAgentAgent,
    "memgas": MemGASAgent,
    "sculptor": SculptorAgent,
}
