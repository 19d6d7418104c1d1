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
from starlette.datastructures import Headers
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
    (``flexamem serve --forwarded-allow-ips``; none by default), the client is the forwarded address with
    port 0: a proxy's connection is then closed at the answer that is some client's 100th, which closes
    its connections about as often."""

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


class RequestLimits:
    """ASGI middleware around every request (pure ASGI: no task or stream of its own per request): its
    body read in full within ``config.body_timeout`` and no larger than ``config.max_body_bytes`` (408,
    413; 499 logged for a client gone before its body was in), then handed to the app; a bug answered as
    one JSON 500; one log line and the request metrics once it is answered."""

    def __init__(self, app: Any, config: ServerConfig, metrics: Metrics) -> None:
        self.app, self.config, self.metrics = app, config, metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 0

        async def sending(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        headers = Headers(scope=scope)
        try:
            body = await self._body(headers, receive)
            if isinstance(body, Response):
                if body.status_code != GONE:  # nobody to answer a client gone
                    await body(scope, receive, sending)
                status = status or body.status_code
                return
            given = False

            async def replay() -> Any:  # the body read above, then what the connection says next
                nonlocal given
                if not given:
                    given = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            try:
                with remote_parent(headers):  # the caller's trace, when it sent one
                    await self.app(scope, replay, sending)
            except Exception as exc:  # a real bug: one JSON 500 and one log line, the connection kept
                if status:  # the answer had begun: nothing can replace it
                    raise
                await internal_error(Request(scope), exc)(scope, receive, sending)
        finally:  # one line per request, however it ended
            self._logged(scope, status, time.perf_counter() - start)

    async def _body(self, headers: Headers, receive: Any) -> bytes | Response:
        """The request's body, or the answer that replaces the request (413, 408, or 499 for a client gone)."""
        limit = self.config.max_body_bytes
        length = headers.get("content-length")
        declared_too_large = length is not None and (not length.isdigit() or int(length) > limit)
        chunks: list[bytes] = []
        size = 0

        async def read() -> None:
            nonlocal size
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientDisconnect
                chunk = message.get("body", b"")
                size += len(chunk)
                if size <= limit:  # past it the rest is read and dropped: the connection stays in step
                    chunks.append(chunk)
                if not message.get("more_body", False):
                    return

        if not declared_too_large:  # a body declared too large is answered at once, never read
            try:
                await asyncio.wait_for(read(), self.config.body_timeout)
            except TimeoutError:  # a body slower than the limit, or shorter than its Content-Length
                late = error_response(
                    408,
                    "RequestTimeout",
                    f"the request's body did not arrive in full within {self.config.body_timeout:g} s",
                )
                late.headers["Connection"] = "close"  # the rest of the body would be read as the next request
                return late
            except ClientDisconnect:  # the client went away before its body was in: nobody to answer
                return Response(status_code=GONE)
        if declared_too_large or size > limit:
            return error_response(413, "PayloadTooLarge", TOO_LARGE.format(limit))
        return b"".join(chunks)

    def _logged(self, scope: Any, status: int, seconds: float) -> None:
        route = getattr(scope.get("route"), "path", "unmatched")
        self.metrics.requests.labels(route, scope["method"], str(status)).inc()
        self.metrics.request_seconds.labels(route).observe(seconds)
        line = {
            "method": scope["method"],
            "path": scope["path"],
            "status": status,
            "ms": round(seconds * 1000, 1),
            "tenant": scope.get("state", {}).get("tenant"),
        }
        if status == GONE:  # one line, never a traceback
            line["error"] = "ClientDisconnect"
        log.info(json.dumps(line))


def install_middleware(app: FastAPI, config: ServerConfig, metrics: Metrics) -> None:
    """Bound every request's body, log and count each request, and close a kept-alive connection after
    ``config.keep_alive_requests`` answers."""
    if config.keep_alive_requests:
        app.add_middleware(RecycledConnections, requests=config.keep_alive_requests)
    app.add_middleware(RequestLimits, config=config, metrics=metrics)  # added last: the outermost of the two
