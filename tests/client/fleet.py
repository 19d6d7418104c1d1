"""Real servers for the client's failure tests: ``flexamem serve`` processes that can be killed with
SIGKILL (the whole process group: the worker and its embedding process) and started again, and a tiny
round-robin TCP proxy in front of several of them (what any load balancer does, minus health checks)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from tests.server.conftest import free_port


class ServerProcess:
    def __init__(self, db: str, keyfile: Path, log: Path, port: int | None = None) -> None:
        self.db, self.keyfile, self.log = db, keyfile, log
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ServerProcess:
        with self.log.open("a") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "flexamem", "serve", "--db", self.db, "--keys", str(self.keyfile),
                 "--port", str(self.port), "--workers", "1"],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "FLEXAMEM_THREADS": "1"},
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            time.sleep(0.2)
        raise AssertionError("the server did not start: " + self.log.read_text()[-2000:])

    def kill(self) -> None:
        """kill -9 of the server and every process it started."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


class RoundRobin:
    """Each new connection goes to the next backend that accepts one; bytes are copied both ways."""

    def __init__(self, backends: list[int], lose: float = 0.0, seed: int = 7) -> None:
        self.backends = backends
        self.lose = lose  # the share of answers lost: the connection is cut instead (the request was served)
        self.lost = 0
        self.random = random.Random(seed)
        self.turn = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = [0] * len(backends)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        for _ in range(len(self.backends)):
            i = self.turn % len(self.backends)
            self.turn += 1
            try:
                backend = socket.create_connection(("127.0.0.1", self.backends[i]), timeout=2)
            except OSError:
                continue
            backend.settimeout(None)
            self.connections[i] += 1
            threading.Thread(target=self._pipe, args=(backend, client, True), daemon=True).start()
            self._pipe(client, backend)
            return
        client.close()

    def close(self) -> None:
        self.listener.close()

    def _pipe(self, src: socket.socket, dst: socket.socket, answers: bool = False) -> None:
        try:
            while data := src.recv(65536):
                if answers and data.startswith(b"HTTP/") and self.random.random() < self.lose:
                    self.lost += 1
                    break  # the server answered; the client never hears it
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
