"""A real server on 127.0.0.1 (``python -m flexamem serve``, two worker processes) for the HTTP tests."""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi")


@dataclass
class Server:
    url: str
    keys: dict[str, str]
    db: Path
    keyfile: Path
    log: Path

    def client(self, tenant: str | None = "acme") -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.keys[tenant]}"} if tenant else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "flexamem", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("server")
    keyfile, db, log = root / "keys.json", root / "m.db", root / "server.log"
    keys = {t: cli("serve", "--keys", str(keyfile), "--add-key", t).strip().splitlines()[-1] for t in ("acme", "other")}
    port = free_port()
    env = {**os.environ, "FLEXAMEM_THREADS": "1"}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "flexamem", "serve", "--db", str(db), "--keys", str(keyfile), "--port", str(port),
             "--workers", "2", "--max-body", "200000"],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail("the server did not start: " + log.read_text()[-2000:])
    yield Server(url, keys, db, keyfile, log)
    proc.terminate()
    proc.wait(timeout=30)
