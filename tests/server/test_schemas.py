"""The HTTP response models say what the library's own JSON says: a field added to one side only fails
here (the OpenAPI document is generated from the models, the TypeScript types from the document)."""

from __future__ import annotations

from dataclasses import fields

import pytest

import flexamem as fm

pytest.importorskip("fastapi")

from flexamem.notes import note_json
from flexamem.render.result import Hit, rendering_json
from flexamem.server import schemas


def small_memory() -> fm.Memory:
    mem = fm.Memory(":memory:")
    mem.add_session(
        [{"speaker": "Ana", "text": "My seat is 12C.", "id": "t1"}, {"speaker": "Ben", "text": "Noted.", "id": "t2"}],
        session_id="s1",
    )
    return mem


def keys(model: type) -> set[str]:
    return set(model.model_fields)  # type: ignore[attr-defined]


def test_every_response_model_has_the_fields_of_the_librarys_json() -> None:
    mem = small_memory()
    r = mem.render("seat", 2000)
    assert keys(schemas.RenderOut) == set(rendering_json(r))
    assert keys(schemas.Shown) == set(rendering_json(r)["shown"][0])
    assert keys(schemas.HitOut) == {f.name for f in fields(Hit)}
    note = mem.notes()[0]
    assert keys(schemas.NoteOut) == set(note_json(note))
    full = note_json(note, full=True)
    assert keys(schemas.NoteFull) == set(full)
    assert keys(schemas.PieceOut) == set(full["pieces"][0])
    assert keys(schemas.HeadOut) == set(mem.head().as_json())
    erasure = mem.erase(turn="t2", reason="asked")
    assert keys(schemas.ErasureOut) == set(erasure.as_json())
