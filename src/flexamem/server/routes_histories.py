"""The routes of a tenant's histories as a whole: list, get, notes (a page, in full, one), verify and
head, erase and the erasures, export, and drop."""

from __future__ import annotations

import io
from typing import Annotated, Any

from fastapi import APIRouter, Path
from fastapi.responses import Response

from flexamem.errors import InvalidInputError, NotFoundError
from flexamem.notes import note_json
from flexamem.server.errors import answers
from flexamem.server.params import HistoryName, Limit, Start, Tenant
from flexamem.server.schemas import (
    Dropped,
    EraseIn,
    ErasureOut,
    HeadOut,
    HeadsIn,
    HistoryOut,
    NoteFull,
    NoteOut,
    VerifyOut,
)
from flexamem.server.state import ServerState
from flexamem.store.base import Erasure


def add_routes(router: APIRouter, s: ServerState) -> None:
    """Add ``/v1/histories`` and ``/v1/histories/{history}`` (with its notes, verify, head, erase, erasures
    and export) to ``router`` (the app's own in ``create_app``)."""

    @router.get("/v1/histories", response_model=list[HistoryOut], responses=answers())
    def list_histories(t: Tenant) -> list[dict[str, Any]]:
        """The tenant's histories (agent sessions as ``<history>/agent:<id>``), with their note counts."""
        return s.memories.histories(t)

    @router.get("/v1/histories/{history}", response_model=HistoryOut, responses=answers(404, 422))
    def get_history(history: HistoryName, t: Tenant) -> dict[str, Any]:
        """One history of the tenant: its kind and note count (404 when it holds nothing)."""
        mem = s.memories.existing(t, history)
        return {"history": history, "kind": mem.store.history_kind(mem.history_id) or "conversation", "notes": len(mem)}

    @router.get("/v1/histories/{history}/verify", response_model=VerifyOut, responses=answers(404, 422))
    def verify(history: HistoryName, t: Tenant) -> dict[str, Any]:
        """Every stored row a render or agent context of the history can show, checked against its digest:
        the problems found (each names its row), or none."""
        return {"history": history, "problems": s.memories.existing(t, history).verify()}

    @router.post("/v1/histories/{history}/verify", response_model=VerifyOut, responses=answers(400, 404, 413, 422))
    def verify_against(body: HeadsIn, history: HistoryName, t: Tenant) -> dict[str, Any]:
        """As ``GET .../verify``, and whether the history (and its sessions) still extend the heads a
        caller kept (``GET .../head``): rows cut off the end, a rewritten chain or a rollback are reported."""
        return {"history": history, "problems": s.memories.existing(t, history).verify(head=body.heads)}

    @router.get("/v1/histories/{history}/head", response_model=HeadOut, responses=answers(404, 422))
    def head(history: HistoryName, t: Tenant) -> dict[str, Any]:
        """The history's head now, signed with the server's key file secret: keep it, and send it back to
        ``POST .../verify`` later."""
        return s.memories.existing(t, history).head().as_json()

    def page(t: str, history: str, start: int, limit: int | None, full: bool) -> list[dict[str, Any]]:
        found = s.memories.existing(t, history).notes(start, None if limit is None else start + limit)
        return [note_json(n, full=full) for n in found]

    @router.get("/v1/histories/{history}/notes", response_model=list[NoteOut], responses=answers(404, 422))
    def notes(history: HistoryName, t: Tenant, start: Start = 0, limit: Limit = None) -> list[dict[str, Any]]:
        """The history's notes in time order (a page of them with ``start`` and ``limit``)."""
        return page(t, history, start, limit, full=False)

    @router.get("/v1/histories/{history}/notes-full", response_model=list[NoteFull], responses=answers(404, 422))
    def notes_full(history: HistoryName, t: Tenant, start: Start = 0, limit: Limit = None) -> list[dict[str, Any]]:
        """The history's notes in full (raw text, pieces, every field), a page at a time."""
        return page(t, history, start, limit, full=True)

    @router.get("/v1/histories/{history}/notes/{unit}", response_model=NoteFull, responses=answers(404, 422))
    def note(history: HistoryName, unit: Annotated[str, Path(max_length=300)], t: Tenant) -> dict[str, Any]:
        """One note in full: raw text, record, fields, pieces and its digest (provenance)."""
        try:
            n = s.memories.existing(t, history).note(unit)
        except InvalidInputError as exc:
            raise NotFoundError(str(exc)) from None
        return note_json(n, full=True)

    @router.delete("/v1/histories/{history}", response_model=Dropped, responses=answers(404, 422))
    def drop(history: HistoryName, t: Tenant) -> dict[str, Any]:
        """Delete the whole history and its agent sessions (the only deletion; notes are never edited)."""
        dropped = s.memories.existing(t, history).drop()
        s.memories.forget(t, history)
        return {"history": history, "dropped": dropped}

    @router.post("/v1/histories/{history}/erase", response_model=ErasureOut, responses=answers(400, 404, 413, 422))
    def erase(body: EraseIn, history: HistoryName, t: Tenant) -> dict[str, Any]:
        """Erase one turn, one session or one agent step from every stored copy, in one transaction
        (``Memory.erase``): every worker's view reads the history again on its next call; the chain lists
        the erasure. Nothing of that name: 404, nothing changes."""
        named = [body.turn is not None, body.session is not None, body.agent is not None or body.step is not None]
        if sum(named) != 1 or (body.agent is None) != (body.step is None):
            raise InvalidInputError("erase one of: turn, session, or agent with step")
        done: Erasure
        with s.a_write():
            if body.agent is not None and body.step is not None:
                done = s.session(t, history, body.agent).erase(body.step, reason=body.reason, marker=body.marker)
            else:
                done = s.memories.existing(t, history).erase(
                    turn=body.turn, session=body.session, reason=body.reason, marker=body.marker
                )
        return done.as_json()

    @router.get("/v1/histories/{history}/erasures", response_model=list[ErasureOut], responses=answers(404, 422))
    def erasures(history: HistoryName, t: Tenant) -> list[dict[str, Any]]:
        """The history's erasures, oldest first (what each named, why, when; never the words)."""
        return [e.as_json() for e in s.memories.existing(t, history).erasures()]

    @router.get("/v1/histories/{history}/export", response_class=Response, responses=answers(404, 422))
    def export(history: HistoryName, t: Tenant) -> Response:
        """The history and its agent sessions as the JSON Lines ``flexamem import`` checks and reads back
        (every row with its digest), as a download: only the tenant's own history."""
        out = io.StringIO()
        s.memories.existing(t, history).export(out)
        return Response(
            out.getvalue(),
            media_type="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="{history}.jsonl"'},
        )
