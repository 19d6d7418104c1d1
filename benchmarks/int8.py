"""Which int8 MiniLM, by measurement: speed, cosine to fp32 and nearest-neighbour agreement (issue 32).

Every recipe is made from the shipped weights' fp32 graph (op for op in standard ONNX, or with
onnxruntime's fused kernels: ``fp32-fused`` and ``int8``, the library's int8) and run on the same
texts: the turns of a LoCoMo conversation (``--turns``, default 300), embedded in batches of
``--batch`` similar-length texts (default 8, fp32's; the library's int8 takes 1). Printed per recipe:
sentences/s at 1 and 2 threads (best of ``--repeats``, the ratio to ``--base``, default the library's
fp32, measured beside it), cosine of each vector to its fp32 twin (median, min), top-10 agreement: for
100 turns used as queries, the share of their 10 nearest turns (fp32) that the recipe's vectors also
put in their 10 nearest; and the cosine of each text's vector in its batch to its vector alone (1 when
a vector depends on its text only: a dynamic int8 recipe quantises each forward with one scale); and
how many of its int8 weights' products this CPU gets wrong (``inexact_products``: 0 means the
recipe's integer arithmetic, and so its vectors, are the same on every CPU).
The static recipes calibrate on 200 windows of 32 tokens from the second conversation's turns (not
the measured ones).

    python benchmarks/int8.py --data ../shared/data/locomo/locomo-dev.json [--recipes fp32,int8,...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from flexamem.write.embed import MAX_SEQ_LEN, batched_embed, int8_instructions, model_dir
from flexamem.write.onnx_embed import minilm_graph, precision_model, session
from flexamem.write.quantize import inexact_products, quantize, weight_matmuls


def _dynamic(**kw: Any) -> Callable[[Any], bytes]:
    def make(model: Any) -> bytes:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "q.onnx"
            quantize_dynamic(model, out, op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8, **kw)
            return out.read_bytes()

    return make


def _preprocessed(model: Any) -> bytes:
    """onnxruntime's recommended pre-processing (shape inference + graph optimisation), then the recipe."""
    import onnx
    from onnxruntime.quantization import quant_pre_process

    with tempfile.TemporaryDirectory() as tmp:
        src, pre = Path(tmp) / "fp32.onnx", Path(tmp) / "pre.onnx"
        onnx.save(model, str(src))
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)  # sympy is not a dependency
        return quantize(onnx.load(str(pre)))


def _named(model: Any) -> Any:
    for i, node in enumerate(model.graph.node):
        node.name = node.name or f"n{i}_{node.op_type}"
    return model


def _fused(make: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """``make`` applied to the graph with onnxruntime's fused kernels (``build_graph(fused=True)``)
    instead of the op-for-op one every other recipe starts from."""
    return lambda _: make(_named(minilm_graph(fused=True)))


def recipes(windows: list[list[int]]) -> dict[str, Callable[[Any], bytes]]:
    """Every recipe by name, each making a model from the op-for-op fp32 graph; the static ones
    calibrate on ``windows``."""
    return {
        "fp32": lambda m: bytes(m.SerializeToString()),  # the library's fp32: op for op
        "int8": lambda _: precision_model("int8"),  # the library's: fused graph, per-channel 7-bit weights (QAttention)
        "int8-v2": lambda _: precision_model("int8-v2"),  # the library's int8 until 2026-12-02 (later): 8-bit weights
        "fp32-fused": _fused(lambda m: bytes(m.SerializeToString())),
        "int8-v1": lambda _: precision_model("int8-v1"),  # the library's int8 until 2026-12-02: weight MatMuls only
        "int8-all-matmuls": _dynamic(per_channel=True),  # attention MatMuls quantised too
        "int8-per-tensor": lambda m: _dynamic(nodes_to_quantize=weight_matmuls(m))(m),
        "int8-reduce-range": lambda m: _dynamic(
            per_channel=True, reduce_range=True, nodes_to_quantize=weight_matmuls(m)
        )(m),
        "int8-preprocessed": _preprocessed,
        # the FFN's down projection (its input has the widest range) kept fp32
        "int8-ffn-down-fp32": lambda m: _dynamic(per_channel=True, nodes_to_quantize=_except(m, "_out_mm"))(m),
        # the first layer kept fp32
        "int8-layer0-fp32": lambda m: _dynamic(per_channel=True, nodes_to_quantize=_except(m, "l0_"))(m),
        # static: activations' ranges fixed from a calibration set (another conversation's turns)
        "int8-static-minmax": lambda m: _static(m, windows, "MinMax"),
        "int8-static-percentile": lambda m: _static(m, windows, "Percentile"),
    }


def _static(model: Any, windows: list[list[int]], method: str) -> bytes:
    """Static quantisation (QDQ, per-channel int8 weights, uint8 activations) of the weight MatMuls,
    the activations' ranges calibrated on ``windows`` (token ids from a conversation the speed is not
    measured on, all of one length: onnxruntime's histogram calibrators need inputs of one shape)."""
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantType, quantize_static

    class Windows(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.left = iter(windows)

        def get_next(self) -> dict[str, np.ndarray] | None:
            window = next(self.left, None)
            if window is None:
                return None
            ids = np.array([window], dtype=np.int64)
            return {"input_ids": ids, "attention_mask": np.ones(ids.shape, dtype=np.float32)}

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "q.onnx"
        quantize_static(
            model, out, Windows(), op_types_to_quantize=["MatMul"], nodes_to_quantize=weight_matmuls(model),
            per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
            calibrate_method=getattr(CalibrationMethod, method),
        )  # fmt: skip
        return out.read_bytes()


def _except(model: Any, marker: str) -> list[str]:
    """The weight MatMuls but those whose output name holds ``marker`` (build_graph's names)."""
    outputs = {n.name: n.output[0] for n in model.graph.node}
    return [name for name in weight_matmuls(model) if marker not in outputs[name]]


def texts_of(path: Path, n: int, conversation: int = 0) -> list[str]:
    data = json.loads(path.read_text())
    conv = data[conversation]["conversation"]
    out = []
    for key in sorted(k for k in conv if k.startswith("session_") and not k.endswith("date_time")):
        out += [f"{t['speaker']}: {t['text']}" for t in conv[key] if isinstance(t, dict)]
    return out[:n]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="../shared/data/locomo/locomo-dev.json")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8, help="texts per forward")
    parser.add_argument("--recipes", default=",".join(recipes([])))
    parser.add_argument("--base", default="fp32", help="the recipe the speed ratios are taken against")
    args = parser.parse_args()
    from tokenizers import Tokenizer

    texts = texts_of(Path(args.data), args.turns)
    tokenizer = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(MAX_SEQ_LEN)
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    stream = [i for t in texts_of(Path(args.data), 200, conversation=1) for i in tokenizer.encode(t).ids[1:-1]]
    made = recipes([[cls, *stream[k : k + 30], sep] for k in range(0, len(stream) - 30, 30)][:200])
    import threading

    lock = threading.Lock()
    results: dict[str, dict[str, float]] = {}
    vectors: dict[str, np.ndarray] = {}
    in_batch: dict[str, np.ndarray] = {}  # per recipe: each text's vector in its batch . alone
    inexact: dict[str, int | None] = {}  # per recipe: int8 products this CPU gets wrong (None: no int8 weights)
    print(f"{len(texts)} LoCoMo turns; best of {args.repeats}; CPU int8 instructions: {int8_instructions()}")
    for name in args.recipes.split(","):
        blob = made[name](_named(minilm_graph()))
        inexact[name] = inexact_products(blob)
        row: dict[str, float] = {}
        for threads in (1, 2):
            sess = session(blob, threads)

            def forward(ids: np.ndarray, mask: np.ndarray, sess: Any = sess) -> np.ndarray:
                out: np.ndarray = sess.run(["embedding"], {"input_ids": ids, "attention_mask": mask})[0]
                return out

            best = float("inf")
            for _ in range(args.repeats):
                start = time.perf_counter()
                v = batched_embed(tokenizer, texts, 384, args.batch, lock, forward)
                best = min(best, time.perf_counter() - start)
            row[f"{threads}t"] = len(texts) / best
            vectors[name] = v
        alone = batched_embed(tokenizer, texts, 384, 1, lock, forward)
        in_batch[name] = (vectors[name] * alone).sum(axis=1)
        results[name] = row
        print(f"  {name}: {row['1t']:.1f} / {row['2t']:.1f} sentences/s (1 / 2 threads)", flush=True)
    base = vectors.get("fp32")
    print(
        f"\n| recipe | 1 thread (x {args.base}) | 2 threads (x {args.base}) "
        "| cosine to fp32 median / min | top-10 agreement | in its batch . alone, median / min "
        "| int8 products wrong on this CPU |"
    )
    print("|---|---:|---:|---|---:|---|---:|")
    for name, row in results.items():
        ratio = (
            (f"{row['1t'] / results[args.base]['1t']:.2f}x", f"{row['2t'] / results[args.base]['2t']:.2f}x")
            if (args.base in results)
            else ("", "")
        )
        cos, agree = "", ""
        if base is not None:
            c = (vectors[name] * base).sum(axis=1)
            cos = f"{statistics.median(c.tolist()):.4f} / {c.min():.4f}"
            queries = range(0, len(texts), max(1, len(texts) // 100))
            shared = []
            for q in queries:
                a = np.argsort(-(base @ base[q]))[1:11]
                b = np.argsort(-(vectors[name] @ vectors[name][q]))[1:11]
                shared.append(len(set(a) & set(b)) / 10)
            agree = f"{100 * statistics.mean(shared):.1f} %"
        own = f"{statistics.median(in_batch[name].tolist()):.4f} / {in_batch[name].min():.4f}"
        cells = f"| {name} | {row['1t']:.1f} ({ratio[0]}) | {row['2t']:.1f} ({ratio[1]}) | {cos} | {agree} | {own} "
        print(cells + f"| {'-' if inexact[name] is None else inexact[name]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
