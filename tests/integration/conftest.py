"""The local model server (llama.cpp, Qwen2.5-Coder 0.5B) shared by the integration tests that need it.

``scripts/setup_local_llm.sh`` installs it; without it those tests skip, unless
``FLEXAMEM_REQUIRE_LOCAL_LLM=1`` (set by CI), where a missing model is a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from flexamem.llm.local import LocalServer, local_model_path, local_server_available

WHY_NOT = local_server_available()
REQUIRED = os.environ.get("FLEXAMEM_REQUIRE_LOCAL_LLM") == "1"
NEEDS_LOCAL_LLM = [
    pytest.mark.integration,
    pytest.mark.skipif(WHY_NOT is not None and not REQUIRED, reason=str(WHY_NOT)),
]


def require_local_llm() -> None:
    """Required (CI) but missing: a failure, not a skip."""
    if WHY_NOT is not None:
        pytest.fail(WHY_NOT)


@pytest.fixture(scope="session")
def server() -> Iterator[LocalServer]:
    """One local model server for the whole run (its start-up costs seconds on 2 cores)."""
    require_local_llm()
    with LocalServer(local_model_path()) as s:
        yield s
