"""What a server does, for Prometheus to scrape at ``/metrics`` (prometheus_client, the ``server``
extra); spans are the library's own (:mod:`flexamem.telemetry`).

Series (labels bounded: a route is its template, never a history or key):

- ``flexamem_requests_total{route,method,status}`` and ``flexamem_request_seconds{route}``;
- ``flexamem_render_seconds``, ``flexamem_write_seconds``, ``flexamem_agent_context_seconds``;
- ``flexamem_tokens_rendered_total`` (renders and agent contexts);
- ``flexamem_ingest_backlog``: writes being embedded or waiting for the embedding process;
- ``flexamem_refused_writes_total``: writes answered 503 because the worker had as many as it admits,
  or because their vectors were not back within their wait;
- ``flexamem_llm_tokens_total{tenant}``: tokens the record writer's model spent (0 with rule records);
- ``flexamem_open_histories`` and ``flexamem_evicted_histories_total`` (the per-worker LRU).

With several workers (``flexamem serve --workers N``) each process writes its samples under
``PROMETHEUS_MULTIPROC_DIR`` (set by ``serve`` when not given) and a scrape of any worker adds all up.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


class Metrics:
    """The server's series, in their own registry (one app's figures never mix with another's)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "flexamem_requests", "HTTP requests by route template, method and status", ["route", "method", "status"],
            registry=r,
        )  # fmt: skip
        self.request_seconds = Histogram(
            "flexamem_request_seconds", "HTTP request latency by route template", ["route"], buckets=BUCKETS, registry=r
        )
        self.render_seconds = Histogram("flexamem_render_seconds", "render latency", buckets=BUCKETS, registry=r)
        self.write_seconds = Histogram(
            "flexamem_write_seconds", "write latency (sessions, messages, agent steps)", buckets=BUCKETS, registry=r
        )
        self.context_seconds = Histogram(
            "flexamem_agent_context_seconds", "agent context latency", buckets=BUCKETS, registry=r
        )
        self.tokens = Counter("flexamem_tokens_rendered", "tokens of rendered memories and contexts", registry=r)
        gauge: dict[str, Any] = {"multiprocess_mode": "livesum"} if MULTIPROCESS else {}
        self.backlog = Gauge(
            "flexamem_ingest_backlog", "writes being embedded or waiting for the embedding process", registry=r, **gauge
        )
        self.refused_writes = Counter(
            "flexamem_refused_writes",
            "writes refused (503): past the worker's bound on writes in progress, or on a write's wait",
            registry=r,
        )
        self.llm_tokens = Counter(
            "flexamem_llm_tokens", "tokens spent by the record writer's model, per tenant", ["tenant"], registry=r
        )
        self.open = Gauge("flexamem_open_histories", "histories kept open by the workers", registry=r, **gauge)
        self.evicted = Counter("flexamem_evicted_histories", "histories closed by the LRU", registry=r)

    def scrape(self) -> tuple[bytes, str]:
        """The exposition text (all workers' samples added up in multiprocess mode) and its type."""
        if MULTIPROCESS:
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


@contextlib.contextmanager
def timed(histogram: Histogram) -> Iterator[None]:
    """Observe the block's seconds in ``histogram`` (the library's own spans trace the call)."""
    start = time.perf_counter()
    yield
    histogram.observe(time.perf_counter() - start)
