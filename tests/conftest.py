"""Shared fixtures: small histories the project writes itself, and a shared embedder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import flexamem as fm
from flexamem.cli.demo import DEMO_SESSIONS

# The default embedder follows the processor (int8 on x86 with AVX2 or better, write/default_embed.py);
# the suite pins fp32 so that it asserts the same vectors on every machine (child processes inherit it).
# The processor rule itself is tested in tests/write/test_embedder_record.py with the variable unset.
os.environ.setdefault("FLEXAMEM_EMBEDDER", "fp32")


@pytest.fixture()
def mem() -> fm.Memory:
    return fm.Memory(":memory:")


@pytest.fixture()
def demo_mem(tmp_path: Path) -> fm.Memory:
    m = fm.Memory(tmp_path / "demo.db")
    for sid, date, turns in DEMO_SESSIONS:
        m.add_session(turns, session_id=sid, date=date)
    return m


POSTGRES_URL = os.environ.get("FLEXAMEM_TEST_POSTGRES")  # make test starts a server: scripts/start_postgres.sh
POSTGRES_REQUIRED = os.environ.get("FLEXAMEM_REQUIRE_POSTGRES") == "1"  # CI: a missing server is a failure


NO_POSTGRES = pytest.mark.skipif(
    not POSTGRES_URL and not POSTGRES_REQUIRED,
    reason="no PostgreSQL test server (FLEXAMEM_TEST_POSTGRES); `make test` starts one",
)


ROOT_REQUIRED = os.environ.get("FLEXAMEM_REQUIRE_ROOT") == "1"  # CI runs as root: a small tmpfs must be mountable
NEEDS_ROOT = pytest.mark.skipif(
    os.geteuid() != 0 and not ROOT_REQUIRED, reason="mounting a small tmpfs needs root (CI runs as root)"
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=NO_POSTGRES)])
def store_path(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a contract test's memories live: a SQLite file, or the test PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "contract.db")
    if POSTGRES_URL:
        return POSTGRES_URL
    pytest.fail("FLEXAMEM_REQUIRE_POSTGRES=1 but FLEXAMEM_TEST_POSTGRES is not set (scripts/start_postgres.sh)")


@pytest.fixture()
def tenant() -> str:
    """A history name no other test uses (the Postgres test database is shared by every test)."""
    import uuid

    return f"t-{uuid.uuid4().hex[:10]}"


_PROVIDER: list[object] = []


@pytest.fixture()
def spans() -> object:
    """The spans finished during the test (an in-memory exporter on the process's one tracer provider,
    set up once: OpenTelemetry takes a provider only once per process)."""
    sdk = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    if not _PROVIDER:
        exporter = InMemorySpanExporter()
        provider = sdk.TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        _PROVIDER.append(exporter)
    exporter = _PROVIDER[0]
    exporter.clear()  # type: ignore[attr-defined]
    return exporter
