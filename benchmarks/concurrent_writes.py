"""Several concurrent writes embedded in one call, against each write's own calls (issue 52 part 2).

A server's embedding process takes one write's texts at a time. When a burst of writes arrives,
their texts could instead be merged into one ``embed`` call: fuller batches of similar lengths,
fewer calls. This measures whether that is cheaper, on the embedders a server can run.

The texts are those a server embeds for a whole-session write (what ``benchmarks/server_load.py``
sends): each LoCoMo dev session is written with ``Memory.add_session`` through an embedder that
records every call's texts (the unit's record and fields, then its pieces). Then, for a burst of
``k`` writes and alternating the two ways ``--rounds`` times (so a noisy neighbour hits both alike):

- **each write's own calls** (as now): every recorded call made as it was;
- **one call**: the texts of all ``k`` writes' calls merged into one ``embed``.

It prints the median seconds of each way per burst size and embedder, their ratio, and checks that
the vectors agree (a merged call must give each text the vector it gets alone, up to float rounding
of the batch it lands in). Run it on an idle machine.

    python benchmarks/concurrent_writes.py [--data ../shared/data] [--rounds 7] [--bursts 1,3,6]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import flexamem as fm
from flexamem.write.embed import int8_instructions
from flexamem.write.onnx_embed import OnnxMiniLMEmbedder
from flexamem_bench.datasets import locomo_histories


class Recording:
    """An embedder that keeps the texts of every call (the same name, size and vectors as the one it wraps)."""

    def __init__(self, inner: OnnxMiniLMEmbedder) -> None:
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return self.inner.embed(texts)


def session_calls(embedder: OnnxMiniLMEmbedder, data: Path) -> list[list[list[str]]]:
    """Each LoCoMo dev session's write: the texts of every embed call it made, in order."""
    writes: list[list[list[str]]] = []
    for h in locomo_histories(data / "locomo" / "locomo-dev.json"):
        recording = Recording(embedder)
        mem = fm.Memory(":memory:", embedder=recording, settings=fm.Settings())
        for s in h.sessions:
            recording.calls = []
            mem.add_session(s.turns, session_id=s.session_id, date=s.date)
            writes.append([c for c in recording.calls if c])
        mem.close()
    return writes


def timed(embedder: OnnxMiniLMEmbedder, calls: list[list[str]]) -> float:
    start = time.perf_counter()
    for texts in calls:
        embedder.embed(texts)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--bursts", default="1,3,6", help="writes per burst")
    args = parser.parse_args()
    bursts = [int(k) for k in args.bursts.split(",")]
    embedders = {"fp32": OnnxMiniLMEmbedder(), "int8-v3": OnnxMiniLMEmbedder(precision="int8")}
    writes = session_calls(embedders["fp32"], Path(args.data))
    texts = [t for w in writes for c in w for t in c]
    print(f"{len(writes)} session writes, {sum(map(len, writes))} calls, {len(texts)} texts "
          f"({sum(map(len, texts)) / len(writes):.0f} characters a write); CPU int8 instructions: "
          f"{int8_instructions()}", flush=True)  # fmt: skip
    # the same bursts for both ways: consecutive writes, as many whole bursts as the sessions give
    for name, embedder in embedders.items():
        embedder.embed(["warm"])
        for k in bursts:
            groups = [writes[i : i + k] for i in range(0, len(writes) - k + 1, k)][: max(1, 24 // k)]
            own = [[c for w in g for c in w] for g in groups]
            merged = [[[t for w in g for c in w for t in c]] for g in groups]
            worst = 0.0
            for calls, one in zip(own, merged, strict=True):
                alone = np.concatenate([embedder.embed(c) for c in calls])
                worst = max(worst, float(np.abs(alone - embedder.embed(one[0])).max()))
            seconds: dict[str, list[float]] = {"own": [], "one": []}
            for _ in range(args.rounds):
                seconds["own"].append(sum(timed(embedder, c) for c in own) / len(groups))
                seconds["one"].append(sum(timed(embedder, c) for c in merged) / len(groups))
            a, b = statistics.median(seconds["own"]), statistics.median(seconds["one"])
            print(f"| {name} | {k} | {len(groups)} | {a * 1000:.0f} ms | {b * 1000:.0f} ms | {a / b:.2f}x "
                  f"| {worst:.1e} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
