"""``Memory(url)`` with a ``request_id`` (or step id) reused for another body raises
``RequestConflictError`` at once, as a local ``Memory`` does: a 409 that names it is never retried, and
nothing of the refused write is stored; the same body again still answers the first write's ids."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest

import flexamem as fm
from tests.server.conftest import Server

ANA = [{"speaker": "Ana", "text": "Refund the hotel to my Visa ending 4417."}]
BO = [{"speaker": "Bo", "text": "I only drink green tea."}]
MESSAGES = [{"role": "user", "content": "Where is order #W4417?"}, {"role": "assistant", "content": "It shipped."}]


def remote(server: Server) -> fm.Memory:
    history = "conflict" + uuid.uuid4().hex[:10]
    # a long retry time: a retried 409 would show as retries (and as seconds)
    return fm.Memory(server.url, key=server.keys["acme"], history=history, client=fm.ClientSettings(retry_seconds=30))


def test_a_reused_request_id_raises_request_conflict_at_once_and_stores_nothing(server: Server) -> None:
    mem = remote(server)
    first = mem.add_session(ANA, session_id="hotel", request_id="r1")
    assert mem.add_session(ANA, session_id="hotel", request_id="r1") == first
    batch = mem.add_sessions([{"turns": BO}], request_id="r2")
    assert mem.add_sessions([{"turns": BO}], request_id="r2") == batch
    chat = mem.add_messages(MESSAGES, session_id="shop", request_id="r3")
    assert mem.add_messages(MESSAGES, session_id="shop", request_id="r3") == chat
    before, retries = [n.raw for n in mem.notes()], mem.http.retries  # type: ignore[attr-defined]
    refused: list[Any] = [
        lambda: mem.add_session(BO, session_id="hotel", request_id="r1"),
        lambda: mem.add_sessions([{"turns": ANA}], request_id="r2"),
        lambda: mem.add_messages(MESSAGES[:1], session_id="shop", request_id="r3"),
        lambda: asyncio.run(mem.aadd_session(BO, session_id="hotel", request_id="r1")),
    ]
    for call in refused:
        with pytest.raises(fm.RequestConflictError, match="HTTP 409"):
            call()
    assert mem.http.retries == retries  # type: ignore[attr-defined]  # never retried
    assert [n.raw for n in mem.notes()] == before


def test_a_reused_step_id_raises_request_conflict(server: Server) -> None:
    mem = remote(server)
    agent = mem.agent("Refund #W4417", budget=900, session_id="a1")
    assert agent.step("get_order W4417", "shipped", step_id="s1") == 1
    assert agent.step("get_order W4417", "shipped", step_id="s1") == 1
    with pytest.raises(fm.RequestConflictError):
        agent.step("cancel_order W4417", "cancelled", step_id="s1")
    assert mem.agent(session_id="a1").step_count == 1
    assert mem.http.retries == 0  # type: ignore[attr-defined]


def test_a_409_naming_request_conflict_is_never_retried_a_concurrent_write_is() -> None:
    """The client's side alone, against a stand-in server: one request for a conflict, however long the
    retry time; a 409 ConcurrentWriteError (another writer went first) is tried again."""
    answers: list[httpx.Response] = []
    sent: list[httpx.Request] = []

    def server(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return answers.pop(0)

    settings = fm.ClientSettings(retry_seconds=30, backoff=0.01)
    mem = fm.Memory("http://127.0.0.1:9", key="k", history="h", client=settings)
    transport = mem.http  # type: ignore[attr-defined]
    transport._sync.close()
    transport._sync = httpx.Client(transport=httpx.MockTransport(server))
    conflict = {"error": {"type": "RequestConflictError", "message": "request id 'r1' names another write"}}
    answers.append(httpx.Response(409, json=conflict))
    with pytest.raises(fm.RequestConflictError, match="names another write"):
        mem.add_session(ANA, request_id="r1")
    assert len(sent) == 1 and transport.retries == 0 and sent[0].headers["Idempotency-Key"] == "r1"
    lost_race = {"error": {"type": "ConcurrentWriteError", "message": "another writer went first"}}
    answers.extend([httpx.Response(409, json=lost_race), httpx.Response(200, json={"history": "h", "units": ["s1"]})])
    assert mem.add_session(ANA, request_id="r1") == ["s1"]
    assert len(sent) == 3 and transport.retries == 1
    assert sent[1].headers["Idempotency-Key"] == sent[2].headers["Idempotency-Key"] == "r1"
