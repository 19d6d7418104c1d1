"""``flexamem serve --workers N`` on Linux (server/workers.py): a listening socket per worker, so that a
burst of kept-alive connections is spread over the workers; a killed worker is started again; a taken
port or a worker that cannot start stops the server with a clear message."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest

from flexamem.server import workers as processes
from tests.servers import ServerProcess, free_port, worker_pids

from .conftest import Server, cli

pytestmark = pytest.mark.skipif(not processes.available(), reason="SO_REUSEPORT spreads connections on Linux only")


def sockets_of(pid: int) -> set[int]:
    """The inodes of the sockets process ``pid`` holds open."""
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(int(target[8:-1]))
    return found


def tcp_sockets(port: int, state: str, peers: set[int] | None = None) -> set[int]:
    """Inodes of the IPv4 TCP sockets on local port ``port`` in ``state`` (0A listening, 01 established),
    only those whose remote port is in ``peers`` when given."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        peer = int(fields[2].rsplit(":", 1)[1], 16)
        if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == state and (peers is None or peer in peers):
            found.add(int(fields[9]))
    return found


def client_ports(port: int) -> set[int]:
    """The local ports of this process's established connections to ``port``."""
    mine = sockets_of(os.getpid())
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[3] == "01" and int(fields[9]) in mine:
            ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def port_of(server: Server) -> int:
    return int(server.url.rsplit(":", 1)[1])


def listening_workers(pid: int, port: int, count: int = 2, timeout: float = 90) -> dict[int, set[int]]:
    """The server's workers and the listening sockets each holds on ``port``, once ``count`` of them
    listen (``/health`` answers as soon as the first does; the next may still be loading)."""
    deadline = time.monotonic() + timeout
    while True:
        listening = tcp_sockets(port, "0A")
        held = {worker: sockets_of(worker) & listening for worker in worker_pids(pid)}
        if sum(1 for h in held.values() if h) >= count or time.monotonic() > deadline:
            return held
        time.sleep(0.2)


def connections_per_worker(url: str, port: int, workers: list[int], n: int = 16) -> Counter[int]:
    """Open ``n`` kept-alive connections at once (``/health`` on each) and count those each worker holds."""

    async def burst() -> Counter[int]:
        before = client_ports(port)  # connections to the server this process held already (not the burst's)
        limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
            answers = await asyncio.gather(*(client.get("/health") for _ in range(n)))
            assert all(a.status_code == 200 for a in answers)
            established = tcp_sockets(port, "01", peers=client_ports(port) - before)  # the burst's, server side
            return Counter({pid: len(sockets_of(pid) & established) for pid in workers})

    return asyncio.run(burst())


def started(tmp_path: Path) -> tuple[ServerProcess, str]:
    """``flexamem serve --workers 2`` on a new store, started (``/health`` answered), and a tenant's key."""
    keyfile = tmp_path / "keys.json"
    key = cli("serve", "--keys", str(keyfile), "--add-key", "acme").strip().splitlines()[-1]
    server = ServerProcess(str(tmp_path / "m.db"), keyfile, tmp_path / "serve.log", workers=2).start()
    assert server.proc is not None
    return server, key


def test_each_worker_listens_on_a_socket_of_its_own(server: Server) -> None:
    held = list(listening_workers(server.pid, port_of(server)).values())
    assert len(held) == 2
    assert all(len(h) == 1 for h in held), held  # one listening socket each ...
    assert held[0] != held[1]  # ... not one shared by both (uvicorn's own --workers shares one)


def test_a_burst_of_connections_is_spread_over_the_workers(server: Server) -> None:
    """16 connections opened at once, three times: each time both workers hold some (with one shared
    socket, one worker took all 16 in 2 bursts of 5; with a socket each, that has a chance of 2 in 65,536)."""
    port = port_of(server)
    workers = list(listening_workers(server.pid, port))
    for _ in range(3):
        held = connections_per_worker(server.url, port, workers)
        assert sum(held.values()) == 16, held
        assert all(held[pid] > 0 for pid in workers), held


def test_a_killed_worker_is_started_again(tmp_path: Path) -> None:
    server, key = started(tmp_path)
    assert server.proc is not None
    try:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=60) as c:
            body = {"session_id": "s1", "turns": [{"speaker": "Ana", "text": "The ferry leaves at 9."}]}
            assert c.post("/v1/histories/h/sessions", json=body).status_code == 200
        before = worker_pids(server.proc.pid)
        os.kill(before[0], signal.SIGKILL)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            now = worker_pids(server.proc.pid)
            if len(now) == 2 and before[0] not in now:
                break
            time.sleep(0.2)
        now = worker_pids(server.proc.pid)
        assert len(now) == 2 and before[0] not in now and before[1] in now, (before, now)
        answered = []
        for _ in range(12):  # new connections, spread over both workers: the new one answers too
            for _ in range(60):
                try:
                    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as c:
                        r = c.post("/v1/histories/h/render", json={"query": "ferry", "budget": 300})
                    break
                except httpx.ConnectError:  # the new worker was still binding: not a refusal of ours
                    time.sleep(0.5)
            answered.append(r.status_code == 200 and "ferry leaves at 9" in r.text)
        assert all(answered)
        assert "starting another" in server.log.read_text()
    finally:
        server.stop()
    assert server.proc.returncode == 0  # SIGTERM: the workers finish, the server exits cleanly


def test_a_taken_port_is_said_at_once(tmp_path: Path) -> None:
    keyfile = tmp_path / "keys.json"
    cli("serve", "--keys", str(keyfile), "--add-key", "acme")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "flexamem", "serve", "--db", str(tmp_path / "m.db"), "--keys", str(keyfile),
             "--port", str(port), "--workers", "2"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr, done.stderr[-2000:]


def test_a_worker_that_cannot_start_stops_the_server(tmp_path: Path) -> None:
    """Record writing by an LLM with no endpoint set: each worker fails to make the app (the command
    itself checks the key file and the store, not this); the server exits with uvicorn's code 3 instead
    of starting workers again for ever."""
    keyfile = tmp_path / "keys.json"
    cli("serve", "--keys", str(keyfile), "--add-key", "acme")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEXAMEM_LLM_")}
    done = subprocess.run(
        [sys.executable, "-m", "flexamem", "serve", "--db", str(tmp_path / "m.db"), "--keys", str(keyfile),
         "--port", str(free_port()), "--workers", "2", "--records", "llm"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == processes.STARTUP_FAILURE, done.stderr[-2000:]
    assert "records='llm' needs an endpoint" in done.stderr
    assert "a worker could not start" in done.stderr


def test_a_worker_socket_answers_without_nagle() -> None:
    """A connection accepted on a worker's socket has Nagle's algorithm off (TCP_NODELAY), as on
    uvicorn's own: asyncio sets it only on sockets whose proto says TCP, and with it on, an answer
    written in two sends (head, then body) waited ~40 ms for the client's delayed ACK (measured:
    sequential renders on one connection 48 ms against 11 ms)."""
    listening = processes.bind("127.0.0.1", 0)
    listening.listen()
    port = listening.getsockname()[1]
    seen: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        made = loop.create_future()

        class Note(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                made.set_result(None)

        server = await loop.create_server(Note, sock=listening)
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.wait_for(made, 10)
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())
    assert seen and seen[0] != 0


def test_sigterm_to_the_server_alone_closes_every_process_cleanly(tmp_path: Path) -> None:
    """``kill PID`` of the server (a container's init, a supervisor that signals one process): the workers
    stop, each closes its embedding processes and waits for them, so none is left and multiprocessing
    has no semaphore left over to warn of (the pools were once closed without waiting: "10 leaked
    semaphore objects" at every such stop)."""
    server, key = started(tmp_path)
    assert server.proc is not None
    try:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
            for i in range(4):  # writes on both workers: their embedding processes did work
                body = {"session_id": "s1", "turns": [{"speaker": "Ana", "text": f"parcel {i} is at the desk"}]}
                assert c.post(f"/v1/histories/h{i}/sessions", json=body).status_code == 200
        embedders = server.embedders()
        assert len(embedders) >= 2
        os.kill(server.proc.pid, signal.SIGTERM)  # the server alone, not its process group
        assert server.proc.wait(timeout=60) == 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in embedders):
            time.sleep(0.2)
        assert not [p for p in embedders if Path(f"/proc/{p}").exists()]
        time.sleep(1.0)  # the resource tracker writes its warning as it exits
        log = server.log.read_text()
        assert "leaked semaphore" not in log and "Traceback" not in log, log[-3000:]
    finally:
        server.stop()


@pytest.mark.parametrize("round_", range(2))
def test_connections_opened_as_soon_as_the_port_answers_reach_both_workers(tmp_path: Path, round_: int) -> None:
    """A client that opens its pool the moment ``/health`` answers: the first workers listen together once
    all are ready, so both get connections (when each listened as soon as it was ready, the one ready
    first, seconds before the other, took every connection and kept them while they stayed alive)."""
    server, _ = started(tmp_path)
    try:
        workers = server.workers()
        held = connections_per_worker(server.url, server.port, workers)
        assert sum(held.values()) == 16, held
        assert all(held[pid] > 0 for pid in workers), held
    finally:
        server.stop()


def environ_of(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode().split("=", 1) for p in pairs if b"=" in p)


@pytest.mark.parametrize(("threads", "args", "expected"), [(None, (), "1"), ("3", ("--embed-threads", "2"), "2")])
def test_every_server_process_embeds_with_the_threads_it_was_given(
    tmp_path: Path, threads: str | None, args: tuple[str, ...], expected: str
) -> None:
    """Without ``FLEXAMEM_THREADS`` the workers and their embedding processes embed with one thread each
    (several processes share the cores: docs/PERFORMANCE.md); ``--embed-threads`` sets it, over the
    environment's."""
    keyfile = tmp_path / "keys.json"
    cli("serve", "--keys", str(keyfile), "--add-key", "acme")
    server = ServerProcess(str(tmp_path / "m.db"), keyfile, tmp_path / "serve.log", args=args, threads=threads)
    server.start()
    assert server.proc is not None
    try:
        assert environ_of(server.proc.pid).get("FLEXAMEM_THREADS") == threads  # as the server was started
        processes_ = server.workers() + server.embedders()
        assert len(processes_) >= 4  # 2 workers, each with its embedding processes
        assert {environ_of(pid).get("FLEXAMEM_THREADS") for pid in processes_} == {expected}
    finally:
        server.stop()


def test_embed_threads_below_one_is_refused(tmp_path: Path) -> None:
    keyfile = tmp_path / "keys.json"
    cli("serve", "--keys", str(keyfile), "--add-key", "acme")
    run = subprocess.run(
        [sys.executable, "-m", "flexamem", "serve", "--db", str(tmp_path / "m.db"), "--keys", str(keyfile),
         "--embed-threads", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode != 0 and "--embed-threads must be at least 1" in run.stderr


def test_a_history_deleted_through_one_worker_is_404_on_every_worker_and_can_be_written_again(
    server: Server,
) -> None:
    """A render or a search of a history a worker holds open takes no look-up of its own: its catch-up
    finds the history gone when another worker deleted it, and the answer is 404 there too; the same name
    written again is rendered afresh, with none of the deleted words."""
    port, history = port_of(server), "gone" + uuid.uuid4().hex[:8]
    workers = list(listening_workers(server.pid, port))
    clients: list[tuple[httpx.Client, int]] = []  # each client holds one connection, to a worker we know
    try:
        for _ in range(16):
            before = client_ports(port)
            client = server.client()
            assert client.get("/health").status_code == 200
            [local] = client_ports(port) - before
            [server_side] = tcp_sockets(port, "01", peers={local})
            clients.append((client, next(pid for pid in workers if server_side in sockets_of(pid))))
        assert {pid for _, pid in clients} == set(workers), clients  # all on one worker: 2 in 65,536
        first = clients[0][0]
        turns = [{"speaker": "Ana", "text": "The spare key is under the blue heron statue."}]
        assert first.post(f"/v1/histories/{history}/sessions", json={"turns": turns}).status_code == 200
        render, search = f"/v1/histories/{history}/render", f"/v1/histories/{history}/search"
        question = {"query": "Where is the spare key?", "budget": 600}
        for client, _ in clients:  # every worker holds the history open, caught up
            r = client.post(render, json=question)
            assert r.status_code == 200 and "heron" in r.json()["text"]
        assert first.delete(f"/v1/histories/{history}").status_code == 200
        for client, pid in clients:
            for path, body in ((render, question), (search, {"query": "spare key"})):
                r = client.post(path, json=body)
                assert r.status_code == 404 and "no history" in r.json()["error"]["message"], (pid, path, r.text)
        turns = [{"speaker": "Ana", "text": "The spare key now hangs in the garage."}]
        assert clients[-1][0].post(f"/v1/histories/{history}/sessions", json={"turns": turns}).status_code == 200
        for client, _ in clients:
            text = client.post(render, json=question).json()["text"]
            assert "garage" in text and "heron" not in text
    finally:
        for client, _ in clients:
            client.close()
