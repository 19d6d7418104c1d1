"""A real server on 127.0.0.1 (``python -m flexamem serve``, two worker processes) for the HTTP tests."""

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.servers import ServerProcess

pytest.importorskip("fastapi")


@dataclass
class Server:
    url: str
    keys: dict[str, str]
    db: Path
    keyfile: Path
    log: Path
    pid: int  # the server's process: its children are the workers

    def client(self, tenant: str | None = "acme") -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.keys[tenant]}"} if tenant else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)


def cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "flexamem", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("server")
    keyfile, db, log = root / "keys.json", root / "m.db", root / "server.log"
    keys = {t: cli("serve", "--keys", str(keyfile), "--add-key", t).strip().splitlines()[-1] for t in ("acme", "other")}
    proc = ServerProcess(str(db), keyfile, log, workers=2, args=("--max-body", "200000")).start(timeout=90)
    assert proc.proc is not None
    yield Server(proc.url, keys, db, keyfile, log, proc.proc.pid)
    proc.stop()
