"""Real servers for the tests: ``flexamem serve`` on 127.0.0.1 in its own process group, started,
waited for, stopped or killed with everything it started (a helper module: no tests here)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """``python -m flexamem serve --db DB --keys KEYFILE --port PORT --workers N [args]``, its output
    appended to ``log``; ``FLEXAMEM_THREADS`` set to ``threads`` (1: one thread per embedder, as the tests
    share 2 cores; None: not set)."""

    def __init__(
        self,
        db: str,
        keyfile: Path,
        log: Path,
        *,
        port: int | None = None,
        workers: int = 2,
        args: Sequence[str] = (),
        threads: str | None = "1",
    ) -> None:
        self.db, self.keyfile, self.log = db, keyfile, log
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [sys.executable, "-m", "flexamem", "serve", "--db", db, "--keys", str(keyfile),
                        "--port", str(self.port), "--workers", str(workers), *args]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None
        self.threads = threads  # FLEXAMEM_THREADS in the server's environment (None: not set)

    def start(self, timeout: float = 120) -> ServerProcess:
        """Start it and wait until ``/health`` answers (a failed test, with the log's end, if it does not)."""
        env = {k: v for k, v in os.environ.items() if k != "FLEXAMEM_THREADS"}
        if self.threads is not None:
            env["FLEXAMEM_THREADS"] = self.threads
        with self.log.open("a") as out:
            self.proc = subprocess.Popen(
                self.command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        pytest.fail("the server did not start: " + self.log.read_text()[-2000:])

    def kill(self) -> None:
        """kill -9 of the server and every process it started."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM to the server and its processes (kill -9 after 30 s)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def workers(self) -> list[int]:
        """The pids of the server's workers."""
        assert self.proc is not None
        return worker_pids(self.proc.pid)

    def embedders(self) -> list[int]:
        """The pids of the embedding processes: the workers' children (two levels below the server)."""
        return [child for worker in self.workers() for child in children_of(worker)]


def children_of(pid: int) -> list[int]:
    """The pids of process ``pid``'s children, started by any of its threads (``/proc/PID/task/TID/children``
    lists only the children of thread TID: an embedding process started again from a request's thread
    is missing from the main thread's list). Empty if it is gone."""
    found: list[int] = []
    try:
        threads = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for thread in threads:
        try:
            found += [int(p) for p in (thread / "children").read_text().split()]
        except OSError:  # the thread ended since
            continue
    return found


def stat_fields(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command's name (state first); OSError if it is gone."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_ticks(pid: int) -> int:
    """The CPU time process ``pid`` has used so far, in clock ticks (user + system)."""
    fields = stat_fields(pid)
    return int(fields[11]) + int(fields[12])


def worker_pids(server_pid: int) -> list[int]:
    """The workers of the ``flexamem serve`` process ``server_pid``: its children but multiprocessing's
    resource tracker (started beside the workers it spawns)."""
    found = []
    for child in children_of(server_pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:  # gone since
            continue
        if b"resource_tracker" not in command:
            found.append(child)
    return found
