"""The HTTP server: FastAPI over one store, memories scoped by tenant and history.

Every ``/v1`` route needs an API key (``Authorization: Bearer <key>`` or ``X-API-Key``); the key names
the tenant, and a tenant's histories are stored as ``<tenant>/<history>``, so no route can reach
another tenant's. Errors are JSON ``{"error": {"type", "message"}}`` with a 4xx status (no stack
trace); bodies over ``max_body_bytes`` get 413, a body that does not arrive in full within ``body_timeout``
408, and an address that failed to authenticate too often 429 (``AuthThrottle``). A name the tenant does
not own is answered exactly as one that does not exist. One JSON log line per request (no keys, no
bodies). Several worker processes may serve one store (SQLite WAL or PostgreSQL; see docs/RELIABILITY.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import Depends, FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from flexamem import __version__
from flexamem.agent import AgentSession
from flexamem.budget import MAX_BUDGET
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
from flexamem.memory import Memory, open_store
from flexamem.notes import note_json
from flexamem.render.result import rendering_json
from flexamem.server.ingest import OffloadedEmbedder, writing
from flexamem.server.keys import AuthThrottle, KeyFile, Link, link_view
from flexamem.server.metrics import Metrics, timed
from flexamem.store.base import Erasure
from flexamem.telemetry import remote_parent
from flexamem.write.embed import Embedder
from flexamem.write.records import RecordWriter

log = logging.getLogger("flexamem.server")
HISTORY = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
SESSION = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
HistoryName = Annotated[str, Path(pattern=HISTORY, description="the history's name (letters, digits, '.', '_', '-')")]
SessionName = Annotated[str, Path(pattern=SESSION, description="the agent session's id")]
DEFAULT_MAX_BODY = 8 * 1024 * 1024  # bytes
DEFAULT_MAX_OPEN = 128  # histories kept open per worker
DEFAULT_MAX_PENDING_WRITES = 2  # writes admitted at once per worker (docs/PERFORMANCE.md)
DEFAULT_BODY_TIMEOUT = 30.0  # seconds for a request's body to arrive in full (8 MiB at 280 KB/s)
DEFAULT_KEEP_ALIVE = 5  # seconds an idle kept-alive connection stays open (uvicorn's default)
DEFAULT_HEADER_TIMEOUT = 10.0  # seconds for a request's line and headers (server/protocol.py)
DEFAULT_MAX_HEADER_BYTES = 16 * 1024  # a request's line and headers (h11's own bound on a head in pieces)
DEFAULT_MAX_HEADERS = 100  # headers of a request (Apache's LimitRequestFields)
DEFAULT_AUTH_BURST = 20  # failed authentications an address may make at once (per worker) ...
DEFAULT_AUTH_RATE = 2.0  # ... and then a second
MAX_QUERY = 1000  # characters of an inspector link's query: the link stays within the head limit
TOO_LARGE = "request bodies are limited to {} bytes"


@dataclass(frozen=True)
class ServerConfig:
    """What one server process serves."""

    db: str
    """SQLite file or ``postgresql://`` URL: the store every route reads and writes."""
    keys: str
    """The JSON file of tenants' key hashes (``flexamem serve --add-key TENANT`` writes it)."""
    max_body_bytes: int = DEFAULT_MAX_BODY
    """Larger request bodies get 413."""
    max_open: int = DEFAULT_MAX_OPEN
    """Histories a worker keeps open (least recently used closed first): bounds its memory."""
    offload_writes: bool = True
    """Embed writes in a lower-priority process (server/ingest.py), so renders keep the CPU."""
    max_pending_writes: int = DEFAULT_MAX_PENDING_WRITES
    """Writes a worker admits at once (being embedded or stored); one more is answered 503 with
    ``Retry-After`` at once, storing nothing, so an acknowledged write waits for at most this many."""
    write_wait: float | None = None
    """Offloaded writes: seconds an admitted write waits for its vectors, per 4,000 characters embedded
    (at least one such allowance); past it the write is answered 503 ``ServerBusyError`` with
    ``Retry-After``, storing nothing, and its vectors, still being made, are kept for the retry
    (server/ingest.py). None (the default): a write waits as long as its embedding takes. Not on by
    default: under full render load the embedding process rarely meets 0.75 s, and clients that do not
    retry then get no write stored at all (docs/PERFORMANCE.md)."""
    records: Literal["rule", "llm"] = "rule"
    """``llm``: records written by the model configured with ``FLEXAMEM_LLM_*`` (its tokens are counted
    per tenant in ``/metrics``); ``rule``: the offline rule writer."""
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    """Seconds a request's body may take to arrive in full once its headers are in; past it the request
    is answered 408 (nothing stored) and its connection closed."""
    auth_burst: int = DEFAULT_AUTH_BURST
    """Failed authentications (a wrong key, a forged link) a client address may make at once, per worker;
    then ``auth_rate`` a second. An address over it gets 429 with ``Retry-After`` for every request that
    needs a key, good or bad, until it may try again. 0: no limit."""
    auth_rate: float = DEFAULT_AUTH_RATE
    """Failed authentications a second an address regains, per worker (see ``auth_burst``)."""
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    """Seconds a request's line and headers may take to arrive (from the connection, or the request's first
    byte on a kept-alive one): an idle new connection is closed, a started head gets 408 (server/protocol.py;
    ``flexamem serve`` only)."""
    keep_alive: int = DEFAULT_KEEP_ALIVE
    """Seconds a kept-alive connection may stay idle after an answer before it is closed (uvicorn)."""
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    """A request's line and headers over this many bytes get 431 (server/protocol.py; ``flexamem serve``)."""
    max_headers: int = DEFAULT_MAX_HEADERS
    """A request with more headers gets 431 (server/protocol.py; ``flexamem serve``)."""


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
RETRY_AFTER = "1"  # seconds a client waits before retrying a 503 (a database restart takes about that)


class Refusal(Exception):
    """An answer given before a route's work: a link used for what it was not made for (403), an address
    throttled for its failed authentications (429)."""

    def __init__(self, status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.headers = status, kind, message, headers or {}


def _status(exc: FlexaMemError) -> int:
    for kind, status in STATUS.items():
        if isinstance(exc, kind):
            return status
    return 400


# -- request and response bodies ---------------------------------------------------------------------
class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Turn(Strict):
    speaker: str = Field(min_length=1, max_length=200)
    text: str = Field(min_length=1)
    id: str | None = Field(default=None, max_length=200)
    role: str | None = Field(default=None, max_length=40)


class SessionIn(Strict):
    turns: list[Turn] = Field(min_length=1)
    session_id: str | None = Field(default=None, max_length=200)
    date: str | None = Field(default=None, max_length=100)


class MessagesIn(Strict):
    messages: list[dict[str, Any]] = Field(min_length=1, description="OpenAI chat messages")
    session_id: str | None = Field(default=None, max_length=200)
    date: str | None = Field(default=None, max_length=100)


class BatchIn(Strict):
    sessions: list[SessionIn] = Field(min_length=1)


class Units(BaseModel):
    history: str
    units: list[str]


class Batch(BaseModel):
    history: str
    sessions: list[list[str]]


Mode = Literal["auto", "pieces", "units"]


class RenderIn(Strict):
    query: str = Field(min_length=1)
    budget: int = Field(
        ge=1, le=MAX_BUDGET, strict=True, description="tokens of the whole context (memory gets 0.95 x budget)"
    )
    mode: Mode = "auto"
    prompt: str = ""
    order: list[str] | None = Field(default=None, description="unit ids or labels, most relevant first (units)")


class SearchIn(Strict):
    query: str = Field(min_length=1)
    mode: Literal["auto", "pieces"] = "auto"
    limit: int = Field(default=10, ge=1, le=1000)


class HitOut(BaseModel):
    seq: int
    unit_id: str
    block: int
    turn_id: str | None
    text: str


class Shown(BaseModel):
    unit_id: str
    label: str
    resolution: str
    pieces: list[int]
    verbatim_turns: list[str] = []


class RenderOut(BaseModel):
    text: str
    tokens: int
    allowance: int
    mode: str
    pass_through: bool
    composition: dict[str, int]
    shown: list[Shown]
    merges_written: int = 0
    timeline_spans: list[tuple[int, int, int]] = []


class HistoryOut(BaseModel):
    history: str
    kind: str
    notes: int


class NoteOut(BaseModel):
    unit_id: str
    label: str
    kind: str
    session_id: str | None
    date: str | None
    record: str
    keywords: list[str]
    raw_tokens: int
    links: list[str]


class PieceOut(BaseModel):
    index: int
    text: str
    tokens: int
    turn: str | None


class NoteFull(NoteOut):
    raw: str
    fields: str
    pieces: list[PieceOut]
    digest: str
    exact: dict[str, Any] = Field(
        description="every field of the note but its raw text (above) and its pieces' texts (slices of it): "
        "flexamem.notes.note_from_json(exact, raw) reads it"
    )


class AgentIn(Strict):
    task: str = Field(min_length=1)
    budget: int = Field(ge=1, le=MAX_BUDGET, strict=True)
    system: str = ""
    session_id: str | None = Field(default=None, pattern=SESSION)


class AgentOut(BaseModel):
    session_id: str
    steps: int
    messages: int = Field(description="chat messages recorded by the steps so far")
    task: str
    system: str
    budget: int


class StepIn(Strict):
    action: str = Field(min_length=1)
    observation: str = ""
    messages: list[dict[str, Any]] | None = None
    step_id: str | None = Field(default=None, max_length=200)
    actor: str = Field(default="assistant", min_length=1, max_length=40)


class StepOut(BaseModel):
    step: int
    messages: int = Field(description="chat messages recorded by the session's steps so far")


class ContextOut(BaseModel):
    messages: list[dict[str, Any]]
    tokens: int
    ceiling: int
    memory_active: bool
    cut: bool = False
    notes: int = 0


class VerifyOut(BaseModel):
    history: str
    problems: list[str]


class HeadOut(BaseModel):
    """A history's head (``Memory.head()``): each chain's length and last digest, its state's digest."""

    history: str
    epoch: str
    notes: int
    note: str
    steps: int
    step: str
    requests: int
    request: str
    state: str
    legacy: list[int] | None
    digest: str
    signature: str | None
    erasures: int = 0
    erasure: str = ""


class EraseIn(Strict):
    """What to erase: one ``turn`` (its id, or ``unit#n``), one ``session``, or step ``step`` of agent
    session ``agent``; why (``reason``, kept in the chain: never the words themselves); whether renders
    show ``(erased)`` where the words were."""

    turn: str | None = Field(default=None, min_length=1, max_length=300)
    session: str | None = Field(default=None, min_length=1, max_length=300)
    agent: str | None = Field(default=None, min_length=1, max_length=300)
    step: int | None = Field(default=None, ge=1)
    reason: str = Field(default="", max_length=2000)
    marker: bool = True


class ErasureOut(BaseModel):
    """One erasure as the chain keeps it (``Memory.erasures()``)."""

    n: int
    kind: str
    ids: list[str]
    reason: str
    at: float
    units: list[str]
    steps: list[int]
    digest: str


class HeadsIn(BaseModel):
    heads: list[dict[str, Any]] = Field(max_length=1000)


class Dropped(BaseModel):
    history: str
    dropped: bool


class LinkIn(Strict):
    query: str = Field(min_length=1, max_length=MAX_QUERY)
    budget: int = Field(default=4096, ge=1, le=MAX_BUDGET)
    mode: Mode = "auto"
    seconds: int = Field(default=300, ge=10, le=3600, description="how long the link works")


class LinkOut(BaseModel):
    url: str = Field(description="the inspector page, relative to the server (no API key in it)")
    expires: int = Field(description="when the link stops working (Unix time)")


class ErrorBody(BaseModel):
    type: str = Field(description="the error's class (InvalidInputError, NotFoundError, StoreUnavailableError, ...)")
    message: str
    details: list[dict[str, str]] | None = None


class ErrorOut(BaseModel):
    error: ErrorBody


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


# -- the app -------------------------------------------------------------------------------------------
class Memories:
    """One store, and the ``Memory`` of each (tenant, history) a request used, kept open for the next
    request: at most ``max_open`` of them, the least recently used dropped first (it is only a cache of
    the store: reopening reads the history back)."""

    def __init__(
        self,
        db: str,
        max_open: int = DEFAULT_MAX_OPEN,
        embedder: Embedder | None = None,
        writer: RecordWriter | None = None,
    ) -> None:
        if max_open < 1:
            raise InvalidInputError("max_open must be at least 1")
        self.store = open_store(db)
        self.max_open = max_open
        self.embedder = embedder
        self.writer = writer
        self._open: OrderedDict[str, Memory] = OrderedDict()
        self._lock = threading.Lock()
        self.evicted = 0

    def get(self, tenant: str, history: str) -> Memory:
        hid = f"{tenant}/{history}"
        with self._lock:
            mem = self._open.get(hid)
            if mem is not None:
                self._open.move_to_end(hid)
                return mem
        mem = Memory(store=self.store, history=hid, embedder=self.embedder, writer=self.writer)  # outside the lock
        with self._lock:
            mem = self._open.setdefault(hid, mem)  # a racing request may have opened it first
            self._open.move_to_end(hid)
            while len(self._open) > self.max_open:
                self._open.popitem(last=False)
                self.evicted += 1
            return mem

    @property
    def open_count(self) -> int:
        return len(self._open)

    def existing(self, tenant: str, history: str) -> Memory:
        """The tenant's history, which exists when it holds notes or agent sessions (404 otherwise)."""
        hid = f"{tenant}/{history}"
        if self.store.history_kind(hid) is None and not self.store.sessions(hid):
            raise NotFoundError(f"no history {history!r}")  # a probe of a missing name keeps no Memory open
        return self.get(tenant, history)

    def histories(self, tenant: str) -> list[dict[str, Any]]:
        prefix = f"{tenant}/"
        return [
            {"history": h[len(prefix) :], "kind": kind, "notes": self.store.note_count(h)}
            for h, kind in self.store.histories()
            if h.startswith(prefix)
        ]

    def forget(self, tenant: str, history: str) -> None:
        with self._lock:
            self._open.pop(f"{tenant}/{history}", None)


def tenant(request: Request) -> str:
    """The tenant whose key the request carries (401 otherwise; 429 first when the caller's address has
    failed to authenticate too often: its key is then not even read)."""
    keys: KeyFile = request.app.state.keys
    throttle: AuthThrottle = request.app.state.throttle
    address = request.client.host if request.client else ""
    wait = throttle.wait(address)
    if wait > 0:
        seconds = math.ceil(wait)
        raise Refusal(
            429,
            "ThrottledError",
            f"too many failed authentications from this address: every request that needs a key is refused "
            f"for {seconds} s",
            {"Retry-After": str(seconds)},
        )
    auth = request.headers.get("authorization", "")
    key = auth[7:].strip() if auth.lower().startswith("bearer ") else request.headers.get("x-api-key")
    if key is None and request.url.path.startswith("/inspect/"):
        if "key" in request.query_params:
            raise UnauthorizedError(
                "the inspector takes no API key in the URL (browsers, proxies and shell history keep it): send "
                "it as a header, or get a short-lived link from POST /v1/histories/{history}/inspect-link"
            )
        token = request.query_params.get("token")
        link = keys.read_link(token) if token else None
        if link is None and token:
            throttle.failed(address)  # a forged or damaged token
        if link is None or link.expired or link.tenant not in keys.tenants():
            raise UnauthorizedError(
                "an API key header, or an inspector link that is genuine and not expired, is required"
            )
        if link.history != request.path_params.get("history"):
            raise Refusal(403, "Forbidden", "this inspector link was made for another history: it opens only its own")
        request.state.link = link
        found: str | None = link.tenant
    else:
        found = keys.tenant_of(key)
        if found is None:
            if key:
                throttle.failed(address)
            raise UnauthorizedError("a valid API key is required (Authorization: Bearer <key> or X-API-Key)")
    request.state.tenant = found
    return str(found)


Tenant = Annotated[str, Depends(tenant)]
Start = Annotated[int, Query(ge=0, description="the first note's position")]
Limit = Annotated[int | None, Query(ge=1, le=10000, description="at most this many notes")]
RequestId = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=200,
        description="the caller's id of this write: a retry with the same key and body stores nothing more and "
        "gets the first answer; the same key with another body is refused (409 RequestConflictError), nothing "
        "stored (the Python client sends one with every write)",
    ),
]


def create_app(config: ServerConfig) -> FastAPI:
    """The FastAPI app serving ``config.db`` to the tenants of ``config.keys``."""
    keys = KeyFile(config.keys)
    throttle = AuthThrottle(config.auth_burst, config.auth_rate)
    if config.body_timeout <= 0:
        raise InvalidInputError("body_timeout must be more than 0 seconds")
    writer = None
    if config.records == "llm":
        from flexamem.llm.config import load_config
        from flexamem.write.llm_writer import LLMWriter

        endpoint = load_config()
        if endpoint is None:
            raise InvalidInputError("records='llm' needs an endpoint: FLEXAMEM_LLM_BASE_URL and FLEXAMEM_LLM_MODEL")
        writer = LLMWriter(endpoint.client())
    offloaded = OffloadedEmbedder() if config.offload_writes else None
    memories = Memories(config.db, config.max_open, offloaded, writer)
    memories.store.head_key = keys.head_secret()  # heads signed outside the database's reach
    metrics = Metrics()

    def opened(t: str, history: str, must_exist: bool = False) -> Memory:
        """The tenant's history, kept open (``must_exist``: 404 when it holds nothing, as for a name another
        tenant holds)."""
        before = memories.evicted
        mem = memories.existing(t, history) if must_exist else memories.get(t, history)
        metrics.open.set(memories.open_count)
        if memories.evicted > before:
            metrics.evicted.inc(memories.evicted - before)
        return mem

    def count_llm_tokens(t: str, mem: Memory, units: list[str]) -> None:
        """The model tokens the record writer spent on the notes this write stored (calls answered from
        the cache cost none); read from the store's call log, so no worker counts another's."""
        if writer is None or not units:
            return
        seqs = {mem.core.history.unit_ids[u] for u in units}
        tokens = sum(  # one indexed read of this write's calls, not the history's whole call log
            c.prompt_tokens + c.completion_tokens
            for c in mem.store.llm_calls(mem.history_id, start=min(seqs))
            if c.seq in seqs and not c.cached
        )
        if tokens:
            metrics.llm_tokens.labels(t).inc(tokens)

    pending = threading.BoundedSemaphore(config.max_pending_writes)

    @contextlib.contextmanager
    def a_write() -> Iterator[None]:
        if not pending.acquire(blocking=False):  # admitted or refused at once: no write waits unbounded
            metrics.refused_writes.inc()
            raise ServerBusyError(
                f"this server has {config.max_pending_writes} writes in progress: nothing was stored, "
                "send it again after Retry-After seconds"
            )
        metrics.backlog.inc()
        try:
            with timed(metrics.write_seconds), writing(config.write_wait):
                yield
        except ServerBusyError:  # its vectors were not back within its wait: nothing stored
            metrics.refused_writes.inc()
            raise
        finally:
            metrics.backlog.dec()
            pending.release()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if offloaded is not None:
            offloaded.warm()  # started with the server: the first write would wait for the process and its model
        yield
        if offloaded is not None:
            offloaded.close()

    app = FastAPI(
        lifespan=lifespan,
        title="FlexA-Mem",
        version=__version__,
        description="A write-once memory for LLM agents and readers, rendered fresh under any token budget.",
    )
    app.state.memories = memories
    app.state.keys = keys
    app.state.throttle = throttle
    app.state.metrics = metrics

    async def answer(request: Request, call_next: Any) -> Any:
        """The request's response, once its body is in whole (413, 408, or 499 for a client gone)."""
        too_large = f"request bodies are limited to {config.max_body_bytes} bytes"
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > config.max_body_bytes):
            return _error(413, "PayloadTooLarge", too_large)
        try:
            body = await asyncio.wait_for(request.body(), config.body_timeout)
        except TimeoutError:  # a body slower than the limit, or shorter than its Content-Length
            late = _error(
                408, "RequestTimeout", f"the request's body did not arrive in full within {config.body_timeout:g} s"
            )
            late.headers["Connection"] = "close"  # the rest of the body would be read as the next request
            return late
        except ClientDisconnect:  # the client went away before its body was in: nobody to answer
            return Response(status_code=GONE)
        if len(body) > config.max_body_bytes:
            return _error(413, "PayloadTooLarge", too_large)
        try:
            with remote_parent(request.headers):  # the caller's trace, when it sent one
                return await call_next(request)
        except Exception as exc:  # a real bug: one JSON 500 and one log line, the connection kept
            return _internal_error(request, exc)

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

    @app.exception_handler(FlexaMemError)
    async def flexamem_error(request: Request, exc: FlexaMemError) -> JSONResponse:
        status = _status(exc)
        if status >= 500 and not isinstance(exc, ServerBusyError):  # the environment failed: one log line
            log.error(json.dumps({"path": request.url.path, "error": type(exc).__name__}))
        response = _error(status, error_name(exc), str(exc))
        if status == 503:
            response.headers["Retry-After"] = RETRY_AFTER
        return response

    @app.exception_handler(Refusal)
    async def refused(request: Request, exc: Refusal) -> JSONResponse:
        response = _error(exc.status, exc.kind, exc.message)
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
        return _error(422, kind.__name__, f"{first['where']}: {first['problem']}", details)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, "HTTPError", str(exc.detail))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:  # outside the middleware above
        return _internal_error(request, exc)

    @app.get("/health", responses={500: READ[500], 503: READ[503]})
    def health() -> dict[str, str]:
        """Liveness: the server answers and its store is readable."""
        memories.store.histories()
        return {"status": "ok"}

    @app.get("/metrics", include_in_schema=False)
    def prometheus_metrics() -> Response:
        """Prometheus exposition text (no keys, no bodies, no history names; tenants only as labels of
        the record writer's model tokens)."""
        body, kind = metrics.scrape()
        return Response(body, media_type=kind)

    @app.get("/v1/histories", response_model=list[HistoryOut], responses=answers())
    def list_histories(t: Tenant) -> list[dict[str, Any]]:
        """The tenant's histories (agent sessions as ``<history>/agent:<id>``), with their note counts."""
        return memories.histories(t)

    @app.get("/v1/histories/{history}", response_model=HistoryOut, responses=answers(404, 422))
    def get_history(history: HistoryName, t: Tenant) -> dict[str, Any]:
        """One history of the tenant: its kind and note count (404 when it holds nothing)."""
        mem = memories.existing(t, history)
        return {"history": history, "kind": mem.store.history_kind(mem.history_id) or "conversation", "notes": len(mem)}

    @app.post("/v1/histories/{history}/sessions", response_model=Units, responses=WRITE)
    def add_session(body: SessionIn, history: HistoryName, t: Tenant, request_id: RequestId = None) -> dict[str, Any]:
        """Write one conversation session (created with its history when new)."""
        mem = opened(t, history)
        turns = [x.model_dump(exclude_none=True) for x in body.turns]
        with a_write():
            units = mem.add_session(turns, session_id=body.session_id, date=body.date, request_id=request_id)
        count_llm_tokens(t, mem, units)
        return {"history": history, "units": units}

    @app.post("/v1/histories/{history}/batch", response_model=Batch, responses=WRITE)
    def add_sessions(body: BatchIn, history: HistoryName, t: Tenant, request_id: RequestId = None) -> dict[str, Any]:
        """Write many sessions at once (each in its own transaction, in order; a retry with the same
        Idempotency-Key stores only the sessions not stored yet)."""
        mem = opened(t, history)
        sessions = [
            {"turns": [x.model_dump(exclude_none=True) for x in b.turns], "session_id": b.session_id, "date": b.date}
            for b in body.sessions
        ]
        with a_write():
            out = mem.add_sessions(sessions, request_id=request_id)
        count_llm_tokens(t, mem, [u for units in out for u in units])
        return {"history": history, "sessions": out}

    @app.post("/v1/histories/{history}/messages", response_model=Units, responses=WRITE)
    def add_messages(body: MessagesIn, history: HistoryName, t: Tenant, request_id: RequestId = None) -> dict[str, Any]:
        """Write an OpenAI-format chat history as one session (tool calls and results verbatim)."""
        mem = opened(t, history)
        with a_write():
            units = mem.add_messages(body.messages, session_id=body.session_id, date=body.date, request_id=request_id)
        count_llm_tokens(t, mem, units)
        return {"history": history, "units": units}

    @app.post("/v1/histories/{history}/render", response_model=RenderOut, responses=answers(400, 404, 413, 422))
    def render(body: RenderIn, history: HistoryName, t: Tenant) -> dict[str, Any]:
        """The memory for one query within the budget (no model call)."""
        mem = memories.existing(t, history)
        metrics.open.set(memories.open_count)
        with timed(metrics.render_seconds):
            r = mem.render(body.query, body.budget, mode=body.mode, prompt=body.prompt, order=body.order)
        metrics.tokens.inc(r.tokens)
        return rendering_json(r)

    @app.post("/v1/histories/{history}/search", response_model=list[HitOut], responses=answers(400, 404, 413, 422))
    def search(body: SearchIn, history: HistoryName, t: Tenant) -> list[dict[str, Any]]:
        """The turns a render would recover first for the query, best first (no budget, no model call)."""
        hits = memories.existing(t, history).search(body.query, mode=body.mode, limit=body.limit)
        return [dataclasses.asdict(h) for h in hits]

    @app.get("/v1/histories/{history}/verify", response_model=VerifyOut, responses=answers(404, 422))
    def verify(history: HistoryName, t: Tenant) -> dict[str, Any]:
        """Every stored row a render or agent context of the history can show, checked against its digest:
        the problems found (each names its row), or none."""
        return {"history": history, "problems": memories.existing(t, history).verify()}

    @app.post("/v1/histories/{history}/verify", response_model=VerifyOut, responses=answers(400, 404, 413, 422))
    def verify_against(body: HeadsIn, history: HistoryName, t: Tenant) -> dict[str, Any]:
        """As ``GET .../verify``, and whether the history (and its sessions) still extend the heads a
        caller kept (``GET .../head``): rows cut off the end, a rewritten chain or a rollback are reported."""
        return {"history": history, "problems": memories.existing(t, history).verify(head=body.heads)}

    @app.get("/v1/histories/{history}/head", response_model=HeadOut, responses=answers(404, 422))
    def head(history: HistoryName, t: Tenant) -> dict[str, Any]:
        """The history's head now, signed with the server's key file secret: keep it, and send it back to
        ``POST .../verify`` later."""
        return memories.existing(t, history).head().as_json()

    @app.get("/v1/histories/{history}/agents/{session_id}/head", response_model=HeadOut, responses=answers(404, 422))
    def agent_head(history: HistoryName, session_id: SessionName, t: Tenant) -> dict[str, Any]:
        """An agent session's head (as ``GET .../head``)."""
        found: AgentSession = session(t, history, session_id)
        return found.head().as_json()

    def page(t: str, history: str, start: int, limit: int | None, full: bool) -> list[dict[str, Any]]:
        found = memories.existing(t, history).notes(start, None if limit is None else start + limit)
        return [note_json(n, full=full) for n in found]

    @app.get("/v1/histories/{history}/notes", response_model=list[NoteOut], responses=answers(404, 422))
    def notes(history: HistoryName, t: Tenant, start: Start = 0, limit: Limit = None) -> list[dict[str, Any]]:
        """The history's notes in time order (a page of them with ``start`` and ``limit``)."""
        return page(t, history, start, limit, full=False)

    @app.get("/v1/histories/{history}/notes-full", response_model=list[NoteFull], responses=answers(404, 422))
    def notes_full(history: HistoryName, t: Tenant, start: Start = 0, limit: Limit = None) -> list[dict[str, Any]]:
        """The history's notes in full (raw text, pieces, every field), a page at a time."""
        return page(t, history, start, limit, full=True)

    @app.get("/v1/histories/{history}/notes/{unit}", response_model=NoteFull, responses=answers(404, 422))
    def note(history: HistoryName, unit: Annotated[str, Path(max_length=300)], t: Tenant) -> dict[str, Any]:
        """One note in full: raw text, record, fields, pieces and its digest (provenance)."""
        try:
            n = memories.existing(t, history).note(unit)
        except InvalidInputError as exc:
            raise NotFoundError(str(exc)) from None
        return note_json(n, full=True)

    @app.delete("/v1/histories/{history}", response_model=Dropped, responses=answers(404, 422))
    def drop(history: HistoryName, t: Tenant) -> dict[str, Any]:
        """Delete the whole history and its agent sessions (the only deletion; notes are never edited)."""
        dropped = memories.existing(t, history).drop()
        memories.forget(t, history)
        return {"history": history, "dropped": dropped}

    @app.post("/v1/histories/{history}/erase", response_model=ErasureOut, responses=answers(400, 404, 413, 422))
    def erase(body: EraseIn, history: HistoryName, t: Tenant) -> dict[str, Any]:
        """Erase one turn, one session or one agent step from every stored copy, in one transaction
        (``Memory.erase``): every worker's view reads the history again on its next call; the chain lists
        the erasure. Nothing of that name: 404, nothing changes."""
        named = [body.turn is not None, body.session is not None, body.agent is not None or body.step is not None]
        if sum(named) != 1 or (body.agent is None) != (body.step is None):
            raise InvalidInputError("erase one of: turn, session, or agent with step")
        done: Erasure
        with a_write():
            if body.agent is not None and body.step is not None:
                done = session(t, history, body.agent).erase(body.step, reason=body.reason, marker=body.marker)
            else:
                done = memories.existing(t, history).erase(
                    turn=body.turn, session=body.session, reason=body.reason, marker=body.marker
                )
        return done.as_json()

    @app.get("/v1/histories/{history}/erasures", response_model=list[ErasureOut], responses=answers(404, 422))
    def erasures(history: HistoryName, t: Tenant) -> list[dict[str, Any]]:
        """The history's erasures, oldest first (what each named, why, when; never the words)."""
        return [e.as_json() for e in memories.existing(t, history).erasures()]

    @app.get("/v1/histories/{history}/export", response_class=Response, responses=answers(404, 422))
    def export(history: HistoryName, t: Tenant) -> Response:
        """The history and its agent sessions as the JSON Lines ``flexamem import`` checks and reads back
        (every row with its digest), as a download: only the tenant's own history."""
        out = io.StringIO()
        memories.existing(t, history).export(out)
        return Response(
            out.getvalue(),
            media_type="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="{history}.jsonl"'},
        )

    @app.post("/v1/histories/{history}/agents", response_model=AgentOut, responses=WRITE)
    def start_agent(body: AgentIn, history: HistoryName, t: Tenant) -> dict[str, Any]:
        """Start an agent session under the history (or resume it, when the task and budget match)."""
        mem = opened(t, history)
        agent = mem.agent(body.task, budget=body.budget, system=body.system, session_id=body.session_id)
        return agent_json(agent)

    @app.get("/v1/histories/{history}/agents", response_model=list[str], responses=answers(404, 422))
    def list_agents(history: HistoryName, t: Tenant) -> list[str]:
        """The ids of the history's agent sessions, oldest first (404 for a history that holds nothing)."""
        return opened(t, history, must_exist=True).sessions()

    @app.get("/v1/histories/{history}/agents/{session_id}", response_model=AgentOut, responses=answers(404, 422))
    def get_agent(history: HistoryName, session_id: SessionName, t: Tenant) -> dict[str, Any]:
        """One agent session: its task, budget, steps and messages recorded."""
        return agent_json(session(t, history, session_id))

    @app.delete("/v1/histories/{history}/agents/{session_id}", response_model=Dropped, responses=answers(404, 422))
    def drop_agent(history: HistoryName, session_id: SessionName, t: Tenant) -> dict[str, Any]:
        """Delete one agent session (its steps and notes); ``dropped`` says whether it existed in the
        history (404 for a history that holds nothing)."""
        return {"history": history, "dropped": opened(t, history, must_exist=True).drop_session(session_id)}

    def session(t: str, history: str, sid: str) -> Any:
        mem = opened(t, history, must_exist=True)
        if sid not in mem.sessions():
            raise NotFoundError(f"no agent session {sid!r} in history {history!r}")
        return mem.agent(session_id=sid)

    @app.post("/v1/histories/{history}/agents/{session_id}/steps", response_model=StepOut, responses=WRITE)
    def step(body: StepIn, history: HistoryName, session_id: SessionName, t: Tenant) -> dict[str, int]:
        """Record one step (``step_id`` makes a retry idempotent)."""
        agent = session(t, history, session_id)
        with a_write():
            number = agent.step(
                body.action, body.observation, actor=body.actor, messages=body.messages, step_id=body.step_id
            )
        return {"step": number, "messages": agent.message_count}

    @app.get(
        "/v1/histories/{history}/agents/{session_id}/context",
        response_model=ContextOut,
        responses=answers(400, 404, 422),
    )
    def context(
        history: HistoryName,
        session_id: SessionName,
        t: Tenant,
        mode: Annotated[Mode, Query()] = "auto",
    ) -> dict[str, Any]:
        """The next model call's messages: always valid OpenAI chat messages within the ceiling."""
        agent = session(t, history, session_id)
        with timed(metrics.context_seconds):
            ctx = agent.context(mode=mode)
        metrics.tokens.inc(ctx.tokens)
        return {
            "messages": ctx.messages,
            "tokens": ctx.tokens,
            "ceiling": ctx.ceiling,
            "memory_active": not ctx.pass_through,
            "cut": ctx.cut,
            "notes": ctx.notes,
        }

    @app.post("/v1/histories/{history}/inspect-link", response_model=LinkOut, responses=answers(400, 404, 413, 422))
    def inspect_link(body: LinkIn, history: HistoryName, t: Tenant) -> dict[str, Any]:
        """A short-lived link to the memory inspector (signed, no API key in it) to open in a browser."""
        memories.existing(t, history)
        token, expires = keys.sign_link(t, history, body.seconds, link_view(body.query, body.budget, body.mode))
        query = urlencode({"query": body.query, "budget": body.budget, "mode": body.mode, "token": token})
        return {"url": f"/inspect/{history}?{query}", "expires": expires}

    @app.get("/inspect/{history}", response_class=HTMLResponse, include_in_schema=False)
    def inspect(
        request: Request,
        history: HistoryName,
        query: Annotated[str, Query(min_length=1, max_length=MAX_QUERY)],
        t: Tenant,
        budget: Annotated[int, Query(ge=1, le=MAX_BUDGET)] = 4096,
        mode: Annotated[Mode, Query()] = "auto",
    ) -> str:
        """The memory inspector: one rendering drawn for people (budget bar, timeline, pieces, links). The
        caller is named by an API key header or by the ``token`` of a link from ``inspect-link``, which
        opens only the query, budget and mode it was made for (403 for any other)."""
        from flexamem.server.inspector import inspector_page

        link: Link | None = getattr(request.state, "link", None)
        if link is not None and link.view != link_view(query, budget, mode):
            raise Refusal(
                403,
                "Forbidden",
                "this inspector link was made for another query, budget or mode: it opens only the rendering it "
                f"was made for (ask POST /v1/histories/{history}/inspect-link for a link to this one)",
            )
        return inspector_page(memories.existing(t, history), history, query, budget, mode)

    return app


def agent_json(agent: AgentSession) -> dict[str, Any]:
    return {
        "session_id": agent.session_id,
        "steps": len(agent.steps),
        "messages": agent.message_count,
        "task": agent.task,
        "system": agent.system,
        "budget": agent.budget,
    }


def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    """A bug (not bad input): logged once, by route and error type only (no body, no key), answered
    as JSON 500; every write is one transaction, so nothing is half-stored."""
    log.error(json.dumps({"path": request.url.path, "error": type(exc).__name__}))
    return _error(500, "InternalError", "the server failed; nothing was half-stored")


def _error(status: int, kind: str, message: str, details: list[dict[str, str]] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": {"type": kind, "message": message}}
    if details:
        body["error"]["details"] = details
    return JSONResponse(body, status_code=status)


def app_from_env() -> FastAPI:
    """For ``uvicorn --factory flexamem.server.app:app_from_env`` (several workers): the store and key
    file from ``FLEXAMEM_DB`` and ``FLEXAMEM_KEYS`` (add ``--http flexamem.server.protocol:GuardedH11Protocol``
    for the limits on requests' heads that ``flexamem serve`` sets)."""
    import os

    db, key_file = os.environ.get("FLEXAMEM_DB"), os.environ.get("FLEXAMEM_KEYS")
    if not db or not key_file:
        raise InvalidInputError("set FLEXAMEM_DB (the store) and FLEXAMEM_KEYS (the key file)")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    records = os.environ.get("FLEXAMEM_RECORDS", "rule")
    wait = os.environ.get("FLEXAMEM_WRITE_WAIT", "")  # "": no bound
    if records not in ("rule", "llm"):
        raise InvalidInputError("FLEXAMEM_RECORDS must be rule or llm")
    return create_app(
        ServerConfig(
            db,
            key_file,
            max_body_bytes=int(os.environ.get("FLEXAMEM_MAX_BODY", DEFAULT_MAX_BODY)),
            max_open=int(os.environ.get("FLEXAMEM_MAX_OPEN", DEFAULT_MAX_OPEN)),
            offload_writes=os.environ.get("FLEXAMEM_OFFLOAD_WRITES", "1") != "0",
            max_pending_writes=int(os.environ.get("FLEXAMEM_MAX_PENDING_WRITES", DEFAULT_MAX_PENDING_WRITES)),
            write_wait=float(wait) if wait else None,
            records=records,  # type: ignore[arg-type]
            body_timeout=float(os.environ.get("FLEXAMEM_BODY_TIMEOUT") or DEFAULT_BODY_TIMEOUT),
            auth_burst=int(os.environ.get("FLEXAMEM_AUTH_BURST") or DEFAULT_AUTH_BURST),
            auth_rate=float(os.environ.get("FLEXAMEM_AUTH_RATE") or DEFAULT_AUTH_RATE),
        )
    )
