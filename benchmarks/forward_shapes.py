"""One MiniLM forward by shape, the graphs side by side: op for op or fused, fp32 or int8 (issue 32).

The four models (``build_graph`` with and without onnxruntime's fused kernels, each in fp32 and with
the library's int8 recipe) are timed on the same inputs, in turn, ``--rounds`` times (so a noisy
neighbour hits all alike), for one text (a query: 8 to 256 wordpieces) and batches of 8 (ingest;
the last eighth of each row padding). Printed: ms per forward (the second best round) and the ratio
to the op-for-op fp32 graph, the library's fp32.

    python benchmarks/forward_shapes.py [--threads 2] [--rounds 7]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from flexamem.write.embed import int8_instructions
from flexamem.write.onnx_embed import minilm_graph, precision_model, session

SHAPES = [(1, 8), (1, 16), (1, 32), (1, 64), (1, 128), (1, 256), (8, 16), (8, 32), (8, 64), (8, 128)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    models = {
        "fp32 op for op (library)": precision_model("fp32"),
        "fp32 fused": minilm_graph(fused=True).SerializeToString(),
        "int8 op for op (int8-v1)": precision_model("int8-v1"),
        "int8 fused, 8-bit weights (int8-v2)": precision_model("int8-v2"),
        "int8 fused, 7-bit weights (library)": precision_model("int8"),
    }
    sessions = {name: session(blob, args.threads) for name, blob in models.items()}
    rng = np.random.default_rng(0)
    ms: dict[str, dict[tuple[int, int], float]] = {name: {} for name in sessions}
    for batch, length in SHAPES:
        ids = rng.integers(1000, 30000, size=(batch, length)).astype(np.int64)
        mask = np.ones((batch, length), dtype=np.float32)
        if batch > 1:
            mask[:, length - length // 8 :] = 0
        feed = {"input_ids": ids, "attention_mask": mask}
        n = max(3, 2000 // (batch * length))  # forwards per timing
        times: dict[str, list[float]] = {name: [] for name in sessions}
        for s in sessions.values():
            s.run(["embedding"], feed)
        for _ in range(args.rounds):
            for name, s in sessions.items():
                start = time.perf_counter()
                for _ in range(n):
                    s.run(["embedding"], feed)
                times[name].append((time.perf_counter() - start) / n * 1000)
        for name in sessions:
            ms[name][(batch, length)] = sorted(times[name])[1]
    base = "fp32 op for op (library)"
    print(f"{args.threads} threads, CPU int8 instructions: {int8_instructions()}")
    print(f"ms per forward (second best of {args.rounds}), x the library's fp32\n")
    print("| batch x wordpieces | " + " | ".join(ms) + " |")
    print("|---|" + "---:|" * len(ms))
    for shape in SHAPES:
        cells = [f"{ms[name][shape]:.2f} ({ms[base][shape] / ms[name][shape]:.2f}x)" for name in ms]
        print(f"| {shape[0]} x {shape[1]} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
