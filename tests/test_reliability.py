"""Many objects, threads and processes on one store: one consistent truth (the reliability issue's reproducers)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import flexamem as fm

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "stores"


def turn(text: str, speaker: str = "A") -> list[dict[str, str]]:
    return [{"speaker": speaker, "text": text}]


def test_a_second_memory_on_one_file_sees_and_extends_the_first(tmp_path: Path) -> None:
    path = tmp_path / "two.db"
    a, b = fm.Memory(path), fm.Memory(path)
    a.add_session(turn("seed"), session_id="seed")
    assert len(b) == 1
    a.add_session(turn("the zebra code is 7919"), session_id="a1")
    assert "zebra code is 7919" in b.render("zebra code", budget=4096).text  # b catches up before rendering
    assert b.add_session(turn("hello", "B"), session_id="b1") == ["b1"]  # b numbers after a's notes
    assert a.add_session(turn("and again"), session_id="a2") == ["a2"]
    for m in (a, b, fm.Memory(path)):
        notes = m.notes()
        assert [n.seq for n in notes] == [0, 1, 2, 3]
        assert [n.unit_id for n in notes] == ["seed", "a1", "b1", "a2"]
        assert all(0 <= t < len(notes) for n in notes for t in n.links)


def test_library_named_sessions_never_collide_with_the_callers(tmp_path: Path) -> None:
    path = tmp_path / "names.db"
    a, b = fm.Memory(path), fm.Memory(path)
    a.add_session(turn("one"), session_id="s2")
    assert a.add_session(turn("two")) == ["s3"]  # s1 would be the count's name ... s2 is the caller's: skip both
    assert b.add_session(turn("three")) == ["s4"]  # b has not seen s3 yet: it catches up when it writes
    assert a.add_session(turn("four")) == ["s5"]
    assert sorted(n.unit_id for n in fm.Memory(path).notes()) == ["s2", "s3", "s4", "s5"]


def many_sessions(mem: fm.Memory, count: int) -> None:
    for i in range(count):
        mem.add_session(
            [{"speaker": "Ana", "text": f"Session {i}: the parcel {i} went to depot {i % 7} on a grey morning."}] * 3,
            session_id=f"x{i}",
        )


def test_a_read_only_reader_renders_when_merges_are_needed(tmp_path: Path) -> None:
    path = tmp_path / "ro.db"
    many_sessions(fm.Memory(path), 60)
    before = path.read_bytes()
    reader = fm.Memory(path, read_only=True)
    r = reader.render("where did parcel 7 go?", budget=2048, mode="units")
    assert r.tokens <= r.allowance and "· merged]" in r.text  # merged records made in memory, by rule
    assert all(v.resolution != "hidden" for v in r.shown)
    assert reader.render("parcel 7 depot", budget=2048).tokens <= 2048
    with pytest.raises(fm.ReadOnlyStoreError):
        reader.add_session(turn("no"), session_id="no")
    assert path.read_bytes() == before  # nothing written by the reader


def test_merged_records_are_stored_once_and_shared(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    many_sessions(fm.Memory(path), 60)
    a, b = fm.Memory(path), fm.Memory(path)
    ra = a.render("parcel 7", budget=2048, mode="units")
    rb = b.render("parcel 7", budget=2048, mode="units")
    assert ra.text == rb.text and ra.merges_written > 0 and rb.merges_written == 0
    db = sqlite3.connect(path)
    rows = db.execute("SELECT first_seq, last_seq, level, COUNT(*) FROM merged GROUP BY 1, 2, 3").fetchall()
    assert rows and all(r[3] == 1 for r in rows)


def test_agent_sessions_belong_to_their_history(tmp_path: Path) -> None:
    path = tmp_path / "tenants.db"
    alice, bob = fm.Memory(path, history="alice"), fm.Memory(path, history="bob")
    session = alice.agent(task="Alice's task", budget=2048, session_id="team-1")
    session.step(action="look", observation="found the key")
    with pytest.raises(fm.InvalidInputError, match="no stored agent session"):
        bob.agent(session_id="team-1")
    mine = bob.agent(task="Bob's task", budget=2048, session_id="team-1")  # Bob's own, separate session
    assert mine.task == "Bob's task" and mine.steps == []
    assert fm.Memory(path, history="alice").agent(session_id="team-1").steps[0].observation == "found the key"
    histories = dict(fm.Memory(path).store.histories())
    assert "alice/agent:team-1" in histories and "bob/agent:team-1" in histories


def test_agent_steps_are_idempotent_by_step_id(tmp_path: Path) -> None:
    path = tmp_path / "steps.db"
    agent = fm.Memory(path).agent(task="t", budget=1024, session_id="s")
    assert agent.step(action="a", observation="o", step_id="call-1") == 1
    assert agent.step(action="a", observation="o", step_id="call-1") == 1  # a retry records nothing
    assert agent.step(action="b", observation="p", step_id="call-2") == 2
    again = fm.Memory(path).agent(session_id="s")
    assert again.step(action="a", observation="o", step_id="call-1") == 1  # known after a restart too
    assert len(again.steps) == 2
    with pytest.raises(fm.InvalidInputError, match="another action"):
        again.step(action="changed", observation="o", step_id="call-1")


def test_a_step_id_replayed_with_other_messages_or_actor_is_refused(tmp_path: Path) -> None:
    """A step id names one step: a replay that differs in anything the step stores (its messages, its
    actor, not only its action or observation) is RequestConflictError and stores nothing; an exact
    replay returns the step's number, in the process that recorded it and after a restart."""
    path = tmp_path / "replay.db"
    m1 = [{"role": "assistant", "content": "get_order W4417"}, {"role": "user", "content": "shipped"}]
    m2 = [{"role": "assistant", "content": "cancel_order W4417"}, {"role": "user", "content": "cancelled"}]
    agent = fm.Memory(path).agent(task="t", budget=1024, session_id="s")
    assert agent.step(action="act", observation="obs", messages=m1, step_id="s1") == 1
    assert agent.step(action="act2", observation="o", step_id="s2") == 2  # default messages, default actor
    for session in (agent, fm.Memory(path).agent(session_id="s")):
        assert session.step(action="act", observation="obs", messages=m1, step_id="s1") == 1
        assert session.step(action="act2", observation="o", step_id="s2") == 2
        # the defaults given explicitly are the same step
        same = [{"role": "assistant", "content": "act2"}, {"role": "user", "content": "o"}]
        assert session.step(action="act2", observation="o", messages=same, step_id="s2", actor="assistant") == 2
        refused = [
            ("s1", {"messages": m2}, "other messages"),
            ("s1", {"messages": None}, "other messages"),  # the defaults are not m1
            ("s1", {"messages": m1, "actor": "planner"}, "another actor"),
            ("s2", {"messages": m2}, "other messages"),
            ("s2", {"actor": "planner"}, "another actor"),
            ("s1", {"messages": m1, "observation": "obs!"}, "another observation"),
        ]
        for step_id, change, what in refused:
            args: dict[str, Any] = {"action": "act" if step_id == "s1" else "act2",
                                    "observation": "obs" if step_id == "s1" else "o", **change}  # fmt: skip
            with pytest.raises(fm.RequestConflictError, match=what):
                session.step(**args, step_id=step_id)
        assert len(session.steps) == 2 and session.steps[0].actor == "assistant"
        assert session.context().messages[-4:-2] == m1  # the stored messages, not a replay's
    stored = fm.Memory(path).agent(session_id="s")
    assert len(stored.steps) == 2 and "cancel" not in json.dumps(stored.context().messages)


def test_a_failed_step_stores_nothing_and_leaves_the_session_usable(tmp_path: Path) -> None:
    mem = fm.Memory(tmp_path / "f.db")
    agent = mem.agent(task="t", budget=600, session_id="s")
    for i in range(12):
        agent.step(action=f"call {i}", observation=f"result {i} " * 40)
    stored = len(mem.store.load_steps(agent.core.history_id))
    for bad in ({"action": "a", "messages": "text"}, {"action": "a", "messages": [{"content": "x"}]}):
        with pytest.raises(fm.InvalidInputError):
            agent.step(**bad)  # type: ignore[arg-type]
    assert len(mem.store.load_steps(agent.core.history_id)) == stored == len(agent.steps)
    assert agent.context().tokens <= agent.context().ceiling


def test_a_second_driver_of_one_session_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "d.db"
    one = fm.Memory(path).agent(task="t", budget=1024, session_id="s")
    two = fm.Memory(path).agent(session_id="s")
    one.step(action="first", observation="ok")
    with pytest.raises(fm.StoreError):
        two.step(action="other", observation="ok")  # its view is one step behind: nothing of it is stored
    assert [s.action for s in fm.Memory(path).agent(session_id="s").steps] == ["first"]


def test_steps_stored_before_their_unit_resume_consistently(tmp_path: Path) -> None:
    """A crash in an older version after a step was saved but before its unit was written: its store
    (schema 5, e233e51, steps without digests) holds steps past the session's last unit."""
    path = tmp_path / "c.db"
    shutil.copy(FIXTURES / "v5-e233e51.db", path)
    db = sqlite3.connect(path)  # the state a crash between the two writes left: steps without units
    (steps,) = db.execute("SELECT COUNT(*) FROM steps WHERE history_id = 'conv/agent:a1'").fetchone()
    (written,) = db.execute("SELECT COUNT(*) FROM notes WHERE history_id = 'conv/agent:a1'").fetchone()
    data = json.dumps({"action": "late", "observation": "x " * 400, "actor": "assistant", "messages": []})
    db.execute("INSERT INTO steps (history_id, n, data) VALUES ('conv/agent:a1', ?, ?)", (steps, data))
    db.execute(
        "INSERT INTO steps (history_id, n, data) VALUES ('conv/agent:a1', ?, ?)",
        (steps + 1, data.replace("late", "later")),
    )
    db.commit()
    db.close()
    again = fm.Memory(path, history="conv").agent(session_id="a1")
    assert [s.action for s in again.steps][-2:] == ["late", "later"]
    assert len(again.core.history) > written  # the missing units are written on resume
    ctx = again.context()
    assert ctx.tokens <= ctx.ceiling and not ctx.pass_through
    assert fm.Memory(path, history="conv").verify() == []


def test_drop_deletes_a_whole_history_and_its_sessions_only(tmp_path: Path) -> None:
    path = tmp_path / "drop.db"
    alice, bob = fm.Memory(path, history="alice"), fm.Memory(path, history="bob")
    many_sessions(alice, 3)
    many_sessions(bob, 2)
    alice.agent(task="t", budget=1024, session_id="x").step(action="a", observation="o")
    alice.render("parcel", budget=300, mode="units")
    assert alice.drop() is True
    assert len(alice) == 0 and len(fm.Memory(path, history="alice")) == 0
    assert [h for h, _ in fm.Memory(path).store.histories()] == ["bob"]
    assert len(bob) == 2
    assert alice.drop() is False
    alice.add_session(turn("a new start"), session_id="n1")  # the history can be written again
    db = sqlite3.connect(path)
    with pytest.raises(sqlite3.DatabaseError, match="write-once"):
        db.execute("DELETE FROM notes WHERE history_id = 'bob'")  # deletion stays refused otherwise


def test_a_failed_first_write_leaves_no_empty_history(tmp_path: Path) -> None:
    class Failing(fm.RuleWriter):
        def write_records(self, drafts, progress=None):  # type: ignore[no-untyped-def]
            raise fm.LLMError("the model is down")

    path = tmp_path / "e.db"
    mem = fm.Memory(path, history="new", writer=Failing())
    with pytest.raises(fm.LLMError):
        mem.add_session(turn("hello"), session_id="h1")
    with pytest.raises(fm.InvalidInputError):
        mem.add_session([{"speaker": "A", "text": "ok"}, {"speaker": "B", "text": "\ud800"}])
    assert fm.Memory(path).store.histories() == []
    assert mem.render("hello", budget=500).text == ""


def test_verify_detects_a_change_made_past_the_triggers(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    mem = fm.Memory(path)
    many_sessions(mem, 5)
    assert mem.verify() == []
    assert len({n.digest for n in mem.notes()}) == 5
    db = sqlite3.connect(path)  # an administrator drops the trigger and edits history
    db.execute("DROP TRIGGER notes_no_update")
    db.execute("UPDATE notes SET raw = 'Ana: nothing happened' WHERE seq = 2")
    db.commit()
    db.close()
    problems = fm.Memory(path).verify()
    assert len(problems) == 1 and "note 2 ('x2')" in problems[0]


def test_sessions_lists_only_this_historys_agents(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    alice, bob = fm.Memory(path, history="alice"), fm.Memory(path, history="bob")
    alice.agent(task="t", budget=900, session_id="a1")
    alice.agent(task="t", budget=900, session_id="a2")
    bob.agent(task="t", budget=900, session_id="b1")
    fm.Memory(path).agent(task="t", budget=900, session_id="d1")
    assert sorted(alice.sessions()) == ["a1", "a2"] and bob.sessions() == ["b1"]
    assert fm.Memory(path).sessions() == ["d1"]


def test_a_session_whose_timeline_names_an_unstored_merged_record_resumes(tmp_path: Path) -> None:
    """A full disk can keep a merged record in memory only while the session's timeline state still
    lands (it is smaller): resuming then shows those units' records instead of failing."""
    path = tmp_path / "t.db"
    agent = fm.Memory(path).agent(task="find the crate", budget=700, session_id="s")
    for i in range(30):
        agent.step(action=f"open crate {i}", observation=f"crate {i} holds item {i} " * 20)
    hid = agent.core.history_id
    agent.core.store.set_state(hid, "timeline", [[0, 3, 1]], epoch=agent.core.epoch)  # no such merged record
    again = fm.Memory(path).agent(session_id="s")
    ctx = again.context()
    assert ctx.tokens <= ctx.ceiling and not ctx.pass_through
