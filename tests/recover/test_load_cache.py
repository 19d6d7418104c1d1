"""A history's kept load (recover/load_cache.py): an open reads the words of its pieces instead of counting
them, renders exactly as a load that counts, and a kept load that is forged, stale or erased over is
never what a render ranks by (verify() names a forged one)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

import flexamem as fm
import flexamem.history
from flexamem.cli.demo import DEMO_SESSIONS
from flexamem.recover import load_cache
from flexamem.store.base import KeptLoad
from flexamem.text import content_words

QUESTIONS = [
    "When did Ann adopt the cat?",
    "What is the booking code?",
    "Which city did they move to?",
    "What did we say about the budget review on Friday?",
]
MODES = ("auto", "pieces", "units")


@pytest.fixture(autouse=True)
def small_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Histories of a unit test are small: let them load in bulk and keep their loads as large ones do."""
    monkeypatch.setattr(flexamem.history, "BULK", 4)
    monkeypatch.setattr(load_cache, "MIN_PIECES", 8)


def extra_session(i: int) -> list[dict[str, str]]:
    return [
        {"speaker": "Ann", "text": f"Session {i}: the booking code is QX-{4400 + i} and we fly to Lisbon {i} May."},
        {"speaker": "Bo", "text": f"Noted. The budget review moved to Friday {i}; bring the receipts from trip {i}."},
        {"speaker": "Ann", "text": f"Also the cat, Miso, needs her shots before day {i} of the trip."},
    ]


def write(mem: fm.Memory, sessions: int = 6) -> None:
    for sid, date, turns in DEMO_SESSIONS:
        mem.add_session(turns, session_id=sid, date=date)
    for i in range(sessions):
        mem.add_session(extra_session(i), session_id=f"x{i}", date=f"{i + 1} June 2024")


def renders(mem: fm.Memory) -> list[tuple[str, int]]:
    out = []
    for q in QUESTIONS:
        for mode in MODES:
            for budget in (300, 700):
                r = mem.render(q, budget, mode=mode)
                out.append((r.text, r.tokens))
    return out


def kept_words(data: bytes) -> list[str]:
    """The words a kept load holds (its JSON head)."""
    (size,) = struct.unpack_from("<I", data)
    words: list[str] = json.loads(data[4 : 4 + size])["words"]
    return words


def counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the bulk countings of words a load does (``count_words``)."""
    calls: list[int] = []
    real = flexamem.history.count_words

    def spy(docs: list[list[str]]) -> load_cache.LoadedWords:
        calls.append(len(docs))
        return real(docs)

    monkeypatch.setattr(flexamem.history, "count_words", spy)
    return calls


def test_encode_decode_round_trip() -> None:
    docs = [content_words(t) for t in ("The cat Miso, booking QX-4417.", "Flights to Lisbon", "", "cat cat cat")]
    words = load_cache.count_words(docs)
    back = load_cache.decode(load_cache.encode(words), len(docs))
    assert back.pairs.words == words.pairs.words and back.stems[1] == words.stems[1]
    for a, b in (
        (back.pairs.terms, words.pairs.terms),
        (back.pairs.docs, words.pairs.docs),
        (back.pairs.counts, words.pairs.counts),
        (back.pairs.lengths, words.pairs.lengths),
        (back.stems[0], words.stems[0]),
        (back.identifiers, words.identifiers),
    ):
        assert np.array_equal(a, b)
    assert back.pairs.m == words.pairs.m


def test_decode_refuses_what_does_not_describe_the_pieces() -> None:
    docs = [content_words(t) for t in ("The cat Miso, booking QX-4417.", "Flights to Lisbon in May", "cat cat")]
    data = load_cache.encode(load_cache.count_words(docs))
    (size,) = struct.unpack_from("<I", data)
    head = json.loads(data[4 : 4 + size])
    body = bytearray(data[4 + size :])

    def with_head(**changes: object) -> bytes:
        h = json.dumps({**head, **changes}).encode()
        return struct.pack("<I", len(h)) + h + bytes(body)

    forged = [
        data[:-4],  # cut short
        data[:3],  # no head
        b"\xff" * 40,  # garbage
        with_head(version=load_cache.VERSION + 1),
        with_head(words=head["words"][:-1]),  # a word number past the words
        with_head(m=head["m"] + 1),
        with_head(sizes=[*head["sizes"][:-1], head["sizes"][-1] + 1]),
    ]
    swapped = bytearray(body)
    swapped[4:8], swapped[8:12] = body[8:12], body[4:8]  # two pairs' words swapped: out of order
    forged.append(struct.pack("<I", size) + data[4 : 4 + size] + bytes(swapped))
    for blob in forged:
        with pytest.raises(ValueError):
            load_cache.decode(blob, len(docs))
    with pytest.raises(ValueError):
        load_cache.decode(data, len(docs) + 1)  # another number of pieces


def test_an_open_reads_the_kept_load_and_renders_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "m.db"
    with fm.Memory(db) as mem:
        write(mem)
    calls = counting(monkeypatch)
    with fm.Memory(db) as first:  # never opened: counts, and keeps the count
        counted = renders(first)
        kept = first.store.get_kept_load("default")
        assert kept is not None and kept.notes == len(first.notes()) and kept.erasures == 0
    assert len(calls) == 1
    with fm.Memory(db) as second:  # reads it: no counting
        assert renders(second) == counted
    assert len(calls) == 1
    assert fm.Memory(db).verify() == []


def test_notes_written_since_the_kept_load_are_counted_on_top(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "m.db"
    with fm.Memory(db) as mem:
        write(mem)  # a view that wrote every note never loads them: it keeps no load
    with fm.Memory(db) as mem:
        mem.render(QUESTIONS[0], 500)  # a first load: keeps its count of these notes
        mem.add_session(extra_session(99), session_id="later", date="1 July 2024")
    calls = counting(monkeypatch)
    with fm.Memory(db) as reads:
        on_top = renders(reads)
        assert reads.store.get_kept_load("default").notes == len(reads.notes()) - 1  # type: ignore[union-attr]
    assert calls == []  # the kept notes read, the new one's few pieces added one by one
    monkeypatch.setattr(load_cache, "MIN_PIECES", 10**9)  # a load that counts everything
    with fm.Memory(db) as counts:
        assert renders(counts) == on_top


def test_a_forged_kept_load_is_named_by_verify_and_a_garbled_one_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "m.db"
    with fm.Memory(db) as mem:
        write(mem)
    with fm.Memory(db) as mem:
        honest = renders(mem)
        kept = mem.store.get_kept_load("default")
    assert kept is not None
    # a well-formed forgery: every count of one word doubled (it ranks pieces differently; no text, no budget)
    store = fm.Memory(db).store
    n_docs = sum(len(n.pieces) for n in fm.Memory(db).notes())
    real = load_cache.decode(kept.data, n_docs)
    forged = load_cache.LoadedWords(
        load_cache.Pairs(real.pairs.words, real.pairs.terms, real.pairs.docs, real.pairs.counts.copy(),
                         real.pairs.lengths.copy(), real.pairs.m),
        real.stems,
        real.identifiers,
    )  # fmt: skip
    forged.pairs.counts[0] += 1
    forged.pairs.lengths[forged.pairs.docs[0]] += 1
    assert store.put_kept_load("default", KeptLoad(kept.epoch, 0, kept.notes, kept.digest, kept.version,
                                                   load_cache.encode(forged)))  # fmt: skip
    problems = fm.Memory(db).verify()
    assert len(problems) == 1 and "kept load" in problems[0]
    with fm.Memory(db) as mem:
        for q in QUESTIONS:
            assert mem.render(q, 300).tokens <= 300  # the budget never rests on it
    # bytes that do not decode: the open counts afresh and renders as before
    store.put_kept_load("default", KeptLoad(kept.epoch, 0, kept.notes, kept.digest, kept.version, b"\x00" * 64))
    assert fm.Memory(db).verify() != []
    calls = counting(monkeypatch)
    with fm.Memory(db) as mem:
        assert renders(mem) == honest
    assert len(calls) == 1
    assert fm.Memory(db).verify() == []  # that open kept an honest count again


def test_erasure_and_drop_delete_the_kept_load(store_path: str, tenant: str) -> None:
    secret = "Zorblaxian"
    with fm.Memory(store_path, history=tenant) as mem:
        write(mem, sessions=3)
        mem.add_session([{"speaker": "Ann", "text": f"My passport number is {secret}, keep it safe."}],
                        session_id="secret", date="2 July 2024")  # fmt: skip
    with fm.Memory(store_path, history=tenant) as mem:
        mem.render("passport", 400)
        kept = mem.store.get_kept_load(tenant)
        assert kept is not None and any(secret.lower() in w for w in kept_words(kept.data))
        mem.erase(session="secret", reason="asked")
        assert mem.store.get_kept_load(tenant) is None  # deleted in the erasure's transaction
    if not store_path.startswith("postgresql"):  # and its bytes are in no file of the store (secure_delete)
        files = [p for p in Path(store_path).parent.iterdir() if p.name.startswith(Path(store_path).name)]
        assert [p.name for p in files if secret.lower().encode() in p.read_bytes().lower()] == []
    with fm.Memory(store_path, history=tenant) as fresh:
        fresh.render("passport", 400)
        again = fresh.store.get_kept_load(tenant)
        assert again is not None and again.erasures == 1
        assert not any(secret.lower() in w for w in kept_words(again.data))
        assert kept_words(again.data)  # the other words are there
        assert fresh.verify() == []
        # a count made before the erasure cannot be kept after it
        assert not fresh.store.put_kept_load(tenant, KeptLoad(again.epoch, 0, again.notes, again.digest, 1, b"x"))
        fresh.drop()
        assert fresh.store.get_kept_load(tenant) is None


def test_verify_with_a_kept_load_and_a_damaged_note_lists_it_and_does_not_raise(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "m.db"
    with fm.Memory(db) as mem:
        write(mem)
    with fm.Memory(db) as mem:
        mem.render(QUESTIONS[0], 500)
        assert mem.store.get_kept_load("default") is not None
    raw = sqlite3.connect(db)
    raw.execute("DROP TRIGGER notes_no_update")  # a change made past the triggers
    raw.execute("UPDATE notes SET fields = '{' WHERE seq = 1")  # a row that cannot be read
    raw.commit()
    raw.close()
    problems = fm.Memory(db).verify()
    assert problems and any("note 1" in p for p in problems)
