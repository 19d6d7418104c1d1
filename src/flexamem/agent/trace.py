"""The command trace of a shell agent's context: the commands run before the recent window, one line
each, within a share of the memory's allowance (docs/RENDERING.md).

Every command's first line (``step N: command``) goes in, newest first while they fit; then, newest
first, whole commands (up to ``agent_trace_line_tokens`` each) take the place of first lines while room
is left. The trace is shown oldest first. A step's two forms and their token counts are made once and
kept; so are the counts of the lines as shown (:class:`~flexamem.tokens.LineCounts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flexamem.agent.window import Recorded
from flexamem.core import HistoryCore
from flexamem.render import format as fmt
from flexamem.tokens import LineCounts, TokenCounter
from flexamem.write.units import first_line

TRACE_HEADER = "Commands run before the recent steps, oldest first:\n"
TRACE_FIRST_LINE_TOKENS = 40  # a command's first line in the trace is cut to this

Forms = tuple[str, int, str, int]  # (first line, its tokens, whole command, its tokens), as the trace shows them


class Trace:
    """The trace lines of one session's steps (``core``: the session's history, for its settings)."""

    def __init__(self, core: HistoryCore) -> None:
        self.core = core
        self.counter = core.counter
        self.header_tokens = self.counter.count(TRACE_HEADER)  # a constant text, counted once
        self._line_counts = LineCounts()  # trace lines' tokens, kept across calls
        # a step's forms by all they are made of (its number, its command, the line limit), so an entry
        # never goes stale: not when a step is taken back or erased and another takes its number, nor
        # when the settings change
        self._forms: dict[tuple[int, str, int], Forms] = {}

    def lines(
        self,
        recorded: Sequence[Recorded],
        upto: int,
        allowance: int,
        skip: set[int] | frozenset[int] = frozenset(),
    ) -> tuple[str, int]:
        """The command trace of steps ``0..upto-1`` of ``recorded`` but ``skip`` (steps the memory shows
        raw) within ``agent_trace_share`` of the allowance. With its tokens and the line break after it
        (``("", 0)`` when empty), counted from its lines' kept counts."""
        s = self.core.settings
        room = int(s.agent_trace_share * allowance) - self.header_tokens
        chosen: list[list[Any]] = []  # [line shown, its tokens, the whole command, its tokens], newest first
        for i in range(upto - 1, -1, -1):
            if recorded[i].command is None or i in skip:
                continue
            entry = self.forms(recorded[i])
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

    def forms(self, recorded: Recorded) -> Forms:
        """A step's trace forms and their tokens (first line, tokens, whole command, tokens); the step
        must have a command."""
        whole, number, s = recorded.command, recorded.step.number, self.core.settings
        assert whole is not None
        key = (number, whole, s.agent_trace_line_tokens)
        if key not in self._forms:
            head = f"step {number}: "
            short = cut_to(
                self.counter,
                head + fmt.body(first_line(whole) or ""),  # the command read once, when the step was recorded
                min(TRACE_FIRST_LINE_TOKENS, s.agent_trace_line_tokens),
                " …",
            )
            # cut as written, then marked: the marks (one token a line) do not shorten what is shown
            long = head + fmt.body(
                cut_to(self.counter, whole, s.agent_trace_line_tokens - self.counter.count(head), " …")
            )
            self._forms[key] = (short, self.counter.count(short), long, self.counter.count(long))
        return self._forms[key]


def cut_to(counter: TokenCounter, text: str, limit: int, mark: str = "") -> str:
    """``text`` cut to at most ``limit`` tokens (``mark`` appended, within the limit, when cut)."""
    ids = counter.head(text, limit + 1)  # enough to tell whether it is longer, and where to cut
    if len(ids) <= limit:
        return text
    keep = max(limit - 2, 1) if mark else limit  # room for the mark, whatever it merges with
    return counter.decode(ids[:keep]).rstrip("\ufffd") + mark
