"""A request row after an erasure (schema v10): the body digest a write under a request id keeps is
salted per row, and an erasure that rewrites a note the write stored erases that salt in its
transaction. Then neither the database nor an export tells a guess of the erased words (a brute force
over every 4-digit PIN finds nothing), a replay of the id answers the same whatever its body (no
oracle), and ``verify()`` stays clean. Rows written before v10 (salt NULL, the bare digest) upgrade,
verify, replay and import as before."""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import flexamem as fm
from flexamem.core import request_body
from flexamem.digests import ERASED_SALT, request_digest, salted_body

from .conftest import NO_POSTGRES, POSTGRES_URL

pytestmark = pytest.mark.faults

OTHER = {"speaker": "Ana", "text": "We walked by the river in Porto.", "id": "a1"}


def turns(pin: str) -> list[dict[str, str]]:
    return [dict(OTHER), {"speaker": "Ana", "text": f"My door PIN is {pin}, remember it.", "id": "a2"}]


def write(mem: fm.Memory, pin: str = "4821", request_id: str = "req-1") -> list[str]:
    return mem.add_session(turns(pin), session_id="s1", date="1 May 2023", request_id=request_id)


def body_of(mem: fm.Memory, pin: str) -> str:
    drafts, _ = mem._drafts(turns(pin), "s1", "1 May 2023")
    return request_body(drafts)


def guessed(mem: fm.Memory, row: dict[str, Any], previous: str = "", last_note: str | None = None) -> list[str]:
    """Every PIN 0000-9999 whose body matches what ``row`` (a request row: body, salt, digest) keeps, by
    its body digest (under the kept salt, and bare) or by its chain digest (``previous``: the request
    before it; ``last_note``: its last note's digest)."""
    found = []
    for pin in range(10000):
        body = body_of(mem, f"{pin:04d}")
        for candidate in {salted_body(body, row["salt"]), body}:
            if candidate == row["body"] or (
                last_note is not None
                and request_digest(previous, row["n"], row["request_id"], row["units"], candidate, last_note)
                == row["digest"]
            ):
                found.append(f"{pin:04d}")
    return found


def request_rows(mem: fm.Memory) -> list[dict[str, Any]]:
    cols = "n, request_id, units, body, digest, salt"
    rows = mem.store._read(f"SELECT {cols} FROM requests WHERE history_id = ? ORDER BY n", (mem.history_id,))
    return [dict(zip(cols.split(", "), r, strict=True)) for r in rows]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=NO_POSTGRES)])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield str(tmp_path / "m.db") if request.param == "sqlite" else str(POSTGRES_URL)


def test_the_erased_pin_is_found_by_no_brute_force_of_the_database_or_an_export(place: str, tmp_path: Path) -> None:
    mem = fm.Memory(place, history="r" + uuid.uuid4().hex[:10])
    assert write(mem) == ["s1"]
    mem.add_session([{"speaker": "Bob", "text": "The ferry timetable changed."}], session_id="s2", request_id="req-2")
    before = request_rows(mem)[0]
    assert before["salt"] not in (None, ERASED_SALT) and before["body"].startswith("v3:")
    assert guessed(mem, before) == ["4821"]  # the brute force works while the salt is there
    mem.erase(turn="a2", reason="gdpr")
    assert mem.verify() == []
    rows = request_rows(mem)
    after = rows[0]
    assert after["salt"] == ERASED_SALT and {k: after[k] for k in ("body", "digest", "units")} == {
        k: before[k] for k in ("body", "digest", "units")
    }
    assert rows[1]["salt"] not in (None, ERASED_SALT)  # a request whose notes were not rewritten keeps its salt
    last_note = mem.notes()[0].digest
    assert guessed(mem, after, "", last_note) == []
    out = tmp_path / "export.jsonl"
    mem.export(str(out))
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    exported = next(line for line in lines if line.get("type") == "request" and line["request_id"] == "req-1")
    assert exported["salt"] == ERASED_SALT
    assert guessed(mem, exported, "", last_note) == []
    assert "4821" not in out.read_text(encoding="utf-8")


def test_an_export_after_the_erasure_imports_with_the_salt_erased(tmp_path: Path) -> None:
    mem = fm.Memory(str(tmp_path / "m.db"), history="h")
    write(mem)
    mem.erase(turn="a2", reason="gdpr")
    out = tmp_path / "export.jsonl"
    mem.export(str(out))
    assert fm.import_history(str(out), str(tmp_path / "imported.db"), history=mem.history_id)
    again = fm.Memory(str(tmp_path / "imported.db"), history=mem.history_id)
    assert again.verify() == [] and request_rows(again)[0]["salt"] == ERASED_SALT
    with pytest.raises(fm.RequestConflictError, match="had words erased"):
        write(again)


def test_a_replay_after_an_erasure_answers_the_same_for_every_body(place: str) -> None:
    mem = fm.Memory(place, history="r" + uuid.uuid4().hex[:10])
    write(mem)
    mem.erase(turn="a2", reason="gdpr")
    answers = []
    for pin in ("4821", "1111", "0000"):  # the erased words, and wrong guesses
        with pytest.raises(fm.RequestConflictError) as caught:
            write(mem, pin)
        answers.append(str(caught.value))
    with pytest.raises(fm.RequestConflictError) as caught:  # another body altogether
        mem.add_session([{"speaker": "Bob", "text": "hello"}], session_id="s1", request_id="req-1")
    answers.append(str(caught.value))
    assert len(set(answers)) == 1 and "had words erased" in answers[0]
    assert [n.unit_id for n in mem.notes()] == ["s1"] and mem.verify() == []
    other = fm.Memory(place, history=mem.history_id)  # another view reads the same
    with pytest.raises(fm.RequestConflictError, match="had words erased"):
        write(other, "4821")


def test_an_ordinary_replay_still_answers_its_units_and_another_body_is_refused(place: str) -> None:
    mem = fm.Memory(place, history="r" + uuid.uuid4().hex[:10])
    assert write(mem) == ["s1"]
    assert write(mem) == ["s1"]  # the same body: the stored units, nothing written
    assert fm.Memory(place, history=mem.history_id).add_session(
        turns("4821"), session_id="s1", date="1 May 2023", request_id="req-1"
    ) == ["s1"]
    with pytest.raises(fm.RequestConflictError, match="another write"):
        write(mem, "1111")
    mem.add_session([{"speaker": "Bob", "text": "Ferries at noon.", "id": "b1"}], session_id="s2", request_id="req-2")
    mem.erase(turn="b1", reason="r")  # erasing another write's words leaves this request as it was
    assert write(mem) == ["s1"]
    with pytest.raises(fm.RequestConflictError, match="another write"):
        write(mem, "1111")
    assert [n.unit_id for n in mem.notes()] == ["s1", "s2"] and mem.verify() == []


def test_the_salt_may_change_only_to_the_marker_and_only_inside_an_erasure(place: str) -> None:
    mem = fm.Memory(place, history="r" + uuid.uuid4().hex[:10])
    write(mem)
    store, h = mem.store, mem.history_id
    for sql in (
        "UPDATE requests SET salt = 'erased' WHERE history_id = ?",
        "UPDATE requests SET salt = NULL WHERE history_id = ?",
    ):
        with pytest.raises(fm.WriteOnceError), store._write() as conn:
            store._run(conn, sql, (h,))
    for sql in (  # inside an erasure: only the salt, only to the marker
        "UPDATE requests SET salt = 'erased', body = 'x' WHERE history_id = ?",
        "UPDATE requests SET salt = 'abc' WHERE history_id = ?",
    ):
        with pytest.raises(fm.WriteOnceError), store._write() as conn:
            store._run(conn, "INSERT INTO erasing VALUES (?)", (h,))
            store._run(conn, sql, (h,))
    assert request_rows(mem)[0]["salt"] not in (None, ERASED_SALT) and mem.verify() == []


# -- rows written before v10 (salt NULL, the bare body digest) -----------------------------------------------


def old_request(mem: fm.Memory, pin: str, request_id: str) -> None:
    """Write a session and the request row schema v9 kept for it (no salt, the bare body digest), chained
    after the requests before it, with the head written again: what a v9 store holds."""
    units = mem.add_session(turns(pin), session_id="s1", date="1 May 2023")
    store, h = mem.store, mem.history_id
    body = body_of(mem, pin)
    last = store._read("SELECT n, digest FROM requests WHERE history_id = ? ORDER BY n DESC LIMIT 1", (h,))
    n, previous = (int(last[0][0]) + 1, str(last[0][1])) if last else (0, "")
    units_json = json.dumps(units)
    digest = request_digest(previous, n, request_id, units_json, body, mem.notes()[-1].digest or "")
    with store._write() as conn:
        store._run(
            conn, "INSERT INTO requests (history_id, n, request_id, units, body, digest) VALUES (?,?,?,?,?,?)",
            (h, n, request_id, units_json, body, digest),
        )  # fmt: skip
        store._put_head(conn, h)


SQLITE_V9_TRIGGER = """CREATE TRIGGER requests_no_update BEFORE UPDATE ON requests
    BEGIN SELECT RAISE(ABORT, 'flexamem: requests are write-once'); END"""


def to_v9_sqlite(path: str) -> None:
    db = sqlite3.connect(path)
    db.execute("DROP TRIGGER requests_no_update")
    db.execute(SQLITE_V9_TRIGGER)
    db.execute("ALTER TABLE requests DROP COLUMN salt")
    db.execute("PRAGMA user_version = 9")
    db.commit()
    db.close()


@contextmanager
def fresh_postgres() -> Iterator[str]:
    import psycopg

    url = os.environ["FLEXAMEM_TEST_POSTGRES"]
    name = f"reqsalt_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield url.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def to_v9_postgres(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER requests_write_once ON requests")
        conn.execute(
            "CREATE TRIGGER requests_write_once BEFORE UPDATE OR DELETE ON requests"
            " FOR EACH ROW EXECUTE FUNCTION flexamem_write_once('history_id')"
        )
        conn.execute("ALTER TABLE requests DROP COLUMN salt")
        conn.execute("UPDATE flexamem_migrations SET version = 9")


def check_old_rows_upgrade(path: str, history: str, downgrade: Any) -> None:
    mem = fm.Memory(path, history=history)
    old_request(mem, "4821", "old-1")
    mem.close()
    downgrade(path)
    mem = fm.Memory(path, history=history)  # migration 10 runs
    assert mem.verify() == []
    row = request_rows(mem)[0]
    assert row["salt"] is None and not row["body"].startswith("v3:")  # the documented leftover
    assert write(mem, request_id="old-1") == ["s1"]  # its replay: the old formula
    with pytest.raises(fm.RequestConflictError, match="another write"):
        write(mem, "1111", request_id="old-1")
    mem.add_session([{"speaker": "Bob", "text": "Ferries at noon."}], session_id="s2", request_id="new-1")
    assert request_rows(mem)[1]["salt"] not in (None, ERASED_SALT)
    mem.erase(turn="a2", reason="gdpr")
    assert mem.verify() == []
    assert request_rows(mem)[0]["salt"] == ERASED_SALT  # no online oracle, even for an old row
    for pin in ("4821", "1111"):
        with pytest.raises(fm.RequestConflictError, match="had words erased"):
            write(mem, pin, request_id="old-1")
    mem.close()


def test_a_v9_sqlite_store_with_request_rows_upgrades_and_its_rows_verify(tmp_path: Path) -> None:
    check_old_rows_upgrade(str(tmp_path / "v9.db"), "conv", to_v9_sqlite)


@NO_POSTGRES
def test_a_v9_postgres_store_with_request_rows_upgrades_and_its_rows_verify() -> None:
    with fresh_postgres() as url:
        check_old_rows_upgrade(url, "conv", to_v9_postgres)


def test_an_export_written_before_the_salt_column_imports(tmp_path: Path) -> None:
    mem = fm.Memory(str(tmp_path / "m.db"), history="h")
    old_request(mem, "4821", "old-1")
    out = tmp_path / "export.jsonl"
    mem.export(str(out))
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [line["salt"] for line in lines if line.get("type") == "request"] == [None]
    # the file an export of v9 wrote: no salt field on its request lines
    lines = [
        {k: v for k, v in line.items() if k != "salt"} if line.get("type") == "request" else line for line in lines
    ]
    out.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    assert fm.import_history(str(out), str(tmp_path / "imported.db"), history="h")
    again = fm.Memory(str(tmp_path / "imported.db"), history="h")
    assert again.verify() == [] and request_rows(again)[0]["salt"] is None
    assert write(again, request_id="old-1") == ["s1"]
    with pytest.raises(fm.RequestConflictError, match="another write"):
        write(again, "1111", request_id="old-1")
