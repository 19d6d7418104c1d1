"""What every request passes through: a body within ``max_body_bytes`` (413) that arrives in full within
``body_timeout`` (408), the caller's trace continued, a bug answered as one JSON 500, one JSON log line
and the request metrics per request (no keys, no bodies), and a kept-alive connection closed after
``keep_alive_requests`` answers."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from flexamem.server.errors import GONE, error_response, internal_error
from flexamem.server.metrics import Metrics
from flexamem.server.settings import ServerConfig
from flexamem.telemetry import remote_parent

log = logging.getLogger("flexamem.server")
TOO_LARGE = "request bodies are limited to {} bytes"


KNOWN_CONNECTIONS = 4096  # connections whose answers are counted, at most (the oldest counts dropped first)


class RecycledConnections:
    """ASGI middleware: the ``requests``-th answer on a kept-alive connection says ``Connection: close``,
    so the connection is closed after it and the client opens another, which the kernel hands to one of
    the workers afresh (``ServerConfig.keep_alive_requests``). A connection is known by its client's
    address and port (unique while it is open); the counts of connections closed otherwise are dropped
    oldest first past ``KNOWN_CONNECTIONS``. Behind a proxy whose ``X-Forwarded-For`` uvicorn trusts
    (127.0.0.1 by default), the client is the forwarded address with port 0: a proxy's connection is
    then closed at the answer that is some client's 100th, which closes its connections about as often."""

    def __init__(self, app: Any, requests: int) -> None:
        self.app, self.requests = app, requests
        self._answers: dict[tuple[Any, ...], int] = {}  # connection -> answers so far, oldest first

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        client = scope.get("client") if scope["type"] == "http" else None
        if not client:
            await self.app(scope, receive, send)
            return
        connection = tuple(client)
        answers = self._answers.pop(connection, 0) + 1
        if answers < self.requests:
            self._answers[connection] = answers  # moved to the newest end
            if len(self._answers) > KNOWN_CONNECTIONS:
                del self._answers[next(iter(self._answers))]
            await self.app(scope, receive, send)
            return

        async def closing(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, closing)


def install_middleware(app: FastAPI, config: ServerConfig, metrics: Metrics) -> None:
    """Bound every request's body, log and count each request, and close a kept-alive connection after
    ``config.keep_alive_requests`` answers."""
    if config.keep_alive_requests:
        app.add_middleware(RecycledConnections, requests=config.keep_alive_requests)

    async def answer(request: Request, call_next: Any) -> Any:
        """The request's response, once its body is in whole (413, 408, or 499 for a client gone)."""
        too_large = TOO_LARGE.format(config.max_body_bytes)
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > config.max_body_bytes):
            return error_response(413, "PayloadTooLarge", too_large)
        try:
            body = await asyncio.wait_for(request.body(), config.body_timeout)
        except TimeoutError:  # a body slower than the limit, or shorter than its Content-Length
            late = error_response(
                408, "RequestTimeout", f"the request's body did not arrive in full within {config.body_timeout:g} s"
            )
            late.headers["Connection"] = "close"  # the rest of the body would be read as the next request
            return late
        except ClientDisconnect:  # the client went away before its body was in: nobody to answer
            return Response(status_code=GONE)
        if len(body) > config.max_body_bytes:
            return error_response(413, "PayloadTooLarge", too_large)
        try:
            with remote_parent(request.headers):  # the caller's trace, when it sent one
                return await call_next(request)
        except Exception as exc:  # a real bug: one JSON 500 and one log line, the connection kept
            return internal_error(request, exc)

    @app.middleware("http")
    async def limits_and_logs(request: Request, call_next: Any) -> Any:
        start = time.perf_counter()
        response = await answer(request, call_next)
        seconds = time.perf_counter() - start
        route = getattr(request.scope.get("route"), "path", "unmatched")
        metrics.requests.labels(route, request.method, str(response.status_code)).inc()
        metrics.request_seconds.labels(route).observe(seconds)
        line = {
            "method": request.method,
            "path": request.url.path,
            "status": response.status_code,
            "ms": round(seconds * 1000, 1),
            "tenant": getattr(request.state, "tenant", None),
        }
        if response.status_code == GONE:  # one line, never a traceback
            line["error"] = "ClientDisconnect"
        log.info(json.dumps(line))
        return response
