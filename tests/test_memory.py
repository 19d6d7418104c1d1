import gc
import weakref
from pathlib import Path

import numpy as np
import pytest

import flexamem as fm


def test_add_session_returns_ids_and_writes_full_notes(mem: fm.Memory) -> None:
    ids = mem.add_session(
        [
            {"speaker": "Caroline", "text": "I went to the LGBTQ support group yesterday.", "id": "D1:3"},
            {"speaker": "Melanie", "text": "That's great!\nHow did it go?", "id": "D1:4"},
        ],
        session_id="s1",
        date="8 May 2023",
    )
    assert ids == ["s1"]
    [note] = mem.notes()
    assert note.raw == "Caroline: I went to the LGBTQ support group yesterday.\nMelanie: That's great!\nHow did it go?"
    assert note.date == "8 May 2023" and note.session_id == "s1" and note.turn_ids == ("D1:3", "D1:4")
    assert note.raw_tokens == fm.count(note.raw) and note.record_tokens == fm.count(note.record)
    assert note.fields_tokens == fm.count(note.fields.as_text())
    assert note.embedding.shape == (384,) and abs(float(np.linalg.norm(note.embedding)) - 1) < 1e-5
    assert [p.source_id for p in note.pieces] == ["D1:3", "D1:4"]
    assert sum(p.tokens for p in note.pieces) <= note.raw_tokens + len(note.pieces)


def test_links_go_both_ways_to_the_top_three(demo_mem: fm.Memory) -> None:
    demo_mem.add_session([{"speaker": "Ana", "text": "Lisbon flight TP1351 was delayed by an hour."}], session_id="s4")
    notes = demo_mem.notes()
    newest = notes[-1]
    assert len(newest.links) == 3
    sims = np.stack([n.embedding for n in notes[:-1]]) @ newest.embedding
    assert list(newest.links) == [int(i) for i in np.argsort(-sims, kind="stable")[:3]]
    for target in newest.links:
        assert newest.seq in notes[target].links


def test_session_ids_are_generated_and_kept_unique(mem: fm.Memory) -> None:
    assert mem.add_session([{"speaker": "A", "text": "one"}]) == ["s1"]
    assert mem.add_session([{"speaker": "A", "text": "two"}]) == ["s2"]
    with pytest.raises(fm.DuplicateUnitError):
        mem.add_session([{"speaker": "A", "text": "three"}], session_id="s1")


def test_bad_input_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    mem = fm.Memory(path)
    mem.add_session([{"speaker": "A", "text": "kept"}], session_id="ok")
    for bad in (
        [{"speaker": "A", "text": "fine"}, {"speaker": "B", "text": ""}],
        [{"speaker": "A", "text": b"\xc3\x28"}],
        [{"speaker": "A", "text": "x", "extra": 1}],
        [{"speaker": None, "text": "x"}],
    ):
        with pytest.raises(fm.InvalidInputError):
            mem.add_session(bad, session_id="bad")
    with pytest.raises(fm.InvalidInputError):
        mem.add_session([{"speaker": "A", "text": "x"}], session_id="   ")
    assert [n.unit_id for n in fm.Memory(path).notes()] == ["ok"]


def test_megabyte_line_is_stored(mem: fm.Memory) -> None:
    text = "".join(f"value{i} " for i in range(150_000))[:1_000_000]
    [uid] = mem.add_session([{"speaker": "tool", "text": text}], session_id="big")
    note = mem.note(uid)
    assert note.raw == "tool: " + text
    assert all(p.tokens <= mem.settings.kappa for p in note.pieces)
    assert len(note.record.split()) <= 80


def test_many_histories_in_one_file(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    a, b = fm.Memory(path, history="a"), fm.Memory(path, history="b")
    a.add_session([{"speaker": "A", "text": "alpha"}], session_id="x")
    b.add_session([{"speaker": "B", "text": "beta"}], session_id="x")
    assert fm.Memory(path, history="a").notes()[0].raw == "A: alpha"
    assert fm.Memory(path, history="b").notes()[0].raw == "B: beta"


def test_unknown_unit_and_settings_validation(mem: fm.Memory) -> None:
    with pytest.raises(fm.InvalidInputError):
        mem.note("nope")
    with pytest.raises(ValueError, match="kappa"):
        fm.Settings(kappa=0)
    with pytest.raises(ValueError, match="lam"):
        fm.Settings(lam=1.0)
    with pytest.raises(fm.InvalidInputError, match="auto_turn_vector"):
        fm.Settings(auto_turn_vector=1.5)
    with pytest.raises(fm.InvalidInputError, match="auto_turn_vector"):
        fm.Settings(auto_turn_vector=-0.1)
    assert fm.Settings(auto_turn_vector=0.0).value("auto_turn_vector") == 0.0  # the best piece alone, as before
    with pytest.raises(fm.InvalidInputError, match="auto_turn_length"):
        fm.Settings(auto_turn_length=-1.0)
    assert fm.Settings(auto_turn_length=0.0).value("auto_turn_length") == 0.0  # no discount, as before
    with pytest.raises(fm.InvalidInputError, match="auto_turn_room"):
        fm.Settings(auto_turn_room=1.5)
    for bad in (1.5, -0.1):
        with pytest.raises(fm.InvalidInputError, match="auto_session_vector"):
            fm.Settings(auto_session_vector=bad)
    assert fm.Settings().value("auto_session_vector") == 0.0  # off unless asked for


def test_search_lists_the_turns_a_render_recovers_first(demo_mem: fm.Memory) -> None:
    question = "Which card should the hotel refund go to?"
    for mode in ("auto", "pieces"):
        hits = demo_mem.search(question, mode=mode, limit=4)
        assert 1 <= len(hits) <= 4 and len({(h.seq, h.block) for h in hits}) == len(hits)
        note = demo_mem.note(hits[0].unit_id)
        assert hits[0].text == note.blocks[hits[0].block].text and hits[0].label == note.label
        shown = demo_mem.render(question, budget=400, mode=mode)
        assert hits[0].text.strip().splitlines()[0] in shown.text  # the best turn is what a small render shows
    assert len(demo_mem.search(question, limit=1)) == 1
    for bad in ({"mode": "units"}, {"limit": 0}, {"limit": True}):
        with pytest.raises(fm.InvalidInputError):
            demo_mem.search(question, **bad)  # type: ignore[arg-type]
    assert fm.Memory(":memory:").search(question) == []


def test_settings_assigned_apply_from_the_next_call() -> None:
    mem = fm.Memory(":memory:")
    for i in range(30):
        mem.add_session(
            [{"speaker": "Ana", "text": f"Day {i}: parcel {i} went to depot {i % 5}. " * 3}], session_id=f"d{i}"
        )
    before = mem.render("parcel 7", budget=1500)
    mem.settings = fm.Settings(auto_rho=0.25, rho=0.5)  # a rendering setting: the timeline keeps more room
    after = mem.render("parcel 7", budget=1500)
    small, large = (r.composition.get("records", 0) + r.composition.get("merged", 0) for r in (before, after))
    assert large > small and after.tokens <= after.allowance
    mem.settings = fm.Settings(kappa=16)  # a writing setting: the history keeps the one it recorded
    long_turn = [{"speaker": "Ana", "text": "a long line about the weather and the sea " * 10}]
    with pytest.warns(fm.WriteSettingsWarning, match="kappa=128 \\(given 16\\)"):
        mem.add_session(long_turn, session_id="new")
    assert max(p.tokens for p in mem.note("new").pieces) > 16 and mem.write_settings()["kappa"] == 128
    fresh = fm.Memory(":memory:", settings=fm.Settings(kappa=16))  # before its first write: the given ones
    fresh.add_session(long_turn)
    assert max(p.tokens for p in fresh.notes()[0].pieces) <= 16 and fresh.write_settings()["kappa"] == 16
    with pytest.raises(fm.InvalidInputError):
        mem.settings = {"kappa": 16}  # type: ignore[assignment]


def test_a_view_let_go_is_freed_at_once_not_by_the_cyclic_collector(tmp_path: Path) -> None:
    """A rendered view holds no reference cycle (its renderer and timeline reach back to it weakly), so
    a view a server's cache lets go is freed with its indexes at once. In a cycle it waited for a full
    collection, which a worker opening many histories ran every ~1.5 s, holding every request for up to
    0.4 s (docs/PERFORMANCE.md)."""
    mem = fm.Memory(str(tmp_path / "m.db"), history="h")
    mem.add_session([{"speaker": "Ana", "text": "The Lisbon trip is on the 14th, invoice INV-88."}])
    mem.render("When is the trip?", 1024)
    core, renderer = weakref.ref(mem.core), weakref.ref(mem.core.renderer)
    gc.collect()
    gc.disable()
    try:
        mem.close()
        del mem
        assert core() is None and renderer() is None  # freed by reference counting alone
    finally:
        gc.enable()
