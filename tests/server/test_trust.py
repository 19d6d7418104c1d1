"""Issue 21 over HTTP, against the real two-worker server: deleted histories stay deleted in every
worker, writes racing a DELETE leave no gap, agent-only histories are deletable, poisoned steps are
refused, and a real bug is one JSON 500 that keeps the client's connection."""

from __future__ import annotations

import json
import socket
import sqlite3
import threading
from urllib.parse import urlparse

import httpx

import flexamem as fm
from flexamem.chat import chat_problems

from .conftest import Server


def fresh(server: Server) -> httpx.Client:
    """A client on a new connection (the kernel spreads new connections over both workers)."""
    return httpx.Client(
        base_url=server.url,
        headers={"Authorization": f"Bearer {server.keys['acme']}"},
        timeout=60,
        limits=httpx.Limits(max_keepalive_connections=0),
    )


def test_a_deleted_history_is_never_shown_by_any_worker(server: Server) -> None:
    with fresh(server) as c:
        c.post(
            "/v1/histories/pin/sessions",
            json={"session_id": "a", "turns": [{"speaker": "A", "text": "My PIN is 9876"}]},
        )
        c.post(
            "/v1/histories/pin/sessions", json={"session_id": "b", "turns": [{"speaker": "A", "text": "I like tea"}]}
        )
        for _ in range(10):  # both workers hold the history in memory
            assert "9876" in c.post("/v1/histories/pin/render", json={"query": "What is the PIN?", "budget": 500}).text
        assert c.delete("/v1/histories/pin").json() == {"history": "pin", "dropped": True}
        r = c.post("/v1/histories/pin/sessions", json={"session_id": "c", "turns": [{"speaker": "A", "text": "new"}]})
        assert r.status_code == 200
        shown = [
            c.post("/v1/histories/pin/render", json={"query": "What is the PIN?", "budget": 500}) for _ in range(40)
        ]
        assert all(r.status_code == 200 and "9876" not in r.text for r in shown)
        assert [n["unit_id"] for n in c.get("/v1/histories/pin/notes").json()] == ["c"]


def test_writes_racing_a_delete_leave_a_whole_history(server: Server) -> None:
    statuses: list[int] = []
    odd: list[str] = []
    stop = threading.Event()

    def writer(k: int) -> None:
        with fresh(server) as c:
            i = 0
            while not stop.is_set():
                for r in (
                    c.post("/v1/histories/race/sessions", json={"turns": [{"speaker": "A", "text": f"w{k} n{i}"}]}),
                    c.post("/v1/histories/race/render", json={"query": "n1", "budget": 300}),
                ):
                    if r.status_code == 503 and "ServerBusyError" in r.text and r.headers.get("retry-after"):
                        continue  # a busy worker's refusal (its bound on writes in progress) stores nothing
                    statuses.append(r.status_code)
                    if r.status_code not in (200, 404):
                        odd.append(r.text)
                i += 1

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    with fresh(server) as c:
        for _ in range(10):
            statuses.append(c.delete("/v1/histories/race").status_code)
            stop.wait(0.1)
    stop.set()
    for t in threads:
        t.join(60)
    assert statuses and all(s in (200, 404, 409) for s in statuses), odd
    assert statuses.count(200) > 10
    mem = fm.Memory(server.db, history="acme/race")
    assert mem.verify() == [] and [n.seq for n in mem.notes()] == list(range(len(mem)))
    with fresh(server) as c:
        r = c.post("/v1/histories/race/sessions", json={"turns": [{"speaker": "A", "text": "after"}]})
        assert r.status_code == 200
        assert c.post("/v1/histories/race/render", json={"query": "after", "budget": 300}).status_code == 200


def test_an_agent_only_history_can_be_deleted(server: Server) -> None:
    with server.client() as c:
        assert (
            c.post("/v1/histories/solo/agents", json={"task": "t", "budget": 600, "session_id": "a"}).status_code == 200
        )
        for i in range(3):
            assert (
                c.post("/v1/histories/solo/agents/a/steps", json={"action": f"a{i}", "observation": "o"}).status_code
                == 200
            )
        assert any(h["history"] == "solo/agent:a" for h in c.get("/v1/histories").json())
        assert c.delete("/v1/histories/solo").json() == {"history": "solo", "dropped": True}
        assert not any(h["history"].startswith("solo") for h in c.get("/v1/histories").json())
        assert c.post("/v1/histories/solo/agents/a/steps", json={"action": "x", "observation": "o"}).status_code == 404
        assert c.get("/v1/histories/solo/agents/a/context").status_code == 404
        assert c.delete("/v1/histories/solo").status_code == 404


def test_poisoned_steps_and_odd_names_get_a_4xx(server: Server) -> None:
    with server.client() as c:
        c.post("/v1/histories/poison/agents", json={"task": "t", "budget": 600, "session_id": "a"})
        c.post("/v1/histories/poison/sessions", json={"turns": [{"speaker": "A", "text": "keep"}]})
        bad_messages = [
            [{"role": "assistant", "content": "x", "tool_calls": 5}],
            [{"role": "assistant", "content": "x", "tool_calls": [{"id": "c", "function": 1.5}]}],
            [{"role": [], "content": "x"}],
            [{"role": "user", "content": json.loads("[" * 300 + "]" * 300)}],
        ]
        for msgs in bad_messages:
            r = c.post(
                "/v1/histories/poison/agents/a/steps", json={"action": "a", "observation": "o", "messages": msgs}
            )
            assert 400 <= r.status_code < 500 and r.json()["error"]["message"], r.text
        ctx = c.get("/v1/histories/poison/agents/a/context")
        assert ctx.status_code == 200 and chat_problems(ctx.json()["messages"]) == []
        for unit in ("u%C2%B2", "u%D9%A3", "u0", "u99999999999999999999"):
            r = c.get(f"/v1/histories/poison/notes/{unit}")
            assert r.status_code == 404, (unit, r.text)


def raw_get(host: str, port: int, sock: socket.socket, path: str, key: str) -> tuple[int, bytes]:
    """One HTTP/1.1 request on an open socket (kept alive), and its status and body."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split(b" ")[1]), body


def test_a_damaged_row_is_one_json_500_naming_it_and_the_connection_stays(server: Server) -> None:
    with server.client() as c:
        c.post("/v1/histories/broken/sessions", json={"session_id": "a", "turns": [{"speaker": "A", "text": "ok"}]})
    db = sqlite3.connect(server.db)  # a note row no version of FlexA-Mem writes: a damaged store
    row = list(db.execute("SELECT * FROM notes WHERE history_id = 'acme/broken'").fetchone())
    row[1], row[2], row[15] = 1, "b", "{not json"  # seq, unit_id, blocks
    db.execute(f"INSERT INTO notes VALUES ({','.join('?' * len(row))})", row)
    db.commit()
    db.close()
    url = urlparse(server.url)
    assert url.hostname and url.port
    before = server.log.read_text().count('"error": "')
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        status, body = raw_get(url.hostname, url.port, sock, "/v1/histories/broken/notes", server.keys["acme"])
        error = json.loads(body)["error"]
        assert status == 500 and error["type"] == "StoreCorruptError" and "note 1" in error["message"]
        status, _ = raw_get(url.hostname, url.port, sock, "/health", server.keys["acme"])  # same connection
        assert status == 200
    log = server.log.read_text()
    assert log.count('"error": "') == before + 1 and "Traceback" not in log and "not json" not in log
