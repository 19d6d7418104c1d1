"""The costly part of a write (embedding its units and pieces) runs in separate embedding processes,
``ServerConfig.embed_processes`` per server worker, at a scheduling priority of their own (``nice``,
``ServerConfig.write_nice``); renders embed their one short query in the worker itself. A write's texts
go to one process as one job (so its vectors never depend on how writes were grouped), and jobs are
taken in order by the first process free: with two, writes admitted together by one worker are
embedded side by side while the other worker's processes idle. The jobs' measured pace is what the
admission of writes predicts from (server/admission.py).

Nothing else about a write changes: the request is answered once its notes are stored in one
transaction (with their vectors), so every promise of docs/RELIABILITY.md holds as before. The
priority decides who waits when the two cores are busy: at ``nice`` 10 the write (its embedding is
scheduled after the renders' work), at 0 (the default since issue 52) both share the CPU, so writes
are acknowledged within about a second and more of them are admitted, at some cost to renders
(docs/PERFORMANCE.md). If an embedding process dies, new ones are started and the write is embedded
again (the same model: the same vectors); if that fails too, the worker embeds it itself.

A write's wait can be bounded (``ServerConfig.write_wait``, off by default): a write whose vectors are
not back within its allowance (``write_wait`` seconds per 4,000 characters embedded, at least one
allowance, counted from its admission) is answered 503 :class:`~flexamem.errors.ServerBusyError`
with ``Retry-After`` and stores nothing. Its embedding goes on: the vectors are kept (newest first, a
bounded number), so the retry (the one-API client makes it) takes them instead of embedding again,
and a text already being embedded for an earlier attempt is waited for, not embedded twice.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import multiprocessing
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

import numpy as np

from flexamem.errors import ServerBusyError
from flexamem.server.settings import DEFAULT_WRITE_NICE
from flexamem.write.default_embed import default_embedder
from flexamem.write.embed import MAX_SEQ_LEN, Embedder, usable_cores

CHARS_PER_ALLOWANCE = 4000  # ~1,000 tokens: a write this long (or shorter) waits one allowance at most
# the measured pace is the recent jobs' seconds over their characters, each job's weight falling by this
# much at each later one: a job counts by its size, so a short job slowed by a burst of renders (its
# seconds per character measured at up to 4x a long one's under load) does not move the pace as a long one
PACE_DECAY = 0.7
Job = Future[tuple[np.ndarray, float]]  # an embedding job: the vectors and the forward's own seconds
KEPT_VECTORS = 40_000  # vectors of refused writes kept for their retry (at most ~60 MB of float32 at 384)
# the characters of MAX_SEQ_LEN tokens: what the model reads of a longer text (measured over 400
# LongMemEval turns longer than 1,500 characters: p10 977, p50 1,109, p90 1,345 characters)
READ_CHARS = 1100 * MAX_SEQ_LEN // 256


def embedded_chars(text: str) -> int:
    """The characters of ``text`` the embedder reads (it truncates at ``MAX_SEQ_LEN`` tokens): the unit
    of an embedding's work in the measured pace and the admission's prediction."""
    return min(len(text), READ_CHARS)


@dataclass
class WriteClock:
    """A write's allowance to wait for its vectors: ``wait`` seconds per ``CHARS_PER_ALLOWANCE``
    characters embedded (at least one), from ``start`` (``time.monotonic()`` at admission)."""

    start: float  # moved later by the time the write waited for a starting embedding process
    wait: float | None  # None: no bound (a server without one)
    chars: int = 0  # characters this write has sent to be embedded so far (each text's embedded_chars)
    embedding: float = 0.0  # seconds this write has waited for its vectors so far

    def deadline(self) -> float | None:
        """The time by which the vectors of the write's texts must be back (None: no bound)."""
        if self.wait is None:
            return None
        return self.start + self.wait * max(1.0, self.chars / CHARS_PER_ALLOWANCE)


_WRITING: contextvars.ContextVar[WriteClock | None] = contextvars.ContextVar("flexamem_writing", default=None)


@contextlib.contextmanager
def writing(wait: float | None = None) -> Iterator[WriteClock]:
    """Mark the code inside as a write: its embeddings go to the embedding process, and wait for their
    vectors at most ``wait`` seconds per allowance (None: as long as it takes). Yields the write's clock
    (``chars``: what it has sent to be embedded so far)."""
    clock = WriteClock(time.monotonic(), wait)
    token = _WRITING.set(clock)
    try:
        yield clock
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


def _embed(texts: list[str]) -> tuple[np.ndarray, float]:  # in an embedding process
    """The texts' vectors and the seconds the forward took here (the job's own time: the measured pace)."""
    started = time.perf_counter()
    vectors = default_embedder().embed(texts)
    return vectors, time.perf_counter() - started


class OffloadedEmbedder:
    """An :class:`~flexamem.write.embed.Embedder` for a server worker: inside :func:`writing` the texts
    are embedded by one of the worker's ``processes`` embedding processes (at ``nice``; None: 2 on two
    cores or more, else 1), elsewhere (a render's query) in this process; :meth:`backlog` predicts how
    long what they were sent will take."""

    def __init__(
        self, local: Embedder | None = None, nice: int = DEFAULT_WRITE_NICE, processes: int | None = None
    ) -> None:
        if processes is None:  # by the machine: see ServerConfig.embed_processes
            processes = min(2, usable_cores())
        if processes < 1:
            raise ValueError("embed_processes must be at least 1")
        self.local = local or default_embedder()
        self.name, self.dim = self.local.name, self.local.dim
        self.nice = nice
        self.processes = processes  # embedding processes: a write's texts go to one, concurrent writes to several
        # two locks, never one inside the other: ``_lock`` guards the pool and may call into it;
        # ``_jobs_lock`` guards the jobs running and the vectors kept, and is all a job's callback (run
        # by the pool's own thread) takes, so the pool's thread never waits for a thread inside the pool
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._ready: list[Job] = []  # the processes' first jobs: their models loaded
        self._broken: set[ProcessPoolExecutor] = set()  # pools whose process died (seen by a job's callback)
        self._jobs_lock = threading.Lock()
        self._running: dict[str, tuple[Job, int]] = {}  # text -> the job embedding it, its row
        self._orphans: set[Job] = set()  # jobs of refused writes: their vectors are kept
        self._kept: OrderedDict[str, np.ndarray] = OrderedDict()  # a refused write's vectors, newest last
        self.offloaded = 0  # texts embedded by the embedding process
        self.restarts = 0  # embedding processes that died and were replaced
        # the embedding processes' measured pace (under _jobs_lock): characters sent and not yet embedded,
        # in the order sent, and the recent jobs' seconds (each job's own time in its process, not its
        # wait behind others) and characters, both decayed by PACE_DECAY at each job
        self._queued: dict[Job, tuple[int, float]] = {}  # job -> its characters, when it was sent
        self._seconds = 0.0
        self._chars = 0.0

    def _pool_locked(self) -> ProcessPoolExecutor:
        """The embedding processes (under ``_lock``): new ones, each with a first job that loads its
        model, when there are none or one died."""
        with self._jobs_lock:
            dead = self._pool is not None and self._pool in self._broken
            self._broken.clear()  # only the pool in use matters (an object, never an id a new pool may reuse)
        if dead and self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.processes,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start,
                initargs=(self.nice, os.getpid()),
            )
            # one first job per process: the pool starts a process for each job sent while none is idle
            self._ready = [self._pool.submit(_embed, ["warm"]) for _ in range(self.processes)]
        return self._pool

    def warm(self) -> None:
        """Start the embedding process and load its model now (not at the first write, which would
        wait for both), without waiting for it."""
        with self._lock:
            self._pool_locked()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        clock = _WRITING.get()
        if clock is None or not texts:
            return self.local.embed(texts)
        clock.chars += sum(embedded_chars(t) for t in texts)
        for _attempt in range(3):  # a dead process is replaced (the third: a job sent to it as it died)
            try:
                vectors = self._offloaded(list(texts), clock)
            except BrokenProcessPool:  # the embedding process died: start another, embed again
                self.restarts += 1
                continue
            self.offloaded += len(texts)
            return vectors
        return self.local.embed(texts)

    def _offloaded(self, texts: list[str], clock: WriteClock) -> np.ndarray:
        """The vectors of ``texts`` from the embedding process: those kept for a refused write's retry
        taken, those another write (or an earlier attempt) is having embedded waited for, the rest sent
        in one job."""
        with self._jobs_lock:
            rows = {t: self._running[t] for t in dict.fromkeys(texts) if t not in self._kept and t in self._running}
            new = [t for t in dict.fromkeys(texts) if t not in self._kept and t not in rows]
        if new:
            with self._lock:
                pool = self._pool_locked()
                try:
                    job = pool.submit(_embed, new)
                except BrokenProcessPool:  # it died between jobs: the next attempt starts another
                    with self._jobs_lock:
                        self._broken.add(pool)
                    raise
            with self._jobs_lock:
                for i, t in enumerate(new):
                    self._running[t] = rows[t] = (job, i)
                self._queued[job] = (sum(embedded_chars(t) for t in new), time.monotonic())
            job.add_done_callback(functools.partial(self._finished, new, pool))
        with self._lock:
            ready = [job for job in self._ready if not job.done()]
        if ready:  # the processes are starting (server start, a crash):
            started = time.monotonic()  # their model load is not the write's wait
            wait(ready)
            clock.start += time.monotonic() - started
        jobs = {job for job, _ in rows.values()}
        deadline = clock.deadline()
        waited = time.monotonic()
        _, late = wait(jobs, timeout=None if deadline is None else max(0.0, deadline - waited))
        clock.embedding += time.monotonic() - waited
        if late:
            self._orphan(rows)
            raise ServerBusyError(
                "this write's vectors were not ready within its wait (the server is busy): nothing was stored, "
                "send it again after Retry-After seconds (its embedding goes on and is kept for the retry)"
            )
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with self._jobs_lock:
            kept = {t: self._kept[t] for t in texts if t in self._kept}
        for n, t in enumerate(texts):
            if t in kept:
                out[n] = kept[t]
                continue
            job, i = rows[t]
            try:
                out[n] = job.result()[0][i]  # the embedding process's failure, if any (BrokenProcessPool: again)
            except BrokenProcessPool:
                if new and job is rows[new[0]][0]:  # ours: its pool is dead, whether or not its callback ran
                    with self._jobs_lock:
                        self._broken.add(pool)
                raise
        return out

    def _orphan(self, rows: dict[str, tuple[Job, int]]) -> None:
        """A refused write's texts: their vectors are kept for its retry (at once for a job already done,
        by the job's callback for one still running)."""
        with self._jobs_lock:
            for t, (job, i) in rows.items():
                if not job.done():
                    self._orphans.add(job)
                elif not job.cancelled() and job.exception() is None:
                    self._keep(t, job.result()[0][i])

    def _keep(self, text: str, vector: np.ndarray) -> None:  # under _jobs_lock
        self._kept[text] = vector
        self._kept.move_to_end(text)
        while len(self._kept) > KEPT_VECTORS:
            self._kept.popitem(last=False)

    def _finished(self, texts: list[str], pool: ProcessPoolExecutor, job: Job) -> None:
        """A job is done (in the pool's thread): keep its vectors if its write was refused, or mark its
        process dead."""
        error = None if job.cancelled() else job.exception()
        with self._jobs_lock:
            chars, _sent = self._queued.pop(job, (0, 0.0))
            if error is None and not job.cancelled() and chars:
                self._seconds = PACE_DECAY * self._seconds + job.result()[1]
                self._chars = PACE_DECAY * self._chars + chars
            for t in texts:
                if self._running.get(t, (None, 0))[0] is job:
                    del self._running[t]
            orphan = job in self._orphans
            self._orphans.discard(job)
            if isinstance(error, BrokenProcessPool):
                self._broken.add(pool)
            if orphan and not job.cancelled() and error is None:
                for t, v in zip(texts, job.result()[0], strict=True):
                    self._keep(t, v)

    @property
    def jobs_in_flight(self) -> int:
        """Jobs sent to the embedding processes and not finished (measured ones: a write's texts)."""
        with self._jobs_lock:
            return len(self._queued)

    def _pace_locked(self) -> float | None:
        """Seconds per character of the recent jobs (under ``_jobs_lock``; None: none measured yet)."""
        return self._seconds / self._chars if self._chars else None

    def work(self, chars: int) -> float | None:
        """Seconds a job of ``chars`` characters takes once a process runs it, at the pace of the recent
        jobs (None until a job has been measured)."""
        with self._jobs_lock:
            pace = self._pace_locked()
        return None if pace is None else chars * pace

    def backlog(self, chars: int = 0, ahead: Sequence[int] = ()) -> float | None:
        """Seconds until a job of ``chars`` characters sent now would be done: behind the jobs sent and
        not finished and jobs of ``ahead`` characters each (writes admitted that have not sent their
        texts), each taken in order by the first process free, at the pace of the recent jobs (which
        the renders' load on the CPU slows); None until a job has been measured.

        A job sent earlier is counted from when it was sent (or its process was next free), so one
        nearly done counts what is left of it, not all of it."""
        now = time.monotonic()
        with self._jobs_lock:
            pace, queued = self._pace_locked(), list(self._queued.values())
        if pace is None:
            return None
        free = [-float("inf")] * self.processes  # when each process is next free
        for job, sent in queued:  # in the order sent: each started when sent or when a process was free
            first = free.index(min(free))
            free[first] = max(free[first], sent) + job * pace
        free = [max(0.0, t - now) for t in free]  # from now (a job past its predicted end: about done)
        for job in ahead:
            first = free.index(min(free))
            free[first] += job * pace
        return min(free) + chars * pace

    def close(self) -> None:
        """Stop the embedding processes and wait for them to exit (jobs not started are cancelled, one
        running finishes first), so nothing of theirs is left to clean at the interpreter's exit."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
