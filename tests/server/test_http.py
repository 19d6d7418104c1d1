"""The HTTP API against a real server: every door used, tenants kept apart, bad input refused with a 4xx."""

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from flexamem.chat import chat_problems
from tests.servers import worker_pids

from .conftest import Server

JSON = {"content-type": "application/json"}
CALL = {"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": '{"id": "#W4417"}'}}


def test_sessions_messages_render_notes_and_drop(server: Server) -> None:
    with server.client() as c:
        r = c.post("/v1/histories/ana/sessions", json={
            "session_id": "trip", "date": "2024-05-08",
            "turns": [{"speaker": "Ana", "text": "Refund the hotel to my Visa ending 4417."}],
        })  # fmt: skip
        assert r.status_code == 200 and r.json() == {"history": "ana", "units": ["trip"]}
        messages = [
            {"role": "user", "content": "where is #W4417?"},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": "shipped, 1Z999AA10123456784"},
        ]
        r = c.post("/v1/histories/ana/messages", json={"messages": messages, "session_id": "shop"})
        assert r.status_code == 200 and r.json()["units"] == ["shop"]
        r = c.post("/v1/histories/ana/render", json={"query": "Which card gets the refund?", "budget": 300})
        body = r.json()
        assert r.status_code == 200 and "Visa ending 4417" in body["text"]
        assert body["tokens"] <= body["allowance"] and {s["label"] for s in body["shown"]} == {"u1", "u2"}
        notes = c.get("/v1/histories/ana/notes").json()
        assert [n["unit_id"] for n in notes] == ["trip", "shop"]
        full = c.get("/v1/histories/ana/notes/u2").json()
        assert "[tool call c1] get_order" in full["raw"] and full["pieces"] and full["digest"].startswith("v3:")
        assert {"history": "ana", "kind": "conversation", "notes": 2} in c.get("/v1/histories").json()
        assert c.delete("/v1/histories/ana").json() == {"history": "ana", "dropped": True}
        assert c.get("/v1/histories/ana/notes").status_code == 404


def test_agent_sessions_over_http_give_valid_chat_contexts(server: Server) -> None:
    with server.client() as c:
        r = c.post("/v1/histories/bot/agents", json={"task": "Refund order #W4417", "budget": 700, "session_id": "a1"})
        assert r.status_code == 200 and r.json() == {
            "session_id": "a1",
            "steps": 0,
            "messages": 0,
            "task": "Refund order #W4417",
            "system": "",
            "budget": 700,
        }
        for i in range(12):
            msgs = [
                {"role": "assistant", "content": None, "tool_calls": [{**CALL, "id": f"c{i}"}]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": f"order #W4417 line {i} " + "status ok " * 30},
            ]
            step = {"action": f"get_order {i}", "observation": "ok", "messages": msgs, "step_id": f"s{i}"}
            assert c.post("/v1/histories/bot/agents/a1/steps", json=step).json() == {
                "step": i + 1,
                "messages": 2 * (i + 1),
            }
        again = c.post("/v1/histories/bot/agents/a1/steps", json=step)  # a retried step is a no-op
        assert again.json() == {"step": 12, "messages": 24}
        ctx = c.get("/v1/histories/bot/agents/a1/context").json()
        assert ctx["memory_active"] and ctx["tokens"] <= ctx["ceiling"]
        assert chat_problems(ctx["messages"]) == []
        assert c.get("/v1/histories/bot/agents/nope/context").status_code == 404


def test_a_tenant_never_sees_another(server: Server) -> None:
    with server.client("acme") as acme, server.client("other") as other:
        acme.post("/v1/histories/secret/sessions", json={"turns": [{"speaker": "A", "text": "PIN 9921"}]})
        assert all(h["history"] != "secret" for h in other.get("/v1/histories").json())
        for method, path, body in [
            ("GET", "/v1/histories/secret/notes", None),
            ("GET", "/v1/histories/secret/notes/u1", None),
            ("POST", "/v1/histories/secret/render", {"query": "PIN", "budget": 500}),
            ("DELETE", "/v1/histories/secret", None),
            ("GET", "/inspect/secret?query=PIN", None),
        ]:
            r = other.request(method, path, json=body)
            assert r.status_code == 404 and "9921" not in r.text
        assert acme.get("/v1/histories/secret/notes").status_code == 200  # still there


def test_bad_requests_get_clear_4xx_and_lose_nothing(server: Server) -> None:
    with server.client() as c, server.client(None) as anonymous:
        c.post("/v1/histories/keep/sessions", json={"turns": [{"speaker": "A", "text": "keep me"}]})
        cases = [
            (anonymous.get("/v1/histories"), 401),
            (anonymous.get("/v1/histories", headers={"Authorization": "Bearer fm_wrong"}), 401),
            (
                c.post("/v1/histories/keep/render", content=b"{not json", headers={"content-type": "application/json"}),
                422,
            ),
            (c.post("/v1/histories/keep/render", json={"query": 5, "budget": "many"}), 422),
            (c.post("/v1/histories/keep/render", json={"query": "x", "budget": 0}), 422),
            (c.post("/v1/histories/keep/render", json={"query": "x", "budget": 10**9}), 422),
            (c.post("/v1/histories/keep/render", json={"query": "x", "budget": 100, "extra": 1}), 422),
            (c.post("/v1/histories/nope/render", json={"query": "x", "budget": 500}), 404),
            (c.post("/v1/histories/-bad/sessions", json={"turns": [{"speaker": "A", "text": "x"}]}), 422),
            (c.post("/v1/histories/bad%2Fname/sessions", json={"turns": [{"speaker": "A", "text": "x"}]}), 404),
            (c.post("/v1/histories/keep/sessions", json={"turns": [{"speaker": "A", "text": "x" * 300_000}]}), 413),
            (c.post("/v1/histories/keep/messages", json={"messages": [{"role": "robot", "content": "x"}]}), 400),
            (c.post("/v1/histories/keep/agents", json={"task": "t", "budget": 20}), 200),
        ]
        for r, status in cases:
            assert r.status_code == status, (r.request.url, r.text)
            if status >= 400:
                error = r.json()["error"]
                assert error["type"] and error["message"] and "Traceback" not in r.text
        assert [n["record"] for n in c.get("/v1/histories/keep/notes").json()]  # nothing lost
    log = server.log.read_text()
    assert '"status": 413' in log and all(k not in log for k in server.keys.values())
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    notes = [x for x in lines if x.get("path") == "/v1/histories/keep/notes" and x.get("status") == 200]
    assert notes and all(x["tenant"] == "acme" and x["method"] == "GET" and x["ms"] >= 0 for x in notes)  # who asked
    assert any(x.get("status") == 401 and x.get("tenant") is None for x in lines)  # no tenant named for a bad key
    assert all(k not in server.keyfile.read_text() for k in server.keys.values())  # hashes only


def test_a_chunked_body_past_the_limit_gets_413_and_the_connection_goes_on(server: Server) -> None:
    """A body sent without Content-Length (chunked) is counted as it arrives: past the limit it gets 413
    like a declared one, and the rest of it is read, so the next request on the kept-alive connection is
    answered as itself."""
    text = json.dumps({"turns": [{"speaker": "A", "text": "x" * 300_000}]}).encode()

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(text), 16_384):
            yield text[i : i + 16_384]

    with server.client() as c:
        r = c.post("/v1/histories/chunked/sessions", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["type"] == "PayloadTooLarge", r.text
        assert "content-length" not in r.request.headers  # sent chunked
        assert r.headers.get("connection") != "close"  # kept alive: its body was read to the end
        ok = c.post("/v1/histories/chunked/sessions", json={"turns": [{"speaker": "A", "text": "after the refusal"}]})
        assert ok.status_code == 200, ok.text
        notes = c.get("/v1/histories/chunked/notes").json()
        assert len(notes) == len(ok.json()["units"]) == 1  # the 413 stored nothing


def resident_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def test_a_chunked_body_past_the_limit_is_not_held_in_memory(server: Server) -> None:
    """64 MiB sent chunked to a server that takes 200 kB: the bytes past the limit are read and dropped,
    so near the end of the upload no worker holds 8 MiB more than it held before (measured: 12-20 KiB;
    with the body kept whole, one worker had grown 26 MiB by the same point)."""
    workers = worker_pids(server.pid)
    before = {pid: resident_kib(pid) for pid in workers}
    grown: list[int] = []
    block = b"x" * 65_536

    def chunks() -> Iterator[bytes]:
        yield b'{"turns": [{"speaker": "A", "text": "'
        for i in range(1024):
            yield block
            if i == 960:  # 60 MiB sent: what each worker holds now, over what it held before
                grown.append(max(resident_kib(pid) - before[pid] for pid in workers))
        yield b'"}]}'

    with server.client() as c:
        r = c.post("/v1/histories/chunked-big/sessions", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413, r.text
        assert c.get("/v1/histories/chunked-big/notes").status_code == 404  # nothing stored
    assert grown and grown[0] < 8 * 1024, f"a worker grew by {grown[0] // 1024} MiB during the upload"


def test_the_openapi_spec_describes_every_route(server: Server) -> None:
    with server.client(None) as c:
        spec = c.get("/openapi.json").json()
    paths = set(spec["paths"])
    assert {
        "/v1/histories",
        "/v1/histories/{history}/render",
        "/v1/histories/{history}/agents/{session_id}/context",
    } <= paths


@pytest.mark.integration
def test_schemathesis_finds_no_server_error(server: Server) -> None:
    """A property-based fuzz of every operation of the OpenAPI spec (schemathesis): no 5xx, and every
    status answered is one the spec lists for that operation."""
    done = subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "run", f"{server.url}/openapi.json",
         "-H", f"Authorization: Bearer {server.keys['acme']}", "-c", "not_a_server_error,status_code_conformance",
         "-n", "40", "--seed", "7"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:]
    assert "passed" in done.stdout


def test_the_http_page_example_runs(server: Server, tmp_path: Path) -> None:
    from tests.doors.docs_blocks import blocks, run_block

    (code,) = blocks("http.md", "python")
    out = run_block(code, "python", tmp_path, {"FLEXAMEM_URL": server.url, "FLEXAMEM_KEY": server.keys["acme"]})
    assert "Refund the hotel to my Visa ending 4417." in out


def test_the_openapi_spec_in_the_docs_is_current() -> None:
    import importlib.util

    script = Path(__file__).resolve().parents[2] / "scripts" / "openapi.py"
    loader = importlib.util.spec_from_file_location("openapi_script", script)
    assert loader is not None and loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    assert module.OUT.read_text() == module.spec(), "run: python scripts/openapi.py"


def test_the_inspector_takes_a_header_or_a_short_lived_link_never_a_key_in_the_url(server: Server) -> None:
    key = server.keys["acme"]
    with server.client() as c:
        c.post("/v1/histories/links/sessions", json={"turns": [{"speaker": "A", "text": "the code is 5521"}]})
        assert c.get("/inspect/links", params={"query": "code"}).status_code == 200  # the key as a header
        made = c.post("/v1/histories/links/inspect-link", json={"query": "the code", "seconds": 10}).json()
        assert key not in made["url"] and made["expires"] <= time.time() + 11
        short = c.post("/v1/histories/links/inspect-link", json={"query": "the code", "seconds": 10}).json()
        assert c.post("/v1/histories/nope/inspect-link", json={"query": "q"}).status_code == 404
    with httpx.Client(base_url=server.url, timeout=60) as anonymous:
        page = anonymous.get(made["url"])
        assert page.status_code == 200 and "5521" in page.text
        refused = anonymous.get("/inspect/links", params={"query": "code", "key": key})
        assert refused.status_code == 401 and "no API key in the URL" in refused.json()["error"]["message"]
        other_history = made["url"].replace("/inspect/links?", "/inspect/diary?")
        assert anonymous.get(other_history).status_code == 403  # a genuine link names one history
        assert anonymous.get(made["url"][:-3] + "abc").status_code == 401  # forged signature
        time.sleep(11)
        assert anonymous.get(short["url"]).status_code == 401  # expired


def test_every_status_a_route_answers_is_in_the_openapi_document(server: Server) -> None:
    """Real requests to every route, made to fail every way a caller can make them fail; each status
    that comes back must be one the route's OpenAPI entry lists (generated clients then know it)."""
    with server.client(None) as c:
        spec = c.get("/openapi.json").json()["paths"]
    turns = {"turns": [{"speaker": "A", "text": "hello there"}], "session_id": "one"}
    big = {"turns": [{"speaker": "A", "text": "x" * 250_000}]}
    h, a = "/v1/histories/statuses", "/v1/histories/statuses/agents"
    calls = [  # (method, route in the spec, concrete path, body)
        ("post", "/v1/histories/{history}/sessions", f"{h}/sessions", turns),
        ("post", "/v1/histories/{history}/sessions", f"{h}/sessions", turns),  # 409: the unit id is taken
        ("post", "/v1/histories/{history}/sessions", f"{h}/sessions", {"turns": [{"speaker": "A", "text": "\x00"}]}),
        ("post", "/v1/histories/{history}/sessions", f"{h}/sessions", {"turns": []}),
        ("post", "/v1/histories/{history}/sessions", f"{h}/sessions", big),
        ("post", "/v1/histories/{history}/messages", f"{h}/messages", {"messages": [{"role": "nobody", "content": 1}]}),
        ("post", "/v1/histories/{history}/render", f"{h}/render", {"query": "hello", "budget": 500}),
        ("post", "/v1/histories/{history}/render", f"{h}/render", {"query": "  ", "budget": 500}),
        ("post", "/v1/histories/{history}/render", f"{h}/render", {"query": "hello", "budget": 1}),
        ("post", "/v1/histories/{history}/render", "/v1/histories/none/render", {"query": "q", "budget": 500}),
        ("get", "/v1/histories/{history}/notes", f"{h}/notes", None),
        ("get", "/v1/histories/{history}/notes", "/v1/histories/none/notes", None),
        ("get", "/v1/histories/{history}/notes/{unit}", f"{h}/notes/u9", None),
        ("post", "/v1/histories/{history}/agents", a, {"task": "t", "budget": 900, "session_id": "s"}),
        ("post", "/v1/histories/{history}/agents", a, {"task": "other", "budget": 900, "session_id": "s"}),
        ("post", "/v1/histories/{history}/agents/{session_id}/steps", f"{a}/s/steps", {"action": "a", "step_id": "1"}),
        ("post", "/v1/histories/{history}/agents/{session_id}/steps", f"{a}/zz/steps", {"action": "a"}),
        ("get", "/v1/histories/{history}/agents/{session_id}/context", f"{a}/s/context", None),
        ("get", "/v1/histories/{history}/agents/{session_id}/context", f"{a}/s/context?mode=nope", None),
        ("post", "/v1/histories/{history}/inspect-link", f"{h}/inspect-link", {"query": "q", "seconds": 1}),
        ("delete", "/v1/histories/{history}", "/v1/histories/none", None),
        ("delete", "/v1/histories/{history}", h, None),
        ("get", "/v1/histories", "/v1/histories", None),
    ]
    seen: dict[tuple[str, str], set[int]] = {}
    with server.client() as c, server.client(None) as anonymous:
        for method, route, path, body in calls:
            for client in (c, anonymous):
                r = client.request(method, path, json=body)
                seen.setdefault((route, method), set()).add(r.status_code)
    undocumented = {
        (route, method, status)
        for (route, method), statuses in seen.items()
        for status in statuses
        if str(status) not in spec[route][method]["responses"]
    }
    assert not undocumented, undocumented
    every = set().union(*seen.values())
    assert {200, 400, 401, 404, 409, 413, 422} <= every, every
