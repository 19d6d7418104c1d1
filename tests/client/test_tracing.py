"""Spans follow the GenAI memory conventions, and a client's trace continues on the server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import flexamem as fm
from tests.servers import free_port


def test_memory_operations_are_genai_memory_spans_without_the_query_unless_asked(
    spans: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = fm.Memory(history="ana")
    mem.add_session([{"speaker": "Ana", "text": "My locker code is 5521."}], session_id="s1")
    mem.render("locker code", 300)
    mem.search("locker", limit=2)
    agent = mem.agent("find the code", budget=900, session_id="a1")
    agent.step("ls", "nothing here")
    agent.context()
    mem.drop_session("a1")
    mem.drop()
    finished = spans.get_finished_spans()
    ops = [(s.name, s.attributes["gen_ai.operation.name"]) for s in finished]
    assert ops == [
        ("update_memory ana", "update_memory"),
        ("search_memory ana", "search_memory"),
        ("search_memory ana", "search_memory"),
        ("update_memory ana/agent:a1", "update_memory"),
        ("search_memory ana/agent:a1", "search_memory"),
        ("delete_memory ana", "delete_memory"),
        ("delete_memory_store ana", "delete_memory_store"),
    ]
    for s in finished:
        assert s.attributes["gen_ai.provider.name"] == "flexamem" and "gen_ai.memory.query" not in s.attributes
    render, search = finished[1], finished[2]
    assert render.attributes["gen_ai.memory.store.id"] == "ana" and render.attributes["flexamem.budget"] == 300
    assert 0 < render.attributes["flexamem.tokens"] <= 285
    assert search.attributes["gen_ai.memory.search.result.count"] == 1
    assert finished[3].attributes["gen_ai.conversation.id"] == "a1"
    spans.clear()
    monkeypatch.setenv("FLEXAMEM_OTEL_CAPTURE_QUERY", "1")  # the user opts in to the query text
    with pytest.raises(fm.InvalidInputError):
        mem.render("locker code", 300, mode="nope")
    mem.render("locker code", 300)
    [span] = spans.get_finished_spans()
    assert span.attributes["gen_ai.memory.query"] == "locker code"


@pytest.fixture()
def live_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The app served by uvicorn in this process (so its spans reach this process's exporter)."""
    uvicorn = pytest.importorskip("uvicorn")
    from flexamem.server.app import ServerConfig, create_app
    from flexamem.server.keys import KeyFile

    keys = tmp_path / "keys.json"
    key = KeyFile(str(keys)).add_key("acme")
    app = create_app(ServerConfig(str(tmp_path / "m.db"), str(keys), offload_writes=False))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", key
    server.should_exit = True
    thread.join(timeout=10)


def test_the_servers_spans_join_the_clients_trace(live_server: tuple[str, str], spans: Any) -> None:
    from opentelemetry import trace

    url, key = live_server
    mem = fm.Memory(url, key=key, history="ana")
    with trace.get_tracer("test").start_as_current_span("agent turn") as parent:
        mem.add_session([{"speaker": "Ana", "text": "My locker code is 5521."}])
        mem.render("locker code", 300)
    ours = parent.get_span_context().trace_id
    served = [s for s in spans.get_finished_spans() if s.name.endswith("acme/ana")]
    assert [s.attributes["gen_ai.operation.name"] for s in served] == ["update_memory", "search_memory"]
    assert all(s.context.trace_id == ours for s in served)  # one trace, from the agent to the store
    assert all(s.parent is not None and s.parent.span_id == parent.get_span_context().span_id for s in served)
