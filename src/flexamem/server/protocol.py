"""uvicorn's h11 protocol with the limits a server facing the Internet needs (``flexamem serve`` runs it).

uvicorn closes a kept-alive connection left idle after an answer (``timeout_keep_alive``), but nothing else:
a connection that never sends a request, or sends its head a byte at a time, is kept for ever, and h11
bounds a request's head only while it arrives in pieces (a 100 KB head read at once, or 1,000 headers,
pass). Here:

- a request's head (request line and headers) must arrive within ``header_timeout`` seconds of the
  connection being made, or of its first byte on a kept-alive connection: a connection that sent nothing
  by then is closed, one that sent part of a head gets ``408`` and is closed;
- a head over ``max_header_bytes`` bytes, or with more than ``max_headers`` headers, gets ``431`` and the
  connection is closed, however it arrived.

Each refusal is a JSON error body, like the app's, and one JSON log line. A request's body is timed by
the app (``ServerConfig.body_timeout``: 408). The limits come from the environment ``flexamem serve``
sets for its workers (``FLEXAMEM_HEADER_TIMEOUT``, ``FLEXAMEM_MAX_HEADER_BYTES``, ``FLEXAMEM_MAX_HEADERS``);
run by hand: ``uvicorn --http flexamem.server.protocol:GuardedH11Protocol``. It relies on uvicorn's
``H11Protocol`` (its ``conn``, ``transport`` and the ``PAUSED`` event of its ``handle_events``).
"""

from __future__ import annotations

import asyncio
import functools
import http
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from flexamem.server.settings import DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_HEADER_BYTES, DEFAULT_MAX_HEADERS

log = logging.getLogger("flexamem.server")


@dataclass(frozen=True)
class HeadLimits:
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    max_headers: int = DEFAULT_MAX_HEADERS


@functools.cache
def head_limits() -> HeadLimits:
    """The limits of this process, from the environment ``flexamem serve`` sets (read once)."""
    env = os.environ
    return HeadLimits(
        float(env.get("FLEXAMEM_HEADER_TIMEOUT") or DEFAULT_HEADER_TIMEOUT),
        int(env.get("FLEXAMEM_MAX_HEADER_BYTES") or DEFAULT_MAX_HEADER_BYTES),
        int(env.get("FLEXAMEM_MAX_HEADERS") or DEFAULT_MAX_HEADERS),
    )


def refusal(status: int, kind: str, message: str) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, with the app's JSON error body."""
    body = json.dumps({"error": {"type": kind, "message": message}}).encode()
    reason = http.HTTPStatus(status).phrase
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class _Connection(h11.Connection):
    """h11's server side, which also refuses a head over the limits once it is parsed whole (h11 refuses
    it only while it is incomplete): ``refuse`` answers it, and ``PAUSED`` stops uvicorn reading more."""

    def __init__(
        self, limits: HeadLimits, refuse: Callable[[int, str, str], None], started: Callable[[], None]
    ) -> None:
        super().__init__(h11.SERVER, max_incomplete_event_size=limits.max_header_bytes)
        self.limits, self.refuse, self.started = limits, refuse, started

    def next_event(self) -> Any:
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as exc:
            if exc.error_status_hint != 431:
                raise  # uvicorn answers a malformed request 400
            self.refuse(431, "RequestHeaderFieldsTooLarge", self._too_large())
            return h11.PAUSED
        if isinstance(event, h11.Request):
            self.started()
            size = len(event.method) + len(event.target) + sum(len(n) + len(v) + 4 for n, v in event.headers)
            if len(event.headers) > self.limits.max_headers:
                self.refuse(
                    431, "RequestHeaderFieldsTooLarge", f"a request may carry at most {self.limits.max_headers} headers"
                )
                return h11.PAUSED
            if size > self.limits.max_header_bytes:
                self.refuse(431, "RequestHeaderFieldsTooLarge", self._too_large())
                return h11.PAUSED
        return event

    def _too_large(self) -> str:
        return f"a request's line and headers are limited to {self.limits.max_header_bytes} bytes"


class GuardedH11Protocol(H11Protocol):
    """``H11Protocol`` with a deadline for each request's head and bounds on its size and header count."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = head_limits()
        self.conn = _Connection(self.limits, self._refuse, self._head_done)
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_begun = False  # a byte of the awaited request has arrived

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(begun=False)

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE and self.cycle_done():  # the first bytes of the next request
            if self._head_timer is None:
                self._arm(begun=True)
            self._head_begun = True
        super().data_received(data)

    def cycle_done(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self, begun: bool) -> None:
        self._disarm()
        self._head_begun = begun
        self._head_timer = self.loop.call_later(self.limits.header_timeout, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_done(self) -> None:
        self._disarm()

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if not self._head_begun:  # nothing asked: an idle connection, closed without an answer
            self.transport.close()
            return
        self._refuse(
            408, "RequestTimeout", f"a request's line and headers must arrive within {self.limits.header_timeout:g} s"
        )

    def _refuse(self, status: int, kind: str, message: str) -> None:
        """Answer ``status`` and close the connection (the request is not read further)."""
        self._disarm()
        client = f"{self.client[0]}" if self.client else None
        log.info(json.dumps({"status": status, "error": kind, "client": client}))
        if not self.transport.is_closing():
            self.transport.write(refusal(status, kind, message))
            self.transport.close()
