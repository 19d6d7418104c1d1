"""Two ``flexamem serve`` instances (separate processes and ports, two workers each) on one PostgreSQL
under mixed load: every write acknowledged by one is shown by a render of the other begun within a second, nothing
acknowledged is lost, no 5xx."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import NO_POSTGRES, POSTGRES_URL
from tests.servers import ServerProcess

pytestmark = [pytest.mark.integration, NO_POSTGRES]


@pytest.fixture()
def servers(tmp_path: Path) -> Iterator[tuple[list[str], str]]:
    if not POSTGRES_URL:
        pytest.fail("FLEXAMEM_REQUIRE_POSTGRES=1 but FLEXAMEM_TEST_POSTGRES is not set")
    from flexamem.server.keys import KeyFile

    keyfile = tmp_path / "keys.json"
    key = KeyFile(str(keyfile)).add_key("t" + uuid.uuid4().hex[:8])  # a tenant no other test uses
    servers = [ServerProcess(POSTGRES_URL, keyfile, tmp_path / f"server{i}.log").start() for i in range(2)]
    yield [s.url for s in servers], key
    for server in servers:
        server.stop()


def busy(r: httpx.Response) -> bool:
    """A write the server refused at once because it had as many in progress as it admits (503
    ServerBusyError with Retry-After: nothing stored, send it again); not a failure of the server."""
    return r.status_code == 503 and r.json()["error"]["type"] == "ServerBusyError"


def test_a_write_to_one_server_is_rendered_by_the_other_within_a_second(servers: tuple[list[str], str]) -> None:
    (a, b), key = servers
    headers = {"Authorization": f"Bearer {key}"}
    statuses: list[int] = []
    delays: list[float] = []
    acked: list[tuple[str, str]] = []
    refused: list[str] = []
    stop = threading.Event()

    def background(url: str, k: int) -> None:  # renders and writes on both servers, all the while
        with httpx.Client(base_url=url, headers=headers, timeout=60) as c:
            i = 0
            while not stop.is_set():
                if i % 5 == 0:
                    sid = f"bg{k}-{i}"
                    r = c.post(f"/v1/histories/bg{k % 2}/sessions", json={"session_id": sid, "turns": [
                        {"speaker": "Ana", "text": f"background note {i} with code BG{k}X{i}"}]})  # fmt: skip
                    if r.status_code == 200:
                        acked.append((f"bg{k % 2}", sid))
                    elif busy(r):
                        refused.append(sid)
                        i += 1
                        continue
                else:
                    r = c.post(f"/v1/histories/bg{k % 2}/render", json={"query": "code", "budget": 600})
                statuses.append(r.status_code)
                i += 1

    threads = [threading.Thread(target=background, args=(url, k)) for k, url in enumerate([a, b, a, b])]
    for t in threads:
        t.start()
    try:
        with httpx.Client(headers=headers, timeout=60) as c:
            for i in range(20):
                writer, reader = (a, b) if i % 2 == 0 else (b, a)
                code = f"ZQ{i:03d}K{uuid.uuid4().hex[:4].upper()}"
                while True:  # a busy server is asked again after its Retry-After, as a client does
                    r = c.post(f"{writer}/v1/histories/shared/sessions", json={"session_id": f"s{i}", "turns": [
                        {"speaker": "Ana", "text": f"The locker code is {code}."}]})  # fmt: skip
                    if not busy(r):
                        break
                    time.sleep(float(r.headers["retry-after"]))
                statuses.append(r.status_code)
                assert r.status_code == 200, r.text
                acked.append(("shared", f"s{i}"))
                acked_at = time.monotonic()
                while True:  # the delay: ack to the start of the first render that shows the write
                    body = {"query": "locker code", "budget": 2000}
                    asked_at = time.monotonic()  # (not its end: a loaded machine's render time is not staleness)
                    shown = c.post(f"{reader}/v1/histories/shared/render", json=body)
                    statuses.append(shown.status_code)
                    if code in shown.text:
                        delays.append(asked_at - acked_at)
                        break
                    assert time.monotonic() - acked_at < 5, "the other server never showed the write"
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    assert not [s for s in statuses if s >= 500], sorted(set(statuses))
    assert max(delays) < 1.0, delays
    with httpx.Client(headers=headers, timeout=60) as c:
        for history in {h for h, _ in acked}:
            stored = {n["session_id"] for n in c.get(f"{a}/v1/histories/{history}/notes").json()}
            assert {sid for h, sid in acked if h == history} <= stored  # nothing acknowledged is lost
            assert not stored & set(refused)  # nothing refused was stored
