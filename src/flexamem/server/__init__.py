"""HTTP server (FastAPI + uvicorn; the ``server`` extra): ``flexamem serve`` or :func:`create_app`."""

from __future__ import annotations

import os

from flexamem.server.app import ServerConfig, create_app
from flexamem.server.keys import KeyFile

__all__ = ["KeyFile", "ServerConfig", "create_app", "serve"]


def serve(config: ServerConfig, host: str = "127.0.0.1", port: int = 8000, workers: int = 1) -> None:
    """Run the server (blocks). Several workers share the store through ``FLEXAMEM_DB``/``FLEXAMEM_KEYS``."""
    import uvicorn

    os.environ["FLEXAMEM_DB"], os.environ["FLEXAMEM_KEYS"] = config.db, config.keys
    os.environ["FLEXAMEM_MAX_BODY"] = str(config.max_body_bytes)
    uvicorn.run(
        "flexamem.server.app:app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="warning",
        access_log=False,
    )
