"""``fm.Memory(url, key=...)`` against a real ``flexamem serve``: the same script gives the same answers
as a local SQLite memory; errors arrive as the library's own; retried writes are stored once."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

import flexamem as fm
from flexamem.client import RemoteMemory
from flexamem.notes import note_exact
from tests.server.conftest import Server


def remote(server: Server, history: str | None = None, **kwargs: Any) -> fm.Memory:
    return fm.Memory(server.url, key=server.keys["acme"], history=history or "h" + uuid.uuid4().hex[:10], **kwargs)


def unsalted(note: dict[str, Any]) -> dict[str, Any]:
    """A note without its digest: each store salts the digests it writes (schema v8), so the same writes
    to two stores give every other field equal and the digests different."""
    return {k: v for k, v in note.items() if k != "digest"}


def script(mem: fm.Memory) -> dict[str, Any]:
    """What a user's program does with a memory: every write, read and agent call, and what it got."""
    out: dict[str, Any] = {}
    out["named"] = mem.add_session(
        [{"speaker": "Ana", "text": "I moved to Lisbon in May; the hotel booking ref is QX-4471.", "id": "D1:1"},
         {"speaker": "Bo", "text": "Nice! Send me a photo.", "id": "D1:2"}],
        session_id="s1", date="2023-05-08",
    )  # fmt: skip
    out["unnamed"] = mem.add_session([{"speaker": "Ana", "text": "The cat is called Miso."}])
    out["messages"] = mem.add_messages(
        [{"role": "user", "content": "What was the booking ref?"}, {"role": "assistant", "content": "QX-4471"}]
    )
    out["batch"] = mem.add_sessions(
        [{"turns": [{"speaker": "Ana", "text": "Gym on Tuesdays."}]},
         {"turns": [{"speaker": "Bo", "text": "I only drink green tea."}], "session_id": "t9", "date": "2023-06-01"}]
    )  # fmt: skip
    out["async"] = asyncio.run(mem.aadd_session([{"speaker": "Bo", "text": "My sister lives in Porto."}]))
    for mode in ("auto", "pieces", "units"):
        r = mem.render("What is the hotel booking ref?", budget=300, mode=mode)
        out[f"render {mode}"] = (r.text, r.tokens, r.allowance, r.pass_through, r.shown, r.composition)
    out["arender"] = asyncio.run(mem.arender("Where does the sister live?", 200)).text
    out["ordered"] = mem.render("cat", budget=200, mode="units", order=["u2", "u1"]).text
    out["search"] = mem.search("Lisbon hotel", limit=3)
    out["notes"] = [unsalted(note_exact(n)) for n in mem.notes()]
    out["note"] = unsalted(note_exact(mem.note("u1")))
    agent = mem.agent("Find the hotel booking ref", budget=1500, system="You are terse.", session_id="a1")
    for i in range(8):
        agent.step(f"cat notes/day{i}.txt", f"day {i}: " + "walked around the old town " * 12)
    out["context"] = agent.context().messages
    out["units context"] = agent.context(mode="units").messages
    out["resumed"] = mem.agent(session_id="a1").messages()
    out["sessions"] = mem.sessions()
    out["len"] = len(mem)
    out["verify"] = mem.verify()
    out["drop session"] = (mem.drop_session("a1"), mem.drop_session("a1"), mem.sessions())
    return out


@pytest.mark.slow
def test_the_same_script_gives_the_same_answers_locally_and_over_http(server: Server, tmp_path: Path) -> None:
    local = script(fm.Memory(str(tmp_path / "local.db")))
    mem = remote(server)
    assert isinstance(mem, RemoteMemory)
    over_http = script(mem)
    assert local.keys() == over_http.keys()
    for name in local:
        assert over_http[name] == local[name], name
    assert mem.drop() and len(mem) == 0 and not mem.drop()


def test_server_errors_arrive_as_the_library_errors(server: Server) -> None:
    mem = remote(server)
    with pytest.raises(fm.NotFoundError):
        mem.note("u1")  # no such history
    assert mem.notes() == [] and len(mem) == 0 and mem.sessions() == []
    mem.add_session([{"speaker": "Ana", "text": "hello"}], session_id="s1")
    with pytest.raises(fm.InvalidInputError, match="u9"):  # a NotFoundError is an InvalidInputError, as locally
        mem.note("u9")
    with pytest.raises(fm.DuplicateUnitError):
        mem.add_session([{"speaker": "Ana", "text": "again"}], session_id="s1")
    with pytest.raises(fm.BudgetError):
        mem.render("hello", budget=3, prompt="a long fixed prompt " * 5)
    with pytest.raises(fm.InvalidInputError):
        mem.add_session([{"speaker": "Ana", "text": ""}])
    with pytest.raises(fm.UnauthorizedError):
        fm.Memory(server.url, key="not-a-key", history="x").render("q", 100)
    with pytest.raises(fm.InvalidInputError, match="API key"):
        fm.Memory(server.url, key="  ", history="x")
    with pytest.raises(fm.InvalidInputError, match="server"):
        fm.Memory(server.url, key="k", embedder=fm.MiniLMEmbedder())
    with pytest.raises(fm.InvalidInputError, match="URL"):
        fm.Memory("memory.db", key="k")
    assert [n.raw for n in mem.notes()] == ["Ana: hello"]  # nothing of the refused calls was stored
    for local in ("store", "core", "writer", "settings", "embedder"):
        with pytest.raises(fm.InvalidInputError, match="URL"):  # what lives on the server, refused by name
            getattr(mem, local)
    with pytest.raises(AttributeError):
        mem.no_such_thing  # noqa: B018


def test_async_with_closes_the_connections_on_their_loop(server: Server, tmp_path: Path) -> None:
    async def main(mem: fm.Memory) -> tuple[list[str], int]:
        async with mem:
            units = await mem.aadd_session([{"speaker": "Ana", "text": "the key is under the mat"}])
            rendering = await mem.arender("where is the key?", 200)
        return units, rendering.tokens

    for mem in (remote(server), fm.Memory(str(tmp_path / "m.db"))):
        units, tokens = asyncio.run(main(mem))
        assert len(units) == 1 and 0 < tokens <= 200
    closed = remote(server)
    asyncio.run(closed.aclose())
    assert closed.http._sync.is_closed  # the sync client too: nothing left open


def test_a_retried_write_is_stored_once(server: Server) -> None:
    mem = remote(server)
    first = mem.add_session([{"speaker": "Ana", "text": "one"}], request_id="req-1")
    again = mem.add_session([{"speaker": "Ana", "text": "one"}], request_id="req-1")
    batch = mem.add_sessions([{"turns": [{"speaker": "Bo", "text": "two"}]}], request_id="req-2")
    batch_again = mem.add_sessions([{"turns": [{"speaker": "Bo", "text": "two"}]}], request_id="req-2")
    assert first == again and batch == batch_again
    assert [n.raw for n in mem.notes()] == ["Ana: one", "Bo: two"]
    agent = mem.agent("task", budget=1000, session_id="a1")
    assert agent.step("ls", "a b", step_id="x") == agent.step("ls", "a b", step_id="x") == 1
    assert mem.agent("task", budget=1000, session_id="a1").step_count == 1  # a retried start resumes


def test_a_dead_server_is_a_typed_error_after_the_retry_time() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once the socket is closed
    mem = fm.Memory(f"http://127.0.0.1:{port}", key="k", client=fm.ClientSettings(retry_seconds=0.5))
    with pytest.raises(fm.StoreUnavailableError, match="cannot reach"):
        mem.render("q", 100)


def test_the_cli_talks_to_a_server(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from flexamem.cli import main

    monkeypatch.setenv("FLEXAMEM_API_KEY", server.keys["acme"])
    monkeypatch.delenv("FLEXAMEM_DB", raising=False)
    history = "cli" + uuid.uuid4().hex[:8]
    turns = tmp_path / "turns.json"
    turns.write_text(json.dumps([{"speaker": "Ana", "text": "My locker code is 5521."}]))
    at = ["--url", server.url, "--history", history]
    assert main(["add", str(turns), *at, "--session-id", "s1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["units"] == ["s1"]
    assert main(["render", "locker code", *at, "--budget", "200"]) == 0
    assert "5521" in capsys.readouterr().out
    assert main(["show", "u1", *at, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["raw"] == "Ana: My locker code is 5521."
    monkeypatch.setenv("FLEXAMEM_URL", server.url)  # the server from the environment
    assert main(["histories", "--json"]) == 0
    assert {"history": history, "kind": "conversation", "notes": 1} in json.loads(capsys.readouterr().out)
    assert main(["drop", "--history", history, "--yes"]) == 0
    assert main(["notes", "--history", history]) == 0 and "no notes" in capsys.readouterr().out
    monkeypatch.setenv("FLEXAMEM_API_KEY", "wrong")
    assert main(["notes", "--history", history]) == 1
    assert "UnauthorizedError" not in (err := capsys.readouterr().err) and "API key" in err


def test_the_client_page_example_runs(server: Server, tmp_path: Path) -> None:
    from tests.doors.docs_blocks import blocks, run_block

    python = blocks("client.md", "python")
    assert len(python) == 1
    env = {"FLEXAMEM_URL": server.url, "FLEXAMEM_API_KEY": server.keys["acme"]}
    out = run_block(python[0], "python", tmp_path, env)
    assert "NotFoundError" in out and "Refund the hotel to my Visa ending 4417." in out
    (tmp_path / "turns.json").write_text('[{"speaker": "Ana", "text": "Use the Amex ending 1009."}]')
    (bash,) = blocks("client.md", "bash")
    assert "1009" in run_block(bash, "bash", tmp_path, env)
