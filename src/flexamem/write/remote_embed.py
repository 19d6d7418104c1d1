"""Sentence embeddings from an OpenAI-compatible ``/embeddings`` endpoint: the embedding forward (the
floor under every write) done where it is cheap, e.g. a GPU box serving all-MiniLM-L6-v2.

What a history records is the name of the *model* whose vectors it holds, not how they were made:
an :class:`EndpointEmbedder` declares the model its endpoint serves (``name``, by default the
``model`` it sends), and a history written through it records that name, like any embedder's. So a
history written locally with all-MiniLM-L6-v2 can be continued through an endpoint serving the same
model, and the other way round, and a history is never continued with another model's vectors (the
name check on open, :meth:`flexamem.core.HistoryCore.check_embedder`, refuses it).

A name is only a claim, so for a model this library makes itself (all-MiniLM-L6-v2) the claim is
checked: before its first vectors are used, the endpoint embeds the probe texts shipped with the
library (``minilm_probes.json``: short, long past the 256-token cut, accented, CJK, emoji, a field
block) and every vector must have a cosine of at least :data:`MIN_COSINE` to the reference
(sentence-transformers' own vectors), else :class:`~flexamem.errors.EmbeddingEndpointError`. fp32
runtimes (numpy, onnxruntime, torch on CPU or GPU) agree to ~1e-7; the int8 model, a different set of
vectors by this library's rule, gives ~0.99. Other models' names are taken as declared (the library
has no reference for them): the answers' ``model`` must match, and the vectors' size must stay the same.

Requests: texts sorted by length and sent ``batch`` at a time (``{"model", "input": [...]}``), the
answer's rows put back in order by their ``index``, each row L2-normalised as the local embedder's
are. Connection errors, timeouts, 408/429/5xx are retried with backoff (``Retry-After`` honoured) for
up to ``retry_for`` seconds (the one retry loop of :func:`flexamem.llm.client.retried`); another 4xx,
an answer that is not the protocol's, or vectors of the wrong size fail at once. Needs ``httpx`` (the
``llm`` or ``client`` extra).
"""

from __future__ import annotations

import base64
import json
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flexamem.errors import EmbeddingEndpointError, InvalidInputError, ModelUnavailableError
from flexamem.llm.client import RETRY_STATUS, RetryPolicy, TransientError, retried, retry_after_seconds, short_text
from flexamem.write.onnx_embed import NAMES

if TYPE_CHECKING:
    import httpx

MIN_COSINE = 0.9999  # every probe's vector against the reference (fp32 runtimes: > 0.9999999; int8: ~0.99)
DEFAULT_BATCH = 64  # texts per request
DEFAULT_TIMEOUT = 30.0  # seconds for one request's answer (connecting: at most 10)
DEFAULT_RETRY_FOR = 120.0  # seconds of retries before giving up (a GPU server's restart and model load)
PROBES = Path(__file__).with_name("minilm_probes.json")
ENV = "FLEXAMEM_EMBEDDINGS_"  # FLEXAMEM_EMBEDDINGS_URL, _MODEL, _KEY, _NAME, _DIM, _BATCH, _TIMEOUT, _RETRY_FOR


@dataclass(frozen=True)
class Reference:
    """Probe texts and the reference vectors (unit length) of one model this library makes."""

    model: str
    texts: tuple[str, ...]
    vectors: np.ndarray

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])


@cache
def reference(name: str) -> Reference | None:
    """The shipped probes of the model named ``name`` (None: no reference for it)."""
    if name != NAMES["fp32"]:
        return None
    data = json.loads(PROBES.read_text(encoding="utf-8"))
    vectors = np.asarray(data["vectors"], dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return Reference(str(data["model"]), tuple(data["texts"]), vectors)


def same_model(answered: str, asked: str) -> bool:
    """Whether an answer's ``model`` names the model asked for (a server may add its organisation:
    ``sentence-transformers/all-MiniLM-L6-v2`` for ``all-MiniLM-L6-v2``, or the other way round)."""
    return answered == asked or answered.endswith("/" + asked) or asked.endswith("/" + answered)


class EndpointEmbedder:
    """An :class:`~flexamem.write.embed.Embedder` whose vectors come from ``{url}/embeddings``.

    Args:
        url: the endpoint's base, e.g. ``http://gpu-box:8081/v1`` (``/embeddings`` is added).
        model: the model name the endpoint serves (sent with every request).
        key: sent as a bearer token; never printed (``repr`` masks it).
        name: the model whose vectors the endpoint gives, as a history records it (default: ``model``).
            ``all-MiniLM-L6-v2`` (this library's default model) is checked against the shipped probes
            before the first vectors are used; the library's int8 names cannot be served.
        dim: the vectors' size; without it, a model other than the library's is asked once, here.
        batch: texts per request.
        timeout: seconds to wait for one request's answer.
        retry_for: seconds of retries of transient failures before :class:`EmbeddingEndpointError`.
        retry: the backoff policy (default: up to 1,000 retries within ``retry_for``, waits 0.25-10 s).
    """

    def __init__(
        self,
        url: str,
        model: str,
        key: str | None = None,
        *,
        name: str | None = None,
        dim: int | None = None,
        batch: int = DEFAULT_BATCH,
        timeout: float = DEFAULT_TIMEOUT,
        retry_for: float = DEFAULT_RETRY_FOR,
        retry: RetryPolicy | None = None,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidInputError(f"the embeddings URL must start with http:// or https://, got {url!r}")
        if not isinstance(model, str) or not model.strip():
            raise InvalidInputError("the embeddings model name is empty")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise InvalidInputError("the embedder's name is empty")
        if not isinstance(batch, int) or batch < 1:
            raise InvalidInputError(f"batch must be a whole number of at least 1, got {batch!r}")
        if not timeout > 0 or not retry_for >= 0:
            raise InvalidInputError("timeout must be more than 0 seconds and retry_for 0 or more")
        base = url.rstrip("/")
        self.url = base.removesuffix("/embeddings")
        self.model = model
        self.name = name or model
        if self.name in NAMES.values() and reference(self.name) is None:
            raise InvalidInputError(
                f"{self.name!r} is one of this library's int8 recipes, whose vectors an endpoint cannot be "
                "checked against: serve the fp32 model (all-MiniLM-L6-v2), or give the endpoint's model its own name"
            )
        self.reference = reference(self.name)
        self._key = key or None
        self.batch = batch
        self.timeout = timeout
        self.retry = retry or RetryPolicy(max_retries=1000, base_delay=0.5, max_delay=10.0, time_limit=retry_for)
        self.requests = 0  # requests answered with vectors (batches sent)
        self.worst_cosine: float | None = None  # the probes' lowest cosine to the reference, once checked
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()
        self._checked = self.reference is None
        self._check_lock = threading.Lock()
        if self.reference is not None:
            if dim is not None and dim != self.reference.dim:
                raise InvalidInputError(f"{self.name!r} gives vectors of {self.reference.dim} numbers, not {dim}")
            self.dim = self.reference.dim
        elif dim is not None:
            if not isinstance(dim, int) or dim < 1:
                raise InvalidInputError(f"dim must be a whole number of at least 1, got {dim!r}")
            self.dim = dim
        else:
            self.dim = 0  # unknown until asked: any size is taken once, then held
            self.dim = int(self._post(["What size are your vectors?"]).shape[1])

    def __repr__(self) -> str:
        return (
            f"EndpointEmbedder(url={self.url!r}, model={self.model!r}, name={self.name!r}, "
            f"key=<{'set' if self._key else 'none'}>)"
        )

    # -- the Embedder seam -------------------------------------------------------------------------------
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length float32 rows of ``texts``, in their order (``batch`` texts a request)."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        self.check()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths: little padding
        for start in range(0, len(order), self.batch):
            rows = order[start : start + self.batch]
            out[rows] = self._post([texts[i] for i in rows])
        return out

    def check(self) -> None:
        """For a model this library makes, refuse an endpoint whose vectors are not that model's (once:
        the probes embedded and compared with the shipped reference); a no-op for other models."""
        if self._checked:
            return
        with self._check_lock:
            if self._checked or self.reference is None:
                return
            ref = self.reference
            got = self._post(list(ref.texts))
            cosines = (got * ref.vectors).sum(axis=1)
            worst = int(np.argmin(cosines))
            self.worst_cosine = float(cosines[worst])
            if not self.worst_cosine >= MIN_COSINE:
                raise EmbeddingEndpointError(
                    f"{self.url}/embeddings serving {self.model!r} does not give the vectors of {self.name!r}: "
                    f"probe {worst} ({short_text(ref.texts[worst], 40)!r}) has a cosine of {self.worst_cosine:.6f} "
                    f"to the reference, at least {MIN_COSINE} is needed (a history's vectors are never mixed "
                    "with another model's: serve the same model in fp32, truncating inputs at 256 tokens, "
                    "or give it its own name)"
                )
            self._checked = True

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # -- one request --------------------------------------------------------------------------------------
    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                try:
                    import httpx
                except ModuleNotFoundError:
                    raise ModelUnavailableError(
                        "an embeddings endpoint needs httpx: pip install 'flexamem[llm]'"
                    ) from None
                timeout = httpx.Timeout(self.timeout, connect=min(10.0, self.timeout))
                self._client = httpx.Client(timeout=timeout)
            return self._client

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        return headers

    def _post(self, texts: list[str]) -> np.ndarray:
        """The unit-length vectors of ``texts`` (one request, retried), rows in the order sent."""
        payload = {"model": self.model, "input": texts}
        started = time.monotonic()

        def attempt(_: int) -> np.ndarray:
            response = self._http().post(f"{self.url}/embeddings", json=payload, headers=self._headers())
            return self._parse(response, len(texts))

        def give_up(reason: str, attempts: int) -> Exception:
            return EmbeddingEndpointError(
                f"embeddings of {self.model!r} at {self.url} failed after {attempts} attempts "
                f"({time.monotonic() - started:.0f} s): {reason}"
            )

        vectors = retried(attempt, self.retry, lambda exc: f"{type(exc).__name__}: {exc}", give_up)
        self.requests += 1
        return vectors

    def _parse(self, response: httpx.Response, count: int) -> np.ndarray:
        status = response.status_code
        if status in RETRY_STATUS or status >= 500:
            raise TransientError(f"HTTP {status}", retry_after_seconds(response.headers.get("retry-after")))
        where = f"{self.url}/embeddings"
        if status >= 400:
            raise EmbeddingEndpointError(f"{where} refused the request: HTTP {status}: {short_text(response.text)}")
        try:
            body = response.json()
            data = body["data"]
            if not isinstance(data, list):
                raise TypeError("'data' is not a list")
            rows = [_row(item) for item in data]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingEndpointError(
                f"{where} did not answer with embeddings ({exc}): {short_text(response.text)}"
            ) from None
        answered = body.get("model") if isinstance(body, dict) else None
        if isinstance(answered, str) and answered and not same_model(answered, self.model):
            raise EmbeddingEndpointError(f"{where} answered with the model {answered!r}, not {self.model!r}")
        if len(rows) != count:
            raise EmbeddingEndpointError(f"{where} answered {len(rows)} vectors for {count} texts")
        indices = [i for i, _ in rows]
        if all(i is None for i in indices):
            indices = list(range(count))
        if sorted(i for i in indices if i is not None) != list(range(count)) or None in indices:
            raise EmbeddingEndpointError(f"{where} answered the indices {indices}, not 0..{count - 1} once each")
        sizes = {len(v) for _, v in rows}
        if len(sizes) != 1 or (self.dim and sizes != {self.dim}):
            expected = f"{self.dim} numbers ({self.name!r})" if self.dim else "one size"
            found = ", ".join(str(s) for s in sorted(sizes))
            raise EmbeddingEndpointError(
                f"{where} answered vectors of {found} numbers, not {expected}: is it serving another model?"
            )
        out = np.zeros((count, sizes.pop()), dtype=np.float32)
        for i, (_, vector) in zip(indices, rows, strict=True):
            out[i] = vector
        if not np.all(np.isfinite(out)):
            raise EmbeddingEndpointError(f"{where} answered vectors holding NaN or infinite numbers")
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.asarray(out / np.maximum(norms, 1e-12), dtype=np.float32)


def _row(item: Any) -> tuple[int | None, np.ndarray]:
    """One ``data`` item's index (None when absent) and vector (a list of numbers, or base64 float32)."""
    if not isinstance(item, dict):
        raise TypeError("a 'data' item is not an object")
    index = item.get("index")
    if index is not None and (not isinstance(index, int) or isinstance(index, bool)):
        raise TypeError(f"index {index!r} is not a whole number")
    raw = item["embedding"]
    if isinstance(raw, str):
        vector = np.frombuffer(base64.b64decode(raw), dtype="<f4").astype(np.float32)
    elif isinstance(raw, list) and all(isinstance(x, int | float) and not isinstance(x, bool) for x in raw):
        vector = np.asarray(raw, dtype=np.float32)
    else:
        raise TypeError("an 'embedding' is not a list of numbers")
    if vector.size == 0:
        raise TypeError("an 'embedding' is empty")
    return index, vector


def endpoint_from_env(env: Mapping[str, str] | None = None) -> EndpointEmbedder:
    """The endpoint ``FLEXAMEM_EMBEDDER=endpoint`` names: ``FLEXAMEM_EMBEDDINGS_URL`` and ``_MODEL``
    (required), ``_KEY``, ``_NAME``, ``_DIM``, ``_BATCH``, ``_TIMEOUT``, ``_RETRY_FOR`` (optional);
    :class:`~flexamem.errors.ModelUnavailableError` naming what is missing or wrong."""
    env = os.environ if env is None else env
    url, model = env.get(ENV + "URL", "").strip(), env.get(ENV + "MODEL", "").strip()
    if not url or not model:
        raise ModelUnavailableError(
            "FLEXAMEM_EMBEDDER=endpoint needs FLEXAMEM_EMBEDDINGS_URL (e.g. http://gpu-box:8081/v1) and "
            "FLEXAMEM_EMBEDDINGS_MODEL (the model name it serves)"
        )

    def number(key: str, kind: type[int] | type[float]) -> Any:
        value = env.get(ENV + key, "").strip()
        if not value:
            return None
        try:
            found = kind(value)
        except ValueError:
            found = None
        if found is None or not math.isfinite(found):
            raise ModelUnavailableError(f"{ENV}{key} must be a number, not {value!r}")
        return found

    options = {
        k: v
        for k, v in (
            ("dim", number("DIM", int)),
            ("batch", number("BATCH", int)),
            ("timeout", number("TIMEOUT", float)),
            ("retry_for", number("RETRY_FOR", float)),
        )
        if v is not None
    }
    try:
        return EndpointEmbedder(
            url, model, env.get(ENV + "KEY") or None, name=env.get(ENV + "NAME", "").strip() or None, **options
        )
    except InvalidInputError as exc:
        raise ModelUnavailableError(f"FLEXAMEM_EMBEDDINGS_*: {exc}") from None
