"""The routes that read a history for a query: render (the memory within a budget), search (the turns a
render would recover first), and the memory inspector (a signed short-lived link, and its page)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from flexamem.budget import MAX_BUDGET
from flexamem.memory import Memory
from flexamem.render.result import Rendering, rendering_json
from flexamem.server.errors import Refusal, answers
from flexamem.server.keys import Link, link_view
from flexamem.server.metrics import timed
from flexamem.server.params import HistoryName, Tenant
from flexamem.server.schemas import MAX_QUERY, HitOut, LinkIn, LinkOut, Mode, RenderIn, RenderOut, SearchIn
from flexamem.server.state import ServerState


def add_routes(router: APIRouter, s: ServerState) -> None:
    """Add ``POST .../render``, ``.../search``, ``.../inspect-link`` and ``GET /inspect/{history}`` to
    ``router`` (the app's own in ``create_app``)."""

    @router.post("/v1/histories/{history}/render", response_model=RenderOut, responses=answers(400, 404, 413, 422))
    def render(body: RenderIn, history: HistoryName, t: Tenant) -> dict[str, Any]:
        """The memory for one query within the budget (no model call)."""

        def rendered(mem: Memory) -> Rendering:
            return mem.render(body.query, body.budget, mode=body.mode, prompt=body.prompt, order=body.order)

        with timed(s.metrics.render_seconds):
            r = s.memories.read(t, history, body.profile, rendered)
        s.metrics.open.set(s.memories.open_count)
        s.metrics.tokens.inc(r.tokens)
        return rendering_json(r)

    @router.post("/v1/histories/{history}/search", response_model=list[HitOut], responses=answers(400, 404, 413, 422))
    def search(body: SearchIn, history: HistoryName, t: Tenant) -> list[dict[str, Any]]:
        """The turns a render would recover first for the query, best first (no budget, no model call)."""
        hits = s.memories.read(t, history, None, lambda mem: mem.search(body.query, mode=body.mode, limit=body.limit))
        return [dataclasses.asdict(h) for h in hits]

    @router.post("/v1/histories/{history}/inspect-link", response_model=LinkOut, responses=answers(400, 404, 413, 422))
    def inspect_link(body: LinkIn, history: HistoryName, t: Tenant) -> dict[str, Any]:
        """A short-lived link to the memory inspector (signed, no API key in it) to open in a browser."""
        s.memories.existing(t, history)
        token, expires = s.keys.sign_link(t, history, body.seconds, link_view(body.query, body.budget, body.mode))
        query = urlencode({"query": body.query, "budget": body.budget, "mode": body.mode, "token": token})
        return {"url": f"/inspect/{history}?{query}", "expires": expires}

    @router.get("/inspect/{history}", response_class=HTMLResponse, include_in_schema=False)
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
        return inspector_page(s.memories.existing(t, history), history, query, budget, mode)
