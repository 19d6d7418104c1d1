"""The servers: HTTP (FastAPI + uvicorn; the ``server`` extra: ``flexamem serve`` or :func:`create_app`,
with the key file and the inspector page beside it) and MCP over stdio (``mcp.py``; the ``mcp`` extra).
Each imports its framework only when used, so one door never needs the other's packages."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from flexamem.server.settings import SERVER_EMBED_THREADS

if TYPE_CHECKING:
    from flexamem.server.app import ServerConfig

__all__ = ["KeyFile", "ServerConfig", "create_app", "serve"]


def __getattr__(name: str) -> Any:
    """``KeyFile``, ``ServerConfig`` and ``create_app``, imported when first asked for."""
    if name in ("ServerConfig", "create_app"):
        from flexamem.server import app

        return getattr(app, name)
    if name == "KeyFile":
        from flexamem.server.keys import KeyFile

        return KeyFile
    raise AttributeError(f"module 'flexamem.server' has no attribute {name!r}")


def serve(config: ServerConfig, host: str = "127.0.0.1", port: int = 8000, workers: int = 1) -> None:
    """Run the server (blocks). Several workers share the store through ``FLEXAMEM_DB``/``FLEXAMEM_KEYS``;
    each reads the rest of ``config`` from the environment set here."""
    import uvicorn

    os.environ["FLEXAMEM_DB"], os.environ["FLEXAMEM_KEYS"] = config.db, config.keys
    os.environ["FLEXAMEM_MAX_BODY"] = str(config.max_body_bytes)
    os.environ["FLEXAMEM_MAX_OPEN"] = str(config.max_open)
    os.environ["FLEXAMEM_OFFLOAD_WRITES"] = "1" if config.offload_writes else "0"
    os.environ["FLEXAMEM_MAX_PENDING_WRITES"] = str(config.max_pending_writes)
    os.environ["FLEXAMEM_WRITE_TARGET"] = "" if config.write_target is None else str(config.write_target)
    os.environ["FLEXAMEM_WRITE_NICE"] = str(config.write_nice)
    os.environ["FLEXAMEM_EMBED_PROCESSES"] = str(config.embed_processes or "")
    if config.embed_threads is not None:  # read where each process first builds its embedder (write/embed.py)
        os.environ["FLEXAMEM_THREADS"] = str(config.embed_threads)
    else:
        os.environ.setdefault("FLEXAMEM_THREADS", str(SERVER_EMBED_THREADS))
    os.environ["FLEXAMEM_WRITE_WAIT"] = "" if config.write_wait is None else str(config.write_wait)
    os.environ["FLEXAMEM_RECORDS"] = config.records
    os.environ["FLEXAMEM_PROFILE"] = config.profile or ""
    os.environ["FLEXAMEM_BODY_TIMEOUT"] = str(config.body_timeout)
    os.environ["FLEXAMEM_AUTH_BURST"], os.environ["FLEXAMEM_AUTH_RATE"] = str(config.auth_burst), str(config.auth_rate)
    os.environ["FLEXAMEM_KEEP_ALIVE_REQUESTS"] = str(config.keep_alive_requests)
    os.environ["FLEXAMEM_HEADER_TIMEOUT"] = str(config.header_timeout)  # read by server/protocol.py in each worker
    os.environ["FLEXAMEM_MAX_HEADER_BYTES"] = str(config.max_header_bytes)
    os.environ["FLEXAMEM_MAX_HEADERS"] = str(config.max_headers)
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # /metrics adds up every worker
        import tempfile

        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="flexamem-metrics-")
    options: dict[str, Any] = {
        "app": "flexamem.server.app:app_from_env",
        "factory": True,
        "log_level": "warning",
        "access_log": False,
        "http": "flexamem.server.protocol:GuardedH11Protocol",  # h11 with deadlines and bounds on requests' heads
        "timeout_keep_alive": config.keep_alive,
        "h11_max_incomplete_event_size": config.max_header_bytes,
        # X-Forwarded-For names the client only from the proxies named (uvicorn alone trusts 127.0.0.1, so
        # a local client could send another address with every wrong key and never be throttled)
        "proxy_headers": config.forwarded_allow_ips is not None,
    }
    if config.forwarded_allow_ips is not None:
        options["forwarded_allow_ips"] = config.forwarded_allow_ips
    from flexamem.server import workers as processes

    if workers > 1 and processes.available():  # a socket per worker: new connections spread over them
        try:
            code = processes.run_workers(options, host, port, workers)
        except OSError as exc:  # the port is taken (or not ours): said once, before any worker starts
            raise SystemExit(f"flexamem serve: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        if code:
            raise SystemExit(code)
        return
    uvicorn.run(host=host, port=port, workers=workers, **options)
