"""The server load generator's HTTP clients (benchmarks/server_load.py ``poster``): aiohttp and httpx
must read an answer alike (its status and ``Retry-After``), send the same body and headers, and raise
one of ``TRANSPORT_ERRORS`` when no server answers, so a run's counts do not depend on the client."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from server_load import CLIENTS, TRANSPORT_ERRORS, Answer, poster

SEEN: list[tuple[str, str | None, Any]] = []


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        SEEN.append((self.path, self.headers.get("Authorization"), body))
        busy = self.path.endswith("/busy")
        payload = b'{"error": "busy"}' if busy else b'{"text": "' + b"x" * 20_000 + b'"}'
        self.send_response(503 if busy else 200)
        if busy:
            self.send_header("Retry-After", "3")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("kind", CLIENTS)
def test_each_client_reads_status_and_retry_after_alike(url: str, kind: str) -> None:
    SEEN.clear()

    async def go() -> list[Answer]:
        async with poster(kind, url, {"Authorization": "Bearer k"}, connections=4) as post:
            return [
                await post("/v1/histories/h/render", {"query": "q", "budget": 64}),
                await post("/v1/histories/h/busy", {"turns": [{"speaker": "a", "text": "é"}]}),
                *await asyncio.gather(*(post("/v1/histories/h/render", {"n": n}) for n in range(6))),
            ]

    answers = asyncio.run(go())
    assert answers[0] == Answer(200, None)
    assert answers[1] == Answer(503, "3")
    assert answers[2:] == [Answer(200, None)] * 6
    assert SEEN[0] == ("/v1/histories/h/render", "Bearer k", {"query": "q", "budget": 64})
    assert SEEN[1] == ("/v1/histories/h/busy", "Bearer k", {"turns": [{"speaker": "a", "text": "é"}]})
    assert sorted(b["n"] for _, _, b in SEEN[2:]) == list(range(6))


@pytest.mark.parametrize("kind", CLIENTS)
def test_each_client_raises_a_transport_error_when_nothing_answers(kind: str) -> None:
    with socket.socket() as s:  # a port just freed: nothing listens on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def go() -> Answer:
        async with poster(kind, f"http://127.0.0.1:{port}", {}, connections=1) as post:
            return await post("/v1/histories/h/render", {})

    with pytest.raises(TRANSPORT_ERRORS):
        asyncio.run(go())
