"""Replaying real agent trajectories through every memory, step by step (no LLM, no live agent).

At call ``t`` the history is steps ``1..t-1``; each method builds the context the agent would have
seen under the budget, and the measures ask whether it holds what the agent used next (step ``t``):

- ``detail_recall``: the details of the next action (:mod:`flexamem_bench.details`: file paths,
  ``path:line``, line ranges, names of code, test ids, quoted strings, numbers of 3+ digits, read from
  its commands: shell fenced blocks of a text action, tool-call argument strings; plus every JSON
  argument leaf of 4+ characters) that occurred in an earlier observation and occur neither in the
  fixed prompt nor in the recent window (the B/4 window, the same for every method): the share of them
  the context shows. "Occurs" means with nothing word-like glued to either end, JSON escapes read;
- ``detail_recall_json``: the measure before coding agents, kept so tables stay comparable: the next
  call's JSON argument leaves of 4+ characters that appeared earlier (actions or observations), not in
  the fixed prompt or window, found as substrings of the context (blind to text actions);
- ``file_shown`` (the paper's Table 7 question, without a model): the files displayed before the call
  (``cat``, ``nl``, ``head``, ``tail``, ``sed -n``, an editor's ``view``) and as many files listed by
  ``ls``/``find``/``grep`` but not displayed (a fixed pseudo-random pick); a displayed file counts as
  answered when the context shows a display command with its path, a listed one when it does not;
  the balanced accuracy of the two (or the displayed share when nothing else was listed);
- ``trace_coverage``: the share of past units represented in the context (raw, excerpt, record or
  merged record; for the baselines: a unit with a step, an outcome line or a log line shown);
- ``repeat_visible``: for each call the agent repeats with identical arguments, whether the earlier
  result is visible verbatim in the context;
- ``tokens`` (the whole context, chat-counted) and ``latency_ms``.

Steps are measured only where memory is active (the full history would exceed ``floor(0.95 B)``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from flexamem import Memory, Note, RenderOptions, Settings
from flexamem.budget import budget_for
from flexamem.chat import Message
from flexamem.recover.pieces import pieces_section, select_pieces
from flexamem.recover.signals import AgentRanking, Fusion, Rankers
from flexamem.render import format as fmt
from flexamem.render.messages import MESSAGE_OVERHEAD, message_tokens, messages_tokens
from flexamem.text import query_terms
from flexamem.write.embed import Embedder
from flexamem.write.records import RuleWriter
from flexamem.write.units import agent_unit
from flexamem_bench.details import (
    commands_of,
    details_of,
    displays_in,
    leaves,
    listed_paths,
    occurs,
    readable,
    shown_displays,
)
from flexamem_bench.methods import score_ranks, span_texts
from flexamem_bench.trajectories import Trajectory, TrajStep

PLACEHOLDER = "[output omitted]"
KEEP_OUTPUTS = 10


@dataclass
class StepContext:
    messages: list[Message]
    tokens: int
    represented: set[int]  # unit indexes shown in some form


def context_text(messages: list[Message]) -> str:
    parts = []
    for m in messages:
        if m.get("content"):
            parts.append(str(m["content"]))
        if m.get("tool_calls"):
            parts.append(json.dumps(m["tool_calls"], ensure_ascii=False))
    return "\n".join(parts)


def _leaves(value: Any) -> Iterator[str]:
    """JSON leaves of 4+ characters (the values ``detail_recall_json`` asks for)."""
    return (text for text in leaves(value) if len(text) >= 4)


class Method:
    """One memory under replay: fed steps, asked for the context before the next action."""

    def __init__(
        self, traj: Trajectory, budget: int, settings: Settings | None = None, embedder: Embedder | None = None
    ) -> None:
        memory = Memory(":memory:", settings=settings, embedder=embedder)
        self.session = memory.agent(task=traj.task or "(no task)", budget=budget, system=traj.system)
        self.traj = traj
        self._spans: dict[int, np.ndarray] = {}  # unit position -> its span vectors

    def feed(self, step: TrajStep) -> None:
        self.session.step(action=step.action, observation=step.observation, messages=step.messages)

    def context(self) -> StepContext:
        raise NotImplementedError

    # helpers shared by the baselines
    def unit_of_step(self) -> dict[int, int]:
        return {i: k for k, unit in enumerate(self.session.units()) for i in unit}

    def fixed(self) -> tuple[list[Message], int, int]:
        s = self.session
        fixed = s.fixed_messages()
        return fixed, messages_tokens(fixed, s.counter), s.core.ceiling(s.budget)

    def spans(self, note: Note) -> np.ndarray:
        """MiniLM vectors of a note's 150-token spans (notes never change: computed once per method)."""
        if note.seq not in self._spans:
            self._spans[note.seq] = self.session.core.embedder.embed(span_texts(note, self.session.counter))
        return self._spans[note.seq]

    def window(self) -> tuple[list[list[int]], int, list[Message]]:
        """The session's units, the first unit of its recent window and the window's messages."""
        s = self.session
        units = s.units()
        first = s.window(units)
        return units, first, s.step_messages(i for k in range(first, len(units)) for i in units[k])


class FlexaMem(Method):
    def __init__(
        self,
        traj: Trajectory,
        budget: int,
        mode: str,
        options: RenderOptions,
        settings: Settings | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        super().__init__(traj, budget, settings, embedder)
        self.mode, self.options = mode, options

    def context(self) -> StepContext:
        ctx = self.session.context(self.options, self.mode)
        units = len(self.session.units())
        if ctx.memory is None:
            shown = set(range(units)) if not ctx.cut else {units - 1}
        else:
            shown = {v.seq for v in ctx.memory.shown if v.resolution != "hidden" or v.pieces}
            shown |= set(ctx.window_units)
        return StepContext(ctx.messages, ctx.tokens, shown)


class Full(Method):
    def context(self) -> StepContext:
        fixed, _, _ = self.fixed()
        msgs = fixed + self.session.step_messages(range(len(self.session.steps)))
        return StepContext(msgs, messages_tokens(msgs, self.session.counter), set(range(len(self.session.units()))))


class Truncation(Method):
    def context(self) -> StepContext:
        fixed, p, ceiling = self.fixed()
        s = self.session
        kept: list[int] = []
        used = p
        for k in range(len(s.units()) - 1, -1, -1):
            size = s.unit_tokens(s.units()[k])
            if used + size > ceiling:
                break
            kept.insert(0, k)
            used += size
        msgs = fixed + s.step_messages(i for k in kept for i in s.units()[k])
        return StepContext(msgs, messages_tokens(msgs, s.counter), set(kept))


class Masking(Method):
    """Observations older than the last 10 steps become a placeholder (or, with ``rule_log``, a
    rule-written outcome line) once the context would exceed the ceiling, more while it still does;
    then the oldest steps are dropped (with ``rule_log``, into a rule-written log message). An
    observation is a tool message, or the user message answering a text command (a fenced ``bash``
    block, as mini-swe-agent's text actions); the user's replies in conversations are never masked.

    The search for how much to mask and drop adds per-step token counts (each step's two forms are
    counted once); only the chosen context is built and counted whole."""

    def __init__(self, traj: Trajectory, budget: int, rule_log: bool) -> None:
        super().__init__(traj, budget)
        self.rule_log = rule_log
        self._outcomes: dict[int, str] = {}
        self._masked: dict[int, list[Message]] = {}
        self._sizes: dict[int, tuple[int, int, int]] = {}  # step -> (tokens whole, tokens masked, log line)

    def outcome(self, i: int) -> str:
        if i not in self._outcomes:
            step = self.session.steps[i]
            unit = agent_unit([step], unit_id=f"s{i}")
            self._outcomes[i] = RuleWriter().write_record(unit).text
        return self._outcomes[i]

    def masked(self, i: int) -> list[Message]:
        """Step ``i``'s messages with its observations replaced."""
        if i not in self._masked:
            msgs = self.session.step_messages([i])
            text_command = any(m.get("role") == "assistant" and not m.get("tool_calls") for m in msgs) and bool(
                commands_of(msgs)
            )
            mark = f"[outcome] {self.outcome(i)}" if self.rule_log else PLACEHOLDER
            self._masked[i] = [
                {**m, "content": mark} if m.get("role") == "tool" or (text_command and m.get("role") == "user") else m
                for m in msgs
            ]
        return self._masked[i]

    def sizes(self, i: int) -> tuple[int, int, int]:
        if i not in self._sizes:
            counter = self.session.counter
            log_line = counter.count(self.outcome(i)) + 1 if self.rule_log else 0
            self._sizes[i] = (
                self.session.unit_tokens([i]),
                sum(message_tokens(m, counter) for m in self.masked(i)),
                log_line,
            )
        return self._sizes[i]

    def _messages(self, masked_before: int, dropped: int) -> list[Message]:
        s = self.session
        out: list[Message] = []
        if self.rule_log and dropped:
            out.append(
                {
                    "role": "user",
                    "content": "Log of earlier steps:\n" + "\n".join(self.outcome(i) for i in range(dropped)),
                }
            )
        for i in range(dropped, len(s.steps)):
            out += self.masked(i) if i < masked_before else s.step_messages([i])
        return out

    def _estimate(self, fixed_tokens: int, masked_before: int, dropped: int) -> int:
        total = fixed_tokens + sum(
            self.sizes(i)[1 if i < masked_before else 0] for i in range(dropped, len(self.session.steps))
        )
        if self.rule_log and dropped:
            total += MESSAGE_OVERHEAD + 8 + sum(self.sizes(i)[2] for i in range(dropped))
        return total

    def context(self) -> StepContext:
        fixed, p, ceiling = self.fixed()
        s = self.session
        n = len(s.steps)
        unit_of = self.unit_of_step()
        masked_before, dropped, keep = 0, 0, KEEP_OUTPUTS
        while True:
            while self._estimate(p, masked_before, dropped) > ceiling:
                if keep > 0 and masked_before < n - keep:
                    masked_before = n - keep
                elif keep > 1:
                    keep -= 1
                    masked_before = n - keep
                elif dropped < n - 1:
                    dropped += 1
                else:
                    break
            msgs = fixed + self._messages(masked_before, dropped)
            tokens = messages_tokens(msgs, s.counter)
            if tokens <= ceiling or dropped >= n - 1:
                break
            dropped += 1  # the estimate was short by a token or two (joins in the log)
        if tokens > ceiling and self.rule_log:  # the log itself is too long: fall back to plain drops
            msgs = fixed + self._messages(masked_before, dropped)[1:]
            tokens = messages_tokens(msgs, s.counter)
        shown = {unit_of[i] for i in range(dropped if not self.rule_log else 0, n)}
        return StepContext(msgs, tokens, shown)


class UnitRetrieval(Method):
    """Raw units ranked by the best similarity of their 150-token spans to task + newest unit."""

    def context(self) -> StepContext:
        s = self.session
        fixed, p, ceiling = self.fixed()
        units, first, window = self.window()
        allowance = ceiling - p - sum(s.unit_tokens(units[k]) for k in range(first, len(units))) - 12
        notes = s.core.history.notes[:first]
        v = s.query_vector()
        best = [float((self.spans(note) @ v).max()) if len(self.spans(note)) else -1.0 for note in notes]
        chosen, used = [], 0
        for seq in sorted(range(len(notes)), key=lambda j: (-best[j], j)):
            size = s.counter.count(fmt.raw_header(notes[seq])) + 2 + notes[seq].raw_tokens
            if used + size <= allowance:
                chosen.append(seq)
                used += size
        msgs = list(fixed)
        if chosen:
            msgs.append(
                {
                    "role": "user",
                    "content": "Earlier steps:\n" + "\n".join(fmt.raw_block(notes[j]) for j in sorted(chosen)),
                }
            )
        msgs += window
        return StepContext(msgs, messages_tokens(msgs, s.counter), set(chosen) | set(range(first, len(units))))


class PieceRetrieval(Method):
    """Baselines: pieces of the written units ranked against task + newest unit, no timeline.

    ``dense``: by MiniLM cosine of the piece vectors; ``hybrid``: reciprocal rank fusion (k=60) of
    that and BM25 (plain content words), the simple retrieval a user could write. The baseline embeds
    its pieces itself (agent sessions write none), each distinct text once per process."""

    _vectors: ClassVar[dict[str, np.ndarray]] = {}

    def __init__(self, traj: Trajectory, budget: int, kind: str) -> None:
        super().__init__(traj, budget)
        self.kind = kind

    def piece_matrix(self, limit: int) -> np.ndarray:
        history, cache = self.session.core.history, PieceRetrieval._vectors
        texts = [history.piece(d)[1].text for d in range(limit)]
        missing = list(dict.fromkeys(t for t in texts if t not in cache))
        if missing:
            cache.update(zip(missing, self.session.core.embedder.embed(missing), strict=True))
        return np.stack([cache[t] for t in texts])

    def context(self) -> StepContext:
        s = self.session
        fixed, p, ceiling = self.fixed()
        units, first, window = self.window()
        header = "Earlier steps (retrieved pieces):\n"
        allowance = ceiling - p - messages_tokens(window, s.counter) + 3 - s.counter.count(header) - 5
        history = s.core.history
        limit = history.doc_of[first] if first < len(history.doc_of) else history.pieces_count
        chosen: dict[int, list[int]] = {}
        if limit and allowance > 0:
            sims = self.piece_matrix(limit) @ s.query_vector()
            fused = 1.0 / (60 + score_ranks(sims))
            if self.kind == "hybrid":
                bm = np.zeros(limit)
                docs, scores = history.index.search(query_terms(s.task + "\n" + s.newest_text()))
                bm[docs[docs < limit]] = scores[docs < limit]
                fused = fused + np.where(bm > 0, 1.0 / (60 + score_ranks(bm)), 0.0)
            ranked = [int(d) for d in np.lexsort((np.arange(limit), -fused))]
            chosen = select_pieces(history, ranked, allowance, s.counter, s.counter.count(fmt.PIECES_HEADER))

        def build() -> list[Message]:
            memory = [{"role": "user", "content": header + pieces_section(history, chosen)}] if chosen else []
            return [*fixed, *memory, *window]

        msgs = build()
        while messages_tokens(msgs, s.counter) > ceiling and chosen:  # joins can add a token or two
            worst = max(chosen)
            chosen[worst].pop()
            if not chosen[worst]:
                del chosen[worst]
            msgs = build()
        return StepContext(msgs, messages_tokens(msgs, s.counter), set(chosen) | set(range(first, len(units))))


# what each part of ``auto`` adds in agent sessions (the readers' turn/neighbour/timeline parts are off there)
AGENT_AUTO_ABLATIONS: dict[str, tuple[RenderOptions, Settings | None]] = {
    "auto": (RenderOptions(), None),
    "auto-no-identifiers": (RenderOptions(identifiers=False), None),
    "auto-no-stemming": (RenderOptions(stemming=False), None),
    "auto-no-commands": (RenderOptions(commands=False), None),
    "auto-full-trace": (RenderOptions(trace_unshown=False), None),
    "auto-no-code-terms": (RenderOptions(code_terms=False), None),
    "auto-pieces": (RenderOptions(shell_units=False), None),
    # the readers' fusion weight: the agent's ranking with the readers' fusion's alpha
    "auto-dense-half": (
        RenderOptions(),
        Settings(rankers=Rankers((replace(AgentRanking(), agent_auto_alpha=Fusion().auto_alpha),))),
    ),
}

AGENT_METHODS: dict[str, Callable[[Trajectory, int], Method]] = {
    **{
        name: (lambda t, b, o=options, st=settings: FlexaMem(t, b, "auto", o, st))  # type: ignore[misc]
        for name, (options, settings) in AGENT_AUTO_ABLATIONS.items()
    },
    "unit-recovery": lambda t, b: FlexaMem(t, b, "units", RenderOptions()),
    "piece-recovery": lambda t, b: FlexaMem(t, b, "pieces", RenderOptions()),
    "timeline-only": lambda t, b: FlexaMem(t, b, "units", RenderOptions(recovery=False)),
    "piece-retrieval": lambda t, b: FlexaMem(t, b, "pieces", RenderOptions(timeline=False)),
    "unit-retrieval": UnitRetrieval,
    "truncation": Truncation,
    "masking": lambda t, b: Masking(t, b, rule_log=False),
    "masking-rule-log": lambda t, b: Masking(t, b, rule_log=True),
    "full": Full,
    "dense-retrieval": lambda t, b: PieceRetrieval(t, b, "dense"),
    "hybrid-retrieval": lambda t, b: PieceRetrieval(t, b, "hybrid"),
}


def effective_budget(traj: Trajectory, budget: int, part: str, counter: Any) -> int:
    """``part="history"``: the budget is for the history alone; the fixed prompt is added on top."""
    if part == "context":
        return budget
    fixed = [{"role": "system", "content": traj.system}] if traj.system else []
    fixed.append({"role": "user", "content": traj.task})
    return budget + budget_for(0, messages_tokens(fixed, counter))


def shown_text(messages: list[Message]) -> str:
    """What a context shows, as text: contents and each tool call as ``name(arguments)``, with JSON
    string escapes read (:func:`flexamem_bench.details.readable`)."""
    parts = []
    for m in messages:
        if m.get("content"):
            parts.append(str(m["content"]))
        for c in m.get("tool_calls") or []:
            fn = c.get("function", {}) if isinstance(c, dict) else {}
            parts.append(f"{fn.get('name')}({fn.get('arguments')})")
    return readable("\n".join(parts))


@dataclass(frozen=True)
class CallFacts:
    """What the measures need of a trajectory before call ``t``, the same for every method."""

    details: tuple[str, ...]  # the next action's details seen in an earlier observation
    displayed: tuple[str, ...]  # files displayed before the call
    not_displayed: tuple[str, ...]  # as many files listed (ls / find / grep) but not displayed


_FACTS: dict[tuple[str, int], CallFacts] = {}


def call_facts(traj: Trajectory, t: int) -> CallFacts:
    """The details and files of call ``t`` (computed once per trajectory and call)."""
    key = (traj.traj_id, t)
    if key not in _FACTS:
        if len(_FACTS) > 20_000:
            _FACTS.clear()
        commands = commands_of(traj.steps[t].messages)
        details = list(dict.fromkeys(d for c in commands for d in details_of(c)))
        details += [leaf for c in traj.steps[t].calls if isinstance(c.arguments, dict) for leaf in _leaves(c.arguments)]
        earlier = [st.observation for st in traj.steps[:t]]
        seen = tuple(d for d in dict.fromkeys(details) if any(occurs(d, o) for o in earlier))
        displayed = list(
            dict.fromkeys(path for st in traj.steps[:t] for c in commands_of(st.messages) for path, _ in displays_in(c))
        )
        listed = {path for o in earlier for path in listed_paths(o)} - set(displayed)
        others = sorted(listed, key=lambda p: hashlib.sha1(p.encode()).hexdigest())[: len(displayed)]
        _FACTS[key] = CallFacts(seen, tuple(displayed), tuple(others))
    return _FACTS[key]


def measure_step(traj: Trajectory, t: int, ctx: StepContext, m: Method) -> dict[str, Any]:
    s = m.session
    text = context_text(ctx.messages)
    fixed_text = context_text(s.fixed_messages())
    units = s.units()
    first = s.window(units)
    window_messages = s.step_messages(i for k in range(first, len(units)) for i in units[k])
    window_text = context_text(window_messages)
    earlier = "\n".join(st.action + "\n" + st.observation for st in traj.steps[:t])
    needed_json = [
        v
        for c in traj.steps[t].calls
        if isinstance(c.arguments, dict)
        for v in _leaves(c.arguments)
        if v in earlier and v not in fixed_text and v not in window_text
    ]
    needed_json = list(dict.fromkeys(needed_json))
    facts = call_facts(traj, t)
    shown = shown_text(ctx.messages)
    known = shown_text(s.fixed_messages()) + "\n" + shown_text(window_messages)
    needed = [d for d in facts.details if not occurs(d, known)]
    on_view = shown_displays(shown)
    rates = []
    if facts.displayed:
        rates.append(sum(p in on_view for p in facts.displayed) / len(facts.displayed))
    if facts.not_displayed:
        rates.append(sum(p not in on_view for p in facts.not_displayed) / len(facts.not_displayed))
    repeats: list[bool] = []
    for c in traj.steps[t].calls:
        for prev in traj.steps[:t]:
            if any(pc.signature() == c.signature() for pc in prev.calls):
                out = "\n".join(prev.outputs).strip()
                repeats.append(bool(out) and out in text)
                break
    return {
        "detail_recall": (sum(occurs(d, shown) for d in needed) / len(needed)) if needed else None,
        "detail_recall_json": (sum(v in text for v in needed_json) / len(needed_json)) if needed_json else None,
        "file_shown": (sum(rates) / len(rates)) if facts.displayed else None,
        "trace_coverage": len(ctx.represented & set(range(len(units)))) / max(len(units), 1),
        "repeat_visible": (sum(repeats) / len(repeats)) if repeats else None,
        "tokens": ctx.tokens,
        "within_budget": m.__class__ is Full or ctx.tokens <= s.core.ceiling(s.budget),
    }
