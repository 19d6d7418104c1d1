"""Writes do not take the CPU from renders: the costly part of a write (embedding its units and
pieces) runs in a separate embedding process at a lower scheduling priority (``nice``), one per server
worker; renders embed their one short query in the worker itself.

Nothing else about a write changes: the request is answered once its notes are stored in one
transaction (with their vectors), so every promise of docs/RELIABILITY.md holds as before. What
changes is who waits when the two cores are busy: the write (its embedding is scheduled after the
renders' work), not the renders. If the embedding process dies, a new one is started and the write
is embedded again (the same model: the same vectors); if that fails too, the worker embeds it itself.
"""

from __future__ import annotations

import contextlib
import contextvars
import multiprocessing
import os
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import numpy as np

from flexamem.write.default_embed import default_embedder
from flexamem.write.embed import Embedder

_WRITING: contextvars.ContextVar[bool] = contextvars.ContextVar("flexamem_writing", default=False)
DEFAULT_NICE = 10


@contextlib.contextmanager
def writing() -> Iterator[None]:
    """Mark the code inside as a write: its embeddings go to the embedding process."""
    token = _WRITING.set(True)
    try:
        yield
    finally:
        _WRITING.reset(token)


def _start(nice: int, parent: int) -> None:  # in the embedding process
    with contextlib.suppress(OSError):
        os.nice(nice)
    threading.Thread(target=_exit_with, args=(parent,), daemon=True, name="flexamem-orphan-watch").start()
    default_embedder()


def _exit_with(parent: int) -> None:
    """End the embedding process once its worker is gone (killed, or stopped without closing its pool):
    an orphan would keep its model's memory for nothing."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def _embed(texts: list[str]) -> np.ndarray:  # in the embedding process
    return default_embedder().embed(texts)


class OffloadedEmbedder:
    """An :class:`~flexamem.write.embed.Embedder` for a server worker: inside :func:`writing` the texts
    are embedded by a lower-priority process, elsewhere (a render's query) in this process."""

    def __init__(self, local: Embedder | None = None, nice: int = DEFAULT_NICE) -> None:
        self.local = local or default_embedder()
        self.name, self.dim = self.local.name, self.local.dim
        self.nice = nice
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self.offloaded = 0  # texts embedded by the embedding process
        self.restarts = 0  # embedding processes that died and were replaced

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_start,
                    initargs=(self.nice, os.getpid()),
                )
            return self._pool

    def warm(self) -> None:
        """Start the embedding process and load its model now (not at the first write, which would
        wait for both), without waiting for it."""
        self._executor().submit(_embed, ["warm"])

    def _restart(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is broken:
                self._pool = None
        broken.shutdown(wait=False, cancel_futures=True)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not _WRITING.get() or not texts:
            return self.local.embed(texts)
        for _attempt in range(2):
            pool = self._executor()
            try:
                vectors = pool.submit(_embed, list(texts)).result()
            except BrokenProcessPool:  # the embedding process died: start another, embed again
                self.restarts += 1
                self._restart(pool)
                continue
            self.offloaded += len(texts)
            return np.asarray(vectors, dtype=np.float32)
        return self.local.embed(texts)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
