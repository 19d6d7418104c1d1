"""The process-wide default embedder: all-MiniLM-L6-v2 on onnxruntime when the ``onnx`` extra is
installed, else the numpy forward pass (both in their own modules, which this one chooses between)."""

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
CHOICES = (*_PRECISION, "numpy")
FP32 = NAMES["fp32"]  # fp32's recorded name (a history written before names were recorded counts as it)
# a recorded int8 name -> the choice that makes its vectors (the current recipe or an earlier one)
_INT8 = {NAMES[p]: c for c, p in _PRECISION.items() if p != "fp32"}


def _shared(choice: str) -> Embedder:
    """Built once per process and choice, even when many threads ask first at once (each would load
    the weights)."""
    found = _SHARED.get(choice)
    if found is not None:
        return found
    with _lock:
        if choice not in _SHARED:
            _SHARED[choice] = _build(choice)
        return _SHARED[choice]


def _build(choice: str) -> Embedder:
    if choice not in CHOICES:
        raise ModelUnavailableError(f"FLEXAMEM_EMBEDDER must be one of {', '.join(CHOICES)}, not {choice!r}")
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

    ``recorded``: the embedder a history was written with (its name): that one, whatever the default
    (vectors of two models are never compared); :class:`ModelUnavailableError` for a name this library
    does not make (a custom embedder must be passed to the Memory again)."""
    choice = os.environ.get("FLEXAMEM_EMBEDDER", "auto")
    if recorded is None:
        return _shared(choice)
    if recorded != FP32 and recorded not in _INT8:
        raise ModelUnavailableError(
            f"this history was written with the embedder {recorded!r}: pass it to Memory(embedder=...)"
        )
    if _shared(choice).name == recorded:
        return _shared(choice)
    int8 = _INT8.get(recorded)
    if int8 is not None:
        return _shared(int8)
    return _shared("auto" if choice.startswith("onnx-int8") else choice)
