"""server/app.py: what a ``flexamem serve`` worker does to its own interpreter once its app is made."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from flexamem.server.app import WORKER_GC_THRESHOLD
from flexamem.server.keys import KeyFile

PROBE = """
import gc, json
from flexamem.server import ServerConfig, create_app
from flexamem.server.app import app_from_env
import os
create_app(ServerConfig(os.environ["FLEXAMEM_DB"], os.environ["FLEXAMEM_KEYS"], offload_writes=False))
library = {"frozen": gc.get_freeze_count(), "threshold": gc.get_threshold()[0]}
app_from_env()
worker = {"frozen": gc.get_freeze_count(), "threshold": gc.get_threshold()[0], "scanned": len(gc.get_objects())}
print(json.dumps({"library": library, "worker": worker}))
"""


def test_a_worker_freezes_what_it_loaded_and_collects_its_youngest_objects_less_often(tmp_path: Path) -> None:
    """A server worker (``app_from_env``, what uvicorn calls in each) moves the objects alive once its app
    is made (models, code) out of the collector's scans and raises the youngest generation's threshold;
    an app made by a host application (``create_app``) leaves the host's collector as it was."""
    keys = tmp_path / "keys.json"
    KeyFile(str(keys)).add_key("acme")
    env = {
        **os.environ,
        "FLEXAMEM_DB": str(tmp_path / "m.db"),
        "FLEXAMEM_KEYS": str(keys),
        "FLEXAMEM_OFFLOAD_WRITES": "0",
    }
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["library"] == {"frozen": 0, "threshold": 700}  # CPython's own: create_app does not touch it
    worker = seen["worker"]
    assert worker["threshold"] == WORKER_GC_THRESHOLD
    # the models and code (tens of thousands of objects) are frozen; what a full collection scans is what
    # the worker takes on from now (here, next to nothing)
    assert worker["frozen"] > 20_000 and worker["scanned"] < worker["frozen"] // 10
