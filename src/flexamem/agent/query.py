"""What an agent's memory is recovered against at each call (SPEC 4): the task and the newest unit.

The task is embedded and split into terms once; the newest unit's vector is kept until its text
changes, so a repeated call embeds nothing. A shell agent's ``auto`` embeds only the head of the
newest unit (``agent_query_tokens``) and ranks no pieces by names of code.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flexamem.agent.trace import cut_to
from flexamem.agent.window import Window
from flexamem.core import HistoryCore
from flexamem.render.renderer import Query
from flexamem.text import code_terms, joined_query_terms, query_terms


class AgentQuery:
    """The queries of one session (``task``: its task; ``window``: its steps)."""

    def __init__(self, core: HistoryCore, task: str, window: Window) -> None:
        self.core = core
        self.task = task
        self.window = window
        self._task_vector: np.ndarray | None = None
        self._task_terms: list[str] | None = None
        self._newest_vector: tuple[str, np.ndarray] | None = None  # the query vector, until the newest unit changes

    def forget_newest(self) -> None:
        """Drop the kept vector of the newest unit (the steps were read again)."""
        self._newest_vector = None

    def vector(self, newest: str | None = None) -> np.ndarray:
        """The agent query's embedding: task vector + newest unit's vector, normalised."""
        newest = self.window.newest_text() if newest is None else newest
        if self._newest_vector is None or self._newest_vector[0] != newest:
            if self._task_vector is None:
                self._task_vector = self.core.embedder.embed([self.task])[0]
            v = self._task_vector + self.core.embedder.embed([newest])[0]
            self._newest_vector = (newest, np.asarray(v / max(float(np.linalg.norm(v)), 1e-12), dtype=np.float32))
        return self._newest_vector[1]

    def query(self, mode: str, order: Sequence[int] | None = None) -> Query:
        """What this call's memory is recovered against: the task and the newest unit."""
        newest = self.window.newest_text()
        shell = mode == "auto" and self.window.is_shell()
        # the shell path embeds the newest unit's head only, and ranks no pieces (no names of code needed)
        head = cut_to(self.core.counter, newest, self.core.settings.agent_query_tokens) if shell else newest
        if self._task_terms is None:
            self._task_terms = query_terms(self.task)
        newest_terms = query_terms(newest)
        return Query(
            text=self.task + "\n" + newest,
            terms=joined_query_terms((self.task, newest), (self._task_terms, newest_terms)),
            excerpt_terms=newest_terms,
            vector=lambda: self.vector(head),
            agent=True,
            order=order,
            code=() if shell else list(dict.fromkeys(code_terms(self.task + "\n" + newest))),
            shell=shell,
        )
