"""A note as JSON (the wire form of ``notes`` over HTTP): the raw text carried once, read back equal."""

import dataclasses
import json

import flexamem as fm
from flexamem.notes import Note, note_exact, note_from_json, note_json


def same(a: Note, b: Note) -> bool:
    """Every field equal (the embedding compared as its bytes, the pieces with their texts)."""
    return note_exact(a) == note_exact(b) and a.pieces == b.pieces


def test_a_full_note_carries_its_raw_text_once_and_reads_back_equal(demo_mem: fm.Memory) -> None:
    for note in demo_mem.notes():
        full = note_json(note, full=True)
        assert same(note_from_json(full["exact"], full["raw"]), note)
        assert same(note_from_json(note_exact(note)), note)  # the raw text inside
        assert "raw" not in full["exact"] and all(len(p) == 8 for p in full["exact"]["pieces"])
        with_texts = {**note_exact(note), "pieces": [dataclasses.astuple(p) for p in note.pieces]}
        saved = len(json.dumps(with_texts)) - len(json.dumps(full["exact"]))
        assert saved >= 2 * len(note.raw)  # the raw text and its pieces' texts (escapes aside)


def test_pieces_written_with_their_text_are_read_as_they_are(demo_mem: fm.Memory) -> None:
    """What servers wrote before the pieces' texts were left out of ``exact``."""
    note = demo_mem.notes()[0]
    older = {**note_exact(note), "pieces": [dataclasses.astuple(p) for p in note.pieces]}
    assert same(note_from_json(json.loads(json.dumps(older))), note)
