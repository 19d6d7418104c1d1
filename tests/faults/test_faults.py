"""The fault suite (``make faults``; part of ``make test``): real servers on this machine, hurt the ways
production hurts them, under load, each bounded in time. Every test asserts that nothing acknowledged is
lost or doubled and that every error a client sees is typed (a JSON body with a status the OpenAPI
document lists), and reports its counts (``FLEXAMEM_FAULTS_REPORT=file`` collects them; the figures in
docs/RELIABILITY.md come from there).

- kill -9 of the whole server (master, workers, embedding processes) in the middle of client writes;
- kill -9 of the servers' embedding processes, again and again, under the same load;
- a PostgreSQL restart (its own throwaway cluster) under load: 503 with Retry-After, never a 500;
- a full disk under the server's SQLite file (a 3 MB tmpfs): 507, reads go on.

Byte flips in a store file and the drop of a history named like another's sessions are in
``tests/store/test_environment.py`` and ``tests/store/test_integrity.py`` (also ``faults``).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.conftest import NEEDS_ROOT, NO_POSTGRES
from tests.servers import ServerProcess, free_port, stat_fields

pytestmark = [pytest.mark.integration, pytest.mark.faults]
pytest.importorskip("fastapi")

ROOT = Path(__file__).resolve().parents[2]
ALLOWED = {400, 401, 404, 409, 413, 422, 500, 503, 507}


def report(name: str, counts: dict[str, object]) -> None:
    """Print the test's counts and add them to ``FLEXAMEM_FAULTS_REPORT`` (JSON lines)."""
    line = json.dumps({"fault": name, **counts})
    print(f"\nFAULTS {line}")
    out = os.environ.get("FLEXAMEM_FAULTS_REPORT")
    if out:
        with open(out, "a", encoding="utf-8") as f:
            f.write(line + "\n")


@dataclass
class Load:
    """Client threads writing sessions with their own ids (a retry of one already stored gets 409), each to
    its own history, with renders between; every answer is counted by status."""

    url: str
    key: str
    clients: int = 4
    statuses: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)  # the error types of the answers that were not 200
    acked: dict[str, list[str]] = field(default_factory=dict)
    retry_after: int = 0
    untyped: list[str] = field(default_factory=list)
    connection_errors: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, k: int) -> None:
        history, i = f"c{k}", 0
        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=30) as c:
            while not self.stop.is_set():
                sid = f"c{k}-{i}"
                body = {"session_id": sid, "turns": [{"speaker": "A", "text": f"note {sid}: parcel {i} to depot {k}"}]}
                stored = False
                while not self.stop.is_set():  # the same write until the server says it is stored
                    status = self.call(c, "POST", f"/v1/histories/{history}/sessions", body)
                    if status in (200, 409):  # 409: stored by an attempt whose answer was lost
                        with self.lock:
                            self.acked.setdefault(history, []).append(sid)
                        stored = True
                        break
                    time.sleep(0.2)
                if stored and i % 3 == 0:  # (a history whose first write was never stored does not exist)
                    self.call(c, "POST", f"/v1/histories/{history}/render", {"query": f"parcel {i}", "budget": 400})
                i += 1

    def call(self, c: httpx.Client, method: str, path: str, body: dict[str, object]) -> int:
        try:
            r = c.request(method, path, json=body)
        except httpx.HTTPError:
            with self.lock:
                self.connection_errors += 1
            time.sleep(0.2)
            return 0
        with self.lock:
            self.statuses[r.status_code] += 1
            if r.status_code == 503 and r.headers.get("retry-after"):
                self.retry_after += 1
            if r.status_code != 200:
                try:
                    typed = r.json()["error"]["type"]
                except (ValueError, KeyError, TypeError):
                    typed = None
                self.errors[str(typed)] += 1
                if not typed or r.status_code not in ALLOWED:
                    self.untyped.append(f"{r.status_code} {r.text[:200]}")
        return r.status_code

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        threads = [threading.Thread(target=self.run, args=(k,), daemon=True) for k in range(self.clients)]
        for t in threads:
            t.start()
        try:
            yield
        finally:
            self.stop.set()
            for t in threads:
                t.join(timeout=60)

    def wait_for_acks(self, count: int, seconds: float = 60) -> None:
        """Until ``count`` more writes are acknowledged (or ``seconds`` pass)."""
        start, deadline = self.total(), time.monotonic() + seconds
        while self.total() < start + count and time.monotonic() < deadline:
            time.sleep(0.05)

    def total(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.acked.values())

    def check(self, url: str) -> tuple[int, int]:
        """Every acknowledged write stored exactly once: (acknowledged, lost)."""
        lost, total = 0, 0
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {self.key}"}, timeout=60) as c:
            for history, sids in self.acked.items():
                stored = [n["unit_id"] for n in c.get(f"/v1/histories/{history}/notes").json()]
                assert len(stored) == len(set(stored)), f"doubled in {history}"
                lost += len(set(sids) - set(stored))
                total += len(sids)
        return total, lost


def keys(tmp_path: Path) -> tuple[Path, str]:
    from flexamem.server.keys import KeyFile

    keyfile = tmp_path / "keys.json"
    return keyfile, KeyFile(keyfile).add_key("faults")


@pytest.fixture()
def sqlite_server(tmp_path: Path) -> Iterator[tuple[ServerProcess, str]]:
    keyfile, key = keys(tmp_path)
    server = ServerProcess(str(tmp_path / "faults.db"), keyfile, tmp_path / "server.log")
    server.start()
    yield server, key
    server.stop()


KILLS = int(os.environ.get("FLEXAMEM_FAULT_KILLS", "5"))


def test_kill_9_of_the_whole_server_mid_writes_loses_and_doubles_nothing(
    sqlite_server: tuple[ServerProcess, str],
) -> None:
    server, key = sqlite_server
    rng = random.Random(29)
    load = Load(server.url, key)
    with load.running():
        for _ in range(KILLS):
            load.wait_for_acks(3)  # the restarted server is writing again
            time.sleep(rng.uniform(0.0, 1.5))
            server.kill()
            time.sleep(rng.uniform(0.0, 0.5))
            server.start()
        time.sleep(1.0)
    acked, lost = load.check(server.url)
    report("server kill -9", {"kills": KILLS, "acknowledged": acked, "lost": lost, "statuses": dict(load.statuses),
                              "connection_errors": load.connection_errors})  # fmt: skip
    assert acked > 0 and lost == 0 and not load.untyped, load.untyped
    assert load.statuses[500] == 0


def test_kill_9_of_the_embedding_processes_under_load_loses_and_doubles_nothing(
    sqlite_server: tuple[ServerProcess, str],
) -> None:
    server, key = sqlite_server
    load, killed = Load(server.url, key), 0
    with load.running():
        deadline = time.monotonic() + 12
        while time.monotonic() < deadline:
            time.sleep(0.7)
            for pid in server.embedders():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
    acked, lost = load.check(server.url)
    report("embedding process kill -9", {"kills": killed, "acknowledged": acked, "lost": lost,
                                         "statuses": dict(load.statuses)})  # fmt: skip
    assert killed > 0 and acked > 0 and lost == 0 and not load.untyped, load.untyped
    # a redone embedding is invisible to the client: only a busy worker's 503 (its bound on writes in progress)
    assert set(load.statuses) <= {200, 409, 503}, load.statuses
    assert set(load.errors) <= {"DuplicateUnitError", "ConcurrentWriteError", "ServerBusyError"}, load.errors


@pytest.fixture()
def own_postgres(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """A throwaway PostgreSQL cluster of this test's own (port and folder apart from the shared one), so
    restarting it disturbs no other test."""
    folder = Path(tempfile.mkdtemp(prefix="flexamem-pg-faults-"))  # pytest's folders are closed to `postgres`
    folder.chmod(0o755)
    env = {**os.environ, "FLEXAMEM_PG_DIR": str(folder / "pg"), "FLEXAMEM_PG_PORT": str(free_port())}
    script = str(ROOT / "scripts" / "start_postgres.sh")
    done = subprocess.run(["bash", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    try:
        yield done.stdout.strip().splitlines()[-1], env
    finally:
        subprocess.run(["bash", script, "stop"], capture_output=True, env=env, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)


@NO_POSTGRES
def test_a_postgresql_restart_under_load_is_503_with_retry_after_never_500(
    own_postgres: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    url, env = own_postgres
    keyfile, key = keys(tmp_path)
    server = ServerProcess(url, keyfile, tmp_path / "server.log")
    server.start()
    pg_ctl = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))[-1]
    as_pg = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    restarts = 3
    load = Load(server.url, key)
    try:
        with load.running():
            for _ in range(restarts):
                time.sleep(2.0)
                subprocess.run([*as_pg, str(pg_ctl), "-D", env["FLEXAMEM_PG_DIR"], "-m", "immediate", "stop"],
                               capture_output=True, timeout=60, check=True)  # fmt: skip
                time.sleep(1.0)  # requests meanwhile meet a database that is gone
                done = subprocess.run(["bash", str(ROOT / "scripts" / "start_postgres.sh")],
                                      capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
                assert done.returncode == 0, done.stderr
            time.sleep(2.0)
        acked, lost = load.check(server.url)
    finally:
        server.stop()
    report("PostgreSQL restart", {"restarts": restarts, "acknowledged": acked, "lost": lost,
                                  "statuses": dict(load.statuses), "retry_after": load.retry_after})  # fmt: skip
    assert acked > 0 and lost == 0 and not load.untyped, load.untyped
    assert load.statuses[500] == 0 and load.statuses[503] > 0 and load.retry_after == load.statuses[503]


@NEEDS_ROOT
def test_a_full_disk_under_the_server_is_507_and_reads_go_on(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)], check=True)
    keyfile, key = keys(tmp_path)
    server = ServerProcess(str(disk / "full.db"), keyfile, tmp_path / "server.log")
    server.start()
    statuses: Counter[int] = Counter()
    acked: list[str] = []
    try:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
            for i in range(400):
                body = {"session_id": f"s{i}", "turns": [{"speaker": "A", "text": f"parcel {i} " + "x" * 6000}]}
                r = c.post("/v1/histories/full/sessions", json=body)
                statuses[r.status_code] += 1
                if r.status_code == 200:
                    acked.append(f"s{i}")
                elif statuses[507] >= 3:
                    break
            last = r.json()["error"]
            notes = c.get("/v1/histories/full/notes")
            render = c.post("/v1/histories/full/render", json={"query": "parcel 3", "budget": 500})
    finally:
        server.stop()
        subprocess.run(["umount", "-l", str(disk)], check=False)
    report("disk full", {"acknowledged": len(acked), "statuses": dict(statuses)})
    assert statuses[507] >= 1 and last["type"] == "StoreFullError" and set(statuses) <= {200, 507}, statuses
    assert notes.status_code == 200 and [n["unit_id"] for n in notes.json()] == acked
    assert render.status_code == 200 and render.json()["tokens"] <= 500


def test_an_embedding_process_whose_worker_dies_exits_too(tmp_path: Path) -> None:
    """Killing a worker (or stopping a server that does not close its pools) must not leave its embedding
    process behind holding a model's memory: it notices its parent is gone and exits within seconds."""
    keyfile, key = keys(tmp_path)
    server = ServerProcess(str(tmp_path / "orphans.db"), keyfile, tmp_path / "server.log")
    server.start()
    try:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
            for i in range(6):  # writes reach both workers, each starting its embedding process
                body = {"session_id": f"s{i}", "turns": [{"speaker": "A", "text": f"parcel {i}"}]}
                assert c.post(f"/v1/histories/h{i}/sessions", json=body).status_code == 200
        embedders = server.embedders()
        assert embedders, "no embedding process started"
        for pid in server.workers():
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in embedders):
            time.sleep(0.2)
        left = [p for p in embedders if Path(f"/proc/{p}").exists() and "Z" not in _state(p)]
        report("orphaned embedding processes", {"embedders": len(embedders), "left_after_10s": len(left)})
        assert not left
    finally:
        server.stop()


def _state(pid: int) -> str:
    try:
        return stat_fields(pid)[0]
    except OSError:
        return "Z"
