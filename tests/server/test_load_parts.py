"""Issue 25's parts in one process (the real app through Starlette's client, a real embedding process,
a real local HTTP model server): /metrics read by Prometheus' own parser, the LRU of open histories,
writes embedded by the lower-priority process (the same vectors; its death costs nothing), renders
answered while a slow write of the same or another history is in flight."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from flexamem.server.app import Memories, ServerConfig, create_app
from flexamem.server.ingest import OffloadedEmbedder, writing
from flexamem.server.keys import KeyFile
from flexamem.write.default_embed import default_embedder
from flexamem.write.embed import usable_cores
from tests.llm.fake_server import FakeOpenAI
from tests.servers import cpu_ticks

from starlette.testclient import TestClient  # isort: skip

TURNS = [{"speaker": "Ana", "text": f"On day {i} I paid invoice INV-{4400 + i} for the Lisbon trip."} for i in range(6)]


def app_client(tmp_path: Path, **config: object) -> tuple[TestClient, str]:
    keys = tmp_path / "keys.json"
    key = KeyFile(str(keys)).add_key("acme")
    app = create_app(ServerConfig(str(tmp_path / "m.db"), str(keys), **config))  # type: ignore[arg-type]
    client = TestClient(app, headers={"Authorization": f"Bearer {key}"})
    return client, key


def long_write(client: TestClient, history: str, lines: int) -> tuple[threading.Event, list[int]]:
    """A session of ``lines`` turns written to ``history`` in a background thread: (set when answered,
    the answer's status)."""
    turns = [{"speaker": "Ana", "text": f"line {i} about invoice INV-{i} and the Lisbon trip"} for i in range(lines)]
    done, status = threading.Event(), []

    def write() -> None:
        r = client.post(f"/v1/histories/{history}/sessions", json={"session_id": "long", "turns": turns})
        status.append(r.status_code)
        done.set()

    threading.Thread(target=write).start()
    return done, status


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_are_prometheus_text_with_bounded_labels(tmp_path: Path) -> None:
    client, key = app_client(tmp_path, offload_writes=False)
    with client:
        assert client.post("/v1/histories/trip/sessions", json={"session_id": "s1", "turns": TURNS}).status_code == 200
        for _ in range(3):
            r = client.post("/v1/histories/trip/render", json={"query": "Which invoice was paid?", "budget": 400})
            assert r.status_code == 200
        assert client.post("/v1/histories/none/render", json={"query": "q", "budget": 400}).status_code == 404
        sid = client.post("/v1/histories/trip/agents", json={"task": "pay", "budget": 900}).json()["session_id"]
        client.post(f"/v1/histories/trip/agents/{sid}/steps", json={"action": "ls", "observation": "a.py"})
        client.get(f"/v1/histories/trip/agents/{sid}/context")
        text = client.get("/metrics").text
    got = samples(text)
    render = "/v1/histories/{history}/render"
    assert got[("flexamem_requests_total", (("method", "POST"), ("route", render), ("status", "200")))] == 3
    assert got[("flexamem_requests_total", (("method", "POST"), ("route", render), ("status", "404")))] == 1
    assert got[("flexamem_render_seconds_count", ())] == 3
    assert got[("flexamem_write_seconds_count", ())] == 2  # the session and the agent step
    assert got[("flexamem_agent_context_seconds_count", ())] == 1
    assert got[("flexamem_tokens_rendered_total", ())] > 0
    assert got[("flexamem_ingest_backlog", ())] == 0 and got[("flexamem_open_histories", ())] >= 1
    assert key not in text and "INV-44" not in text and "trip" not in text  # no keys, bodies or names


def test_the_record_writers_model_tokens_are_counted_per_tenant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeOpenAI() as model:
        monkeypatch.setenv("FLEXAMEM_LLM_BASE_URL", model.url)
        monkeypatch.setenv("FLEXAMEM_LLM_MODEL", "fake")
        monkeypatch.setenv("FLEXAMEM_LLM_CACHE", "off")  # a cached answer costs no tokens
        client, _ = app_client(tmp_path, offload_writes=False, records="llm")
        with client:
            r = client.post("/v1/histories/trip/sessions", json={"session_id": "s1", "turns": TURNS})
            assert r.status_code == 200
            r = client.post("/v1/histories/trip/sessions", json={"session_id": "s2", "turns": TURNS[:2]})
            assert r.status_code == 200
            text = client.get("/metrics").text
            mem = client.app.state.memories.get("acme", "trip")  # type: ignore[attr-defined]
            spent = sum(c.prompt_tokens + c.completion_tokens for c in mem.store.llm_calls(mem.history_id))
    counted = samples(text)[("flexamem_llm_tokens_total", (("tenant", "acme"),))]
    assert counted > 0 and counted == spent  # each write's calls counted once


def test_open_histories_are_bounded_and_reopen_from_the_store(tmp_path: Path) -> None:
    memories = Memories(str(tmp_path / "m.db"), max_open=2)
    for name in ("a", "b", "c"):
        memories.get("t", name).add_session(TURNS, session_id="s1")
    assert memories.open_count == 2 and memories.evicted == 1
    again = memories.get("t", "a")  # closed by the LRU, read back whole
    assert len(again) == 1 and "INV-4403" in again.render("Which invoice on day 3?", 400).text
    with pytest.raises(Exception, match="max_open"):
        Memories(str(tmp_path / "m.db"), max_open=0)


@pytest.fixture()
def offloaded() -> Iterator[OffloadedEmbedder]:
    emb = OffloadedEmbedder(processes=1)  # the tests that kill it find the one process
    yield emb
    emb.close()


@pytest.mark.parametrize("nice", [0, 7])
def test_writes_are_embedded_by_a_process_of_their_own_at_the_priority_set(nice: int) -> None:
    texts = [f"invoice INV-{i} for the Lisbon trip" for i in range(5)]
    others = set(multiprocessing.active_children())
    offloaded = OffloadedEmbedder(nice=nice)
    try:
        local = default_embedder().embed(texts)
        assert np.allclose(offloaded.embed(texts), local, atol=1e-5) and offloaded.offloaded == 0  # a query: here
        with writing():
            vectors = offloaded.embed(texts)
        assert np.allclose(vectors, local, atol=1e-5) and offloaded.offloaded == 5
        children = [c.pid for c in set(multiprocessing.active_children()) - others if c.pid is not None]
        assert len(children) == offloaded.processes == min(2, usable_cores())  # by the machine, by default
        ours = os.getpriority(os.PRIO_PROCESS, 0)
        assert all(os.getpriority(os.PRIO_PROCESS, pid) == min(19, ours + nice) for pid in children)
    finally:
        offloaded.close()


@pytest.mark.parametrize("processes", [1, 2])
def test_a_killed_embedding_process_loses_and_doubles_nothing(tmp_path: Path, processes: int) -> None:
    offloaded = OffloadedEmbedder(processes=processes)
    try:
        killed_and_written(tmp_path, offloaded)
    finally:
        offloaded.close()


def killed_and_written(tmp_path: Path, offloaded: OffloadedEmbedder) -> None:
    memories = Memories(str(tmp_path / "m.db"), embedder=offloaded)
    mem = memories.get("t", "big")
    others = set(multiprocessing.active_children())
    with writing():
        offloaded.embed(["warm"])  # the embedding process is up
    started = sorted(set(multiprocessing.active_children()) - others, key=lambda c: c.pid or 0)
    assert len(started) == offloaded.processes
    started[0].kill()  # one of them killed before the write's job (the pool is then replaced whole)
    started[0].join(timeout=30)
    long_session = [{"speaker": "Ana", "text": f"line {i} of a long session about invoice INV-{i}"} for i in range(600)]
    with writing():
        units = mem.add_session(long_session, session_id="long")
    notes = memories.get("t", "big").notes()
    assert [n.session_id for n in notes].count("long") == len(units) > 0  # every unit stored once
    assert len({n.unit_id for n in notes}) == len(notes)  # nothing twice
    assert offloaded.restarts == 1 and offloaded.offloaded > 1  # the job was redone by a new process
    assert "INV-433" in mem.render("Which invoice is on line 433?", 600).text


def test_renders_are_answered_while_a_slow_write_is_in_flight(tmp_path: Path) -> None:
    client, _ = app_client(tmp_path, write_wait=None)  # writes offloaded, waited for however long they take
    with client:
        for name in ("same", "other"):
            client.post(f"/v1/histories/{name}/sessions", json={"session_id": "s0", "turns": TURNS})
            client.post(f"/v1/histories/{name}/render", json={"query": "invoice", "budget": 400})  # opened, warm
        done, write_status = long_write(client, "same", 1500)
        time.sleep(0.2)
        answered_during = 0
        while not done.is_set():
            for name in ("same", "other"):
                r = client.post(f"/v1/histories/{name}/render", json={"query": "Which invoice?", "budget": 400})
                assert r.status_code == 200
                answered_during += not done.is_set()
        done.wait(300)
    assert write_status == [200]
    assert answered_during >= 4  # renders of both histories went on while the write was being embedded


def test_renders_writes_and_contexts_are_genai_memory_spans(tmp_path: Path, spans: Any) -> None:
    client, _ = app_client(tmp_path, offload_writes=False)
    with client:
        client.post("/v1/histories/trip/sessions", json={"session_id": "s1", "turns": TURNS})
        client.post("/v1/histories/trip/render", json={"query": "Which invoice?", "budget": 400})
        sid = client.post("/v1/histories/trip/agents", json={"task": "pay", "budget": 900}).json()["session_id"]
        client.get(f"/v1/histories/trip/agents/{sid}/context")
        client.delete("/v1/histories/trip")
    found = {(s.name, s.attributes.get("gen_ai.operation.name")) for s in spans.get_finished_spans()}
    assert {
        ("update_memory acme/trip", "update_memory"),
        ("search_memory acme/trip", "search_memory"),
        (f"search_memory acme/trip/agent:{sid}", "search_memory"),
        ("delete_memory_store acme/trip", "delete_memory_store"),
    } <= found


def test_an_embedding_process_killed_mid_job_has_the_job_redone(offloaded: OffloadedEmbedder) -> None:
    others = set(multiprocessing.active_children())  # other tests' processes may still be exiting
    with writing():
        offloaded.embed(["warm"])
    [child] = set(multiprocessing.active_children()) - others
    assert child.pid is not None

    texts = [f"invoice INV-{i} for the Lisbon trip, paid on day {i % 28}" for i in range(3000)]
    out: list[np.ndarray] = []

    def job() -> None:
        with writing():
            out.append(offloaded.embed(texts))

    worker = threading.Thread(target=job)
    before = cpu_ticks(child.pid)
    worker.start()
    deadline = time.monotonic() + 60
    while cpu_ticks(child.pid) < before + 20 and time.monotonic() < deadline:  # the job is being computed
        time.sleep(0.01)
    child.kill()
    worker.join(timeout=600)
    assert out and out[0].shape == (3000, default_embedder().dim) and offloaded.restarts == 1
    assert np.allclose(out[0][:3], default_embedder().embed(texts[:3]), atol=1e-5)


def test_a_real_bug_stays_one_json_500_internal_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug (an exception that is no FlexaMemError) answers 500 InternalError without its message, while a
    store failure keeps its own type (tests/server/test_trust.py, tests/faults)."""
    from flexamem.memory import Memory

    client, _ = app_client(tmp_path, offload_writes=False)
    assert client.post("/v1/histories/h/sessions", json={"turns": TURNS[:2]}).status_code == 200

    def broken(self: Memory) -> None:
        raise ZeroDivisionError("secret detail of a bug")

    monkeypatch.setattr(Memory, "notes", broken)  # a bug put in on purpose: nothing real raises it
    r = client.get("/v1/histories/h/notes")
    assert r.status_code == 500 and r.json()["error"]["type"] == "InternalError" and "secret" not in r.text
    monkeypatch.undo()
    assert client.get("/v1/histories/h/notes").status_code == 200


def test_writes_past_the_bound_are_refused_with_retry_after_and_store_nothing(tmp_path: Path) -> None:
    client, _ = app_client(tmp_path, offload_writes=False, max_pending_writes=1)
    with client:
        client.post("/v1/histories/trip/sessions", json={"session_id": "s0", "turns": TURNS})
        done, first = long_write(client, "trip", 800)
        deadline = time.monotonic() + 60
        while samples(client.get("/metrics").text)[("flexamem_ingest_backlog", ())] < 1:  # the long one is in
            assert time.monotonic() < deadline and not done.is_set()
            time.sleep(0.005)
        refused: list[Any] = []
        while not refused and not done.is_set() and time.monotonic() < deadline:
            r = client.post("/v1/histories/other/sessions", json={"session_id": f"x{len(refused)}", "turns": TURNS})
            if r.status_code == 503:
                refused.append(r)
            time.sleep(0.01)
        done.wait(300)
        assert first == [200]
        assert refused, "a second write while the first was in progress was admitted"
        body = refused[0].json()["error"]
        assert body["type"] == "ServerBusyError" and refused[0].headers["Retry-After"] == "1"
        assert client.get("/v1/histories/other/notes").status_code == 404  # nothing of it was stored
        r = client.post("/v1/histories/other/sessions", json={"session_id": "x0", "turns": TURNS})
        assert r.status_code == 200  # sent again once the first is done: admitted and stored once
        assert [n["session_id"] for n in client.get("/v1/histories/other/notes").json()] == ["x0"]
        got = samples(client.get("/metrics").text)
    assert got[("flexamem_refused_writes_total", ())] >= 1


def test_a_write_past_its_wait_stores_nothing_and_its_retry_takes_the_vectors_made_meanwhile(tmp_path: Path) -> None:
    """The embedding process cannot embed a session in a millisecond: the write is answered 503 with
    Retry-After and stores nothing; its embedding goes on, so the same write sent again finds its
    vectors made and is stored once, with the vectors an unbounded write stores."""
    client, _ = app_client(tmp_path, write_wait=0.001)
    turns = [{"speaker": "Ana", "text": f"invoice INV-{i} was paid on the {i}th"} for i in range(40)]
    with client:
        r = client.post("/v1/histories/h/sessions", json={"session_id": "s1", "turns": turns})
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        assert r.json()["error"]["type"] == "ServerBusyError" and "nothing was stored" in r.json()["error"]["message"]
        assert client.get("/v1/histories/h/notes").status_code == 404  # nothing of it stored
        deadline = time.monotonic() + 120
        body = {"session_id": "s1", "turns": turns}
        while (r := client.post("/v1/histories/h/sessions", json=body)).status_code == 503:
            assert time.monotonic() < deadline, "the retry never found its vectors"
            time.sleep(0.2)
        assert r.status_code == 200
        got = samples(client.get("/metrics").text)
        stored = client.get("/v1/histories/h/notes-full").json()
    assert got[("flexamem_refused_writes_total", ())] >= 1
    assert [n["session_id"] for n in stored] == ["s1"]
    (tmp_path / "b").mkdir()
    unbounded, _ = app_client(tmp_path / "b", write_wait=None)
    with unbounded:
        assert unbounded.post("/v1/histories/h/sessions", json={"session_id": "s1", "turns": turns}).status_code == 200
        same = unbounded.get("/v1/histories/h/notes-full").json()
    assert [n["exact"]["embedding"] for n in stored] == [n["exact"]["embedding"] for n in same]
