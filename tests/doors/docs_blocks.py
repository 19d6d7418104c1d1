"""The code blocks of the door pages (docs/doors/*.md), run by the tests as a user would paste them."""

import os
import re
import subprocess
import sys
from pathlib import Path

DOORS = Path(__file__).resolve().parents[2] / "docs" / "doors"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks(page: str, lang: str) -> list[str]:
    return [code for kind, code in FENCE.findall((DOORS / page).read_text()) if kind == lang]


def run_block(code: str, lang: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run one block in ``cwd`` with the project's Python (and its ``flexamem`` command) first on PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    full = {**os.environ, "PATH": path, **(env or {})}
    command = [sys.executable, "-c", code] if lang == "python" else ["bash", "-euo", "pipefail", "-c", code]
    done = subprocess.run(command, cwd=cwd, env=full, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{lang} block failed:\n{code}\n--- stderr ---\n{done.stderr[-3000:]}"
    return done.stdout
