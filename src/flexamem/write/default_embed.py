"""The process-wide default embedder: all-MiniLM-L6-v2 on onnxruntime when the ``onnx`` extra is
installed, else the numpy forward pass (both in their own modules, which this one chooses between), or,
with ``FLEXAMEM_EMBEDDER=endpoint``, an OpenAI-compatible embeddings endpoint (write/remote_embed.py)."""

from __future__ import annotations

import os
import threading

from flexamem.errors import ModelUnavailableError
from flexamem.write.embed import Embedder, MiniLMEmbedder
from flexamem.write.onnx_embed import NAMES, PRECISIONS  # onnx and onnxruntime are imported there only when used

_lock = threading.Lock()
_SHARED: dict[str, Embedder] = {}
# FLEXAMEM_EMBEDDER -> precision: onnx-int8 (the current int8), onnx-int8-v2, onnx-int8-v1 (earlier ones)
_PRECISION = {"auto": "fp32", "onnx": "fp32", **{f"onnx-{p}": p for p in PRECISIONS if p != "fp32"}}
ENDPOINT = "endpoint"  # FLEXAMEM_EMBEDDER=endpoint: the FLEXAMEM_EMBEDDINGS_* endpoint
CHOICES = (*_PRECISION, "numpy", ENDPOINT)
FP32 = NAMES["fp32"]  # fp32's recorded name (a history written before names were recorded counts as it)
# a recorded int8 name -> the choice that makes its vectors (the current recipe or an earlier one)
_INT8 = {NAMES[p]: c for c, p in _PRECISION.items() if p != "fp32"}


def _shared(choice: str) -> Embedder:
    """Built once per process and choice (an endpoint: once per configuration), even when many threads
    ask first at once (each would load the weights)."""
    key = choice
    if choice == ENDPOINT:
        key = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("FLEXAMEM_EMBEDDINGS_"))
    found = _SHARED.get(key)
    if found is not None:
        return found
    with _lock:
        if key not in _SHARED:
            _SHARED[key] = _build(choice)
        return _SHARED[key]


def _build(choice: str) -> Embedder:
    if choice not in CHOICES:
        raise ModelUnavailableError(f"FLEXAMEM_EMBEDDER must be one of {', '.join(CHOICES)}, not {choice!r}")
    if choice == ENDPOINT:
        from flexamem.write.remote_embed import endpoint_from_env

        return endpoint_from_env()
    if choice != "numpy":
        try:
            from flexamem.write.onnx_embed import OnnxMiniLMEmbedder

            return OnnxMiniLMEmbedder(precision=_PRECISION[choice])
        except ImportError:
            if choice != "auto":
                raise ModelUnavailableError(f"FLEXAMEM_EMBEDDER={choice} needs: pip install 'flexamem[onnx]'") from None
    return MiniLMEmbedder()


def default_embedder(recorded: str | None = None) -> Embedder:
    """The process-wide MiniLM embedder (weights loaded once): onnxruntime when the ``onnx`` extra is
    installed (ingest 1.3-2.2x faster, the same vectors to ~1e-6), else the numpy forward pass.
    ``FLEXAMEM_EMBEDDER=numpy`` (or ``onnx``) forces one; ``onnx-int8`` runs the model with int8
    weights (:mod:`flexamem.write.quantize`; ``onnx-int8-v2``, ``onnx-int8-v1``: the earlier recipes).

    ``FLEXAMEM_EMBEDDER=endpoint`` takes the vectors from the endpoint ``FLEXAMEM_EMBEDDINGS_URL`` serving
    ``FLEXAMEM_EMBEDDINGS_MODEL`` (:func:`flexamem.write.remote_embed.endpoint_from_env`).

    ``recorded``: the embedder a history was written with (its name): that one, whatever the default
    (vectors of two models are never compared): the endpoint when it serves that model, else the local
    model of that name; :class:`ModelUnavailableError` for a name this library does not make (a custom
    embedder must be passed to the Memory again, an endpoint's named in ``FLEXAMEM_EMBEDDINGS_*``)."""
    choice = os.environ.get("FLEXAMEM_EMBEDDER", "auto")
    if recorded is None:
        return _shared(choice)
    if choice == ENDPOINT and _shared(choice).name == recorded:
        return _shared(choice)
    if recorded != FP32 and recorded not in _INT8:
        raise ModelUnavailableError(
            f"this history was written with the embedder {recorded!r}: pass it to Memory(embedder=...), or, "
            "for an embeddings endpoint serving it, set FLEXAMEM_EMBEDDER=endpoint and FLEXAMEM_EMBEDDINGS_URL, "
            "_MODEL (and _NAME when the endpoint calls it otherwise)"
        )
    if choice != ENDPOINT and _shared(choice).name == recorded:
        return _shared(choice)
    int8 = _INT8.get(recorded)
    if int8 is not None:
        return _shared(int8)
    return _shared("auto" if choice.startswith("onnx-int8") or choice == ENDPOINT else choice)


def endpoint_chosen() -> bool:
    """Whether ``FLEXAMEM_EMBEDDER`` names an embeddings endpoint (the forward runs elsewhere: a server
    has nothing to move to a lower-priority process)."""
    return os.environ.get("FLEXAMEM_EMBEDDER", "auto") == ENDPOINT
