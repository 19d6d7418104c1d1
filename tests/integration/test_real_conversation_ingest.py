"""Ingest a real LoCoMo development conversation (skipped only when the shared file is absent)."""

import time

import pytest

import flexamem as fm
from flexamem_bench.conversation_data import load_locomo

from ..helpers import needs_data, shared_file

LOCOMO = shared_file("locomo", "locomo-dev.json")
pytestmark = [
    pytest.mark.integration,
    needs_data(LOCOMO),
]


@pytest.fixture(scope="module")
def conversation():  # type: ignore[no-untyped-def]
    return load_locomo(LOCOMO)[0]


def test_ingest_keeps_every_turn_and_its_dia_id(conversation, tmp_path) -> None:  # type: ignore[no-untyped-def]
    mem = fm.Memory(tmp_path / "locomo.db", settings=fm.Settings(one_unit_per_session=True))
    start = time.perf_counter()
    for s in conversation.sessions:
        mem.add_session(s.turns, session_id=s.session_id, date=s.date)
    elapsed = time.perf_counter() - start
    notes = fm.Memory(tmp_path / "locomo.db").notes()
    assert len(notes) == len(conversation.sessions)
    dia_ids = [t["id"] for s in conversation.sessions for t in s.turns]
    assert [tid for n in notes for tid in n.turn_ids] == dia_ids
    assert {p.source_id for n in notes for p in n.pieces} == set(dia_ids)
    for n in notes:
        assert n.date and len(n.record.split()) <= 80 and len(n.links) >= min(3, len(notes) - 1)
        assert all(p.tokens <= fm.Settings().kappa for p in n.pieces)
    # every evidence turn of the questions can be found among the stored turns
    evidence = {e for q in conversation.questions for e in q.evidence}
    assert len(evidence & set(dia_ids)) / len(evidence) > 0.95
    print(f"ingested {len(notes)} sessions in {elapsed:.2f} s")
