"""A write's request id: a retried write stores nothing more and answers what the first stored."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

import flexamem as fm


def test_a_write_repeated_with_its_request_id_is_stored_once(tmp_path: Path) -> None:
    mem = fm.Memory(str(tmp_path / "m.db"))
    turns = [{"speaker": "Ana", "text": "I moved to Lisbon."}]
    first = mem.add_session(turns, request_id="r1")  # library-named: a plain retry would make s2
    assert mem.add_session(turns, request_id="r1") == first == ["s1"]
    assert mem.add_session(turns, session_id="x", request_id="r2") == mem.add_session(
        turns, session_id="x", request_id="r2"
    )  # a named session's retry is not a DuplicateUnitError
    assert asyncio.run(mem.aadd_session(turns, request_id="r1")) == first
    msgs = [{"role": "user", "content": "hi"}]
    assert mem.add_messages(msgs, request_id="r3") == mem.add_messages(msgs, request_id="r3")
    assert len(mem) == 3
    other = fm.Memory(str(tmp_path / "m.db"))  # another process's view of the store knows it too
    assert other.add_session(turns, request_id="r1") == first and len(other) == 3
    assert mem.add_session(turns) not in (first, ["x"])  # no request id: a new session
    assert len(mem) == 4


def test_a_batch_retried_after_a_failure_half_way_stores_only_the_rest(tmp_path: Path) -> None:
    mem = fm.Memory(str(tmp_path / "m.db"))
    sessions = [
        {"turns": [{"speaker": "Ana", "text": "one"}], "session_id": "a"},
        {"turns": [{"speaker": "Ana", "text": "two"}]},
    ]
    mem.add_sessions(sessions[:1], request_id="b")  # as if the first of the batch landed before a crash
    out = mem.add_sessions(sessions, request_id="b")
    assert out[0] == ["a"] and len(out[1]) == 1
    assert mem.add_sessions(sessions, request_id="b") == out
    assert [n.raw for n in mem.notes()] == ["Ana: one", "Ana: two"]


def test_racing_writers_with_one_request_id_store_it_once(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    fm.Memory(db).add_session([{"speaker": "Ana", "text": "start"}])
    answers: list[list[str]] = []

    def write() -> None:
        answers.append(fm.Memory(db).add_session([{"speaker": "Bo", "text": "once"}], request_id="same"))

    threads = [threading.Thread(target=write) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(answers) == 4 and all(a == answers[0] for a in answers)
    assert [n.raw for n in fm.Memory(db).notes()] == ["Ana: start", "Bo: once"]


def test_a_request_stored_between_catch_up_and_its_lookup_is_answered(tmp_path: Path) -> None:
    """The race CI once hit: another writer commits the same request after this view caught up."""
    db = str(tmp_path / "m.db")
    mem = fm.Memory(db)
    mem.add_session([{"speaker": "Ana", "text": "start"}])
    store = mem.core.store
    lookup = store.written_by
    raced: list[list[str]] = []

    def written_by(history: str, request_id: str) -> list[str] | None:
        if not raced:  # the other writer lands just after our catch-up, before our lookup
            raced.append(fm.Memory(db).add_session([{"speaker": "Bo", "text": "once"}], request_id=request_id))
        return lookup(history, request_id)

    store.written_by = written_by  # type: ignore[method-assign]
    assert mem.add_session([{"speaker": "Bo", "text": "once"}], request_id="same") == raced[0] == ["s2"]
    assert [n.raw for n in mem.notes()] == ["Ana: start", "Bo: once"]


@pytest.mark.parametrize("bad", ["", "   ", "x" * 201, 7])
def test_a_bad_request_id_is_refused_before_anything_is_stored(bad: object) -> None:
    mem = fm.Memory()
    with pytest.raises(fm.InvalidInputError, match="request_id"):
        mem.add_session([{"speaker": "Ana", "text": "hi"}], request_id=bad)  # type: ignore[arg-type]
    assert len(mem) == 0
