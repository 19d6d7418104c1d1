"""The process-wide default embedder: all-MiniLM-L6-v2 on onnxruntime when the ``onnx`` extra is
installed, else the numpy forward pass (both in their own modules, which this one chooses between)."""

from __future__ import annotations

import os
import threading

from flexamem.errors import ModelUnavailableError
from flexamem.write.embed import Embedder, MiniLMEmbedder

_lock = threading.Lock()
_SHARED: list[Embedder] = []


def _shared() -> Embedder:
    """Built once per process, even when many threads ask first at once (each would load the weights)."""
    if _SHARED:
        return _SHARED[0]
    with _lock:
        if not _SHARED:
            _SHARED.append(_build())
        return _SHARED[0]


def _build() -> Embedder:
    choice = os.environ.get("FLEXAMEM_EMBEDDER", "auto")
    if choice in ("auto", "onnx"):
        try:
            from flexamem.write.onnx_embed import OnnxMiniLMEmbedder

            return OnnxMiniLMEmbedder()
        except ImportError:
            if choice == "onnx":
                raise ModelUnavailableError("FLEXAMEM_EMBEDDER=onnx needs: pip install 'flexamem[onnx]'") from None
    return MiniLMEmbedder()


def default_embedder() -> Embedder:
    """The process-wide MiniLM embedder (weights loaded once): onnxruntime when the ``onnx`` extra is
    installed (ingest 1.3-2.2x faster, the same vectors to ~1e-6), else the numpy forward pass.
    ``FLEXAMEM_EMBEDDER=numpy`` (or ``onnx``) forces one."""
    return _shared()
