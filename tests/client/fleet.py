"""A tiny round-robin TCP proxy in front of several servers (what any load balancer does, minus health
checks), for the client's failure tests (the servers: :class:`tests.servers.ServerProcess`)."""

from __future__ import annotations

import contextlib
import random
import socket
import threading


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
