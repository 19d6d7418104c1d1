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

import contextlib
import gc
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from flexamem import __version__
from flexamem.errors import InvalidInputError
from flexamem.server import routes_admin, routes_agents, routes_histories, routes_render, routes_writes
from flexamem.server.errors import install_handlers
from flexamem.server.errors import status_of as _status  # the name tests/client/test_error_parity.py imports
from flexamem.server.middleware import install_middleware
from flexamem.server.settings import (
    DEFAULT_AUTH_BURST,
    DEFAULT_AUTH_RATE,
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_KEEP_ALIVE,
    DEFAULT_KEEP_ALIVE_REQUESTS,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_MAX_HEADERS,
    DEFAULT_MAX_OPEN,
    DEFAULT_MAX_PENDING_WRITES,
    DEFAULT_WRITE_NICE,
    DEFAULT_WRITE_TARGET,
    ServerConfig,
)
from flexamem.server.state import Memories, ServerState

__all__ = [  # the names this module offered before the split, still importable from it
    "DEFAULT_AUTH_BURST",
    "DEFAULT_AUTH_RATE",
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_KEEP_ALIVE",
    "DEFAULT_MAX_BODY",
    "DEFAULT_MAX_HEADERS",
    "DEFAULT_MAX_HEADER_BYTES",
    "DEFAULT_MAX_OPEN",
    "DEFAULT_MAX_PENDING_WRITES",
    "Memories",
    "ServerConfig",
    "_status",
    "app_from_env",
    "create_app",
]

ROUTERS = (routes_admin, routes_histories, routes_writes, routes_render, routes_agents)
ORDER = (  # the routes in the order they are matched and listed in the OpenAPI document (as before the split)
    "health",
    "prometheus_metrics",
    "list_histories",
    "get_history",
    "add_session",
    "add_sessions",
    "add_messages",
    "render",
    "search",
    "verify",
    "verify_against",
    "head",
    "agent_head",
    "notes",
    "notes_full",
    "note",
    "drop",
    "erase",
    "erasures",
    "export",
    "start_agent",
    "list_agents",
    "get_agent",
    "drop_agent",
    "step",
    "context",
    "inspect_link",
    "inspect",
)


def create_app(config: ServerConfig) -> FastAPI:
    """The FastAPI app serving ``config.db`` to the tenants of ``config.keys``."""
    state = ServerState.open(config)
    offloaded = state.offloaded

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
    app.state.memories = state.memories
    app.state.keys = state.keys
    app.state.throttle = state.throttle
    app.state.metrics = state.metrics
    app.state.admission = state.admission
    install_middleware(app, config, state.metrics)
    install_handlers(app)
    for routes in ROUTERS:  # into the app's own router: app.routes stays one flat table of APIRoutes
        routes.add_routes(app.router, state)
    _in_order(app)
    return app


def _in_order(app: FastAPI) -> None:
    """Put the routes in ``ORDER`` (FastAPI's own first; one not listed goes last): routes are matched in
    this order (a path's first route answers 405 for the methods it lacks), and the OpenAPI document
    lists paths in it."""
    rank = {name: i for i, name in enumerate(ORDER)}

    def place(route: BaseRoute) -> int:
        return rank.get(route.name, len(ORDER)) if isinstance(route, APIRoute) else -1  # FastAPI's own first

    app.router.routes.sort(key=place)  # a stable sort: FastAPI's own keep their order


# allocations (less deallocations) between two collections of the youngest generation in a server worker,
# not 700 (CPython's): a render's and a write's own objects die before a collection sees them, so fewer
# are moved to older generations and the full collections they trigger come less often (docs/PERFORMANCE.md)
WORKER_GC_THRESHOLD = 10_000


def settle_collector(threshold: int = WORKER_GC_THRESHOLD) -> None:
    """A server worker's garbage collector, once its app is made (its models and code loaded): what is
    alive then is moved out of every later collection's scan (``gc.freeze``: it lives as long as the
    worker), and the youngest generation is collected after ``threshold`` allocations. A full
    collection holds the worker's interpreter (every request on it waits) for as long as it scans; it
    then scans only what the worker took on since (the histories it holds open, the requests in
    flight). Only ``flexamem serve``'s workers do this: a host application's collector is its own."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(threshold, *gc.get_threshold()[1:])


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
    target = os.environ.get("FLEXAMEM_WRITE_TARGET", str(DEFAULT_WRITE_TARGET))  # "": no bound
    if records not in ("rule", "llm"):
        raise InvalidInputError("FLEXAMEM_RECORDS must be rule or llm")
    app = create_app(
        ServerConfig(
            db,
            key_file,
            max_body_bytes=int(os.environ.get("FLEXAMEM_MAX_BODY", DEFAULT_MAX_BODY)),
            max_open=int(os.environ.get("FLEXAMEM_MAX_OPEN", DEFAULT_MAX_OPEN)),
            offload_writes=os.environ.get("FLEXAMEM_OFFLOAD_WRITES", "1") != "0",
            max_pending_writes=int(os.environ.get("FLEXAMEM_MAX_PENDING_WRITES", DEFAULT_MAX_PENDING_WRITES)),
            write_wait=float(wait) if wait else None,
            write_target=(float(target) or None) if target else None,  # "" or 0: off
            write_nice=int(os.environ.get("FLEXAMEM_WRITE_NICE") or DEFAULT_WRITE_NICE),
            embed_processes=int(os.environ.get("FLEXAMEM_EMBED_PROCESSES") or 0) or None,  # "": by the machine
            records=records,  # type: ignore[arg-type]
            profile=os.environ.get("FLEXAMEM_PROFILE") or None,
            body_timeout=float(os.environ.get("FLEXAMEM_BODY_TIMEOUT") or DEFAULT_BODY_TIMEOUT),
            auth_burst=int(os.environ.get("FLEXAMEM_AUTH_BURST") or DEFAULT_AUTH_BURST),
            auth_rate=float(os.environ.get("FLEXAMEM_AUTH_RATE") or DEFAULT_AUTH_RATE),
            keep_alive_requests=int(os.environ.get("FLEXAMEM_KEEP_ALIVE_REQUESTS") or DEFAULT_KEEP_ALIVE_REQUESTS),
        )
    )
    settle_collector()
    return app
