"""This library's own MiniLM served over OpenAI's ``/v1/embeddings`` (``flexamem embed-serve``): the
endpoint an :class:`~flexamem.write.remote_embed.EndpointEmbedder` calls, with the same vectors as the
local embedder (it *is* the local embedder, behind HTTP).

The Python standard library's threaded HTTP server, so it needs no extra: one process, the embedder's
own lock running one forward at a time (texts of concurrent requests wait their turn). Routes:
``POST /v1/embeddings`` (also ``/embeddings``): ``{"model", "input": text or [texts], "encoding_format"?:
"float" | "base64"}`` -> ``{"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
"model", "usage"}``; ``GET /v1/models``; ``GET /health``. A request naming another model is answered
404 (as OpenAI answers an unknown model), so a client is never given one model's vectors for another's.
With ``key``, requests must carry ``Authorization: Bearer <key>`` (401 otherwise). For a GPU, serve
the model with a GPU runtime instead (docs/EMBEDDINGS.md): this server runs on the CPU.
"""

from __future__ import annotations

import base64
import hmac
import json
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from flexamem.write.embed import Embedder
from flexamem.write.remote_embed import same_model

MAX_BODY = 16 * 1024 * 1024  # bytes of one request
MAX_INPUTS = 2048  # texts of one request (OpenAI's own limit)


class RequestError(Exception):
    """A request answered with an error status (the OpenAI error body)."""

    def __init__(self, status: int, message: str, code: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.code = status, code


class EmbeddingServer:
    """``embedder`` behind ``http://host:port/v1/embeddings`` (``port=0``: a free port, see ``url``).

    ``start()`` serves from a thread, ``serve_forever()`` from the caller's; ``close()`` stops it.
    ``model`` is the name it serves the vectors under (default: the embedder's name).
    """

    def __init__(
        self,
        embedder: Embedder,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        model: str | None = None,
        key: str | None = None,
        max_inputs: int = MAX_INPUTS,
        max_body: int = MAX_BODY,
    ) -> None:
        self.embedder = embedder
        self.model = model or embedder.name
        self.key = key or None
        self.max_inputs = max_inputs
        self.max_body = max_body
        self.requests = 0  # embeddings requests answered with vectors
        self.texts = 0  # texts embedded
        self.batches: list[int] = []  # texts per answered request, in order
        self._count_lock = threading.Lock()
        self.httpd = ThreadingHTTPServer((host, port), _handler(self))
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        """The base URL a client is given (``/embeddings`` is added to it)."""
        host = str(self.httpd.server_address[0])
        return f"http://{host}:{self.port}/v1"

    def start(self) -> EmbeddingServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="flexamem-embed-serve", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def close(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self.httpd.server_close()

    def __enter__(self) -> EmbeddingServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- what a request gets ------------------------------------------------------------------------------
    def authorised(self, header: str | None) -> bool:
        if self.key is None:
            return True
        given = (header or "").removeprefix("Bearer ").strip()
        return hmac.compare_digest(given.encode(), self.key.encode())

    def answer(self, body: Any) -> dict[str, Any]:
        """The answer to one embeddings request's JSON body (:class:`RequestError` for a bad one)."""
        if not isinstance(body, dict):
            raise RequestError(400, "the body must be a JSON object")
        asked = body.get("model")
        if asked is not None and (not isinstance(asked, str) or not same_model(asked, self.model)):
            raise RequestError(
                404, f"the model {asked!r} is not served here (it serves {self.model!r})", "model_not_found"
            )
        texts = body.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise RequestError(400, "'input' must be a text or a non-empty list of texts (token arrays are not taken)")
        if len(texts) > self.max_inputs:
            raise RequestError(400, f"'input' holds {len(texts)} texts; at most {self.max_inputs} a request")
        encoding = body.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            raise RequestError(400, f"'encoding_format' must be float or base64, not {encoding!r}")
        vectors = self.embedder.embed(texts)
        with self._count_lock:
            self.requests += 1
            self.texts += len(texts)
            self.batches.append(len(texts))
        tokens = _tokens(self.embedder, texts)
        return {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": _encoded(v, encoding)} for i, v in enumerate(vectors)
            ],
            "model": self.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }


def _encoded(vector: np.ndarray, encoding: str) -> Any:
    """A vector as JSON numbers (each float32 exactly: a Python float holds it) or base64 float32."""
    if encoding == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return [float(x) for x in vector]


def _tokens(embedder: Embedder, texts: Sequence[str]) -> int:
    """The wordpieces of ``texts`` (the usage a client may count), when the embedder has a tokenizer."""
    tokenizer = getattr(embedder, "tokenizer", None)
    if tokenizer is None:
        return 0
    return sum(len(e.ids) for e in tokenizer.encode_batch(list(texts)))


def _handler(server: EmbeddingServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # kept-alive connections: a client's batches reuse one
        server_version = "flexamem-embed-serve"

        def log_message(self, format: str, *args: Any) -> None:  # quiet: one line per request is noise
            return

        def _send(self, status: int, data: dict[str, Any]) -> None:
            blob = json.dumps(data, ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(blob)))
            self.end_headers()
            self.wfile.write(blob)

        def _error(self, error: RequestError) -> None:
            self.close_connection = True  # a body may be left unread: the connection cannot be reused
            kind = "invalid_request_error" if error.status < 500 else "server_error"
            self._send(error.status, {"error": {"message": str(error), "type": kind, "code": error.code}})

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/")
            if path == "/health":
                self._send(200, {"status": "ok", "model": server.model})
            elif path in ("/v1/models", "/models"):
                model = {"id": server.model, "object": "model", "owned_by": "flexamem"}
                self._send(200, {"object": "list", "data": [model]})
            else:
                self._error(RequestError(404, f"no route {path!r}", "not_found"))

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/")
            try:
                if path not in ("/v1/embeddings", "/embeddings"):
                    raise RequestError(404, f"no route {path!r}", "not_found")
                if not server.authorised(self.headers.get("Authorization")):
                    raise RequestError(401, "a valid API key is needed (Authorization: Bearer ...)", "invalid_api_key")
                try:
                    length = int(self.headers.get("Content-Length", ""))
                except ValueError:
                    raise RequestError(411, "a Content-Length is needed") from None
                if length > server.max_body:
                    raise RequestError(413, f"the body is over {server.max_body} bytes")
                try:
                    body = json.loads(self.rfile.read(length))
                except (ValueError, UnicodeDecodeError) as exc:
                    raise RequestError(400, f"the body is not JSON: {exc}") from None
                answer = server.answer(body)
            except RequestError as exc:
                self._error(exc)
                return
            except Exception as exc:  # the embedder failed: the client may retry (5xx)
                self._error(RequestError(500, f"embedding failed: {type(exc).__name__}: {exc}", "server_error"))
                return
            self._send(200, answer)

    return Handler
