"""Every past schema upgrades whole (issue 48): stores written by the code of each released schema
(``tests/fixtures/stores``, made by ``scripts/make_store_fixtures.py <commit>``) open with today's code
with every history, note and raw text there, ``verify()`` clean, every agent session resumable from
the memory that started it with all its steps (and a further step), and a render.

SQLite: v1 (7229568, before agent sessions; 20d73b8, the first with them), v2 (6c61580), v3 (6c08732),
v4 (cdcb06d), v5 (e233e51), v6 (a8d242b). PostgreSQL (SQL dumps, restored into a new database): its
own numbering 1-3 (6b149de, cdcb06d, e233e51; shared v3-v5), the shared v5 (18de15e) and v6 (a8d242b).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import flexamem as fm
from flexamem.store.schema import MIGRATIONS, SCHEMA_VERSION
from flexamem.store.sqlite import SQLiteStore, split_sql
from tests.conftest import NO_POSTGRES

pytestmark = pytest.mark.faults  # make faults upgrades every past schema too

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "stores"
SQLITE = sorted(FIXTURES.glob("v*.db"))
POSTGRES = sorted(FIXTURES.glob("pg-*.sql"))


def manifest(fixture: Path) -> dict[str, Any]:
    return dict(json.loads(fixture.with_suffix(".json").read_text()))


@contextmanager
def restored(dump: Path) -> Iterator[str]:
    """A new PostgreSQL database holding ``dump`` (what the old code left), dropped afterwards."""
    import psycopg

    url = os.environ["FLEXAMEM_TEST_POSTGRES"]  # the postgres cases are marked NO_POSTGRES
    name = f"upgrade_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    db_url = url.rsplit("/", 1)[0] + "/" + name
    try:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute(dump.read_text())  # a whole script: allowed without parameters
        yield db_url
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def check_upgrade(path: str, info: dict[str, Any]) -> None:
    """Everything the fixture's JSON lists, read back (and used) through today's code."""
    mem = fm.Memory(path, history=info["history"])
    conversations = {h: v for h, v in info["histories"].items() if v["kind"] == "conversation"}
    assert set(conversations) == {info["history"]}
    for hid, written in conversations.items():
        notes = fm.Memory(path, history=hid).notes()
        assert [(n.unit_id, n.raw) for n in notes] == [(w["unit_id"], w["raw"]) for w in written["notes"]], hid
        merged = [[m.first, m.last, m.level, m.text] for m in mem.store.load_merged(hid)]
        assert merged == written["merged"], hid
        for sid, session in info["sessions"].items():
            assert [n.unit_id for n in notes if n.session_id == sid] == session["unit_ids"]
            assert {n.date for n in notes if n.session_id == sid} == {session["date"]}
    assert mem.verify() == []
    assert sorted(mem.sessions()) == sorted(info["agents"])  # each session under the memory that started it
    for sid, written in info["agents"].items():
        agent = mem.agent(session_id=sid)
        assert (agent.task, agent.budget) == (written["task"], written["budget"])
        assert [s.action for s in agent.steps] == written["actions"], sid
        stored = info["histories"][written["stored_as"]]["notes"]
        notes = agent.core.notes()
        assert [(n.unit_id, n.raw) for n in notes] == [(w["unit_id"], w["raw"]) for w in stored], sid
        merged = [[m.first, m.last, m.level, m.text] for m in mem.store.load_merged(agent.core.history_id)]
        assert merged == info["histories"][written["stored_as"]]["merged"], sid
        assert agent.step(action="check_done()", observation="done") == written["steps"] + 1
        context = agent.context()
        assert context.tokens <= context.ceiling
        assert "check_done()" in json.dumps(context.messages)
        again = fm.Memory(path, history=info["history"]).agent(session_id=sid)  # a later process resumes it
        assert [s.action for s in again.steps] == [*written["actions"], "check_done()"]
    assert mem.verify() == []
    if info["render"] is not None:
        r = mem.render(info["render"]["query"], info["render"]["budget"], mode=info["render"]["mode"])
        assert "Lisbon" in r.text and "900 euros" in r.text and r.tokens <= r.allowance
    r = mem.render("Who teaches the cello?", 300)  # today's default mode
    assert "Okafor" in r.text
    mem.add_session([{"speaker": "Ann", "text": "Miso turned two today."}], session_id="s4", date="9 May 2024")
    assert [n.unit_id for n in fm.Memory(path, history=info["history"]).notes()][-1] == "s4"
    mem.close()


@pytest.mark.parametrize("fixture", SQLITE, ids=[f.stem for f in SQLITE])
def test_a_sqlite_store_of_every_past_schema_upgrades_whole(fixture: Path, tmp_path: Path) -> None:
    info = manifest(fixture)
    path = tmp_path / fixture.name
    shutil.copyfile(fixture, path)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == info["schema"]["sqlite"]
    db.close()
    check_upgrade(str(path), info)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()


@NO_POSTGRES
@pytest.mark.parametrize("fixture", POSTGRES, ids=[f.stem for f in POSTGRES])
def test_a_postgres_store_of_every_past_schema_upgrades_whole(fixture: Path) -> None:
    with restored(fixture) as url:
        check_upgrade(url, manifest(fixture))


def test_fixtures_cover_every_released_schema() -> None:
    assert {manifest(f)["schema"]["sqlite"] for f in SQLITE} == set(range(1, SCHEMA_VERSION))
    assert {manifest(f)["schema"]["postgres"] for f in POSTGRES} == set(range(3, SCHEMA_VERSION))
    assert any(manifest(f)["agents"] for f in SQLITE if manifest(f)["schema"]["sqlite"] == 1)


# -- who owns a session stored before sessions were scoped (schemas 1 and 2: named agent:<id>) --------


def legacy_store(path: Path, conversations: list[str], sessions: list[str]) -> None:
    """A schema-v2 file: conversation histories (rows only) and agent sessions with a step, their state and
    a row in every other table a session can hold."""
    db = sqlite3.connect(path)
    for m in MIGRATIONS[:2]:
        for statement in split_sql(m.sqlite):
            db.execute(statement)
    for h in conversations:
        db.execute("INSERT INTO histories VALUES (?, 'conversation', '{}', 0)", (h,))
    for sid in sessions:
        db.execute("INSERT INTO histories VALUES (?, 'agent', ?, 1)", (f"agent:{sid}", '{"task": "t", "budget": 900}'))
        step = {"action": f"act {sid}", "observation": "o", "actor": "assistant", "messages": []}
        db.execute("INSERT INTO state VALUES (?, 'step:0', ?)", (f"agent:{sid}", json.dumps(step)))
        db.execute("INSERT INTO state VALUES (?, 'steps', '1')", (f"agent:{sid}",))
        db.execute("INSERT INTO state VALUES (?, 'memory_started', 'true')", (f"agent:{sid}",))
        db.execute("INSERT INTO links VALUES (?, 0, 1)", (f"agent:{sid}",))  # rows of every other table
        db.execute("INSERT INTO merged VALUES (?, 0, 1, 1, 'm', 1, 'rule', 0, 0)", (f"agent:{sid}",))
        db.execute("INSERT INTO piece_vectors VALUES (?, 0, 0, x'00')", (f"agent:{sid}",))
        db.execute("INSERT INTO llm_calls VALUES (NULL, ?, 0, 'record', 'm', 1, 1, 0, 0)", (f"agent:{sid}",))
    db.execute("PRAGMA user_version = 2")
    db.commit()
    db.close()


@pytest.mark.parametrize(
    ("conversations", "owner"),
    [
        (["conv"], "conv"),  # the one history the store holds: its memory started them
        (["default"], "default"),
        ([], "default"),  # an agent-only store
        (["conv", "other"], "default"),  # which of them started them is not known: as before
        (["conv", "default"], "default"),
    ],
)
def test_a_session_stored_before_scoping_belongs_to_the_stores_one_history(
    conversations: list[str], owner: str, tmp_path: Path
) -> None:
    path = tmp_path / "v2.db"
    legacy_store(path, conversations, ["a1", "a2"])
    store = SQLiteStore(path)
    prefix = "agent:" if owner == "default" else f"{owner}/agent:"
    assert store.sessions(owner) == [f"{prefix}a1", f"{prefix}a2"]
    assert [json.loads(r.data)["action"] for r in store.load_steps(f"{prefix}a1")] == ["act a1"]
    assert store.get_state(f"{prefix}a2", "memory_started") is True
    assert {h for h, _ in store.histories()} == {*conversations, f"{prefix}a1", f"{prefix}a2"}
    for table in ("links", "merged", "piece_vectors", "llm_calls", "state", "steps"):  # every row moved
        held = store._read(f"SELECT history_id, count(*) FROM {table} GROUP BY history_id ORDER BY history_id")
        assert [tuple(r) for r in held] == [(f"{prefix}a1", 1), (f"{prefix}a2", 1)], table
    store.close()
    mem = fm.Memory(path, history=owner)
    assert mem.sessions() == ["a1", "a2"]
    problems = mem.verify()  # the only ones: the link row this test put in each session, which holds no notes
    assert len(problems) == 2 and all(p.startswith("link 0 -> 1 of ") and "joins no two notes" in p for p in problems)
    assert mem.agent(session_id="a2").step(action="next", observation="o") == 2
    fresh = SQLiteStore(tmp_path / "new.db")  # the schema (tables, triggers) as a new store has it
    fresh.close()
    assert schema_of(path) == schema_of(tmp_path / "new.db")


def schema_of(path: Path) -> list[tuple[str, str, str]]:
    db = sqlite3.connect(path)
    try:
        return sorted(db.execute("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL").fetchall())
    finally:
        db.close()
