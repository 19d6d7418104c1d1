"""The routes of agent sessions under a history: start (or resume), list, get, drop, record a step, the
next model call's context, and a session's head."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from flexamem.agent import AgentSession
from flexamem.server.errors import WRITE, answers
from flexamem.server.metrics import timed
from flexamem.server.params import HistoryName, SessionName, Tenant
from flexamem.server.schemas import AgentIn, AgentOut, ContextOut, Dropped, HeadOut, Mode, StepIn, StepOut
from flexamem.server.state import ServerState


def add_routes(router: APIRouter, s: ServerState) -> None:
    """Add ``/v1/histories/{history}/agents`` and ``.../agents/{session_id}`` (with its steps, context and
    head) to ``router`` (the app's own in ``create_app``)."""

    @router.post("/v1/histories/{history}/agents", response_model=AgentOut, responses=WRITE)
    def start_agent(body: AgentIn, history: HistoryName, t: Tenant) -> dict[str, Any]:
        """Start an agent session under the history (or resume it, when the task and budget match)."""
        mem = s.opened(t, history)
        agent = mem.agent(body.task, budget=body.budget, system=body.system, session_id=body.session_id)
        return agent_json(agent)

    @router.get("/v1/histories/{history}/agents", response_model=list[str], responses=answers(404, 422))
    def list_agents(history: HistoryName, t: Tenant) -> list[str]:
        """The ids of the history's agent sessions, oldest first (404 for a history that holds nothing)."""
        return s.opened(t, history, must_exist=True).sessions()

    @router.get("/v1/histories/{history}/agents/{session_id}", response_model=AgentOut, responses=answers(404, 422))
    def get_agent(history: HistoryName, session_id: SessionName, t: Tenant) -> dict[str, Any]:
        """One agent session: its task, budget, steps and messages recorded."""
        return agent_json(s.session(t, history, session_id))

    @router.delete("/v1/histories/{history}/agents/{session_id}", response_model=Dropped, responses=answers(404, 422))
    def drop_agent(history: HistoryName, session_id: SessionName, t: Tenant) -> dict[str, Any]:
        """Delete one agent session (its steps and notes); ``dropped`` says whether it existed in the
        history (404 for a history that holds nothing)."""
        return {"history": history, "dropped": s.opened(t, history, must_exist=True).drop_session(session_id)}

    @router.post("/v1/histories/{history}/agents/{session_id}/steps", response_model=StepOut, responses=WRITE)
    def step(body: StepIn, history: HistoryName, session_id: SessionName, t: Tenant) -> dict[str, int]:
        """Record one step (``step_id`` makes a retry idempotent)."""
        agent = s.session(t, history, session_id)
        with s.a_write([body.action, body.observation, body.messages]):
            number = agent.step(
                body.action, body.observation, actor=body.actor, messages=body.messages, step_id=body.step_id
            )
        return {"step": number, "messages": agent.message_count}

    @router.get(
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
        agent = s.session(t, history, session_id)
        with timed(s.metrics.context_seconds):
            ctx = agent.context(mode=mode)
        s.metrics.tokens.inc(ctx.tokens)
        return {
            "messages": ctx.messages,
            "tokens": ctx.tokens,
            "ceiling": ctx.ceiling,
            "memory_active": not ctx.pass_through,
            "cut": ctx.cut,
            "notes": ctx.notes,
        }

    @router.get("/v1/histories/{history}/agents/{session_id}/head", response_model=HeadOut, responses=answers(404, 422))
    def agent_head(history: HistoryName, session_id: SessionName, t: Tenant) -> dict[str, Any]:
        """An agent session's head (as ``GET .../head``)."""
        return s.session(t, history, session_id).head().as_json()


def agent_json(agent: AgentSession) -> dict[str, Any]:
    return {
        "session_id": agent.session_id,
        "steps": len(agent.steps),
        "messages": agent.message_count,
        "task": agent.task,
        "system": agent.system,
        "budget": agent.budget,
    }
