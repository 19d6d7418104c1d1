"""The routes outside ``/v1``, which need no API key: ``/health`` (liveness: the store is readable) and
``/metrics`` (Prometheus text, not in the OpenAPI document)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from flexamem.server.errors import READ
from flexamem.server.state import ServerState


def add_routes(router: APIRouter, s: ServerState) -> None:
    """Add ``GET /health`` and ``GET /metrics`` to ``router`` (the app's own in ``create_app``)."""

    @router.get("/health", responses={500: READ[500], 503: READ[503]})
    def health() -> dict[str, str]:
        """Liveness: the server answers and its store is readable."""
        s.memories.store.histories()
        return {"status": "ok"}

    @router.get("/metrics", include_in_schema=False)
    def prometheus_metrics() -> Response:
        """Prometheus exposition text (no keys, no bodies, no history names; tenants only as labels of
        the record writer's model tokens)."""
        body, kind = s.metrics.scrape()
        return Response(body, media_type=kind)
