"""The wire under a memory at a URL: one request with bounded retries, over one of several servers.

A :class:`Call` says what to send and how to read the answer; :class:`Transport` sends it, sync or async (one
retry rule for both: :meth:`Transport.plan`). Connection failures, timeouts, a busy or unreachable store or
server (503), a proxy's 502/504 and a 409 ``ConcurrentWriteError`` are tried again with exponential back-off
(honouring ``Retry-After``) until ``ClientSettings.retry_seconds`` have passed; a connection failure moves on
to the next server of the list. Every write carries what makes a retry harmless (an ``Idempotency-Key``, a
step id, a session id), so a write retried after the server stored it is stored once. Any other error answer
becomes the library's own :class:`~flexamem.errors.FlexaMemError` subclass named by the server
(:func:`~flexamem.errors.error_classes`), with the server's message: a 409 ``RequestConflictError`` (a request
id reused with another body) is raised at once, never retried. ``httpx`` is imported when a transport is made.
"""

from __future__ import annotations

import asyncio
import json
import numbers
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from flexamem.config import ClientSettings
from flexamem.errors import (
    ConcurrentWriteError,
    FlexaMemError,
    InvalidInputError,
    NotFoundError,
    ServerBusyError,
    StoreError,
    StoreFullError,
    StoreUnavailableError,
    ThrottledError,
    UnauthorizedError,
    error_classes,
)
from flexamem.telemetry import trace_headers

if TYPE_CHECKING:
    import httpx

T = TypeVar("T")

# what is worth another attempt: a busy or unreachable store or server, a lost race (a 409 that is not a
# taken name), and a proxy's 502/504 without a live server behind it (no FlexA-Mem error in its body)
RETRIED_ERRORS = {StoreUnavailableError, ServerBusyError, ConcurrentWriteError}
BY_STATUS: dict[int, type[FlexaMemError]] = {
    400: InvalidInputError,
    401: UnauthorizedError,
    404: NotFoundError,
    409: ConcurrentWriteError,
    413: InvalidInputError,
    422: InvalidInputError,
    429: ThrottledError,
    503: StoreUnavailableError,
    507: StoreFullError,
}


@dataclass(frozen=True)
class Wait:
    """An attempt failed in a way worth another: wait this many seconds first."""

    seconds: float


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its JSON answer. ``headers`` carry a write's idempotency key, made
    once with the call, so every retry sends the same one."""

    method: str
    path: str
    read: Callable[[Any], T]
    body: Any = None
    params: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    missing: Callable[[], T] | None = None  # the answer to a 404 (a drop of nothing: False), else raise


def error_from(response: httpx.Response) -> FlexaMemError:
    """The library's error for an error answer: the class the server named (when the library has it,
    else the one for the status), with the server's message."""
    try:
        body = response.json()["error"]
        kind, message = str(body["type"]), str(body["message"])
    except (ValueError, KeyError, TypeError):
        kind, message = "", response.text[:500] or response.reason_phrase
    cls = error_classes().get(kind) or BY_STATUS.get(response.status_code, StoreError)
    return cls(f"{message} (HTTP {response.status_code} from {response.request.url.host})")


def encoded(body: Any) -> bytes:
    """A request's JSON body, or :class:`InvalidInputError` for what JSON cannot carry (a lone surrogate,
    an object of another type), as the library refuses it locally; numpy integers are sent as numbers."""

    def plain(value: Any) -> Any:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        raise TypeError(f"a {type(value).__name__} is not JSON")

    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=plain).encode()
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"the request holds a lone surrogate (not valid text): {exc.reason}") from None
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"the request cannot be sent as JSON: {exc}") from None


class Transport:
    """Calls to one of ``urls`` (the first that answers), retried by :meth:`plan`, sync or async."""

    def __init__(self, urls: list[str], key: str, settings: ClientSettings) -> None:
        try:
            import httpx
        except ModuleNotFoundError as exc:  # pragma: no cover - install problem
            raise InvalidInputError("a memory at a URL needs httpx: pip install 'flexamem[client]'") from exc
        self.urls = urls
        self.settings = settings
        self.current = 0  # the server calls go to; the next one after a connection failure
        self.retries = 0  # attempts after a retryable failure, over this transport's life
        timeout = httpx.Timeout(settings.timeout, connect=settings.connect_timeout)
        headers = {"Authorization": f"Bearer {key}", "User-Agent": "flexamem-client"}
        self._sync = httpx.Client(timeout=timeout, headers=headers)
        self._async: tuple[asyncio.AbstractEventLoop, httpx.AsyncClient] | None = None  # per event loop
        self._async_args = {"timeout": timeout, "headers": headers}
        self._httpx = httpx

    def close(self) -> None:
        self._sync.close()
        if self._async is not None:
            loop, client = self._async
            if not loop.is_closed() and not loop.is_running():
                loop.run_until_complete(client.aclose())
            self._async = None

    async def aclose(self) -> None:
        """:meth:`close` from a coroutine: the async client is closed on the loop it was made on."""
        self._sync.close()
        if self._async is not None:
            loop, client = self._async
            self._async = None
            if loop is asyncio.get_running_loop():
                await client.aclose()
            elif not loop.is_closed() and not loop.is_running():
                loop.run_until_complete(client.aclose())

    def _request(self, call: Call[Any]) -> tuple[str, str, dict[str, Any]]:
        url = self.urls[self.current % len(self.urls)] + call.path
        kwargs: dict[str, Any] = {"headers": {**call.headers, **trace_headers()}}
        if call.body is not None:
            kwargs["content"] = encoded(call.body)
            kwargs["headers"]["Content-Type"] = "application/json"
        if call.params:
            kwargs["params"] = dict(call.params)
        return call.method, url, kwargs

    def plan(self, call: Call[T], outcome: httpx.Response | Exception, started: float, attempt: int) -> T | Wait:
        """What an attempt's outcome means: the call's answer, or how long to wait before the next
        attempt; raises the library's error when the outcome is final."""
        if isinstance(outcome, Exception):
            if not isinstance(outcome, self._httpx.TransportError):
                raise outcome
            self.current += 1  # this server is unreachable or cut the connection: the next one
            failure: FlexaMemError = StoreUnavailableError(
                f"cannot reach the FlexA-Mem server ({type(outcome).__name__}: {outcome})"
            )
            wait = None
        else:
            status = outcome.status_code
            if status < 400:
                return call.read(outcome.json())
            if status == 404 and call.missing is not None:
                return call.missing()
            failure = error_from(outcome)
            retryable = type(failure) in RETRIED_ERRORS or (status in (502, 504) and type(failure) is StoreError)
            if not retryable:
                raise failure
            if status == 502:
                self.current += 1
            wait = _retry_after(outcome)
        delay = min(self.settings.max_backoff, self.settings.backoff * 2**attempt) * random.uniform(0.5, 1.0)
        if wait is not None:
            delay = min(self.settings.max_backoff, max(delay, wait))
        if time.monotonic() - started + delay > self.settings.retry_seconds:
            raise failure
        self.retries += 1
        return Wait(delay)

    def run(self, call: Call[T]) -> T:
        started, attempt = time.monotonic(), 0
        while True:
            method, url, kwargs = self._request(call)
            try:
                outcome: httpx.Response | Exception = self._sync.request(method, url, **kwargs)
            except Exception as exc:
                outcome = exc
            result = self.plan(call, outcome, started, attempt)
            if not isinstance(result, Wait):
                return result
            time.sleep(result.seconds)
            attempt += 1

    async def arun(self, call: Call[T]) -> T:
        loop = asyncio.get_running_loop()
        if self._async is None or self._async[0] is not loop:  # an async client serves one event loop
            self._async = (loop, self._httpx.AsyncClient(**self._async_args))  # type: ignore[arg-type]
        client = self._async[1]
        started, attempt = time.monotonic(), 0
        while True:
            method, url, kwargs = self._request(call)
            try:
                outcome: httpx.Response | Exception = await client.request(method, url, **kwargs)
            except Exception as exc:
                outcome = exc
            result = self.plan(call, outcome, started, attempt)
            if not isinstance(result, Wait):
                return result
            await asyncio.sleep(result.seconds)
            attempt += 1


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
