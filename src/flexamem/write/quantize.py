"""int8 MiniLM: the project's fp32 graph with int8 weights, made here and cached with a checksum.

Nothing is downloaded: the fp32 graph is built from the shipped safetensors weights
(:func:`flexamem.write.onnx_embed.build_graph`, with onnxruntime's fused kernels or op for op as
:data:`flexamem.write.onnx_embed.RECIPES` says), then onnxruntime's dynamic quantiser turns every
weight matrix into per-channel int8 (activations are quantised per forward at run time): the linear
layers' MatMul nodes, and each fused ``Attention`` node's query/key/value projection (it becomes a
``QAttention``). The recipe was chosen by measurement (``benchmarks/int8.py``, docs/PERFORMANCE.md):
weights only; the attention products (query x key, probabilities x value) and every other node stay
fp32.

The library's int8 (``precision="int8"``) keeps its weights within 7 bits ([-64, 64]): onnxruntime
multiplies a uint8 activation by an int8 weight and, on a CPU with AVX2 but without VNNI, sums two
such products in 16 bits, which saturates with 8-bit weights (2 x 255 x 127 > 32,767) and cannot with
7-bit ones (2 x 255 x 64 = 32,640). With 7-bit weights every CPU computes the same integer products
(what may still differ is the float rounding of the other nodes, as in fp32); with 8-bit ones
(``int8-v2``, ``int8-v1``) a CPU without VNNI got some products wrong and gave other vectors
(``benchmarks/int8.py`` prints both; docs/PERFORMANCE.md).

The result is cached under ``FLEXAMEM_CACHE`` (default ``~/.cache/flexamem``) in a file named by the
digest of what it is made from (the fp32 model, the recipe and onnxruntime's version), beside a
``.sha256`` file holding the digest of its own bytes; a cached file whose bytes do not match is made
again, never used. When the cache folder cannot be written the model is made in memory each time.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

RECIPE = "dynamic, per-channel QInt8 weights: weight MatMuls and fused Attention projections"


def cache_dir() -> Path:
    """Where made models are kept (``FLEXAMEM_CACHE``, default ``~/.cache/flexamem``)."""
    return Path(os.environ.get("FLEXAMEM_CACHE") or Path.home() / ".cache" / "flexamem")


def weight_matmuls(model: Any) -> list[str]:
    """Names of the MatMul nodes whose second input is a weight (an initializer): the linear layers."""
    weights = {t.name for t in model.graph.initializer}
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in weights]


def weight_nodes(model: Any) -> list[str]:
    """Names of the nodes the recipe quantises: the weight MatMuls and the fused Attention nodes."""
    return weight_matmuls(model) + [n.name for n in model.graph.node if n.op_type == "Attention"]


def quantize(model: Any, *, reduce_range: bool = False) -> bytes:
    """The serialised int8 model made from an fp32 ``onnx.ModelProto`` (see the module's recipe).
    ``reduce_range``: 7-bit weights, whose products cannot saturate AVX2's 8-bit multiply-add."""
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic  # type: ignore[import-untyped]

    for i, node in enumerate(model.graph.node):  # the quantiser selects nodes by name
        if not node.name:
            node.name = f"n{i}_{node.op_type}"
    with tempfile.TemporaryDirectory(prefix="flexamem-int8-") as tmp:
        out = Path(tmp) / "int8.onnx"
        quantize_dynamic(
            model,
            out,
            op_types_to_quantize=["MatMul", "Attention"],
            nodes_to_quantize=weight_nodes(model),
            per_channel=True,
            weight_type=QuantType.QInt8,
            reduce_range=reduce_range,
            # the fused nodes' outputs carry no inferred type: they are float
            extra_options={"DefaultTensorType": TensorProto.FLOAT},
        )
        return out.read_bytes()


def int8_model(model: Any, *, reduce_range: bool = False) -> bytes:
    """The int8 model of ``model`` (fp32 ``onnx.ModelProto``; ``reduce_range``: 7-bit weights, see
    :func:`quantize`): from the cache when a checked copy is there, else made now and cached
    (atomically: a half-written file is never read)."""
    import onnxruntime as ort  # type: ignore[import-untyped]

    source = model.SerializeToString()
    recipe = RECIPE + (", 7-bit" if reduce_range else "")  # 8-bit models keep the key they were cached under
    key = hashlib.sha256(source + recipe.encode() + ort.__version__.encode()).hexdigest()[:24]
    folder = cache_dir()
    path = folder / f"minilm-int8-{key}.onnx"
    check = path.with_suffix(".sha256")
    try:
        blob = path.read_bytes()
        if hashlib.sha256(blob).hexdigest() == check.read_text().strip():
            return blob
    except OSError:
        pass  # not cached yet (or unreadable): make it
    blob = quantize(model, reduce_range=reduce_range)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for target, data in ((path, blob), (check, hashlib.sha256(blob).hexdigest().encode())):
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".flexamem-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
    except OSError:
        pass  # a read-only or full cache folder: use the model made in memory
    return blob


def inexact_products(blob: bytes, rows: int = 8, seed: int = 0) -> int | None:
    """How many int8 matrix products this CPU gets wrong with the weights of the int8 model ``blob``:
    each int8 weight matrix is multiplied by ``rows`` random uint8 activations (the full range, as a
    dynamically quantised forward gives them) with onnxruntime's ``MatMulInteger`` and compared with
    exact integer arithmetic. 7-bit weights cannot saturate the 16-bit sums of AVX2 or AVX-512 without
    VNNI; 8-bit ones do there (measured: docs/PERFORMANCE.md). None for a model without int8 weights (fp32).
    Printed by ``benchmarks/int8.py``."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weights = [
        numpy_helper.to_array(t)
        for t in onnx.load_from_string(blob).graph.initializer
        if t.data_type == TensorProto.INT8 and len(t.dims) == 2
    ]
    if not weights:
        return None
    wrong = 0
    for w in weights:
        k, n = w.shape
        graph = helper.make_graph(
            [helper.make_node("MatMulInteger", ["a", "w", "zero"], ["y"])],
            "product",
            [
                helper.make_tensor_value_info("a", TensorProto.UINT8, [rows, k]),
                helper.make_tensor_value_info("zero", TensorProto.UINT8, []),
            ],
            [helper.make_tensor_value_info("y", TensorProto.INT32, [rows, n])],
            [numpy_helper.from_array(w, "w")],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        run = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        a = rng.integers(0, 256, size=(rows, k), dtype=np.uint8)
        got = run.run(None, {"a": a, "zero": np.array(128, dtype=np.uint8)})[0]
        wrong += int((got != (a.astype(np.int64) - 128) @ w.astype(np.int64)).sum())
    return wrong
