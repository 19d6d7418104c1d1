"""Which writes a worker takes: admitted when they can be acknowledged in time, refused at once (503
with ``Retry-After``, nothing stored) when they cannot, so no write waits without bound.

Two rules, both per worker:

- **a bound on writes in progress** (``max_pending_writes``): a hard cap, whatever the pace;
- **a bound on the predicted acknowledgement** (``write_target`` seconds, or twice the write's own
  embedding work where that is longer): with writes already in progress, a new one is admitted only if
  it is predicted to be acknowledged within its bound (a long write may wait as long as its own work
  takes: else, under a steady load, it would be admitted only when no other is in progress):
  its wait for its vectors (the jobs ahead of it taken in order by the worker's embedding processes,
  one after the other with one process, with two by the first of them free; a job already running
  counted by what is left of it; then its own, at the pace the processes were measured to keep over
  their recent jobs), then the rest of its work (its transaction, records and links, as long as this
  worker's recent writes took for it). Both are measured under the load of the moment: when renders
  keep the CPU busy they grow and fewer writes are admitted, when it is free more.
  A write's own work is predicted from its text (its characters, times the ratio of characters embedded
  to characters sent over this worker's recent writes: a text longer than the model reads counts what it
  reads of it, pieces of a long turn embedded beside the turn count too). A request with no text to
  embed (an erasure) is bounded by the first rule only.

A write arriving when none is in progress is always admitted, however long (else a large one would never
be), and so is one arriving before this worker has measured a write (its ratio would be a guess: the
first rule bounds those few). Without an embedding process (``offload_writes=False`` or an embeddings
endpoint) only the first rule applies.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from flexamem.errors import ServerBusyError
from flexamem.server.ingest import OffloadedEmbedder, WriteClock, writing

LATEST_WEIGHT = 0.3  # the weight of the latest write in what a worker measures of its writes (a moving average)
OWN_WORK_TIMES = 2.0  # a long write's bound: this many times its own embedding work, where above write_target
FIRST_RATIO = 2.0  # for the writes ahead before any was measured: the safe side of ~1.2 measured for sessions


def averaged(average: float | None, latest: float) -> float:
    """``average`` moved toward ``latest`` by ``LATEST_WEIGHT`` (``latest`` itself when there is none)."""
    return latest if average is None else LATEST_WEIGHT * latest + (1 - LATEST_WEIGHT) * average


def text_chars(value: Any) -> int:
    """The characters of the strings in a request's JSON (the text a write may embed), counted without
    recursion: however deep the JSON nests, this answers (the route's validation refuses it after)."""
    chars, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            chars += len(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return chars


@dataclass
class Admission:
    """One worker's admission of writes (see the module's text)."""

    max_pending: int
    target: float | None = None
    """Seconds a write is predicted to wait for its vectors, at most, to be admitted while others are in
    progress; None: only ``max_pending`` bounds admission."""
    embedder: OffloadedEmbedder | None = None
    wait: float | None = None
    """An admitted write's bound on its wait for its vectors (``ServerConfig.write_wait``)."""
    ratio: float | None = None
    """Characters embedded per character sent, over this worker's recent writes (None: none measured
    yet, and no write is refused on a prediction)."""
    rest: float | None = None
    """Seconds a write takes besides waiting for its vectors (its transaction, records and links, and its
    share of the worker's interpreter with the renders), over this worker's recent writes (None: none
    measured yet)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _pending: dict[int, tuple[int, WriteClock | None]] = field(default_factory=dict, init=False, repr=False)
    _tickets: int = field(default=0, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_pending < 1:
            raise ValueError("max_pending_writes must be at least 1")
        if self.target is not None and self.target <= 0:
            raise ValueError("write_target must be more than 0 seconds")

    @property
    def pending(self) -> int:
        """Writes admitted and not yet answered."""
        return len(self._pending)

    def predicted(self, chars: int) -> float | None:
        """Seconds until a write of ``chars`` characters of text is predicted to be acknowledged if
        admitted now: its wait for its vectors and the rest of its work (None: no embedding process, or
        its pace not measured yet)."""
        with self._lock:
            return self._predicted_locked(chars)

    def _predicted_locked(self, chars: int) -> float | None:
        if self.embedder is None:
            return None
        # the text of writes admitted and not yet sent to the embedding processes (what they sent is queued)
        ratio = self.ratio or FIRST_RATIO
        unsent = [int(c * ratio) - (k.chars if k else 0) for c, k in self._pending.values()]
        wait = self.embedder.backlog(int(chars * ratio), ahead=[c for c in unsent if c > 0])
        return None if wait is None else wait + (self.rest or 0.0)

    def _refusal(self, chars: int) -> str | None:  # under _lock
        if len(self._pending) >= self.max_pending:
            return f"this server has {self.max_pending} writes in progress"
        if self.target is None or self.embedder is None or not self._pending or chars == 0 or self.ratio is None:
            return None
        ack, own = self._predicted_locked(chars), self.embedder.work(int(chars * self.ratio))
        limit = self.target if own is None else max(self.target, OWN_WORK_TIMES * own)
        if ack is not None and ack > limit:
            return f"this write would be acknowledged in about {ack:.1f} s (this server admits {limit:.1f} s for it)"
        return None

    @contextlib.contextmanager
    def admitted(self, chars: int) -> Iterator[None]:
        """Run the block as an admitted write of ``chars`` characters of text, or raise
        ``ServerBusyError`` at once (nothing done)."""
        with self._lock:
            refusal = self._refusal(chars)
            if refusal is not None:
                raise ServerBusyError(f"{refusal}: nothing was stored, send it again after Retry-After seconds")
            self._tickets += 1
            ticket = self._tickets
            self._pending[ticket] = (chars, None)
        try:
            with writing(self.wait) as clock:
                with self._lock:
                    self._pending[ticket] = (chars, clock)
                yield
            if chars and clock.chars:
                with self._lock:
                    self.ratio = averaged(self.ratio, clock.chars / chars)
                    self.rest = averaged(self.rest, time.monotonic() - clock.start - clock.embedding)
        finally:
            with self._lock:
                del self._pending[ticket]
