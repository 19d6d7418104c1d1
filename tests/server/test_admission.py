"""server/admission.py with a real embedding process: a write is admitted when it can be acknowledged
in time at the pace the process was measured to keep, refused at once (nothing done) when it cannot,
and always admitted when no write is in progress; the hard cap holds whatever the pace."""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from flexamem.errors import ServerBusyError
from flexamem.server.admission import OWN_WORK_TIMES, Admission, text_chars
from flexamem.server.app import ServerConfig, create_app
from flexamem.server.ingest import (
    READ_CHARS,
    OffloadedEmbedder,
    embedded_chars,
    writing,
)
from flexamem.server.keys import KeyFile
from flexamem.write.default_embed import default_embedder
from tests.servers import cpu_ticks

from starlette.testclient import TestClient  # isort: skip

LINES = [f"line {i} about invoice INV-{i} and the Lisbon trip on the {i}th" for i in range(40)]


@pytest.fixture(scope="module")
def offloaded() -> Iterator[OffloadedEmbedder]:
    emb = OffloadedEmbedder()
    yield emb
    emb.close()


def measured(emb: OffloadedEmbedder, gate: Admission | None = None) -> None:
    """One write's texts embedded by the process, so its pace is known (and ``gate``'s ratio of text
    embedded to text sent)."""
    gate = gate or Admission(1, None, emb)
    with gate.admitted(text_chars(LINES)):
        emb.embed(LINES)


def test_text_chars_counts_the_strings_of_a_requests_json() -> None:
    body = [{"speaker": "Ana", "text": "hello"}, {"speaker": "Bo", "text": "hi", "n": 3, "x": None}]
    assert text_chars(body) == len("Ana") + 5 + len("Bo") + 2
    assert text_chars(None) == 0 and text_chars(("ab", ["c"])) == 3
    # what the embedder reads of a text: up to MAX_SEQ_LEN tokens
    assert embedded_chars("y" * 50_000) == READ_CHARS and embedded_chars("ab") == 2


def test_text_chars_answers_for_json_nested_any_depth() -> None:
    """It walks a request's JSON before the route validates it: a RecursionError there was a 500."""
    deep: object = "abc"
    for i in range(100_000):
        deep = [deep] if i % 2 else {"k": deep}
    assert text_chars([{"role": "user", "content": "hi", "meta": deep}]) == len("user") + 2 + 3


def test_the_embedding_process_measures_its_pace_and_backlog(offloaded: OffloadedEmbedder) -> None:
    fresh = OffloadedEmbedder()
    try:
        assert fresh.backlog(1000) is None  # nothing measured yet: no prediction
    finally:
        fresh.close()
    measured(offloaded)
    one, two = offloaded.backlog(1000), offloaded.backlog(2000)
    assert one is not None and two is not None and 0 < one < two
    assert two == pytest.approx(2 * one)  # nothing in its queue now: the prediction is the pace times the text


def test_a_job_running_counts_what_is_left_of_it() -> None:
    """With one process busy on a long job, the wait predicted for the next falls as the job runs (it
    is counted from when it was sent, not whole at every prediction)."""
    emb = OffloadedEmbedder(processes=1)
    try:
        measured(emb)
        texts = [f"{line} (copy {n})" for n in range(30) for line in LINES]
        done = threading.Event()

        def write() -> None:
            with writing():
                emb.embed(texts)
            done.set()

        threading.Thread(target=write).start()
        deadline = time.monotonic() + 60
        while emb.jobs_in_flight < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        first = emb.backlog(0)
        time.sleep(0.5)
        later = emb.backlog(0)
        still_running = not done.is_set()
        done.wait(600)
        assert first is not None and later is not None and first > 0.6  # the job is predicted to take a while
        assert still_running and later == pytest.approx(first - 0.5, abs=0.1)
    finally:
        emb.close()


def test_a_write_predicted_late_is_refused_at_once_and_one_alone_always_admitted(offloaded: OffloadedEmbedder) -> None:
    measured(offloaded)  # the processes' pace is known: writes are predicted
    strict = Admission(8, 1e-6, offloaded)  # no write can be embedded in a microsecond

    def long_writes() -> contextlib.ExitStack:
        """One long write in progress per embedding process (the first alone, the others long enough
        to wait for no other: all admitted), nothing of theirs sent yet."""
        stack = contextlib.ExitStack()
        for _ in range(offloaded.processes):
            stack.enter_context(strict.admitted(100_000))
        return stack

    with long_writes(), strict.admitted(5_000):  # the same short write as below, before any was measured:
        assert strict.pending == offloaded.processes + 1 and strict.ratio is None  # not refused on a guess
    measured(offloaded, strict)
    ran = []
    with long_writes():
        assert strict.pending == offloaded.processes
        predicted = strict.predicted(5_000)
        assert predicted is not None and predicted > 1e-6
        late = r"would be acknowledged in about .* nothing was stored"
        with pytest.raises(ServerBusyError, match=late), strict.admitted(5_000):
            ran.append("a short write")  # never: refused before its block runs (it would wait for a long one)
        with strict.admitted(0):  # nothing to embed (an erasure): not held back by the embedding queue
            ran.append("an erasure")
    assert ran == ["an erasure"] and strict.pending == 0
    loose = Admission(8, 3600.0, offloaded)
    with loose.admitted(5_000), loose.admitted(5_000):  # within the target: both admitted
        assert loose.pending == 2


def test_a_long_write_may_wait_as_long_as_its_own_work(offloaded: OffloadedEmbedder) -> None:
    """With writes in progress, a short write predicted past ``write_target`` is refused, while one whose
    own embedding is longer than the target is admitted if predicted within twice its own work (under a
    steady load it would else be admitted only when no other write is in progress)."""
    measured(offloaded)
    gate = Admission(8, 3600.0, offloaded)
    measured(offloaded, gate)  # its ratio of text embedded to text sent
    assert gate.ratio is not None
    short, long = 2_000, 2_000_000
    with gate.admitted(20_000), gate.admitted(20_000):  # in progress, nothing sent yet: work ahead of both
        p_short, p_long, own = gate.predicted(short), gate.predicted(long), offloaded.work(int(long * gate.ratio))
        assert p_short is not None and p_long is not None and own is not None
        gate.target = p_short * 0.9  # a target the short write misses and the long one's own work exceeds
        assert gate.target < own < p_long <= OWN_WORK_TIMES * own
        with pytest.raises(ServerBusyError, match=r"admits .* s for it"), gate.admitted(short):
            pass
        with gate.admitted(long):
            assert gate.pending == 3


def test_the_hard_cap_holds_whatever_the_pace(offloaded: OffloadedEmbedder) -> None:
    gate = Admission(2, None, offloaded)
    third = gate.admitted(10)
    with gate.admitted(10), gate.admitted(10), pytest.raises(ServerBusyError, match="2 writes in progress"), third:
        pass
    with gate.admitted(10):  # the permits came back
        assert gate.pending == 1
    with pytest.raises(ValueError):
        Admission(0)
    with pytest.raises(ValueError):
        Admission(1, 0.0)


def test_the_ratio_of_text_embedded_to_text_sent_is_learned(offloaded: OffloadedEmbedder) -> None:
    gate = Admission(1, 10.0, offloaded)
    sent = text_chars(LINES)
    assert gate.ratio is None  # nothing measured: the writes ahead are counted at FIRST_RATIO
    with gate.admitted(sent):
        offloaded.embed(LINES)
        offloaded.embed(LINES)  # this write embeds its text twice
    assert gate.ratio == pytest.approx(2.0)  # the first write measured sets it
    with gate.admitted(sent):
        offloaded.embed(LINES[:20])  # about half
    assert gate.ratio is not None and 0.5 < gate.ratio < 2.0


def test_the_rest_of_a_write_is_measured_and_predicted(offloaded: OffloadedEmbedder) -> None:
    """What a write takes besides waiting for its vectors (here a pause standing for its transaction) is
    measured without the wait, and added to the prediction: the target is its acknowledgement."""
    measured(offloaded)
    gate = Admission(8, 10.0, offloaded)
    texts = [f"{line} (copy {n})" for n in range(10) for line in LINES]
    with gate.admitted(text_chars(texts)):
        offloaded.embed(texts)  # its vectors: waited for, not counted in the rest
        time.sleep(0.3)  # the rest of the write
    assert gate.rest is not None and gate.ratio is not None
    assert 0.3 <= gate.rest < 0.45
    predicted, wait = gate.predicted(1000), offloaded.backlog(int(1000 * gate.ratio))
    assert predicted is not None and wait is not None
    assert predicted - wait == pytest.approx(gate.rest, abs=0.02)


def test_the_server_refuses_a_write_it_predicts_late_and_stores_nothing(tmp_path: Path) -> None:
    """Through HTTP: with a long write in progress on the one embedding process, a short one predicted past
    ``write_target`` (waiting for the long one) gets 503 with Retry-After and stores nothing; the same
    write sent once the first is done is stored."""
    keys = tmp_path / "keys.json"
    key = KeyFile(str(keys)).add_key("acme")
    app = create_app(ServerConfig(str(tmp_path / "m.db"), str(keys), write_target=1e-6, embed_processes=1))
    turns = [{"speaker": "Ana", "text": line} for line in LINES]
    with TestClient(app, headers={"Authorization": f"Bearer {key}"}) as client:
        assert client.post("/v1/histories/h/sessions", json={"session_id": "s0", "turns": turns}).status_code == 200
        long = [{"speaker": "Ana", "text": f"{line} (long session)"} for line in LINES * 20]
        done, first = threading.Event(), []

        def write() -> None:
            first.append(client.post("/v1/histories/h/sessions", json={"session_id": "long", "turns": long}))
            done.set()

        threading.Thread(target=write).start()
        admission = app.state.admission
        while admission.pending == 0 and not done.is_set():
            done.wait(0.001)
        r = client.post("/v1/histories/o/sessions", json={"session_id": "x", "turns": turns})
        done.wait(300)
        assert first[0].status_code == 200
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        assert "would be acknowledged in about" in r.json()["error"]["message"]
        assert client.get("/v1/histories/o/notes").status_code == 404
        assert client.post("/v1/histories/o/sessions", json={"session_id": "x", "turns": turns}).status_code == 200


def test_with_two_processes_writes_admitted_together_are_embedded_side_by_side() -> None:
    """``embed_processes=2``: each of two writes in flight has a process of its own (both do the work, the
    vectors are the local embedder's), and the prediction for a third counts the process that is free."""
    others = set(multiprocessing.active_children())
    emb = OffloadedEmbedder(processes=2)
    try:
        measured(emb)
        children = [c.pid for c in set(multiprocessing.active_children()) - others if c.pid is not None]
        assert len(children) == 2  # each started with the pool, its model loaded

        before = {pid: cpu_ticks(pid) for pid in children}
        texts = {w: [f"{line} (write {w}, copy {n})" for n in range(60) for line in LINES] for w in ("a", "b")}
        out: dict[str, object] = {}
        assert emb.backlog(0) == 0  # nothing in flight: nothing ahead

        def write(w: str) -> None:
            with writing():
                out[w] = emb.embed(texts[w])

        first = threading.Thread(target=write, args=("a",))
        first.start()
        deadline = time.monotonic() + 60
        while emb.jobs_in_flight < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        one_in_flight = emb.backlog(0), emb.backlog(1000)
        second = threading.Thread(target=write, args=("b",))
        second.start()
        while emb.jobs_in_flight < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        two_in_flight = emb.backlog(0)
        first.join(600)
        second.join(600)
        assert one_in_flight[0] == 0 and one_in_flight[1] is not None and one_in_flight[1] > 0  # a process free
        assert two_in_flight is not None and two_in_flight > 0  # both busy: the next job waits for one
        local = default_embedder()
        for w in ("a", "b"):
            vectors = out[w]
            assert isinstance(vectors, np.ndarray) and vectors.shape == (len(texts[w]), local.dim)
            assert np.allclose(vectors[:3], local.embed(texts[w][:3]), atol=1e-5)
        assert all(cpu_ticks(pid) > before[pid] + 50 for pid in children)  # both processes did the work
    finally:
        emb.close()
    with pytest.raises(ValueError, match="at least 1"):
        OffloadedEmbedder(processes=0)
