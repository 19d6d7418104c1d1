"""The routes that write conversations into a history (created with it when new): one session, a batch
of sessions, OpenAI chat messages. Each is admitted as a write (``ServerState.a_write``: 503 when the
worker cannot take it in time, server/admission.py) and may carry an ``Idempotency-Key``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from flexamem.server.errors import WRITE
from flexamem.server.params import HistoryName, RequestId, Tenant
from flexamem.server.schemas import Batch, BatchIn, MessagesIn, SessionIn, Units
from flexamem.server.state import ServerState


def add_routes(router: APIRouter, s: ServerState) -> None:
    """Add ``POST /v1/histories/{history}/sessions``, ``.../batch`` and ``.../messages`` to ``router`` (the
    app's own in ``create_app``)."""

    @router.post("/v1/histories/{history}/sessions", response_model=Units, responses=WRITE)
    def add_session(body: SessionIn, history: HistoryName, t: Tenant, request_id: RequestId = None) -> dict[str, Any]:
        """Write one conversation session (created with its history when new)."""
        mem = s.opened(t, history)
        turns = [x.model_dump(exclude_none=True) for x in body.turns]
        with s.a_write(turns):
            units = mem.add_session(turns, session_id=body.session_id, date=body.date, request_id=request_id)
        s.count_llm_tokens(t, mem, units)
        return {"history": history, "units": units}

    @router.post("/v1/histories/{history}/batch", response_model=Batch, responses=WRITE)
    def add_sessions(body: BatchIn, history: HistoryName, t: Tenant, request_id: RequestId = None) -> dict[str, Any]:
        """Write many sessions at once (each in its own transaction, in order; a retry with the same
        Idempotency-Key stores only the sessions not stored yet)."""
        mem = s.opened(t, history)
        sessions = [
            {"turns": [x.model_dump(exclude_none=True) for x in b.turns], "session_id": b.session_id, "date": b.date}
            for b in body.sessions
        ]
        with s.a_write(sessions):
            out = mem.add_sessions(sessions, request_id=request_id)
        s.count_llm_tokens(t, mem, [u for units in out for u in units])
        return {"history": history, "sessions": out}

    @router.post("/v1/histories/{history}/messages", response_model=Units, responses=WRITE)
    def add_messages(body: MessagesIn, history: HistoryName, t: Tenant, request_id: RequestId = None) -> dict[str, Any]:
        """Write an OpenAI-format chat history as one session (tool calls and results verbatim)."""
        mem = s.opened(t, history)
        with s.a_write(body.messages):
            units = mem.add_messages(body.messages, session_id=body.session_id, date=body.date, request_id=request_id)
        s.count_llm_tokens(t, mem, units)
        return {"history": history, "units": units}
