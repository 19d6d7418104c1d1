"""Integrity to the last byte (issue 29): a drop deletes only what it names, verify() covers every row a
render or a context can show, and a render refuses a row verify() would flag. On SQLite and on a real
PostgreSQL server (``store_path``), tampering past the triggers as an administrator could."""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import flexamem as fm
from flexamem.store.schema import MIGRATIONS
from flexamem.store.sqlite import split_sql
from tests.conftest import NO_POSTGRES

from .test_contract import raw_sql, sessions

# what stores written before schema v6 could hold: a conversation history under an agent-like name
LEGACY = [
    ("ana", "conversation", None),
    ("ana/agent:diary", "conversation", None),  # the reproducer: fm.Memory(db, history="ana/agent:diary")
    ("ana/agent:s1", "agent", "ana"),
    ("ana/agent:diary/agent:s2", "agent", "ana/agent:diary"),
    ("anab/agent:s3", "agent", "anab"),  # an agent-only history whose name starts like "ana"
    ("agent:x", "conversation", None),  # under the default history's prefix
    ("agent:d1", "agent", "default"),
]


def tamper(path: str, table: str, sql: str) -> None:
    """Change a row past the write-once triggers (an administrator who can drop them)."""
    if path.startswith("postgresql://"):
        raw_sql(path, f"ALTER TABLE {table} DISABLE TRIGGER {table}_write_once; {sql};"
                      f" ALTER TABLE {table} ENABLE TRIGGER {table}_write_once")  # fmt: skip
        return
    db = sqlite3.connect(path)
    try:
        db.execute(f"DROP TRIGGER IF EXISTS {table}_no_update")
        db.execute(f"DROP TRIGGER IF EXISTS {'histories_meta_fixed' if table == 'histories' else table + '_x'}")
        db.execute(f"DROP TRIGGER IF EXISTS {table}_no_delete")
        db.execute(sql)
        db.commit()
    finally:
        db.close()


@contextmanager
def v5_store(kind: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """An empty database at schema v5 (before agent sessions named their history): ``(url, placeholder)``."""
    if kind == "sqlite":
        path = str(tmp_path / "v5.db")
        db = sqlite3.connect(path)
        for m in MIGRATIONS[:5]:
            for statement in split_sql(m.sqlite):
                db.execute(statement)
        db.execute("PRAGMA user_version = 5")
        db.commit()
        db.close()
        yield path, "?"
        return
    import psycopg

    url = os.environ["FLEXAMEM_TEST_POSTGRES"]  # the postgres case is marked NO_POSTGRES
    name = f"v5_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    db_url = url.rsplit("/", 1)[0] + "/" + name
    try:
        with psycopg.connect(db_url, autocommit=True) as conn:
            for m in MIGRATIONS[:5]:
                if m.postgres:
                    conn.execute(m.postgres)
            conn.execute("CREATE TABLE flexamem_migrations (version INTEGER NOT NULL)")
            conn.execute("INSERT INTO flexamem_migrations VALUES (5)")
        yield db_url, "%s"
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def insert_rows(url: str, mark: str, rows: list[tuple[str, str, str]]) -> None:
    sql = f"INSERT INTO histories (id, kind, meta, created_at, epoch) VALUES ({mark}, {mark}, {mark}, 0, '')"
    if url.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            for row in rows:
                conn.execute(sql, row)
        return
    db = sqlite3.connect(url)
    db.executemany(sql, rows)
    db.commit()
    db.close()


@pytest.mark.faults
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=NO_POSTGRES)])
def test_a_store_written_before_v6_keeps_every_history_a_drop_does_not_name(backend: str, tmp_path: Path) -> None:
    with v5_store(backend, tmp_path) as (url, mark):
        meta = '{"task": "t", "budget": 900}'
        insert_rows(url, mark, [(h, kind, meta if kind == "agent" else "{}") for h, kind, _ in LEGACY])
        store = fm.Memory(url).store  # migrates to v6: each session's history is backfilled
        for parent in ("ana", "ana/agent:diary", "anab", "default"):
            assert store.sessions(parent) == [h for h, _, p in LEGACY if p == parent], parent
        assert fm.Memory(url, history="ana").sessions() == ["s1"]
        diary = fm.Memory(url, history="ana/agent:diary")  # a legacy name still opens, reads and writes
        diary.add_session([{"speaker": "A", "text": "my diary holds the code 4417"}], session_id="d")
        assert diary.sessions() == ["s2"]
        assert fm.Memory(url, history="ana").drop() is True
        left = {h for h, _ in store.histories()}
        assert left == {"ana/agent:diary", "ana/agent:diary/agent:s2", "anab/agent:s3", "agent:x", "agent:d1"}
        assert "4417" in fm.Memory(url, history="ana/agent:diary").render("the code", budget=500).text
        assert fm.Memory(url).drop() is True  # the default history's sessions go, "agent:x" stays
        assert {h for h, _ in store.histories()} == left - {"agent:d1"}
        assert fm.Memory(url, history="anab").drop() is True and fm.Memory(url, history="ana").drop() is False
        assert {h for h, _ in store.histories()} == {"ana/agent:diary", "ana/agent:diary/agent:s2", "agent:x"}
        store.close()


@pytest.mark.faults
def test_names_cannot_collide_and_a_drop_deletes_only_its_own(store_path: str, tenant: str) -> None:
    say = [{"speaker": "A", "text": "x"}]
    for name in (f"{tenant}/agent:diary", "agent:diary", f"agent:{tenant}"):
        with pytest.raises(fm.InvalidInputError, match="agent:"):
            fm.Memory(store_path, history=name)
    mem, alike = fm.Memory(store_path, history=tenant), fm.Memory(store_path, history=f"{tenant}/agent")
    mem.add_session(say, session_id="a")
    alike.add_session(say, session_id="b")  # "<t>/agent" without the colon is an ordinary name
    mem.agent(task="t", budget=900, session_id="s1").step(action="a", observation="o")
    other = fm.Memory(store_path, history=f"{tenant}x")
    other.agent(task="t", budget=900, session_id="s1")
    assert mem.drop_session("nope") is False
    assert alike.drop_session("s1") is False  # not its session: nothing goes
    assert mem.drop() is True
    assert mem.sessions() == [] and other.sessions() == ["s1"] and len(alike) == 1
    assert fm.Memory(store_path, history=tenant).notes() == []


@pytest.mark.faults
def test_verify_names_every_tampered_row_and_renders_refuse_it(store_path: str, tenant: str) -> None:
    mem = fm.Memory(store_path, history=tenant)
    sessions(mem, 40)
    agent = mem.agent(task="find the parcel", budget=900, session_id="s")
    for i in range(3):
        agent.step(action=f"look {i}", observation=f"depot {i}")
    assert mem.render("parcel 7", budget=150, mode="units").merges_written > 0
    assert mem.verify() == []
    first = fm.Memory(store_path, history=tenant).store.load_merged(tenant)[0]

    # 1. one byte of a merged record's text (the reproducer)
    flipped = ("Y" if first.text[0] != "Y" else "Z") + first.text[1:]
    where = f"history_id = '{tenant}' AND first_seq = {first.first} AND last_seq = {first.last}"
    tamper(store_path, "merged", f"UPDATE merged SET text = '{flipped}' WHERE {where} AND level = {first.level}")
    problems = fm.Memory(store_path, history=tenant).verify()
    assert len(problems) == 1 and f"merged record of notes {first.first}..{first.last}" in problems[0]
    for mode in ("pieces", "units"):
        with pytest.raises(fm.StoreCorruptError, match="merged record"):
            fm.Memory(store_path, history=tenant).render("parcel 7", budget=150, mode=mode)

    # 2. a piece's bounds (what pieces mode shows of a raw text), 3. a link, 4. a step, 5. the task
    tamper(store_path, "pieces", f"UPDATE pieces SET start = start + 1 WHERE history_id = '{tenant}' AND seq = 3")
    tamper(store_path, "links", f"INSERT INTO links (history_id, src, dst) VALUES ('{tenant}', 0, 39)")
    tamper(
        store_path,
        "steps",
        f"UPDATE steps SET data = replace(data, 'depot 1', 'depot 9') WHERE history_id = '{tenant}/agent:s'",
    )
    tamper(
        store_path,
        "histories",
        f"UPDATE histories SET meta = replace(meta, 'parcel', 'bike') WHERE id = '{tenant}/agent:s'",
    )
    problems = fm.Memory(store_path, history=tenant).verify()
    assert any("note 3 " in p and "digest" in p for p in problems), problems
    assert any("link 0 -> 39" in p for p in problems), problems
    assert any("step 1 of" in p for p in problems), problems
    assert any(f"history '{tenant}/agent:s'" in p for p in problems), problems
    assert len(problems) == 5, problems
    with pytest.raises(fm.StoreCorruptError, match="note 3"):
        fm.Memory(store_path, history=tenant).render("parcel 3", budget=4000)
    with pytest.raises(fm.StoreCorruptError):
        fm.Memory(store_path, history=tenant).agent(session_id="s")
    assert fm.Memory(store_path, history=tenant).drop() is True  # a damaged history can still be deleted
    assert fm.Memory(store_path, history=tenant).verify() == []
