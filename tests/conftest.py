"""Shared fixtures: small histories the project writes itself, and a shared embedder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import flexamem as fm
from flexamem.demo import DEMO_SESSIONS


def data_root() -> Path:
    """Shared data: ``$FLEXAMEM_DATA``, else ``../shared/data`` beside the repository."""
    env = os.environ.get("FLEXAMEM_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture()
def mem() -> fm.Memory:
    return fm.Memory(":memory:")


@pytest.fixture()
def demo_mem(tmp_path: Path) -> fm.Memory:
    m = fm.Memory(tmp_path / "demo.db")
    for sid, date, turns in DEMO_SESSIONS:
        m.add_session(turns, session_id=sid, date=date)
    return m
