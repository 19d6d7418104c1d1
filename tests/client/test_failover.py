"""Retries that lose nothing and double nothing, against real servers killed with SIGKILL mid-run:
every write a client saw acknowledged is stored exactly once (SQLite: the server restarted; PostgreSQL:
a fleet behind a round-robin proxy, and a client given two servers, carrying on through the other)."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import flexamem as fm
from flexamem.server.keys import KeyFile
from tests.client.fleet import RoundRobin
from tests.client.test_remote import script
from tests.conftest import NO_POSTGRES, POSTGRES_URL
from tests.servers import ServerProcess

pytestmark = pytest.mark.integration
PATIENT = fm.ClientSettings(retry_seconds=90, timeout=30)


class Writer(threading.Thread):
    """A client's write loop: sessions (library-named and named), agent steps and renders; it keeps
    what was acknowledged and every error it saw."""

    def __init__(self, url: str, key: str, name: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.mem = fm.Memory(url, key=key, history=name, client=PATIENT)
        self.name, self.stop = name, stop
        self.acked: list[tuple[str, list[str]]] = []  # (text, unit ids)
        self.steps = 0
        self.errors: list[BaseException] = []

    def run(self) -> None:
        try:
            agent = self.mem.agent("keep notes", budget=2000, session_id="a1")
            i = 0
            while not self.stop.is_set():
                text = f"{self.name} note {i}: code {uuid.uuid4().hex[:8]}"
                named = {"session_id": f"n{i}"} if i % 3 == 0 else {}
                units = self.mem.add_session([{"speaker": "Ana", "text": text}], **named)
                self.acked.append((f"Ana: {text}", units))
                if i % 4 == 0:
                    self.steps = agent.step(f"echo {i}", f"step {i} " * 20)
                if i % 5 == 0:
                    assert self.mem.render("code", budget=400).tokens <= 380
                i += 1
        except BaseException as exc:
            self.errors.append(exc)

    def check(self, key: str, url: str) -> None:
        assert not self.errors, self.errors
        assert len(self.acked) > 10
        assert self.mem.http.retries > 0  # the kill reached this client mid-run: it retried
        notes = fm.Memory(url, key=key, history=self.name).notes()
        raws = Counter(n.raw for n in notes)
        assert all(c == 1 for c in raws.values()), [r for r, c in raws.items() if c > 1]  # nothing doubled
        stored = {n.unit_id: n.raw for n in notes}
        for raw, units in self.acked:  # nothing acknowledged lost
            assert [stored.get(u) for u in units] == [raw]
        assert len(notes) <= len(self.acked) + 1  # at most the write in flight at the stop, unacknowledged
        agent = fm.Memory(url, key=key, history=self.name).agent(session_id="a1")
        assert agent.step_count == self.steps  # each acknowledged step once (steps are numbered)


def run_writers(writers: list[Writer], stop: threading.Event, middle: object, seconds: float = 6) -> None:
    for w in writers:
        w.start()
    time.sleep(seconds)
    middle()  # type: ignore[operator]
    time.sleep(seconds)
    stop.set()
    for w in writers:
        w.join(timeout=180)
        assert not w.is_alive()


def test_a_server_killed_mid_write_loop_and_restarted_loses_and_doubles_nothing(tmp_path: Path) -> None:
    keyfile = tmp_path / "keys.json"
    key = KeyFile(str(keyfile)).add_key("acme")
    server = ServerProcess(str(tmp_path / "m.db"), keyfile, tmp_path / "server.log", workers=1).start()
    stop = threading.Event()
    writer = Writer(server.url, key, "loop", stop)

    def kill_and_restart() -> None:
        server.kill()
        time.sleep(1)
        server.start()

    try:
        run_writers([writer], stop, kill_and_restart)
        writer.check(key, server.url)
    finally:
        server.stop()


def test_answers_lost_on_the_way_back_are_retried_without_storing_twice(tmp_path: Path) -> None:
    keyfile = tmp_path / "keys.json"
    key = KeyFile(str(keyfile)).add_key("acme")
    server = ServerProcess(str(tmp_path / "m.db"), keyfile, tmp_path / "server.log", workers=1).start()
    proxy = RoundRobin([server.port], lose=0.25)  # a quarter of the answers never reach the client
    stop = threading.Event()
    writer = Writer(proxy.url, key, "lossy", stop)
    try:
        run_writers([writer], stop, lambda: None, seconds=4)
        assert proxy.lost > 5, (proxy.lost, len(writer.acked), writer.errors)
        writer.check(key, server.url)
    finally:
        proxy.close()
        server.stop()


@pytest.fixture()
def fleet(tmp_path: Path) -> Iterator[tuple[list[ServerProcess], str]]:
    """Two servers on the test PostgreSQL (a tenant no other test uses) and the key."""
    if not POSTGRES_URL:
        pytest.fail("FLEXAMEM_REQUIRE_POSTGRES=1 but FLEXAMEM_TEST_POSTGRES is not set")
    keyfile = tmp_path / "keys.json"
    key = KeyFile(str(keyfile)).add_key("t" + uuid.uuid4().hex[:8])
    servers = [ServerProcess(POSTGRES_URL, keyfile, tmp_path / f"s{i}.log", workers=1).start() for i in range(2)]
    yield servers, key
    for s in servers:
        s.stop()


@NO_POSTGRES
def test_the_same_script_through_two_servers_on_postgres_gives_the_local_answers(
    fleet: tuple[list[ServerProcess], str], tmp_path: Path
) -> None:
    servers, key = fleet
    proxy = RoundRobin([s.port for s in servers])  # requests spread over both servers
    try:
        local = script(fm.Memory(str(tmp_path / "local.db")))
        remote = script(fm.Memory(proxy.url, key=key, history="same"))
        assert all(proxy.connections), proxy.connections
    finally:
        proxy.close()
    for name in local:
        assert remote[name] == local[name], name


@NO_POSTGRES
def test_a_fleet_on_postgres_carries_on_through_the_other_servers_when_one_is_killed(
    fleet: tuple[list[ServerProcess], str],
) -> None:
    servers, key = fleet
    proxy = RoundRobin([s.port for s in servers], lose=0.1)  # and a tenth of the answers lost on the way
    stop = threading.Event()
    writers = [Writer(proxy.url, key, f"w{i}", stop) for i in range(2)]
    writers.append(Writer(f"{servers[0].url},{servers[1].url}", key, "listed", stop))  # the client's own failover
    try:
        run_writers(writers, stop, servers[0].kill)
        assert all(proxy.connections), proxy.connections  # both servers took clients before the kill
        for w in writers:
            w.check(key, servers[1].url)
    finally:
        proxy.close()
