"""Issue 48, part 3: the HTTP server under a hostile client, against real ``flexamem serve`` processes.

- another tenant's history names are answered on every route exactly as names that do not exist;
- an inspector link opens the rendering it was made for and no other (query, budget, mode, history);
- chat messages nested deeper than the limit get a 4xx naming the nesting (never a 500), nothing stored;
- wrong keys from one address are throttled (429 with ``Retry-After``), in every worker, whatever
  ``X-Forwarded-For`` it sends unless ``--forwarded-allow-ips`` names it as a proxy;
- idle and half-open connections are closed, slow heads and bodies get 408, a client gone before its
  body is one log line (no traceback), oversized heads and too many headers get 431.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import httpx
import pytest

from tests.faults.test_faults import report
from tests.servers import ServerProcess

from .conftest import Server, cli

pytest.importorskip("fastapi")

# -- 1. another tenant's names ---------------------------------------------------------------------------
BODIES: dict[tuple[str, str], dict[str, Any]] = {  # a valid body for every route that takes one
    ("POST", "/v1/histories/{history}/sessions"): {"turns": [{"speaker": "A", "text": "hello"}], "session_id": "s"},
    ("POST", "/v1/histories/{history}/batch"): {"sessions": [{"turns": [{"speaker": "A", "text": "hello"}]}]},
    ("POST", "/v1/histories/{history}/messages"): {"messages": [{"role": "user", "content": "hello"}]},
    ("POST", "/v1/histories/{history}/render"): {"query": "What is the PIN?", "budget": 500},
    ("POST", "/v1/histories/{history}/search"): {"query": "PIN"},
    ("POST", "/v1/histories/{history}/agents"): {"task": "t", "budget": 900, "session_id": "a"},
    ("POST", "/v1/histories/{history}/agents/{session_id}/steps"): {"action": "look", "observation": "o"},
    ("POST", "/v1/histories/{history}/inspect-link"): {"query": "PIN"},
    ("POST", "/v1/histories/{history}/verify"): {"heads": []},  # checked against kept heads (when the route exists)
    ("POST", "/v1/histories/{history}/erase"): {"turn": "u1#0", "reason": "asked"},
}
QUERIES = {"/inspect/{history}": "?query=PIN"}
CREATING = {  # the routes that create the caller's own history of that name: 200 for a name not yet its own
    ("POST", "/v1/histories/{history}/sessions"),
    ("POST", "/v1/histories/{history}/batch"),
    ("POST", "/v1/histories/{history}/messages"),
    ("POST", "/v1/histories/{history}/agents"),
}


def app_routes() -> list[tuple[str, str]]:
    """Every (method, path) the server's app routes, read from the app itself (not a list kept by hand)."""
    from fastapi.routing import APIRoute

    from flexamem.server import ServerConfig, create_app

    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(ServerConfig(str(Path(tmp) / "m.db"), str(Path(tmp) / "keys.json"), offload_writes=False))
        return sorted(
            (method, route.path) for route in app.routes if isinstance(route, APIRoute) for method in route.methods
        )


def shape(answer: httpx.Response, name: str) -> tuple[int, Any]:
    """The status and the body with the history's name blanked (the names differ; nothing else may)."""
    try:
        body: Any = answer.json()
    except ValueError:
        body = answer.text
    return answer.status_code, json.loads(json.dumps(body).replace(name, "<history>"))


@pytest.mark.faults
def test_another_tenants_names_answer_on_every_route_as_names_that_do_not_exist(server: Server) -> None:
    routes = app_routes()
    walked = [(m, p) for m, p in routes if "{history}" in p]
    assert len(walked) >= 18 and ("DELETE", "/v1/histories/{history}/agents/{session_id}") in walked
    missing = [r for r in walked if r[0] == "POST" and r not in BODIES]
    assert not missing, f"add a body for each new route to BODIES: {missing}"
    compared = 0
    with server.client("acme") as acme, server.client("other") as other:
        for i, (method, template) in enumerate(walked):
            owned, absent = f"owned{i}", f"absent{i}"
            assert acme.post(f"/v1/histories/{owned}/sessions", json={"turns": [{"speaker": "A", "text": "PIN 9921"}]})
            assert acme.post(f"/v1/histories/{owned}/agents", json=BODIES[("POST", "/v1/histories/{history}/agents")])
            step = {"action": "PIN is 9921", "observation": "ok"}
            assert acme.post(f"/v1/histories/{owned}/agents/a/steps", json=step).status_code == 200
            answers = {}
            for name in (owned, absent):
                path = template.format(history=name, session_id="a", unit="u1") + QUERIES.get(template, "")
                r = other.request(method, path, json=BODIES.get((method, template)))
                assert "9921" not in r.text, (method, template)
                answers[name] = shape(r, name)
            assert answers[owned] == answers[absent], (method, template, answers)
            status, body = answers[absent]
            if (method, template) in CREATING:
                assert status == 200, (method, template, body)
            else:  # a name that holds nothing is 404 on every other route (a GET of agents, a DELETE of one too)
                assert status == 404 and body["error"]["type"] == "NotFoundError", (method, template, body)
            compared += 1
            assert acme.get(f"/v1/histories/{owned}/notes").status_code == 200  # untouched by the other tenant
    report("another tenant's names", {"routes": compared, "differing": 0})


# -- 2. inspector links ----------------------------------------------------------------------------------
@pytest.mark.faults
def test_an_inspector_link_opens_only_what_it_was_made_for(server: Server) -> None:
    with server.client("acme") as acme:
        acme.post("/v1/histories/bound/sessions", json={"turns": [{"speaker": "A", "text": "the safe code is 7710"}]})
        acme.post("/v1/histories/elsewhere/sessions", json={"turns": [{"speaker": "A", "text": "the gate is 3301"}]})
        asked = {"query": "safe code", "budget": 600, "mode": "pieces"}
        made = acme.post("/v1/histories/bound/inspect-link", json=asked)
        assert made.status_code == 200
    url = urlparse(made.json()["url"])
    params = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert params.keys() == {"query", "budget", "mode", "token"}
    refused = 0
    with httpx.Client(base_url=server.url, timeout=60) as browser:
        page = browser.get(made.json()["url"])
        assert page.status_code == 200 and "7710" in page.text
        reordered = dict(reversed(list(params.items())))  # the same values, written otherwise: the same page
        assert browser.get(f"{url.path}?{urlencode(reordered)}").status_code == 200
        for changed in (
            {"query": "gate"},
            {"query": "safe code "},
            {"budget": "601"},
            {"budget": "4096"},
            {"mode": "auto"},
            {"mode": "units"},
        ):
            r = browser.get(url.path, params={**params, **changed})
            assert r.status_code == 403, (changed, r.text)
            error = r.json()["error"]
            assert error["type"] == "Forbidden" and "made for another query, budget or mode" in error["message"]
            refused += 1
        dropped = {k: v for k, v in params.items() if k != "budget"}  # the page's default budget is not the link's
        assert browser.get(url.path, params=dropped).status_code == 403
        r = browser.get("/inspect/elsewhere", params=params)  # another history of the same tenant
        assert r.status_code == 403 and "another history" in r.json()["error"]["message"] and "3301" not in r.text
        mac = params["token"].split(".")[1]
        with server.client("other") as other:
            theirs = other.post("/v1/histories/bound/sessions", json={"turns": [{"speaker": "B", "text": "x"}]})
            assert theirs.status_code == 200
            link = other.post("/v1/histories/bound/inspect-link", json={"query": "safe code", "budget": 600})
            their_payload = parse_qs(urlparse(link.json()["url"]).query)["token"][0].split(".")[0]
        swapped = browser.get(url.path, params={**params, "token": f"{their_payload}.{mac}"})  # a tenant swapped in
        assert swapped.status_code == 401 and "7710" not in swapped.text
        refused += 3
    with server.client("acme") as acme:
        too_long = acme.post("/v1/histories/bound/inspect-link", json={"query": "q" * 1001})
        assert too_long.status_code == 422  # a link stays within the server's limit on a request's head
    report("inspector links used for another rendering", {"tried": refused, "served": 0})


# -- 2b. JSON nested deep inside free-form chat messages --------------------------------------------------
def deep_list(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.faults
@pytest.mark.parametrize("depth", [40, 500, 20_000])
def test_messages_nested_deep_are_refused_with_a_4xx_and_store_nothing(server: Server, depth: int) -> None:
    """A ~1 KB body nesting a message's free-form field ~500 levels deep was a 500 (RecursionError): now a
    422 naming the nesting (a body too deep for JSON itself to parse: a 400 naming it), nothing stored,
    on both routes that take chat messages."""
    h = f"/v1/histories/deep{depth}"
    message = {"role": "user", "content": "hi", "meta": "DEEP"}
    bodies = {  # JSON too deep for the client's encoder: the nesting spliced in as text
        h + "/messages": {"messages": [message]},
        h + "/agents/ag/steps": {"action": "act", "observation": "obs", "messages": [message]},
        h + "/agents/ag/steps#parts": {"action": "a", "messages": [{"role": "user", "content": ["DEEP"]}]},
    }
    with server.client() as c:
        assert c.post(h + "/agents", json={"task": "t", "budget": 900, "session_id": "ag"}).status_code == 200
        for path, body in bodies.items():
            text = json.dumps(body).replace('"DEEP"', deep_list(depth))
            r = c.post(path.split("#")[0], content=text, headers={"Content-Type": "application/json"})
            assert r.status_code in (400, 422), (path, r.status_code, r.text)
            error = r.json()["error"]
            assert error["type"] == "InvalidInputError" and "nested" in error["message"], error
            if depth < 1000:  # what the schema refuses: the limit named
                assert r.status_code == 422 and "nested deeper than 32 levels" in error["message"], error
        assert c.get(h + "/agents/ag").json()["steps"] == 0  # nothing stored
        assert c.get(h + "/notes").json() == []  # no note either
        within = {"role": "user", "content": "hi", "meta": json.loads(deep_list(31))}
        assert c.post(h + "/messages", json={"messages": [within]}).status_code == 200
        assert c.post(h + "/agents/ag/steps", json={"action": "a", "messages": [within]}).json()["step"] == 1
    assert "RecursionError" not in server.log.read_text()


# -- 3 and 4: a server of its own, with small limits -----------------------------------------------------
HEADER_TIMEOUT, BODY_TIMEOUT, KEEP_ALIVE, BURST, RATE, WORKERS = 2.0, 2.0, 2, 5, 1.0, 2
KEEP_ALIVE_REQUESTS = 3
SLACK = 3.0  # seconds a loaded 2-core machine may add to a timeout


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("guarded")
    keyfile, db, log = root / "keys.json", root / "m.db", root / "server.log"
    key = cli("serve", "--keys", str(keyfile), "--add-key", "acme").strip().splitlines()[-1]
    limits = ("--header-timeout", str(HEADER_TIMEOUT), "--body-timeout", str(BODY_TIMEOUT),
              "--keep-alive", str(KEEP_ALIVE), "--auth-burst", str(BURST), "--auth-rate", str(RATE),
              "--max-header-bytes", "8192", "--max-headers", "50", "--no-offload",
              "--keep-alive-requests", str(KEEP_ALIVE_REQUESTS))  # fmt: skip
    proc = ServerProcess(str(db), keyfile, log, workers=WORKERS, args=limits).start(timeout=90)
    assert proc.proc is not None
    yield Server(proc.url, {"acme": key}, db, keyfile, log, proc.proc.pid)
    proc.stop()


def address(server: Server) -> tuple[str, int]:
    url = urlparse(server.url)
    assert url.hostname and url.port
    return url.hostname, url.port


def until_closed(sock: socket.socket, limit: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and when it did (seconds from now)."""
    start, data = time.monotonic(), b""
    sock.settimeout(limit)
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        return data + b"<still open>", time.monotonic() - start
    except ConnectionResetError:
        pass
    return data, time.monotonic() - start


def status_of(data: bytes) -> int:
    match = re.match(rb"HTTP/1\.1 (\d{3}) ", data)
    assert match, data[:200]
    return int(match.group(1))


def answer(sock: socket.socket) -> bytes:
    """One whole answer on a kept-alive connection (its head and Content-Length bytes of body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        body += sock.recv(65536)
    return data


def error_of(data: bytes) -> dict[str, str]:
    return dict(json.loads(data.split(b"\r\n\r\n", 1)[1])["error"])


@pytest.mark.faults
def test_idle_and_half_open_connections_are_closed_and_slow_heads_get_408(guarded: Server) -> None:
    host, port = address(guarded)
    idle = [socket.create_connection((host, port), timeout=10) for _ in range(50)]  # connected, nothing sent
    half = [socket.create_connection((host, port), timeout=10) for _ in range(50)]  # a head never finished
    opened = time.monotonic()
    for s in half:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    results: list[tuple[str, bytes, float]] = []

    def wait(kind: str, sock: socket.socket) -> None:
        data, _ = until_closed(sock, HEADER_TIMEOUT + SLACK + 5)
        results.append((kind, data, time.monotonic() - opened))
        sock.close()

    threads = [threading.Thread(target=wait, args=("idle", s)) for s in idle]
    threads += [threading.Thread(target=wait, args=("half", s)) for s in half]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 100
    late = [(k, round(when, 1)) for k, data, when in results if when > HEADER_TIMEOUT + SLACK]
    assert not late, late  # every one closed within the timeout
    assert all(data == b"" for k, data, _ in results if k == "idle")  # nothing asked: closed, no answer
    for k, data, _ in results:
        if k == "half":
            assert status_of(data) == 408 and error_of(data)["type"] == "RequestTimeout", data[:300]
    with socket.create_connection((host, port), timeout=10) as kept:  # an idle kept-alive connection
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(answer(kept)) == 200
        rest, after = until_closed(kept, KEEP_ALIVE + SLACK + 5)
        assert after <= KEEP_ALIVE + SLACK and b"HTTP/1.1" not in rest
    with socket.create_connection((host, port), timeout=10) as kept:  # a second request whose head stalls
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(answer(kept)) == 200
        kept.sendall(b"GET /health HTTP/1.1\r\n")
        data, after = until_closed(kept, HEADER_TIMEOUT + SLACK + 5)
        assert status_of(data) == 408 and after <= HEADER_TIMEOUT + SLACK
    assert httpx.get(guarded.url + "/health", timeout=10).status_code == 200
    worst = max(when for _, _, when in results)
    report("idle and half-open connections", {"connections": 100, "closed": 100, "slowest_s": round(worst, 1)})


def test_an_idle_kept_alive_connection_outlives_the_pools_of_common_clients(server: Server) -> None:
    """With the default ``--keep-alive`` the server keeps an idle connection open longer than httpx's pool
    keeps one (5 s): with equal idle times a client may send on a connection as the server closes it,
    and the request fails (measured with the former 5 s and httpx's default pool: 2 of 210 requests sent
    4.9985-5.003 s after the previous one ended in ``ReadError``). Here the same connection answers
    after 6 s."""
    with socket.create_connection(address(server), timeout=10) as kept:
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(answer(kept)) == 200
        time.sleep(6.0)  # past httpx's keepalive_expiry: an httpx pool would have dropped it by now
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(answer(kept)) == 200  # answer() fails if the server had closed it


def test_a_kept_alive_connection_is_closed_after_its_requests(guarded: Server) -> None:
    """``--keep-alive-requests 3``: the third answer on a connection says ``Connection: close`` and the
    server closes it (the client opens another, which the kernel hands to a worker afresh); a new
    connection is counted from one again."""
    host, port = address(guarded)
    for _ in range(2):
        with socket.create_connection((host, port), timeout=10) as kept:
            closes = []
            for _ in range(KEEP_ALIVE_REQUESTS):
                kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                data = answer(kept)
                assert status_of(data) == 200
                closes.append(b"connection: close" in data.split(b"\r\n\r\n")[0].lower())
            assert closes == [False] * (KEEP_ALIVE_REQUESTS - 1) + [True]
            rest, after = until_closed(kept, KEEP_ALIVE + SLACK)
            assert rest == b"" and after < KEEP_ALIVE  # closed at once, not by the idle timeout


def post_head(path: str, length: int, key: str = "") -> bytes:
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


@pytest.mark.faults
def test_a_short_body_gets_408_and_a_client_gone_is_one_log_line(guarded: Server) -> None:
    host, port = address(guarded)
    key = guarded.keys["acme"]
    with httpx.Client(base_url=guarded.url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:
        written = c.post("/v1/histories/slow/sessions", json={"turns": [{"speaker": "A", "text": "hi"}]})
        assert written.status_code == 200
    body = b'{"query": "hi", "budget": 500}'
    timings = []
    for _ in range(5):
        with socket.create_connection((host, port), timeout=10) as s:
            s.sendall(post_head("/v1/histories/slow/render", len(body) + 40, key) + body)  # 40 bytes never sent
            data, after = until_closed(s, BODY_TIMEOUT + SLACK + 5)
            assert status_of(data) == 408 and error_of(data)["type"] == "RequestTimeout", data[:300]
            assert b"connection: close" in data.lower() and after <= BODY_TIMEOUT + SLACK
            timings.append(after)
    before = guarded.log.read_text()
    for _ in range(5):  # the client goes away with its body half sent
        with socket.create_connection((host, port), timeout=10) as s:
            s.sendall(post_head("/v1/histories/gone/render", 500, key) + b'{"query": ')
            time.sleep(0.2)
    deadline = time.monotonic() + 10
    while guarded.log.read_text()[len(before) :].count("ClientDisconnect") < 5 and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    lines = guarded.log.read_text()[len(before) :].splitlines()
    gone = [json.loads(line) for line in lines if "/v1/histories/gone/" in line]
    assert len(gone) == 5 and all(g["error"] == "ClientDisconnect" and g["status"] == 499 for g in gone), lines
    log = guarded.log.read_text()
    assert "Traceback" not in log and "Exception in ASGI application" not in log
    with httpx.Client(base_url=guarded.url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:
        assert c.post("/v1/histories/slow/render", json={"query": "hi", "budget": 500}).status_code == 200
    report("short bodies and clients gone", {"408": 5, "slowest_s": round(max(timings), 1), "gone_lines": 5})


@pytest.mark.faults
def test_oversized_heads_and_too_many_headers_get_431(guarded: Server) -> None:
    host, port = address(guarded)
    cases = {
        "a 100 KB header": b"X-Big: " + b"a" * 100_000 + b"\r\n",
        "a 9 KB header in one piece": b"X-Big: " + b"a" * 9_000 + b"\r\n",
        "1,000 headers": b"".join(b"X-H%d: v\r\n" % i for i in range(1000)),
        "51 headers": b"".join(b"X-H%d: v\r\n" % i for i in range(50)),  # with Host: 51
    }
    for name, headers in cases.items():
        with socket.create_connection((host, port), timeout=10) as s:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # refused while still sending
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
            data, after = until_closed(s, 10)
        assert status_of(data) == 431, (name, data[:300])
        assert error_of(data)["type"] == "RequestHeaderFieldsTooLarge" and after < 10, name
    with socket.create_connection((host, port), timeout=10) as s:  # a head sent a few bytes at a time
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for i in range(40):
                s.sendall(b"X-Part%d: " % i + b"p" * 500 + b"\r\n")
                time.sleep(0.01)
        data, _ = until_closed(s, 10)
        assert status_of(data) == 431, data[:300]
    within = {f"x-h{i}": "v" * 100 for i in range(40)}  # 40 headers, ~4.5 KB: served
    assert httpx.get(guarded.url + "/health", headers=within, timeout=10).status_code == 200
    assert "Traceback" not in guarded.log.read_text()
    report("oversized heads", {"refused_431": len(cases) + 1, "served_within_limits": 1})


@pytest.mark.faults
def test_wrong_keys_from_one_address_are_throttled_in_every_worker(guarded: Server) -> None:
    key = guarded.keys["acme"]
    start = time.monotonic()
    statuses: list[int] = []
    with httpx.Client(base_url=guarded.url, timeout=30, limits=httpx.Limits(max_keepalive_connections=0)) as fresh:
        for i in range(60):  # a new connection each: the kernel spreads them over both workers
            r = fresh.get("/v1/histories", headers={"Authorization": f"Bearer fm_wrong{i}"})
            statuses.append(r.status_code)
            if r.status_code == 429:
                assert int(r.headers["retry-after"]) >= 1 and r.json()["error"]["type"] == "ThrottledError"
    elapsed = time.monotonic() - start
    assert set(statuses) == {401, 429}, statuses
    allowed = WORKERS * (BURST + RATE * elapsed) + 1  # each worker's bucket: BURST at once, then RATE a second
    assert statuses.count(401) <= allowed, (statuses.count(401), allowed, elapsed)
    with httpx.Client(base_url=guarded.url, timeout=30) as one:  # one kept-alive connection: one worker
        wrong = 0
        while (r := one.get("/v1/histories", headers={"Authorization": f"Bearer fm_more{wrong}"})).status_code == 401:
            wrong += 1
            assert wrong <= BURST + 2, "the worker never throttled the address"
        assert r.status_code == 429, r.text
        r = one.get("/v1/histories", headers={"Authorization": f"Bearer {key}"})  # a good key, same address
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1, r.text  # refused, the key unread
        time.sleep(int(r.headers["retry-after"]) + 0.2)
        r = one.get("/v1/histories", headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200, r.text  # a token back: the good key is served
    assert httpx.get(guarded.url + "/health", timeout=10).status_code == 200  # no key needed: never throttled
    log = guarded.log.read_text()
    assert "fm_wrong" not in log and key not in log
    report("wrong keys from one address", {"sent": 60, "401": statuses.count(401), "429": statuses.count(429)})


def wrong_keys_with_forwarded_for(server: Server, sent: int, forwarded: str = "203.0.113.{i}") -> list[int]:
    """The statuses of ``sent`` wrong keys from 127.0.0.1, each claiming another client address."""
    statuses = []
    with httpx.Client(base_url=server.url, timeout=30) as c:
        for i in range(sent):
            headers = {"Authorization": f"Bearer fm_xff{i}", "X-Forwarded-For": forwarded.format(i=i)}
            statuses.append(c.get("/v1/histories", headers=headers).status_code)
    return statuses


@pytest.mark.faults
def test_a_changing_x_forwarded_for_does_not_escape_the_throttle(guarded: Server) -> None:
    """uvicorn alone trusts X-Forwarded-For from 127.0.0.1: a local client sending another address with
    every wrong key was never throttled (80 sent, 80 answered 401). ``flexamem serve`` trusts no proxy
    unless named (``--forwarded-allow-ips``): the throttle counts the connection's address."""
    start = time.monotonic()
    statuses = wrong_keys_with_forwarded_for(guarded, 80)
    elapsed = time.monotonic() - start
    assert 429 in statuses and set(statuses) <= {401, 429}, statuses
    allowed = WORKERS * (BURST + RATE * elapsed) + 1
    assert statuses.count(401) <= allowed, (statuses.count(401), allowed, elapsed)
    report("wrong keys with a changing X-Forwarded-For", {"sent": 80, "401": statuses.count(401),
                                                           "429": statuses.count(429)})  # fmt: skip


@pytest.mark.faults
def test_forwarded_allow_ips_names_the_proxy_whose_forwarded_for_is_the_client(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Behind a proxy named with ``--forwarded-allow-ips`` each forwarded client has a bucket of its own
    (else they would all share the proxy's), and one client is throttled as from its own address."""
    root = tmp_path_factory.mktemp("proxied")
    keyfile, log = root / "keys.json", root / "server.log"
    cli("serve", "--keys", str(keyfile), "--add-key", "acme")
    args = ("--auth-burst", "3", "--auth-rate", "0.1", "--no-offload", "--forwarded-allow-ips", "127.0.0.1")
    proc = ServerProcess(str(root / "m.db"), keyfile, log, workers=1, args=args).start(timeout=90)
    assert proc.proc is not None
    try:
        proxied = Server(proc.url, {}, root / "m.db", keyfile, log, proc.proc.pid)
        assert set(wrong_keys_with_forwarded_for(proxied, 20)) == {401}  # 20 clients, one wrong key each
        one = wrong_keys_with_forwarded_for(proxied, 8, forwarded="198.51.100.7")  # one client, 8 wrong keys
        assert one[:3] == [401] * 3 and set(one[4:]) == {429}, one
    finally:
        proc.stop()
