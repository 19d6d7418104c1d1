"""Optional OpenTelemetry spans, named by the GenAI memory conventions.

Every public memory operation is one span when ``opentelemetry-api`` is installed (a no-op until the
process configures an SDK provider; nothing at all without the package):

| operation (``gen_ai.operation.name``) | span name | calls |
|---|---|---|
| ``search_memory`` | ``search_memory <store id>`` | ``render``, ``search``, an agent ``context`` |
| ``update_memory`` | ``update_memory <store id>`` | ``add_session``, ``add_messages``, ``add_sessions``, ``step`` |
| ``delete_memory`` | ``delete_memory <store id>`` | ``drop_session`` |
| ``delete_memory_store`` | ``delete_memory_store <store id>`` | ``drop`` (the whole history) |

Attributes: ``gen_ai.provider.name`` (``flexamem``), ``gen_ai.memory.store.id`` (the history),
``gen_ai.conversation.id`` (an agent session's id), ``gen_ai.memory.search.result.count``, the
``flexamem.*`` figures of a render (budget, mode, tokens), and ``error.type`` when the call raises. The
query text is sensitive and is recorded (``gen_ai.memory.query``) only when the user opts in with
``FLEXAMEM_OTEL_CAPTURE_QUERY=1``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

SEARCH = "search_memory"
UPDATE = "update_memory"
DELETE = "delete_memory"
DELETE_STORE = "delete_memory_store"
PROVIDER = "flexamem"
CAPTURE_QUERY_ENV = "FLEXAMEM_OTEL_CAPTURE_QUERY"

_TRACER: list[Any] = []


def tracer() -> Any:
    """The ``flexamem`` tracer when OpenTelemetry is installed (None otherwise), looked up once."""
    if not _TRACER:
        try:
            from opentelemetry import trace
        except ImportError:
            _TRACER.append(None)
        else:
            _TRACER.append(trace.get_tracer("flexamem"))
    return _TRACER[0]


class Span:
    """What a caller may add to its span once the call has answered (a no-op without tracing)."""

    def __init__(self, span: Any) -> None:
        self._span = span

    def set(self, key: str, value: Any) -> None:
        if self._span is not None and self._span.is_recording():
            self._span.set_attribute(key, value)


def trace_headers() -> dict[str, str]:
    """The current trace context as W3C ``traceparent`` headers (none without OpenTelemetry or outside
    a span), so a server's spans join the caller's trace (the client sends them)."""
    if tracer() is None:
        return {}
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


@contextlib.contextmanager
def remote_parent(headers: Any) -> Iterator[None]:
    """Within the block, spans are children of the trace context the caller's headers carry (W3C
    ``traceparent``: the flexamem client sends it), so a server's spans join the caller's trace."""
    if tracer() is None or "traceparent" not in headers:
        yield
        return
    from opentelemetry import context, propagate

    token = context.attach(propagate.extract(headers))
    try:
        yield
    finally:
        context.detach(token)


@contextlib.contextmanager
def memory_span(operation: str, store_id: str, *, query: str | None = None, **attributes: Any) -> Iterator[Span]:
    """One span of a memory operation (see the module docstring); ``attributes`` are set as given,
    leaving out those that are None."""
    found = tracer()
    if found is None:
        yield Span(None)
        return
    attrs = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.memory.store.id": store_id,
        **{k: v for k, v in attributes.items() if v is not None},
    }
    if query is not None and os.environ.get(CAPTURE_QUERY_ENV) == "1":
        attrs["gen_ai.memory.query"] = query
    with found.start_as_current_span(f"{operation} {store_id}", attributes=attrs) as span:
        try:
            yield Span(span)
        except Exception as exc:
            span.set_attribute("error.type", type(exc).__name__)
            raise
