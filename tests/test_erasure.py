"""Erasure (issue 49): a turn, a session or an agent step erased from every stored copy on SQLite and
PostgreSQL, in one transaction; the erased words in no render, note, search, merged record or file of
the store, in any process; ``verify()`` clean, listing the erasure, and still catching any other
change; the digest the chain keeps gives nothing back; a correction renders instead of the wrong fact."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import flexamem as fm
from flexamem.digests import note_digest
from flexamem.llm.cache import ResponseCache
from flexamem.notes import Fields, Record, UnitDraft
from flexamem.write.records import RuleWriter

from .conftest import NO_POSTGRES, POSTGRES_URL

pytestmark = pytest.mark.faults  # make faults runs the erasure tests too

SECRET = "48213-ZEBRA"


def words(mem: fm.Memory, secret: str = SECRET[:5]) -> list[str]:
    """Every place a reader of ``mem`` could find ``secret`` (the PIN's digits, which records and merged
    records keep as a keyword): renders in every mode at small and large budgets, search hits, notes (raw,
    record, fields, pieces) and merged records."""
    found = []
    for mode in ("auto", "units", "pieces"):
        for budget in (120, 400, 4096):
            if secret in mem.render(f"what is the locker PIN {secret}?", budget, mode=mode).text:
                found.append(f"render {mode} {budget}")
        if any(secret in h.text for h in mem.search(f"locker PIN {secret}", mode=mode if mode != "units" else "auto")):
            found.append(f"search {mode}")
    for n in mem.notes():
        texts = [n.raw, n.record, n.fields.as_text(), *(p.text for p in n.pieces)]
        if any(secret in t for t in texts):
            found.append(f"note {n.seq}")
    if any(secret in m.text for m in mem.store.load_merged(mem.history_id)):
        found.append("merged")
    return found


def written(mem: fm.Memory) -> None:
    """Five sessions; the second says the secret in turn ``t2-2``; merged records written over them."""
    for i in range(5):
        turns = [
            {
                "speaker": "Ana",
                "text": f"Session {i}: we walked by the river in Porto and counted {i} boats.",
                "id": f"t{i}-1",
            },
            {"speaker": "Bob", "text": f"The ferry timetable for day {i} changed again.", "id": f"t{i}-2"},
        ]
        if i == 2:
            turns[1] = {"speaker": "Ana", "text": f"My locker PIN is {SECRET}, keep it safe.", "id": "t2-2"}
        mem.add_session(turns, session_id=f"s{i}", date=f"{i + 1} May 2023")
    mem.render("boats", 60, mode="units")  # a small budget merges records: the secret is in a merged record too


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=NO_POSTGRES)])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield str(tmp_path / "m.db") if request.param == "sqlite" else str(POSTGRES_URL)


def test_a_turn_erased_is_in_no_copy_and_the_chain_still_verifies(place: str) -> None:
    mem = fm.Memory(place, history="e" + uuid.uuid4().hex[:10])
    written(mem)
    assert len(words(mem)) > 5 and "merged" in words(mem)  # the test can see the secret where it lies
    kept = mem.head()
    before = {n.seq: n for n in mem.notes()}
    erasure = mem.erase(turn="t2-2", reason="the user asked")
    assert (erasure.kind, erasure.ids, erasure.reason, erasure.notes) == ("turn", ("t2-2",), "the user asked", (2,))
    assert words(mem) == [] and words(fm.Memory(place, history=mem.history_id)) == []
    assert mem.verify() == [] and mem.verify(head=kept) == []  # the head kept before still extends
    assert mem.erasures() == [erasure]
    assert mem.head().erasures == 1 and mem.head().notes == kept.notes
    after = {n.seq: n for n in mem.notes()}
    for seq, note in before.items():  # only note 2 changed, and it kept its place in the chain
        if seq != 2:
            assert (after[seq].raw, after[seq].digest, after[seq].salt) == (note.raw, note.digest, note.salt)
    assert after[2].digest == before[2].digest and after[2].salt != before[2].salt
    assert after[2].raw == "Ana: Session 2: we walked by the river in Porto and counted 2 boats.\n(erased)"
    assert "(erased)" in mem.render("boats", 4096, mode="units").text


def test_a_name_that_is_not_there_changes_nothing(place: str) -> None:
    mem = fm.Memory(place, history="e" + uuid.uuid4().hex[:10])
    written(mem)
    head = mem.head()
    for call in (lambda: mem.erase(turn="t9-9"), lambda: mem.erase(session="s9"), lambda: mem.erase(turn="u3#7")):
        with pytest.raises(fm.NotFoundError):
            call()
    with pytest.raises(fm.InvalidInputError):
        mem.erase()
    with pytest.raises(fm.InvalidInputError):
        mem.erase(turn="t2-2", session="s2")
    assert mem.erasures() == [] and mem.head() == head and len(words(mem)) > 5


def test_a_session_and_a_turn_by_its_place(place: str) -> None:
    mem = fm.Memory(place, history="e" + uuid.uuid4().hex[:10])
    written(mem)
    mem.erase(turn="u1#2", marker=False)  # the first unit's second turn (no id needed)
    assert "ferry timetable for day 0" not in mem.render("ferry timetable", 4096, mode="units").text
    erasure = mem.erase(session="s2", reason="wrong person")
    assert erasure.kind == "session" and erasure.notes == (2,)
    note = mem.note("s2")
    assert (note.raw, note.record, note.pieces, float(abs(note.embedding).sum())) == ("(erased)", "(erased)", (), 0.0)
    assert words(mem) == [] and mem.verify() == []
    text = mem.render("what happened in May?", 4096, mode="units").text
    assert "[u3 · 3 May 2023 · raw]\n(erased)" in text and "counted 2 boats" not in text
    assert [e.kind for e in mem.erasures()] == ["turn", "session"]


def test_a_retried_erasure_by_place_never_takes_the_next_turn(place: str) -> None:
    """A client whose answer was lost sends the erasure again: the place names the turn as written, the
    erased one is a marker there, and the retry erases nothing more."""
    mem = fm.Memory(place, history="e" + uuid.uuid4().hex[:10])
    said = (("Ana", "My door PIN is 4821."), ("Bob", "Keep the lighthouse keys safe."),
            ("Ana", "The boat leaves at noon."), ("Bob", "The ferry is late."))  # fmt: skip
    turns = [{"speaker": s, "text": t} for s, t in said]
    mem.add_session(turns, session_id="s1")
    mem.erase(turn="s1#1")
    with pytest.raises(fm.NotFoundError, match="erased already"):
        mem.erase(turn="s1#1")
    mem.erase(turn="s1#3")  # the third turn as written, not the third of those left
    raw = mem.note("s1").raw
    assert raw == "(erased)\nBob: Keep the lighthouse keys safe.\n(erased)\nBob: The ferry is late.", raw
    mem.erase(turn="s1#2")  # two erased turns side by side keep one marker each: places stay
    with pytest.raises(fm.NotFoundError, match="erased already"):
        mem.erase(turn="s1#3")
    assert mem.note("s1").raw.count("(erased)") == 3 and len(mem.erasures()) == 3 and mem.verify() == []


def test_a_turn_id_two_turns_share_is_refused_and_erases_nothing(place: str) -> None:
    mem = fm.Memory(place, history="e" + uuid.uuid4().hex[:10])
    mem.add_session([{"speaker": "Ana", "text": "my PIN is 4821", "id": "m1"}], session_id="s1")
    mem.add_session([{"speaker": "Bob", "text": "lunch at noon", "id": "m1"}], session_id="s2")
    head = mem.head()
    with pytest.raises(fm.InvalidInputError, match=r"names 2 turns \(s1#1, s2#1\).*nothing was erased"):
        mem.erase(turn="m1")
    assert mem.head() == head and mem.erasures() == []
    mem.erase(turn="s1#1")
    assert "4821" not in mem.note("s1").raw and mem.note("s2").raw == "Bob: lunch at noon"


def test_an_agent_step_erased_in_every_open_session(place: str) -> None:
    mem = fm.Memory(place, history="e" + uuid.uuid4().hex[:10])
    agent = mem.agent(task="find the booking", budget=700, session_id="a1")
    for i in range(12):
        token = f" token {SECRET}" if i == 2 else ""
        agent.step(action=f"search(page={i})", observation=f"page {i}:{token} " + "booking list " * 30)
        agent.context()
    other = fm.Memory(place, history=mem.history_id).agent(session_id="a1")  # another view of the session
    assert SECRET in json.dumps(other.context().messages) or any(SECRET in n.raw for n in other.core.history.notes)
    erasure = agent.erase(3, reason="a pasted token")
    assert erasure.kind == "step" and erasure.steps == (3,) and erasure.ids == ("a1:3",)
    assert mem.erasures() == [erasure]
    for view in (agent, other, fm.Memory(place, history=mem.history_id).agent(session_id="a1")):
        context = view.context()
        assert SECRET not in json.dumps(context.messages) and context.tokens <= context.ceiling
        assert all(SECRET not in n.raw and SECRET not in n.record for n in view.core.history.notes)
        assert view.steps[2].action == "(erased)" and view.steps[2].observation == ""
    assert mem.verify() == [] and other.step(action="go on", observation="fine") == 13
    with pytest.raises(fm.NotFoundError):
        agent.erase(99)


def test_verify_catches_any_other_change_after_an_erasure(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    mem = fm.Memory(path)
    written(mem)
    mem.erase(turn="t2-2")

    def tampered(sql: str, *args: object) -> list[str]:
        db = sqlite3.connect(path)
        triggers = [r[0] for r in db.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger'")]
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
            db.execute(f"DROP TRIGGER {name}")
        saved = db.execute("SELECT * FROM notes").fetchall(), db.execute("SELECT * FROM erasures").fetchall()
        db.execute(sql, args)
        db.commit()
        problems = fm.Memory(path).verify()
        db.execute("DELETE FROM notes")
        db.executemany(f"INSERT INTO notes VALUES ({','.join('?' * len(saved[0][0]))})", saved[0])
        db.execute("DELETE FROM erasures")
        db.executemany(f"INSERT INTO erasures VALUES ({','.join('?' * len(saved[1][0]))})", saved[1])
        for trigger in triggers:
            db.execute(trigger)
        db.commit()
        db.close()
        return problems

    assert any("note 1" in p for p in tampered("UPDATE notes SET raw = raw || '!' WHERE seq = 1"))
    assert any("note 2" in p for p in tampered("UPDATE notes SET raw = raw || '!' WHERE seq = 2"))
    assert any("note 2" in p for p in tampered("UPDATE notes SET salt = 'aa' WHERE seq = 2"))
    assert any("erasure 0" in p for p in tampered("UPDATE erasures SET reason = 'nothing'"))
    assert any("erasure" in p or "head" in p for p in tampered("DELETE FROM erasures"))
    assert fm.Memory(path).verify() == []  # each change undone: clean again


def test_the_digest_the_chain_keeps_gives_nothing_back(tmp_path: Path) -> None:
    """A four-digit PIN under an unsalted digest is found by trying all 10,000; under the salted one an
    erasure keeps, the true PIN does not reproduce it without the salt, which went with the words."""
    mem = fm.Memory(tmp_path / "m.db")
    mem.add_session([{"speaker": "Ana", "text": "My PIN is 4821.", "id": "p"}], session_id="s", date="1 May 2023")
    original = mem.notes()[0]
    assert original.salt and note_digest(original, "") == original.digest  # the formula the test tries is right

    def with_pin(pin: str) -> fm.Note:
        raw = f"Ana: My PIN is {pin}."
        return dataclasses.replace(original, raw=raw, blocks=(dataclasses.replace(original.blocks[0], text=raw),))

    unsalted = note_digest(original, "", version=2)  # what a v2 chain would keep
    assert [p for p in (f"{i:04d}" for i in range(10_000)) if note_digest(with_pin(p), "", version=2) == unsalted] == [
        "4821"
    ]  # (only the raw differs between guesses: the rest of the note is known to whoever holds the store)
    mem.erase(turn="p")
    kept = mem.notes()[0]
    assert kept.digest == original.digest and kept.salt != original.salt
    for salt in (None, "", kept.salt):
        guess = dataclasses.replace(with_pin("4821"), salt=salt)
        assert note_digest(guess, "") != kept.digest


def test_a_correction_renders_instead_of_the_wrong_fact(place: str) -> None:
    mem = fm.Memory(place, history="e" + uuid.uuid4().hex[:10])
    written(mem)
    mem.add_session([{"speaker": "Ana", "text": "I live at 12 Rua das Flores now.", "id": "addr"}], session_id="s5",
                    date="8 May 2023")  # fmt: skip
    for i in range(6, 30):  # enough history that a 1k render must choose
        mem.add_session([{"speaker": "Bob", "text": f"Day {i}: the ferry to Gaia left at {i % 12 + 1} o'clock."}],
                        session_id=f"s{i}", date=f"{i} June 2023")  # fmt: skip
    erasure, units = mem.correct(
        "addr", [{"speaker": "Ana", "text": "Correction: I live at 7 Avenida da Liberdade now."}], date="1 July 2023"
    )
    assert erasure.reason == "corrected" and len(units) == 1
    text = mem.render("where does she live now?", 1000).text
    assert "7 Avenida da Liberdade" in text and "Rua das Flores" not in text
    assert "(erased)" not in text and mem.verify() == []
    with pytest.raises(fm.InvalidInputError):  # a refused correction erases nothing
        mem.correct("t0-1", [{"speaker": "", "text": ""}])
    assert len(mem.erasures()) == 1


def store_files(path: Path) -> list[Path]:
    return [p for p in path.parent.iterdir() if p.name.startswith(path.name)]


def test_the_erased_words_are_in_no_file_while_another_process_holds_the_store(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    mem = fm.Memory(path)
    written(mem)
    reader = subprocess.Popen(  # a second process: renders, waits, renders again after the erasure
        [sys.executable, "-c", READER, str(path), SECRET], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert reader.stdout is not None and reader.stdin is not None
    assert reader.stdout.readline().strip() == "seen"
    assert any(SECRET.encode() in p.read_bytes() for p in store_files(path))  # the bytes the test must not find
    mem.erase(turn="t2-2")
    reader.stdin.write("again\n")
    reader.stdin.flush()
    assert reader.stdout.readline().strip() == "gone"
    assert reader.wait(timeout=60) == 0
    assert [p.name for p in store_files(path) if SECRET.encode() in p.read_bytes()] == []


def test_a_read_held_past_the_erasure_leaves_the_wal_to_the_next_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:  # fmt: skip
    """Another process holds a read transaction through the erasure's 5 s of retries: the WAL keeps the
    erased words for now (said in a warning), and the store's first write after that read ends truncates it."""
    path = tmp_path / "m.db"
    mem = fm.Memory(path)
    written(mem)
    hold = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); c.execute('BEGIN');"
    hold += " c.execute('SELECT count(*) FROM notes').fetchone(); print('held', flush=True); sys.stdin.readline()"
    reader = subprocess.Popen([sys.executable, "-c", hold, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    assert reader.stdout is not None and reader.stdin is not None
    assert reader.stdout.readline().strip() == "held"
    with caplog.at_level("WARNING", logger="flexamem.store"):
        mem.erase(turn="t2-2")
    assert any("WAL still holds the erased words" in r.getMessage() for r in caplog.records)
    assert words(mem) == [] and mem.verify() == []
    reader.stdin.write("done\n")
    reader.stdin.flush()
    assert reader.wait(timeout=60) == 0
    mem.add_session([{"speaker": "Cy", "text": "a later write"}], session_id="later")
    assert [p.name for p in store_files(path) if SECRET.encode() in p.read_bytes()] == []


READER = """
import sys
import flexamem as fm
mem = fm.Memory(sys.argv[1])
secret = sys.argv[2]
print("seen" if secret in mem.render("locker PIN", 4096, mode="units").text else "missing", flush=True)
sys.stdin.readline()
text = mem.render("locker PIN", 4096, mode="units").text + "".join(n.raw + n.record for n in mem.notes())
print("gone" if secret not in text else "shown", flush=True)
"""


def test_kill_9_during_an_erasure_leaves_all_of_it_or_none(place: str) -> None:
    history = "k" + uuid.uuid4().hex[:10]
    mem = fm.Memory(place, history=history)
    turns = [{"speaker": "Ana", "text": f"Line {i}: the {SECRET} code opens locker {i}. " * 8} for i in range(300)]
    units = mem.add_session(turns, session_id="big", date="1 May 2023")
    assert len(units) > 15  # one session of several units: one erasure rewrites them all
    rng = random.Random(7)
    outcomes = set()
    for _ in range(12):
        proc = subprocess.Popen([sys.executable, "-c", ERASER, place, history], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "erasing"
        time.sleep(rng.uniform(0.0, 0.06))  # its transaction (~22 notes rewritten) takes about that long
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        after = fm.Memory(place, history=history)
        assert after.verify() == []
        raws = [n.raw for n in after.notes()]
        if after.erasures():
            assert all(SECRET not in r for r in raws)
            outcomes.add("all")
            break
        assert all(SECRET in r for r in raws)
        outcomes.add("none")
    print(f"kill -9 during an erasure: {sorted(outcomes)}")
    again = fm.Memory(place, history=history)
    if not again.erasures():
        again.erase(session="big")
    assert again.verify() == [] and all(SECRET not in n.raw for n in again.notes())


ERASER = """
import sys
import flexamem as fm
mem = fm.Memory(sys.argv[1], history=sys.argv[2])
mem.notes()
print("erasing", flush=True)
mem.erase(session="big")
print("done", flush=True)
"""


def test_export_after_an_erasure_imports_and_a_changed_erasure_is_refused(tmp_path: Path) -> None:
    mem = fm.Memory(tmp_path / "a.db")
    written(mem)
    agent = mem.agent(task="t", budget=700, session_id="a1")
    for i in range(8):
        agent.step(action=f"look {i}", observation=f"shelf {i} " * 40)
    agent.erase(2)
    mem.erase(turn="t2-2")
    out = tmp_path / "x.jsonl"
    mem.export(out)
    assert SECRET not in out.read_text()
    copy = fm.Memory(tmp_path / "b.db")
    fm.import_history(out, copy.store)
    assert copy.verify() == [] and copy.erasures() == mem.erasures()
    assert copy.render("boats", 300).text == mem.render("boats", 300).text
    lines = out.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if '"type": "erasure"' in line)
    row = json.loads(lines[at])
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*lines[:at], json.dumps({**row, "reason": "other"}), *lines[at + 1 :]]) + "\n")
    with pytest.raises(fm.InvalidInputError, match=f"line {at + 1}: erasure 0"):
        fm.import_history(bad, tmp_path / "c.db")


class Forgetful(RuleWriter):
    """The rule writer, keeping a response cache as a model-backed writer does (a deterministic double)."""

    def __init__(self, cache: ResponseCache) -> None:
        super().__init__()
        self.cache = cache

    def write_records(self, units, progress=None):  # type: ignore[no-untyped-def]
        records: list[Record] = super().write_records(units, progress)
        for unit, record in zip(units, records, strict=True):
            self.cache.put(f"key-{unit.unit_id}", "double", record.text + " | " + unit.raw, 1, 1)
        return records

    def forget_responses(self) -> None:
        self.cache.clear()


def test_model_answers_written_from_erased_words_go_too(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache.db")
    mem = fm.Memory(tmp_path / "m.db", writer=Forgetful(cache))
    written(mem)
    assert len(cache) == 5 and any(SECRET.encode() in p.read_bytes() for p in store_files(tmp_path / "cache.db"))
    mem.erase(turn="t2-2")
    assert len(cache) == 0
    assert [p.name for p in store_files(tmp_path / "cache.db") if SECRET.encode() in p.read_bytes()] == []


def test_an_emptied_unit_draft_and_record_name_no_turn() -> None:
    from flexamem.write.units import ERASED_MARK, erased_draft, is_marker, turn_blocks

    blocks = tuple(turn_blocks([fm.Turn("Ana", "hello", id="a"), fm.Turn("Bob", "(erased)", id="b")]))
    draft = UnitDraft("u", "conversation", "", blocks)
    left = erased_draft(draft, lambda b: b.source_id == "a", marker=True)
    assert [b.text for b in left.blocks] == [ERASED_MARK, "Bob: (erased)"]
    assert [is_marker(b) for b in left.blocks] == [True, False]  # a turn that says "(erased)" is still words
    assert erased_draft(left, lambda b: b.source_id == "b").blocks == ()
    assert RuleWriter().write_record(erased_draft(draft, lambda b: b.source_id == "b")).text.startswith("Ana")
    assert Record("", Fields(), "erasure").text == ""


@NO_POSTGRES
def test_postgres_scrub_leaves_no_erased_bytes_in_the_table_files() -> None:
    """After an erasure and ``scrub()`` (VACUUM FULL), the erased string is in no file of the database's
    tables; WAL segments keep it until recycled (docs/RELIABILITY.md says what an operator does)."""
    data = Path(os.environ.get("FLEXAMEM_PG_DIR", "/tmp/flexamem-pg"))
    if not os.access(data / "base", os.R_OK):
        if os.environ.get("FLEXAMEM_REQUIRE_ROOT") == "1":
            pytest.fail(f"cannot read {data}/base (the test must run as root to read the server's files)")
        pytest.skip(f"cannot read {data}/base: run as root")
    secret = "PGSECRET-" + uuid.uuid4().hex[:12]
    mem = fm.Memory(str(POSTGRES_URL), history="e" + uuid.uuid4().hex[:10])
    mem.add_session([{"speaker": "Ana", "text": f"The vault code is {secret}.", "id": "v"}], session_id="s")
    mem.store.scrub()  # flushes the rows to the table files (CHECKPOINT)

    def found() -> list[str]:
        hits = []
        for p in (data / "base").rglob("*"):
            if p.is_file() and secret.encode() in p.read_bytes():
                hits.append(str(p.relative_to(data)))
        return hits

    assert found(), "the test must see the secret in the table files before the erasure"
    mem.erase(turn="v")
    mem.store.scrub()
    assert found() == []
    assert mem.verify() == []


def erase_at(mem: fm.Memory, turn: str, start: threading.Barrier, failures: list[Exception]) -> None:
    start.wait()
    try:
        mem.erase(turn=turn)
    except Exception as exc:
        failures.append(exc)


def test_erasures_racing_on_one_history_each_land_once(place: str) -> None:
    """Two memories erase at once (PostgreSQL: two transactions that would take the same erasure number):
    one waits for the other, both land, the chain verifies."""
    history = "r" + uuid.uuid4().hex[:10]
    written(fm.Memory(place, history=history))
    first, second = fm.Memory(place, history=history), fm.Memory(place, history=history)
    for a, b in (("t0-1", "t1-1"), ("t3-1", "t4-2")):
        start, failures = threading.Barrier(2), []
        pairs = ((first, a), (second, b))
        threads = [threading.Thread(target=erase_at, args=(m, t, start, failures)) for m, t in pairs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
    done = fm.Memory(place, history=history)
    assert sorted(i for e in done.erasures() for i in e.ids) == ["t0-1", "t1-1", "t3-1", "t4-2"]
    assert [e.n for e in done.erasures()] == [0, 1, 2, 3] and done.verify() == []
