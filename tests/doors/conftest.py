"""Every adapter runs both ways: on a local ``fm.Memory`` and on ``fm.Memory(url)`` over a real server."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

import flexamem as fm
from tests.server.conftest import Server, server  # noqa: F401  (the real server of the HTTP tests)

Opener = Callable[[], fm.Memory]


@pytest.fixture(params=["local", "remote"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens the same memory again each call (as a restarted process would): a SQLite file, or one
    history of the test server's tenant."""
    if request.param == "local":
        return lambda: fm.Memory(tmp_path / "adapter.db")
    srv: Server = request.getfixturevalue("server")
    history = "a" + uuid.uuid4().hex[:10]
    return lambda: fm.Memory(srv.url, key=srv.keys["acme"], history=history)
