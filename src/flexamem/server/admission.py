"""Which writes a worker takes: admitted when they can be acknowledged in time, refused at once (503
with ``Retry-After``, nothing stored) when they cannot, so no write waits without bound.

Two rules, both per worker:

- **a bound on writes in progress** (``max_pending_writes``): a hard cap, whatever the pace;
- **a bound on the predicted wait** (``write_target`` seconds): with writes already in progress, a new
  one is admitted only if its vectors are predicted back within ``write_target``: the jobs ahead of it
  taken in order by the worker's embedding processes (one after the other with one process; with two,
  it waits only for the first of them to be free), then its own, at the pace the processes were
  measured to keep over their recent jobs (which the renders' load on the CPU slows: under load fewer
  writes are admitted, when the CPU is free more).
  A write's own work is predicted from its text (its characters, times the ratio of characters embedded
  to characters sent over this worker's recent writes: about 1.2 for a session, each turn once and its
  record). A request with no text to embed (an erasure) is bounded by the first rule only.

A write arriving when none is in progress is always admitted, however long (else a large one would never
be). Without an embedding process (``offload_writes=False`` or an embeddings endpoint) only the first
rule applies.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from flexamem.errors import ServerBusyError
from flexamem.server.ingest import OffloadedEmbedder, WriteClock, writing

RATIO_WEIGHT = 0.3  # the weight of the latest write in the ratio of characters embedded to sent
FIRST_RATIO = 2.0  # before any write was measured: on the safe side of the ~1.2 measured for sessions


def text_chars(value: Any) -> int:
    """The characters of the strings in a request's JSON (the text a write may embed)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(text_chars(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(text_chars(v) for v in value)
    return 0


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
    ratio: float = FIRST_RATIO
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
        """Seconds a write of ``chars`` characters of text is predicted to wait for its vectors if admitted
        now (None: no embedding process, or its pace not measured yet)."""
        with self._lock:
            return self._predicted_locked(chars)

    def _predicted_locked(self, chars: int) -> float | None:
        if self.embedder is None:
            return None
        # the text of writes admitted and not yet sent to the embedding processes (what they sent is queued)
        unsent = [int(c * self.ratio) - (k.chars if k else 0) for c, k in self._pending.values()]
        return self.embedder.backlog(int(chars * self.ratio), ahead=[c for c in unsent if c > 0])

    def _refusal(self, chars: int) -> str | None:  # under _lock
        if len(self._pending) >= self.max_pending:
            return f"this server has {self.max_pending} writes in progress"
        if self.target is None or not self._pending or chars == 0:
            return None
        wait = self._predicted_locked(chars)
        if wait is not None and wait > self.target:
            return f"this write would wait about {wait:.1f} s for its vectors (this server admits {self.target:g} s)"
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
                    self.ratio = RATIO_WEIGHT * clock.chars / chars + (1 - RATIO_WEIGHT) * self.ratio
        finally:
            with self._lock:
                del self._pending[ticket]
