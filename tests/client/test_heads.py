"""Heads over HTTP (issue 48): a server signs every head with its key file's secret; a head a client kept
shows rows cut off the end, which the database alone cannot, through ``POST .../verify``."""

from __future__ import annotations

import sqlite3
import uuid

import pytest

import flexamem as fm
from tests.server.conftest import Server

pytestmark = pytest.mark.faults


def test_a_signed_head_kept_by_a_client_catches_a_cut_tail(server: Server) -> None:
    history = "h" + uuid.uuid4().hex[:10]
    mem = fm.Memory(server.url, key=server.keys["acme"], history=history)
    for i in range(3):
        mem.add_session([{"speaker": "Ana", "text": f"parcel {i} went to depot {i}"}], session_id=f"s{i}")
    agent = mem.agent(task="find parcel 2", budget=900, session_id="a1")
    agent.step(action="look", observation="depot 2")
    kept = [mem.head(), agent.head()]
    assert kept[0].notes == 3 and kept[0].signature and kept[1].steps == 1 and kept[1].signature
    assert mem.verify(head=kept) == []
    forged = fm.Head.from_json({**kept[0].as_json(), "signature": "0" * 64})
    assert any("not signed by this store's key" in p for p in mem.verify(head=forged))
    db = sqlite3.connect(server.db)  # an administrator cuts the newest note (and its head) past the library
    names = [f"{t}_no_delete" for t in ("pieces", "piece_vectors", "notes", "links")]
    kept_triggers = [r[0] for r in db.execute(
        f"SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name IN ({','.join('?' * len(names))})", names
    )]  # fmt: skip
    for name in names:
        db.execute(f"DROP TRIGGER IF EXISTS {name}")
    for table in ("pieces", "piece_vectors", "notes"):
        db.execute(f"DELETE FROM {table} WHERE history_id = ? AND seq = 2", ("acme/" + history,))
    db.execute("DELETE FROM links WHERE history_id = ? AND (src = 2 OR dst = 2)", ("acme/" + history,))
    db.execute("DELETE FROM heads WHERE history_id = ?", ("acme/" + history,))
    for trigger in kept_triggers:  # the shared server's other tests keep their write-once store
        db.execute(trigger)
    db.commit()
    db.close()
    problems = mem.verify(head=kept)
    assert any("cut off the end or rolled back" in p for p in problems), problems
    with pytest.raises(fm.InvalidInputError):
        mem.verify(head={"history": history})  # not a head
