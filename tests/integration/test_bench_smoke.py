"""The performance suite's smoke run (CI runs it; figures are printed, never asserted)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..helpers import needs_data, shared_file

LOCOMO = shared_file("locomo", "locomo-dev.json")
SUITE = Path(__file__).resolve().parents[2] / "benchmarks" / "suite.py"
pytestmark = [
    pytest.mark.integration,
    needs_data(LOCOMO),
]


def test_suite_smoke_prints_every_section(tmp_path: Path) -> None:
    env = {**os.environ, "FLEXAMEM_BENCH_CACHE": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, str(SUITE), "--smoke", "--data", str(LOCOMO)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    for heading in ("## Ingest", "## Render", "## Agent calls", "open to first render", "bm25s"):
        assert heading in out
    rows = [line for line in out.splitlines() if line.startswith("| auto |") or line.startswith("| units |")]
    assert len(rows) == 4  # two budgets per mode
    assert "| after a new step |" in out and "| repeated |" in out
    assert (tmp_path / "varied-20000-v1.json").exists()  # the built history is cached for the next run
