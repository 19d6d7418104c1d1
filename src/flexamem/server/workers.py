"""``flexamem serve --workers N`` on Linux: N worker processes, each listening on a socket of its own
bound to the same port (``SO_REUSEPORT``), so that the kernel spreads new connections over them.

uvicorn's own ``--workers`` binds one socket in the parent and lets every worker accept on it. An
asyncio worker woken by that socket accepts every connection waiting there in one go, so a burst of
connections (a client's pool of kept-alive connections, opened together) lands on whichever worker
woke first, and stays there: measured with 2 workers and 16 connections opened at once, one worker
took all 16 in 2 bursts of 5 and 11-12 in two more, and one interpreter then served every request
while the other idled. With a socket per worker the kernel hands each new connection to one of them
by a hash of its addresses, so 16 connections split about evenly (never all on one but by a chance of
2 in 65,536).

The workers first started listen together: each makes its app (loading the models takes seconds, and
more when the workers and their embedding processes load at once), then waits for the others before
it listens, so that the connections a client opens as soon as the port answers are not all handed to
the worker that was ready first (they would stay there while kept alive: measured, one worker at
~600 MB served a benchmark's 16 connections while the other idled at ~250 MB). A worker started again
later listens as soon as it is ready.

The parent holds the port (bound, not listening: a port in use fails at once, before any worker
starts), starts the workers (``spawn``), starts again a worker that dies (a crash, a ``kill -9``) and
stops them all on SIGINT/SIGTERM (SIGTERM to each, which uvicorn answers by finishing the requests
in progress; ``kill -9`` after ``grace`` seconds). A worker that fails to start (uvicorn's exit code
3: the app could not be made, its store or key file unreadable, for example) stops the server with
that code rather than being started again for ever.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import signal
import socket
import sys
import threading
from typing import Any

__all__ = ["available", "run_workers"]

log = logging.getLogger("flexamem.server")

STARTUP_FAILURE = 3  # uvicorn's exit code for a server that could not start
START_WAIT = 120.0  # seconds a worker waits for the others to be ready before it listens anyway


def available() -> bool:
    """Whether this platform spreads connections over sockets bound with ``SO_REUSEPORT`` (Linux does;
    BSD and macOS let one of them take every connection)."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` with ``SO_REUSEPORT`` (and ``SO_REUSEADDR``), not listening."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on sockets whose
    # proto says TCP, and an answer sent in two writes then waited ~40 ms for the client's delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _worker(options: dict[str, Any], host: str, port: int, together: threading.Barrier | None) -> None:
    """One worker (a spawned process): its own listening socket on the port, one uvicorn server on it.
    ``together``: the workers started with the server, which listen once all of them are ready."""
    import uvicorn

    config = uvicorn.Config(host=host, port=port, **options)
    try:
        config.load()  # the app (the store, the keys) made before listening
    except (Exception, SystemExit) as exc:  # uvicorn exits 1 on some failures; the app's own errors raise
        print(f"flexamem serve: a worker could not start: {exc}", file=sys.stderr, flush=True)
        sys.exit(STARTUP_FAILURE)  # not started again: the next worker would fail the same way
    if together is not None:
        with contextlib.suppress(threading.BrokenBarrierError):  # one failed or is slow: listen anyway
            together.wait(START_WAIT)
    sock = bind(host, port)
    sock.listen(config.backlog)  # at once: connections wait in its queue while the app starts
    uvicorn.Server(config).run(sockets=[sock])


def run_workers(options: dict[str, Any], host: str, port: int, workers: int, *, grace: float = 30.0) -> int:
    """Serve ``options`` (``uvicorn.Config``'s arguments but host and port) from ``workers`` processes
    until SIGINT/SIGTERM; return the exit code (0, or uvicorn's 3 when a worker could not start)."""
    held = bind(host, port)  # a port in use fails here, once; port 0 becomes the port every worker binds
    port = held.getsockname()[1]
    context = multiprocessing.get_context("spawn")
    stop = threading.Event()
    code = 0
    together = context.Barrier(workers)

    def start(first: bool = False) -> multiprocessing.process.BaseProcess:
        args = (options, host, port, together if first else None)
        process = context.Process(target=_worker, args=args, name="flexamem-worker")
        process.start()
        return process

    def on_signal(_signum: int, _frame: Any) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    processes = [start(first=True) for _ in range(workers)]
    try:
        while not stop.is_set():
            multiprocessing.connection.wait([p.sentinel for p in processes], timeout=0.5)
            for i, process in enumerate(processes):
                if stop.is_set() or process.is_alive():
                    continue
                if process.exitcode == STARTUP_FAILURE:
                    log.error("a worker could not start (exit code 3): stopping the server")
                    code = STARTUP_FAILURE
                    stop.set()
                    break
                together.abort()  # one of the first may have died before it was ready: the others listen
                log.warning("worker %s exited with code %s: starting another", process.pid, process.exitcode)
                processes[i] = start()
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()  # SIGTERM: uvicorn finishes the requests in progress
        for process in processes:
            process.join(grace)
            if process.is_alive():
                process.kill()
                process.join()
        held.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code
