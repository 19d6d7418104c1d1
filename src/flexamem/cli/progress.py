"""Progress of a long job on stderr, with an estimate of the time left: what a large import
(``flexamem ingest`` of a whole data set) shows while it works.

The estimate is the time taken so far, scaled by the work left over the work done, counted in a
``weight`` the caller chooses (characters of text for an import: embedding time grows with the text,
not with the number of sessions). On a terminal the line is redrawn in place (at most every
``redraw`` seconds); elsewhere (``--progress`` into a log) a line is written at each tenth of the work,
and at least every ``every`` seconds while work is done.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


def duration(seconds: float) -> str:
    """``seconds`` for a person: ``42 s``, ``3 min 05 s``, ``2 h 07 min``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Progress:
    """``done``/``total`` items (and their weights) of a job, shown on ``stream`` with the time left."""

    def __init__(
        self,
        label: str,
        total: int,
        weight: float,
        *,
        unit: str = "items",
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        redraw: float = 0.2,
        every: float = 30.0,
    ) -> None:
        self.label, self.total, self.weight, self.unit = label, total, max(weight, 0.0), unit
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.clock = clock
        self.redraw, self.every = redraw, every
        self.started = clock()
        self.done, self.done_weight = 0, 0.0
        self._shown_at: float | None = None
        self._shown_tenth = -1
        self._drawn = 0  # characters of the line on a terminal (to clear it)
        self._finished = False

    def left(self) -> float | None:
        """Seconds left by the rate so far (None before any work is done)."""
        if self.done_weight <= 0 or self.weight <= 0:
            return None
        elapsed = self.clock() - self.started
        return elapsed * max(self.weight - self.done_weight, 0.0) / self.done_weight

    def line(self) -> str:
        share = self.done_weight / self.weight if self.weight > 0 else 1.0
        elapsed = duration(self.clock() - self.started)
        left = self.left()
        if self.done >= self.total:
            tail = f"done in {elapsed}"
        elif left is None:
            tail = f"{elapsed} elapsed, estimating the time left"
        else:
            tail = f"{elapsed} elapsed, ~{duration(left)} left"
        return f"{self.label}: {self.done}/{self.total} {self.unit} ({share:.0%}), {tail}"

    def update(self, done: int, done_weight: float) -> None:
        """``done`` items of ``total`` finished, ``done_weight`` of the weight."""
        final = done >= self.total
        if final and self._finished:  # told twice that it is done: said once
            return
        self.done, self.done_weight, self._finished = done, done_weight, final
        now = self.clock()
        if self.tty:
            if final or self._shown_at is None or now - self._shown_at >= self.redraw:
                self._draw(final)
                self._shown_at = now
            return
        tenth = int(10 * done_weight / self.weight) if self.weight > 0 else 10
        if final or tenth > self._shown_tenth or (self._shown_at is not None and now - self._shown_at >= self.every):
            print(self.line(), file=self.stream, flush=True)
            self._shown_tenth, self._shown_at = tenth, now

    def _draw(self, final: bool) -> None:
        text = self.line()
        pad = " " * max(self._drawn - len(text), 0)
        print("\r" + text + pad, end="\n" if final else "", file=self.stream, flush=True)
        self._drawn = 0 if final else len(text)

    def clear(self) -> None:
        """Take the line off a terminal, so that other output starts on a clean line (redrawn at the next
        update)."""
        if self.tty and self._drawn:
            print("\r" + " " * self._drawn + "\r", end="", file=self.stream, flush=True)
            self._drawn = 0
            self._shown_at = None


def progress_wanted(quiet: bool, forced: bool, stream: TextIO | None = None) -> bool:
    """Progress on stderr: never with ``--quiet``, always with ``--progress``, else on a terminal."""
    if quiet:
        return False
    return forced or (stream or sys.stderr).isatty()
