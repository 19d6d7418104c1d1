"""Command-line parts about embeddings: ``flexamem embed-serve`` (this library's MiniLM over
``/v1/embeddings``) and the ``--embeddings-url`` / ``--embeddings-model`` / ``--embeddings-name`` flags
that point ``flexamem serve`` and ``flexamem ingest`` at an endpoint.

The flags are another spelling of the environment the library reads (``FLEXAMEM_EMBEDDER=endpoint``,
``FLEXAMEM_EMBEDDINGS_URL``, ``_MODEL``, ``_NAME``): set for this process, so the server's workers
inherit them and every history opened takes the endpoint as it would from the environment (a history
written with another model keeps its own). The key is read from ``FLEXAMEM_EMBEDDINGS_KEY`` only, never
from a flag (a command line is visible to every user of the machine).
"""

from __future__ import annotations

import argparse
import os
import sys

from flexamem.errors import InvalidInputError
from flexamem.write.default_embed import ENDPOINT, default_embedder
from flexamem.write.remote_embed import ENV


def add_embedder_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--embeddings-url",
        help="embed with an OpenAI-compatible endpoint, e.g. http://gpu-box:8081/v1 "
        "(= FLEXAMEM_EMBEDDER=endpoint FLEXAMEM_EMBEDDINGS_URL; key: $FLEXAMEM_EMBEDDINGS_KEY)",
    )
    p.add_argument("--embeddings-model", help="the model name the endpoint serves (FLEXAMEM_EMBEDDINGS_MODEL)")
    p.add_argument(
        "--embeddings-name",
        help="the model whose vectors it gives, as histories record it (default: the model name; "
        "FLEXAMEM_EMBEDDINGS_NAME)",
    )


def use_embedder_arguments(args: argparse.Namespace) -> None:
    """Make the flags the process's embedder (checked now: a bad one fails before any work)."""
    url, model, name = args.embeddings_url, args.embeddings_model, args.embeddings_name
    if not url and not model and not name:
        return
    if not url or not model:
        raise InvalidInputError("--embeddings-url and --embeddings-model go together")
    os.environ["FLEXAMEM_EMBEDDER"] = ENDPOINT
    os.environ[ENV + "URL"], os.environ[ENV + "MODEL"] = url, model
    if name:
        os.environ[ENV + "NAME"] = name
    else:
        os.environ.pop(ENV + "NAME", None)
    print(f"flexamem: embeddings by {default_embedder()!r}", file=sys.stderr)


def cmd_embed_serve(args: argparse.Namespace) -> int:
    from flexamem.server.embeddings import EmbeddingServer

    if os.environ.get("FLEXAMEM_EMBEDDER") == ENDPOINT:
        raise InvalidInputError("embed-serve serves a local model: unset FLEXAMEM_EMBEDDER=endpoint")
    embedder = default_embedder()
    key = os.environ.get(ENV + "KEY") or None
    server = EmbeddingServer(embedder, args.host, args.port, model=args.model, key=key)
    print(
        f"FlexA-Mem embeddings: {server.model} ({type(embedder).__name__}, {embedder.dim}-d) on {server.url}"
        f"/embeddings{' (key required)' if key else ''}",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.serve_forever()
    finally:
        server.close()
    return 0


def add_embedding_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "embed-serve",
        help="serve this library's MiniLM over OpenAI's /v1/embeddings (for --embeddings-url elsewhere)",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8081, help="0: a free port (printed)")
    p.add_argument("--model", help="the name to serve it under (default: the embedder's, all-MiniLM-L6-v2)")
    p.set_defaults(func=cmd_embed_serve)
