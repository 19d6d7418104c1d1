"""What one server process serves, and its limits: ``ServerConfig`` and the defaults ``flexamem serve``,
``app_from_env`` and ``server/protocol.py`` share (no framework imported here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DEFAULT_MAX_BODY = 8 * 1024 * 1024  # bytes
DEFAULT_MAX_OPEN = 128  # histories kept open per worker
DEFAULT_MAX_PENDING_WRITES = 8  # writes admitted at once per worker, a hard cap (docs/PERFORMANCE.md)
DEFAULT_WRITE_TARGET = 1.0  # seconds a write may be predicted to wait for its vectors, to be admitted
SERVER_EMBED_THREADS = 1  # onnxruntime threads per server process, FLEXAMEM_THREADS unset (docs/PERFORMANCE.md)
DEFAULT_WRITE_NICE = 0  # the embedding process's scheduling priority (10: renders first; docs/PERFORMANCE.md)
DEFAULT_BODY_TIMEOUT = 30.0  # seconds for a request's body to arrive in full (8 MiB at 280 KB/s)
# seconds an idle kept-alive connection stays open: longer than the idle expiry of the clients' and proxies'
# pools (httpx 5 s, Node 4 s, aiohttp 15 s, nginx upstreams and AWS load balancers 60 s), so a client
# never reuses a connection the server is closing at that moment (nginx's own default; uvicorn's is 5 s)
DEFAULT_KEEP_ALIVE = 75
DEFAULT_KEEP_ALIVE_REQUESTS = 100  # answers on one kept-alive connection before it is closed (Apache's default)
DEFAULT_HEADER_TIMEOUT = 10.0  # seconds for a request's line and headers (server/protocol.py)
DEFAULT_MAX_HEADER_BYTES = 16 * 1024  # a request's line and headers (h11's own bound on a head in pieces)
DEFAULT_MAX_HEADERS = 100  # headers of a request (Apache's LimitRequestFields)
DEFAULT_AUTH_BURST = 20  # failed authentications an address may make at once (per worker) ...
DEFAULT_AUTH_RATE = 2.0  # ... and then a second


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
    """Embed writes in a process of their own per worker (server/ingest.py), at ``write_nice``."""
    max_pending_writes: int = DEFAULT_MAX_PENDING_WRITES
    """Writes a worker admits at once (being embedded or stored); one more is answered 503 with
    ``Retry-After`` at once, storing nothing: a hard cap on the queue, whatever its pace."""
    write_target: float | None = DEFAULT_WRITE_TARGET
    """With writes in progress, a worker admits one more only if it is predicted to be acknowledged
    within this many seconds, or twice its own embedding work where that is longer (the embedding work ahead
    of it and its own, at the pace the embedding processes kept over their recent jobs, and the rest of
    a write's work as long as its recent writes took for it); else 503 with ``Retry-After`` at once,
    storing nothing (server/admission.py). A write arriving when none is in progress, or before the
    worker has measured one, is always admitted. None: only ``max_pending_writes`` bounds admission.
    Offloaded writes only."""
    embed_processes: int | None = None
    """Embedding processes per worker (offloaded writes): a write's texts go to one of them, so with more
    than one the writes admitted together by one worker are embedded side by side (each process holds
    its own copy of the model, ~230 MB). None: 2 where the worker may run on two cores or more (a burst
    of writes on one worker then uses the core the other workers leave idle), else 1
    (docs/PERFORMANCE.md)."""
    embed_threads: int | None = None
    """Threads of each onnxruntime session in the server's processes (the workers' query forwards, the
    embedding processes' writes; ``FLEXAMEM_THREADS`` in them). None: ``FLEXAMEM_THREADS`` where it is
    set, else 1: a server runs several such processes per core, and a second thread in each spends CPU
    for little gain there (docs/PERFORMANCE.md). ``flexamem serve`` only: an app made by
    :func:`create_app` in a process of one's own embeds as that process is set."""
    write_nice: int = DEFAULT_WRITE_NICE
    """The scheduling priority (``nice``, 0-19) of each worker's embedding process: the higher, the more
    the renders get the CPU first and the longer a write waits under load (0, the default: writes and
    renders share the CPU)."""
    write_wait: float | None = None
    """Offloaded writes: seconds an admitted write waits for its vectors, per 4,000 characters embedded
    (at least one such allowance); past it the write is answered 503 ``ServerBusyError`` with
    ``Retry-After``, storing nothing, and its vectors, still being made, are kept for the retry
    (server/ingest.py). None (the default): a write waits as long as its embedding takes. Not on by
    default: under full render load the embedding process rarely meets 0.75 s, and clients that do not
    retry then get no write stored at all (docs/PERFORMANCE.md)."""
    profile: str | None = None
    """The profile (flexamem.profiles) every history is rendered with unless a request names another;
    None: the default (``auto``)."""
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
    forwarded_allow_ips: str | None = None
    """The proxies whose ``X-Forwarded-For`` (and ``X-Forwarded-Proto``) names the client: addresses or
    networks, comma-separated (uvicorn's ``forwarded_allow_ips``; ``*``: any). None (the default): no
    proxy is trusted and the client is the connection's own address, so a client cannot pick the address
    its failed authentications are counted under by sending the header (``auth_burst``). Set it to the
    proxy's address when the server runs behind one, else every client shares the proxy's bucket.
    ``flexamem serve`` only (uvicorn reads the header before the app)."""
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    """Seconds a request's line and headers may take to arrive (from the connection, or the request's first
    byte on a kept-alive one): an idle new connection is closed, a started head gets 408 (server/protocol.py;
    ``flexamem serve`` only)."""
    keep_alive: int = DEFAULT_KEEP_ALIVE
    """Seconds a kept-alive connection may stay idle after an answer before it is closed (uvicorn). Keep it
    above the idle expiry of the clients' and proxies' connection pools: with equal ones a client may send
    on a connection at the moment the server closes it, and that request fails (docs/doors/http.md)."""
    keep_alive_requests: int = DEFAULT_KEEP_ALIVE_REQUESTS
    """Answers on one kept-alive connection before it is closed (its last says ``Connection: close``; 0:
    never). A client that sends a light load over a pool of kept-alive connections (a proxy's, httpx's)
    keeps reusing the few it prefers, and each stays on the worker the kernel gave it when it was
    opened: measured, one of two workers then served 86 % of a run's writes. Closed now and then, they
    are opened again and handed to a worker afresh (docs/PERFORMANCE.md)."""
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    """A request's line and headers over this many bytes get 431 (server/protocol.py; ``flexamem serve``)."""
    max_headers: int = DEFAULT_MAX_HEADERS
    """A request with more headers gets 431 (server/protocol.py; ``flexamem serve``)."""
