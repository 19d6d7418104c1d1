"""int8 against fp32 MiniLM where the forward pass is the floor, in one run (issue 32; prints ratios).

Both embedders are built first; then, alternating fp32 and int8 ``--rounds`` times (so a noisy
neighbour hits both alike), each one:

- **ingest**: a LoCoMo dev conversation stored with piece vectors (``Memory.add_sessions``), tokens/s;
- **agent calls**: the first ``--runs`` mini-swe-agent dev trajectories replayed step by step at a
  16k history budget, ``AgentSession.context()`` after each step where memory is on (``auto`` embeds
  the newest step as its query): mean and p50 ms;
- **renders**: every question of the conversation rendered at 4k with its query embedded in the call
  (what a server's render does), mean ms;
- **one forward** of a single text of 16, 64 and 256 wordpieces, median ms (5 ms of Python work
  between forwards, as in a call);
- **bulk**: 600 LoCoMo turns and 300 LongMemEval turns (shuffled, from the dev files) embedded in one
  call, characters/s: the embedder alone, as ``flexamem ingest`` and a batch of writes use it.

It ends with the precision ``FLEXAMEM_EMBEDDER=auto`` picks on this processor (issue 52).

The best round of each is kept and the int8 / fp32 ratio printed. Run it on an idle machine.

    python benchmarks/int8_speed.py [--data ../shared/data] [--rounds 2] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import flexamem as fm
from flexamem.write.default_embed import auto_precision
from flexamem.write.embed import int8_instructions
from flexamem.write.onnx_embed import OnnxMiniLMEmbedder
from flexamem_bench.datasets import locomo_histories
from flexamem_bench.trajectories import Trajectory, load_trajectories


def ingest(embedder: OnnxMiniLMEmbedder, sessions: list[dict[str, object]]) -> tuple[float, fm.Memory]:
    mem = fm.Memory(":memory:", embedder=embedder, settings=fm.Settings(one_unit_per_session=True))
    start = time.perf_counter()
    mem.add_sessions(sessions)
    seconds = time.perf_counter() - start
    return sum(n.raw_tokens for n in mem.history.notes) / seconds, mem


class Counted:
    """An embedder that counts its calls (the same name, size and vectors as the one it wraps)."""

    def __init__(self, inner: OnnxMiniLMEmbedder) -> None:
        self.inner, self.name, self.dim, self.calls = inner, inner.name, inner.dim, 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        return self.inner.embed(texts)


def agent_calls(embedder: OnnxMiniLMEmbedder, trajectories: list[Trajectory], budget: int) -> tuple[list[float], int]:
    """Each call's ms, and how many of the calls embedded their query (a unit whose head is unchanged
    since the last call reuses its vector)."""
    ms, embedding = [], 0
    counted = Counted(embedder)
    for traj in trajectories:
        agent = fm.Memory(":memory:", embedder=counted).agent(task=traj.task, budget=budget, system=traj.system)
        for step in traj.steps:
            agent.step(action=step.action, observation=step.observation, messages=step.messages)
            before = counted.calls
            start = time.perf_counter()
            ctx = agent.context()
            if not ctx.pass_through:
                ms.append((time.perf_counter() - start) * 1000)
                embedding += counted.calls > before
    return ms, embedding


def forward_ms(embedder: OnnxMiniLMEmbedder, tokens: int, repeats: int = 30) -> float:
    """Median ms of one text of about ``tokens`` wordpieces, with 5 ms of Python work between forwards
    (as in a call: the runtime's pool threads have gone to sleep when the query comes)."""
    text = " ".join(["memory"] * max(1, tokens - 2))
    ms = []
    for _ in range(repeats):
        until = time.perf_counter() + 0.005
        while time.perf_counter() < until:
            pass
        start = time.perf_counter()
        embedder.embed([text])
        ms.append((time.perf_counter() - start) * 1000)
    return statistics.median(ms)


def renders(mem: fm.Memory, questions: list[str]) -> list[float]:
    ms = []
    for q in questions:
        start = time.perf_counter()
        mem.render(q, 4096)
        ms.append((time.perf_counter() - start) * 1000)
    return ms


def bulk_texts(data: Path) -> dict[str, list[str]]:
    """600 LoCoMo dev turns and 300 LongMemEval dev turns (of its first two haystacks), shuffled."""
    locomo = [
        t["text"] for h in locomo_histories(data / "locomo" / "locomo-dev.json") for s in h.sessions for t in s.turns
    ]
    haystacks = json.loads((data / "longmemeval" / "longmemeval-s-dev.json").read_text())[:2]
    lme = [t["content"] for q in haystacks for s in q["haystack_sessions"] for t in s]
    random.Random(0).shuffle(locomo)
    random.Random(0).shuffle(lme)
    return {"LoCoMo turns": locomo[:600], "LongMemEval turns": lme[:300]}


def bulk_rate(embedder: OnnxMiniLMEmbedder, texts: list[str]) -> float:
    start = time.perf_counter()
    embedder.embed(texts)
    return sum(map(len, texts)) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3, help="mini-swe-agent dev trajectories replayed")
    parser.add_argument("--budget", type=int, default=16384)
    args = parser.parse_args()
    data = Path(args.data)
    h = locomo_histories(data / "locomo" / "locomo-dev.json")[0]
    sessions: list[dict[str, object]] = [
        {"turns": s.turns, "session_id": s.session_id, "date": s.date} for s in h.sessions
    ]
    questions = [q.question for q in h.questions]
    trajectories = load_trajectories(data / "agent_trajectories" / "mini_swe_agent" / "gemini-3-pro-dev.json")
    trajectories = trajectories[: args.runs]
    bulk = bulk_texts(data)
    embedders = {"fp32": OnnxMiniLMEmbedder(), "int8": OnnxMiniLMEmbedder(precision="int8")}
    best: dict[str, dict[str, float]] = {name: {} for name in embedders}
    for r in range(args.rounds):
        for name, embedder in embedders.items():
            rate, mem = ingest(embedder, sessions)
            calls, embedding = agent_calls(embedder, trajectories, args.budget)
            rendered = renders(mem, questions)
            mem.close()
            row = {
                "ingest tokens/s": rate,
                "agent call mean ms": statistics.mean(calls),
                "agent call p50 ms": statistics.median(calls),
                "render mean ms": statistics.mean(rendered),
                **{f"one forward, {n} tokens, ms": forward_ms(embedder, n) for n in (16, 64, 256)},
                **{f"bulk {k}, chars/s": bulk_rate(embedder, texts) for k, texts in bulk.items()},
            }
            print(f"round {r + 1} {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)
            for k, v in row.items():
                keep = max if k.startswith(("ingest", "bulk")) else min
                best[name][k] = keep(best[name].get(k, v), v)
    print(f"\nCPU int8 instructions: {int8_instructions()}")
    print(f"{h.history_id} ({len(sessions)} sessions, {len(questions)} renders at 4k); "
          f"{len(trajectories)} coding runs at {args.budget} ({len(calls)} calls with memory on, "
          f"{embedding} of them embedding their query)")  # fmt: skip
    print("| measure | fp32 | int8 | speed-up |\n|---|---:|---:|---:|")
    for k in best["fp32"]:
        a, b = best["fp32"][k], best["int8"][k]
        ratio = b / a if k.startswith(("ingest", "bulk")) else a / b
        print(f"| {k} | {a:.1f} | {b:.1f} | {ratio:.2f}x |")
    print(f"\nFLEXAMEM_EMBEDDER=auto runs {auto_precision()} on this processor")


if __name__ == "__main__":
    main()
