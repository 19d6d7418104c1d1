import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import flexamem as fm
from flexamem.store.base import LLMCall, MergedRecord
from flexamem.store.sqlite import SCHEMA_VERSION, SQLiteStore


def test_notes_round_trip_through_the_file(demo_mem: fm.Memory) -> None:
    before = demo_mem.notes()
    path = demo_mem.store.path  # type: ignore[attr-defined]
    demo_mem.close()
    again = fm.Memory(path)
    after = again.notes()
    assert [n.unit_id for n in after] == [n.unit_id for n in before]
    for a, b in zip(before, after, strict=True):
        assert (a.raw, a.record, a.fields, a.pieces, a.blocks, a.links) == (
            b.raw,
            b.record,
            b.fields,
            b.pieces,
            b.blocks,
            b.links,
        )
        assert np.array_equal(a.embedding, b.embedding)
        assert (a.raw_tokens, a.record_tokens, a.fields_tokens) == (b.raw_tokens, b.record_tokens, b.fields_tokens)
    assert again.history.pieces_count == sum(len(n.pieces) for n in after)


def test_raw_text_and_records_are_write_once_even_through_sql(demo_mem: fm.Memory) -> None:
    store = demo_mem.store
    assert isinstance(store, SQLiteStore)
    for sql in (
        "UPDATE notes SET raw = 'changed'",
        "UPDATE notes SET record = 'changed'",
        "DELETE FROM notes",
        "UPDATE pieces SET tokens = 0",
        "DELETE FROM links",
    ):
        with pytest.raises(fm.WriteOnceError), store._write() as db:
            db.execute(sql)
    assert fm.Memory(store.path).notes()[0].raw.startswith("Ana: I finally booked")


def test_duplicate_unit_is_a_clear_error_and_adds_nothing(demo_mem: fm.Memory) -> None:
    n = len(demo_mem)
    with pytest.raises(fm.DuplicateUnitError, match="s1"):
        demo_mem.add_session([{"speaker": "A", "text": "again"}], session_id="s1")
    assert len(demo_mem) == n
    # the store refuses it too, even when the in-memory check is bypassed
    note = demo_mem.notes()[0]
    import dataclasses

    with pytest.raises(fm.DuplicateUnitError):
        demo_mem.store.append_notes("default", [dataclasses.replace(note, seq=99)], [])
    assert len(fm.Memory(demo_mem.store.path).notes()) == n  # type: ignore[attr-defined]


def test_a_failing_batch_lands_nothing(tmp_path: Path) -> None:
    mem = fm.Memory(tmp_path / "m.db")
    mem.add_session([{"speaker": "A", "text": "first"}], session_id="a")
    good, bad = mem.notes()[0], mem.notes()[0]
    good = type(good)(**{**good.__dict__, "seq": 1, "unit_id": "b"})
    bad = type(bad)(**{**bad.__dict__, "seq": 2, "unit_id": "a"})  # duplicate id: the whole batch must fail
    with pytest.raises(fm.DuplicateUnitError):
        mem.store.append_notes("default", [good, bad], [(1, 0)])
    assert [n.unit_id for n in fm.Memory(tmp_path / "m.db").notes()] == ["a"]


def test_closed_and_read_only(tmp_path: Path, demo_mem: fm.Memory) -> None:
    path = demo_mem.store.path  # type: ignore[attr-defined]
    demo_mem.close()
    with pytest.raises(fm.StoreClosedError):
        demo_mem.store.load_notes("default")
    ro = fm.Memory(path, read_only=True)
    assert len(ro.notes()) == 3
    with pytest.raises(fm.ReadOnlyStoreError):
        ro.add_session([{"speaker": "A", "text": "new"}], session_id="s9")
    assert len(fm.Memory(path, read_only=True).notes()) == 3
    with pytest.raises(fm.StoreError):
        SQLiteStore(tmp_path / "missing.db", read_only=True)


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "new.db")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(fm.StoreError, match="newer"):
        SQLiteStore(tmp_path / "new.db")


def test_not_a_database(tmp_path: Path) -> None:
    (tmp_path / "junk.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(fm.StoreError):
        SQLiteStore(tmp_path / "junk.db")


def test_caches_accounting_and_state() -> None:
    s = SQLiteStore()
    s.ensure_history("h", "agent", {"task": "t"})
    assert s.ensure_history("h", "agent") == {"task": "t"}
    with pytest.raises(fm.StoreError, match="agent history"):
        s.ensure_history("h", "conversation")
    m = MergedRecord(0, 3, 1, "merged text", 3, "rule")
    s.put_merged("h", m)
    s.put_merged("h", MergedRecord(0, 3, 1, "other", 1, "rule"))  # first write wins
    assert s.load_merged("h") == [m]
    s.record_llm_call("h", LLMCall("record", "m", 100, 20, seq=0))
    assert s.llm_calls("h") == [LLMCall("record", "m", 100, 20, 0, False)]
    s.set_state("h", "window", [1, 2])
    s.set_state("h", "window", [3])
    assert s.get_state("h", "window") == [3] and s.get_state("h", "nope") is None
    assert s.histories() == [("h", "agent")]


def test_a_version_1_database_is_migrated_in_place(tmp_path: Path) -> None:
    from flexamem.store.schema import MIGRATIONS
    from flexamem.store.sqlite import split_sql

    path = tmp_path / "v1.db"
    db = sqlite3.connect(path)
    for statement in split_sql(MIGRATIONS[0].sqlite):
        db.execute(statement)
    db.execute("INSERT INTO histories VALUES ('h', 'conversation', '{}', 0)")
    db.execute("INSERT INTO merged VALUES ('h', 0, 3, 1, 'old merged text', 3, 'rule', 0)")
    db.execute("INSERT INTO histories VALUES ('agent:a', 'agent', '{\"task\": \"t\", \"budget\": 900}', 0)")
    for i in range(2):  # agent steps lived in the mutable state table until schema 3
        data = json.dumps({"action": f"a{i}", "observation": "o", "actor": "assistant", "messages": []})
        db.execute("INSERT INTO state VALUES ('agent:a', ?, ?)", (f"step:{i}", data))
    db.execute("INSERT INTO state VALUES ('agent:a', 'steps', '2')")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    s = SQLiteStore(path)
    assert s.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 10
    assert s.load_merged("h") == [MergedRecord(0, 3, 1, "old merged text", 3, "rule", False)]
    # schema 1 named a session agent:<id> whatever memory started it; the store's one history's did (issue 48)
    assert [(r.n, json.loads(r.data)["action"]) for r in s.load_steps("h/agent:a")] == [(0, "a0"), (1, "a1")]
    assert s.get_state("h/agent:a", "steps") is None  # moved, not copied
    assert s.sessions("h") == ["h/agent:a"] and s.sessions("default") == []  # v6 names each session's history
    with pytest.raises(fm.WriteOnceError), s._write() as db:
        db.execute("UPDATE steps SET data = 'x'")
    with pytest.raises(fm.WriteOnceError), s._write() as db:
        db.execute("UPDATE histories SET meta = '{}'")
    with pytest.raises(fm.WriteOnceError), s._write() as db:
        db.execute("UPDATE merged SET text = 'x'")
