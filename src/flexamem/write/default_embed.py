"""The process-wide default embedder: all-MiniLM-L6-v2 on onnxruntime when the ``onnx`` extra is
installed, else the numpy forward pass (both in their own modules, which this one chooses between), or,
with ``FLEXAMEM_EMBEDDER=endpoint``, an OpenAI-compatible embeddings endpoint (write/remote_embed.py).

Which precision ``auto`` (the default) runs is chosen by the processor (:func:`auto_precision`), from
measurements (docs/PERFORMANCE.md): int8 weights on an x86 CPU with AVX2 or better, fp32 elsewhere.
With int8 (one text per forward) against fp32 (batches of 8): on an Intel CPU with AVX-512 VNNI/AMX,
ingest 1.51x, agent calls 1.67x, renders 1.26x; on an Intel CPU with AVX2, a forward 1.4-1.6x; on the
AMD EPYC (AVX2) this project runs on (2026-12-05), ingest with piece vectors 1.24x, renders 1.24x,
agent calls 1.29-1.35x, one text 1.27-1.35x, bulk LongMemEval turns 1.24x, bulk short LoCoMo turns
0.95-1.15x (the one kind of work int8 does not speed up there). Without AVX2 (or on another
architecture) nothing was measured, and onnxruntime's int8 kernels fall back to slow paths: fp32.
A history keeps the embedder it recorded whatever the default (vectors of two
models are never compared)."""

from __future__ import annotations

import os
import threading

from flexamem.errors import ModelUnavailableError
from flexamem.write.embed import INT8_INSTRUCTIONS, Embedder, MiniLMEmbedder, int8_instructions
from flexamem.write.onnx_embed import NAMES, PRECISIONS  # onnx and onnxruntime are imported there only when used

_lock = threading.Lock()
_SHARED: dict[str, Embedder] = {}
# FLEXAMEM_EMBEDDER -> precision: onnx-int8 (the current int8), onnx-int8-v2, onnx-int8-v1 (earlier ones);
# "auto" is the processor's (auto_precision), "fp32" fp32 on onnxruntime (the numpy pass without it)
_PRECISION = {"onnx": "fp32", **{f"onnx-{p}": p for p in PRECISIONS if p != "fp32"}}
ENDPOINT = "endpoint"  # FLEXAMEM_EMBEDDER=endpoint: the FLEXAMEM_EMBEDDINGS_* endpoint
CHOICES = ("auto", "fp32", *_PRECISION, "numpy", ENDPOINT)
INT8_FASTER = INT8_INSTRUCTIONS  # the CPUs where int8 was measured faster: AVX2 or better, x86
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


def auto_precision(cpuinfo: str | None = None) -> str:
    """The precision ``FLEXAMEM_EMBEDDER=auto`` runs on this processor (``cpuinfo``: default
    ``/proc/cpuinfo``): ``"int8"`` on an x86 CPU with AVX2 or better (``INT8_FASTER``, where int8 was
    measured faster), ``"fp32"`` elsewhere (no AVX2, another architecture, a cpuinfo without flags). A
    rule, not a timing at start: every process on one kind of machine picks the same."""
    return "int8" if int8_instructions(cpuinfo) in INT8_FASTER else "fp32"


def _build(choice: str) -> Embedder:
    if choice not in CHOICES:
        raise ModelUnavailableError(f"FLEXAMEM_EMBEDDER must be one of {', '.join(CHOICES)}, not {choice!r}")
    if choice == ENDPOINT:
        from flexamem.write.remote_embed import endpoint_from_env

        return endpoint_from_env()
    if choice != "numpy":
        precision = {"auto": auto_precision(), "fp32": "fp32"}.get(choice) or _PRECISION[choice]
        try:
            from flexamem.write.onnx_embed import OnnxMiniLMEmbedder

            return OnnxMiniLMEmbedder(precision=precision)
        except ImportError:
            if choice not in ("auto", "fp32"):
                raise ModelUnavailableError(f"FLEXAMEM_EMBEDDER={choice} needs: pip install 'flexamem[onnx]'") from None
    return MiniLMEmbedder()


def default_embedder(recorded: str | None = None) -> Embedder:
    """The process-wide MiniLM embedder (weights loaded once): onnxruntime when the ``onnx`` extra is
    installed (ingest 1.3-2.2x faster, the same vectors to ~1e-6), else the numpy forward pass; with int8
    weights (:mod:`flexamem.write.quantize`) where the processor makes them faster
    (:func:`auto_precision`). ``FLEXAMEM_EMBEDDER=fp32`` keeps fp32 on any processor; ``numpy`` (or
    ``onnx``) forces one runtime at fp32; ``onnx-int8`` int8 on any processor (``onnx-int8-v2``,
    ``onnx-int8-v1``: the earlier recipes).

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
    return _shared("fp32")  # an fp32 history (the default may be int8 here: auto on a VNNI processor)


def endpoint_chosen() -> bool:
    """Whether ``FLEXAMEM_EMBEDDER`` names an embeddings endpoint (the forward runs elsewhere: a server
    has nothing to move to a lower-priority process)."""
    return os.environ.get("FLEXAMEM_EMBEDDER", "auto") == ENDPOINT
