"""How the server answers what goes wrong: the status of each library error, the JSON error body
``{"error": {"type", "message"}}`` (no stack trace), the exception handlers, and the error answers each
route lists in the OpenAPI document."""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from flexamem.errors import (
    BudgetError,
    ConcurrentWriteError,
    DuplicateUnitError,
    FlexaMemError,
    HistoryDroppedError,
    InvalidInputError,
    ModelUnavailableError,
    NotFoundError,
    RequestConflictError,
    ServerBusyError,
    StoreClosedError,
    StoreError,
    StoreFullError,
    StoreUnavailableError,
    UnauthorizedError,
    error_name,
)
from flexamem.server.schemas import ErrorOut

log = logging.getLogger("flexamem.server")

STATUS = {  # the first that matches: subclasses before their bases
    NotFoundError: 404,
    RequestConflictError: 409,  # a request id reused with another body: refused, not retried (an InvalidInputError)
    UnauthorizedError: 401,
    BudgetError: 400,
    InvalidInputError: 400,
    HistoryDroppedError: 404,  # before its base class: a deleted agent session is gone, not busy
    ConcurrentWriteError: 409,
    DuplicateUnitError: 409,
    ModelUnavailableError: 503,
    StoreClosedError: 503,
    StoreUnavailableError: 503,  # a lost or restarting database: retryable, with Retry-After
    ServerBusyError: 503,  # as many writes in progress as the worker admits: retryable, with Retry-After
    StoreFullError: 507,
    StoreError: 500,  # a damaged store (StoreCorruptError) or another failure under it: the server's, not the caller's
}
GONE = 499  # the status logged and counted for a client that went away before its request was in (nginx's)
NESTED_TOO_DEEP = "the request body is JSON nested too deeply to be read: nothing was stored"
RETRY_AFTER = "1"  # seconds a client waits before retrying a 503 (a database restart takes about that)


class Refusal(Exception):
    """An answer given before a route's work: a link used for what it was not made for (403), an address
    throttled for its failed authentications (429)."""

    def __init__(self, status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.headers = status, kind, message, headers or {}


def status_of(exc: FlexaMemError) -> int:
    for kind, status in STATUS.items():
        if isinstance(exc, kind):
            return status
    return 400


ANSWERS = {
    400: "Bad input (InvalidInputError, BudgetError): nothing was stored",
    401: "No API key, or a key no tenant holds",
    404: "No such history, unit or agent session for this tenant (or it was deleted); another tenant's "
    "history is answered exactly so",
    408: "The request's body did not arrive in full within the server's body timeout: nothing was stored, "
    "the connection is closed",
    409: "A conflict: the unit id is taken, or another writer advanced the history or agent session first "
    "(ConcurrentWriteError: retry), or the Idempotency-Key or step id already names a write with another body "
    "(RequestConflictError: nothing was stored; do not retry)",
    413: "The request body is over the server's limit",
    422: "The request does not match the schema",
    429: "Too many failed authentications from this address (wrong keys): every request that needs a key, "
    "good or bad, is refused until Retry-After seconds have passed",
    431: "The request's line and headers are over the server's limit in bytes, or it carries too many headers: "
    "the connection is closed",
    500: "The store is damaged (StoreCorruptError names the row) or the server failed; nothing was half-stored",
    503: "The store cannot be reached right now (a database restarting), or the worker has as many writes in "
    "progress as it admits, or a write's vectors were not ready within its wait (ServerBusyError): nothing "
    "was stored, retry after Retry-After seconds",
    507: "The store's disk is full: nothing of this write was stored; reads go on",
}


def answers(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The error statuses a route can answer, for the OpenAPI document (every /v1 route also answers
    401, 429, 431, 500 and 503; a route with a body 413 and 408)."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in sorted({401, 429, 431, 500, 503, *codes, *((408,) if 413 in codes else ())}):
        out[code] = {"model": ErrorOut, "description": ANSWERS[code]}
        if code in (429, 503):
            out[code]["headers"] = {"Retry-After": {"description": "seconds", "schema": {"type": "integer"}}}
    return out


READ = answers(404)
WRITE = answers(400, 404, 409, 413, 422, 507)


def install_handlers(app: FastAPI) -> None:
    """Answer every error raised by a route (or before it) as JSON, with its status."""

    @app.exception_handler(FlexaMemError)
    async def flexamem_error(request: Request, exc: FlexaMemError) -> JSONResponse:
        status = status_of(exc)
        if status >= 500 and not isinstance(exc, ServerBusyError):  # the environment failed: one log line
            log.error(json.dumps({"path": request.url.path, "error": type(exc).__name__}))
        response = error_response(status, error_name(exc), str(exc))
        if status == 503:
            response.headers["Retry-After"] = RETRY_AFTER
        return response

    @app.exception_handler(Refusal)
    async def refused(request: Request, exc: Refusal) -> JSONResponse:
        response = error_response(exc.status, exc.kind, exc.message)
        response.headers.update(exc.headers)
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        details = [
            {"where": ".".join(str(p) for p in e.get("loc", ())), "problem": str(e.get("msg"))} for e in exc.errors()
        ]
        first = details[0] if details else {"where": "", "problem": "invalid request"}
        # named as the library names the same mistake (a client raises that class): a budget's BudgetError
        kind = BudgetError if first["where"].rsplit(".", 1)[-1] == "budget" else InvalidInputError
        return error_response(422, kind.__name__, f"{first['where']}: {first['problem']}", details)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and isinstance(exc.__cause__, RecursionError):  # FastAPI's json.loads gave up
            return error_response(400, "InvalidInputError", NESTED_TOO_DEEP)
        return error_response(exc.status_code, "HTTPError", str(exc.detail))

    @app.exception_handler(Exception)
    async def unexpected(
        request: Request, exc: Exception
    ) -> JSONResponse:  # outside the middleware (server/middleware.py)
        return internal_error(request, exc)


def internal_error(request: Request, exc: Exception) -> JSONResponse:
    """A bug (not bad input): logged once, by route and error type only (no body, no key), answered
    as JSON 500; every write is one transaction, so nothing is half-stored."""
    log.error(json.dumps({"path": request.url.path, "error": type(exc).__name__}))
    return error_response(500, "InternalError", "the server failed; nothing was half-stored")


def error_response(status: int, kind: str, message: str, details: list[dict[str, str]] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": {"type": kind, "message": message}}
    if details:
        body["error"]["details"] = details
    return JSONResponse(body, status_code=status)
