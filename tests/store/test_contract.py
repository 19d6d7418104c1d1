"""The store contract: the same behaviour on SQLite and on a real PostgreSQL server (``store_path``)."""

from __future__ import annotations

import os
import sqlite3
import threading
from typing import Any

import pytest

import flexamem as fm


def raw_sql(path: str, sql: str) -> None:
    """Run SQL past the library, on the backend's own connection (tampering as a user could)."""
    if path.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(path, autocommit=True) as conn:
            conn.execute(sql)
    else:
        db = sqlite3.connect(path)
        try:
            db.execute(sql)
            db.commit()
        finally:
            db.close()


def refused(path: str, sql: str) -> bool:
    try:
        raw_sql(path, sql)
    except Exception as exc:  # sqlite3 / psycopg errors: the trigger's message
        return "write-once" in str(exc)
    return False


def sessions(mem: fm.Memory, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        text = f"Session {i}: the parcel {i} went to depot {i % 7} on a grey morning."
        mem.add_session([{"speaker": "Ana", "text": text}] * 3, session_id=f"x{i}")


def test_two_memories_share_one_truth(store_path: str, tenant: str) -> None:
    a, b = fm.Memory(store_path, history=tenant), fm.Memory(store_path, history=tenant)
    a.add_session([{"speaker": "A", "text": "seed"}], session_id="seed")
    a.add_session([{"speaker": "A", "text": "the zebra code is 7919"}], session_id="a1")
    assert "7919" in b.render("zebra code", budget=4096).text
    b.add_session([{"speaker": "B", "text": "hello"}], session_id="b1")
    a.add_session([{"speaker": "A", "text": "more"}])  # a library-named session after b's write
    notes = fm.Memory(store_path, history=tenant).notes()
    assert [(n.seq, n.unit_id) for n in notes] == [(0, "seed"), (1, "a1"), (2, "b1"), (3, "s4")]
    assert all(0 <= t < 4 for n in notes for t in n.links)
    with pytest.raises(fm.DuplicateUnitError):
        b.add_session([{"speaker": "B", "text": "again"}], session_id="a1")
    assert len(fm.Memory(store_path, history=tenant)) == 4


def test_write_once_holds_even_through_raw_sql(store_path: str, tenant: str) -> None:
    mem = fm.Memory(store_path, history=tenant)
    sessions(mem, 12)
    mem.agent(task="t", budget=900, session_id="s").step(action="a", observation="o")
    mem.render("parcel", budget=300, mode="units")  # merged records to tamper with
    for table in ("notes", "pieces", "piece_vectors", "links", "merged", "steps"):  # every write-once table
        hid = f"{tenant}/agent:s" if table == "steps" else tenant
        assert refused(store_path, f"DELETE FROM {table} WHERE history_id = '{hid}'"), table
        assert refused(store_path, f"UPDATE {table} SET history_id = 'moved' WHERE history_id = '{hid}'"), table
    assert refused(store_path, f"UPDATE notes SET raw = 'changed' WHERE history_id = '{tenant}'")
    assert refused(store_path, f"DELETE FROM histories WHERE id = '{tenant}'")
    assert refused(store_path, f"UPDATE histories SET meta = '{{}}' WHERE id = '{tenant}/agent:s'")
    assert fm.Memory(store_path, history=tenant).notes()[0].raw.startswith("Ana: Session 0")


def test_merged_records_once_and_read_only_renders(store_path: str, tenant: str) -> None:
    writer = fm.Memory(store_path, history=tenant)
    sessions(writer, 40)
    a, b = fm.Memory(store_path, history=tenant), fm.Memory(store_path, history=tenant)
    ra, rb = a.render("parcel 7", budget=1500, mode="units"), b.render("parcel 7", budget=1500, mode="units")
    assert ra.text == rb.text and ra.merges_written > 0 and rb.merges_written == 0
    reader = fm.Memory(store_path, history=tenant, read_only=True)
    r = reader.render("parcel 9 depot", budget=900, mode="units")
    assert r.tokens <= r.allowance and "merged]" in r.text
    with pytest.raises(fm.ReadOnlyStoreError):
        reader.add_session([{"speaker": "A", "text": "no"}], session_id="no")


def test_merged_records_made_before_an_erasure_are_not_stored_after_it(store_path: str, tenant: str) -> None:
    """A view merges records from words it read; another process erases some of them before the view
    stores its merges. Those merges may hold the erased words, so the store keeps none of them (the
    view said how many erasures it had seen); with the count it sees now, a merge is kept."""
    from flexamem.store.base import MergedRecord

    mem = fm.Memory(store_path, history=tenant)
    sessions(mem, 6)
    seen = mem.store.history_state(tenant)[2]
    stale = MergedRecord(0, 3, 1, "Session 1: the parcel 1 went to depot 1 (merged before the erasure)", 20, "rule")
    fm.Memory(store_path, history=tenant).erase(session="x1", reason="asked to forget")
    with pytest.raises(fm.ConcurrentWriteError, match="erased"):
        mem.store.put_merged_many(tenant, [stale], erasures=seen)
    assert mem.store.load_merged(tenant) == []
    now = mem.store.history_state(tenant)[2]
    assert now == seen + 1
    fresh = MergedRecord(0, 3, 1, "Sessions 0-3 (merged after the erasure)", 9, "rule")
    assert mem.store.put_merged_many(tenant, [fresh], erasures=now) == [fresh]
    assert [m.text for m in fm.Memory(store_path, history=tenant).store.load_merged(tenant)] == [fresh.text]


def test_agent_steps_atomic_idempotent_single_driver(store_path: str, tenant: str) -> None:
    mem = fm.Memory(store_path, history=tenant)
    agent = mem.agent(task="count", budget=700, session_id="s")
    for i in range(15):
        assert agent.step(action=f"count({i})", observation="ok " * 60, step_id=f"c{i}") == i + 1
    assert agent.step(action="count(3)", observation="ok " * 60, step_id="c3") == 4  # a retry: no new step
    other = fm.Memory(store_path, history=tenant).agent(session_id="s")
    assert len(other.steps) == 15 and len(other.core.history) == len(agent.core.history) > 0
    agent.step(action="count(15)", observation="ok")
    with pytest.raises(fm.StoreError):
        other.step(action="count(x)", observation="late")  # a second driver with a stale view
    ctx = fm.Memory(store_path, history=tenant).agent(session_id="s").context()
    assert ctx.tokens <= ctx.ceiling
    with pytest.raises(fm.InvalidInputError):
        fm.Memory(store_path, history=f"{tenant}-other").agent(session_id="s")  # another tenant's


def test_drop_history_is_the_only_deletion(store_path: str, tenant: str) -> None:
    keep, gone = fm.Memory(store_path, history=f"{tenant}-keep"), fm.Memory(store_path, history=f"{tenant}-gone")
    sessions(keep, 2)
    sessions(gone, 3)
    gone.agent(task="t", budget=900, session_id="z").step(action="a", observation="o")
    gone.render("parcel", budget=300, mode="units")
    assert gone.drop() and not gone.drop()
    names = {h for h, _ in keep.store.histories() if h.startswith(tenant)}
    assert names == {f"{tenant}-keep"}
    assert len(fm.Memory(store_path, history=f"{tenant}-gone")) == 0 and len(keep) == 2


def test_threads_share_one_store_object(store_path: str, tenant: str) -> None:
    mem = fm.Memory(store_path, history=tenant)
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for i in range(4):
                mem.add_session([{"speaker": "A", "text": f"thread {k} line {i}"}], session_id=f"t{k}-{i}")
                mem.render(f"thread {k}", budget=600)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    notes: list[Any] = fm.Memory(store_path, history=tenant).notes()
    assert len(notes) == 16 and [n.seq for n in notes] == list(range(16))


@pytest.mark.skipif(not os.environ.get("FLEXAMEM_TEST_POSTGRES"), reason="needs the test PostgreSQL server")
def test_a_postgres_database_numbered_before_the_shared_list_migrates_once() -> None:
    """PostgreSQL counted its migrations apart (its v2 = the digest); the shared list translates the old
    number once and runs only what is missing."""
    import uuid

    import psycopg

    from flexamem.store.postgres import PostgresStore
    from flexamem.store.schema import MIGRATIONS, SCHEMA_VERSION

    url = os.environ["FLEXAMEM_TEST_POSTGRES"]
    name = f"legacy_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    legacy_url = url.rsplit("/", 1)[0] + "/" + name
    try:
        with psycopg.connect(legacy_url, autocommit=True) as conn:  # what the old code left: its v1 and v2
            conn.execute(MIGRATIONS[0].postgres)
            conn.execute(MIGRATIONS[3].postgres)
            conn.execute("CREATE TABLE flexamem_schema (version INTEGER NOT NULL)")
            conn.execute("INSERT INTO flexamem_schema VALUES (2)")
        store = PostgresStore(legacy_url)
        store.close()
        with psycopg.connect(legacy_url) as conn:
            assert conn.execute("SELECT version FROM flexamem_migrations").fetchone()[0] == SCHEMA_VERSION
            columns = {r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'histories'")}  # fmt: skip
            assert "epoch" in columns
        mem = fm.Memory(legacy_url, history="h")
        mem.add_session([{"speaker": "A", "text": "after the migration"}], session_id="a")
        assert [n.unit_id for n in fm.Memory(legacy_url, history="h").notes()] == ["a"]
        mem.close()
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_llm_calls_from_a_note_on_leave_out_older_notes_and_merges(store_path: str, tenant: str) -> None:
    from flexamem.notes import LLMCall

    store = fm.Memory(store_path, history=tenant).store
    store.ensure_history(tenant, "conversation")
    calls = [LLMCall("record", "m", 10, 2, seq=0), LLMCall("merge", "m", 7, 1), LLMCall("record", "m", 30, 4, seq=1)]
    calls.append(LLMCall("repair", "m", 5, 1, seq=2, cached=True))
    for call in calls:
        store.record_llm_call(tenant, call)
    assert store.llm_calls(tenant) == calls  # every call, merges included, in order
    assert store.llm_calls(tenant, start=1) == calls[2:]
    assert store.llm_calls(tenant, start=3) == []
