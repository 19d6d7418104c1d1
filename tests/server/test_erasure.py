"""Erasure over HTTP (issue 49): a server of two workers, both holding the history, erases a turn and an
agent step for the tenant that owns them and for no other; neither worker shows the words again (renders,
notes, search, the inspector), the store's files hold none of them, the chain verifies with the head kept
before; a tenant's export is a download only it can take, and it imports clean."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import pytest

import flexamem as fm

from .conftest import Server

pytestmark = pytest.mark.faults  # make faults runs the erasure tests too

SECRET = "77341-OTTER"


def shown(server: Server, history: str, link: str) -> list[str]:
    """Where the words are shown, asked of both workers (a new connection per request)."""
    found = []
    for _ in range(4):
        with server.client() as c:
            for mode in ("auto", "units", "pieces"):
                r = c.post(
                    f"/v1/histories/{history}/render", json={"query": "locker PIN", "budget": 4096, "mode": mode}
                )
                assert r.status_code == 200, r.text
                if SECRET in r.text:
                    found.append(f"render {mode}")
            for path in ("notes-full", "search?query=locker+PIN"):
                got = c.get(f"/v1/histories/{history}/{path}")
                if got.status_code == 405:  # search is a POST
                    got = c.post(f"/v1/histories/{history}/search", json={"query": "locker PIN"})
                if SECRET in got.text:
                    found.append(path)
            if SECRET in c.get(link).text:
                found.append("inspector")
    return found


def test_an_erasure_reaches_every_worker_and_no_other_tenant(server: Server, tmp_path: Path) -> None:
    history = "e" + uuid.uuid4().hex[:10]
    mem = fm.Memory(server.url, key=server.keys["acme"], history=history)
    for i in range(4):
        text = f"My locker PIN is {SECRET}." if i == 1 else f"Day {i}: the ferry left at {i + 8}."
        mem.add_session([{"speaker": "Ana", "text": text, "id": f"t{i}"}], session_id=f"s{i}")
    agent = mem.agent(task="find the key", budget=800, session_id="a1")
    for i in range(5):
        agent.step(action=f"open(drawer={i})", observation=f"drawer {i}" + (f" holds {SECRET}" if i == 3 else ""))
    with server.client() as c:
        link = c.post(f"/v1/histories/{history}/inspect-link", json={"query": "locker PIN", "budget": 4096}).json()[
            "url"
        ]
    assert shown(server, history, link)  # both workers hold the words before
    kept = mem.head()

    with server.client("other") as c:  # another tenant names the same history: it is not theirs
        assert c.post(f"/v1/histories/{history}/erase", json={"turn": "t1"}).status_code == 404
        assert c.get(f"/v1/histories/{history}/export").status_code == 404
        assert c.get(f"/v1/histories/{history}/erasures").status_code == 404
    with server.client() as c:
        for body in ({}, {"turn": "t1", "session": "s1"}, {"agent": "a1"}, {"step": 2}):
            answer = c.post(f"/v1/histories/{history}/erase", json=body)
            assert answer.status_code in (400, 422), (body, answer.text)
    with pytest.raises(fm.NotFoundError):
        mem.erase(turn="t9")
    assert mem.erasures() == [] and mem.head() == kept  # refused calls changed nothing

    erasure = mem.erase(turn="t1", reason="asked by Ana")
    assert (erasure.kind, erasure.ids, erasure.reason) == ("turn", ("t1",), "asked by Ana")
    step = fm.Memory(server.url, key=server.keys["acme"], history=history).agent(session_id="a1").erase(4)
    assert step.kind == "step" and step.steps == (4,)
    assert shown(server, history, link) == []
    assert SECRET not in json.dumps(agent.context().messages)
    assert [e.kind for e in mem.erasures()] == ["turn", "step"]
    assert mem.verify() == [] and mem.verify(head=kept) == [] and mem.head().erasures == 1
    files = [p for p in server.db.parent.iterdir() if p.name.startswith(server.db.name)]
    assert [p.name for p in files if SECRET.encode() in p.read_bytes()] == []

    with server.client() as c:
        download = c.get(f"/v1/histories/{history}/export")
    assert download.status_code == 200 and "attachment" in download.headers["content-disposition"]
    assert SECRET not in download.text
    copy = tmp_path / "copy.db"
    names = fm.import_history(io.BytesIO(download.content), copy, history=history)
    assert names[0] == history
    again = fm.Memory(copy, history=history)
    assert again.verify() == [] and len(again.erasures()) == 2
    assert again.render("ferry", 4096).text == mem.render("ferry", 4096).text

    erasure, units = mem.correct("t2", [{"speaker": "Ana", "text": "Day 2: the ferry left at 11."}])
    assert erasure.ids == ("t2",) and len(units) == 1
    text = mem.render("when did the ferry leave on day 2?", 4096).text
    assert "left at 11" in text and "left at 10" not in text
    with pytest.raises(fm.InvalidInputError):  # refused before anything is sent: nothing erased
        mem.correct("t3", [{"speaker": "", "text": ""}])
    assert len(mem.erasures()) == 3
