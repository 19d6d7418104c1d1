"""Render latency benchmark (prints figures; not a test).

Histories of ~20k, ~100k and ~1M tokens are built from the LoCoMo development conversations
(repeated under new session ids for the larger sizes). For each size, mode and budget it prints the
render latency p50/p95 over the questions (query embedding excluded, and reported on its own), and
the floor: the time to tokenize the rendered output once. Targets: p50 under 10 ms at ~100k tokens
and under 3x the tokenize-once floor.

p50/p95 are for a question seen before (the steady state of an agent or a reader asking again);
"first sight" is the first render of each question, which also writes any new merged record and
embeds the pieces of a BM25 tie run at the edge of the room. The larger histories repeat the LoCoMo
text, so every piece has exact duplicates that tie: first-sight figures there are a worst case.

    python benchmarks/render.py [--data PATH] [--sizes 20000,100000,1000000] [--queries 60]
"""

from __future__ import annotations

import argparse
import statistics
import time

import flexamem as fm
from flexamem.eval.conversation_data import default_path, load_locomo

BUDGETS = (2048, 4096, 8192, 16384, 32768)


def build(conversations, target_tokens: int) -> fm.Memory:  # type: ignore[no-untyped-def]
    mem = fm.Memory(":memory:", settings=fm.Settings(one_unit_per_session=True))
    tokens, rep = 0, 0
    while tokens < target_tokens:
        for conv in conversations:
            for s in conv.sessions:
                mem.add_session(s.turns, session_id=f"{conv.sample_id}/{rep}/{s.session_id}", date=s.date)
                tokens = sum(n.raw_tokens for n in mem.history.notes)
                if tokens >= target_tokens:
                    return mem
        rep += 1
    return mem


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(int(q * len(values)), len(values) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default=str(default_path()))
    parser.add_argument("--sizes", default="20000,100000,1000000")
    parser.add_argument("--queries", type=int, default=60)
    args = parser.parse_args()
    conversations = load_locomo(args.data)
    questions = [q.question for c in conversations for q in c.questions if 1 <= q.category <= 4][: args.queries]
    counter = fm.counter()
    for size in (int(s) for s in args.sizes.split(",")):
        start = time.perf_counter()
        mem = build(conversations, size)
        built = time.perf_counter() - start
        tokens = sum(n.raw_tokens for n in mem.history.notes)
        t = time.perf_counter()
        vectors = [mem.embedder.embed([q])[0] for q in questions]
        embed_ms = (time.perf_counter() - t) / len(questions) * 1000
        print(
            f"\n~{size:,} tokens: {len(mem)} units, {mem.history.pieces_count} pieces, {tokens:,} tokens "
            f"(ingest {built:.1f} s); query embedding {embed_ms:.1f} ms/query (not in the figures below)"
        )
        print(
            f"{'mode':<8}{'budget':>8}{'p50 ms':>9}{'p95 ms':>9}{'floor ms':>10}{'p50/floor':>11}{'tokens':>8}"
            f"{'first-sight p50/p95 ms':>24}"
        )
        for mode in ("pieces", "units"):
            for budget in BUDGETS:
                first = []  # first sight of each question: merged records and tie vectors computed then
                for q, v in zip(questions, vectors, strict=True):
                    t = time.perf_counter()
                    mem.render(q, budget, mode=mode, query_vector=v)
                    first.append((time.perf_counter() - t) * 1000)
                times, floors, sizes = [], [], []
                for q, v in zip(questions, vectors, strict=True):
                    t = time.perf_counter()
                    r = mem.render(q, budget, mode=mode, query_vector=v)
                    times.append((time.perf_counter() - t) * 1000)
                    t = time.perf_counter()
                    counter.count(r.text)
                    floors.append((time.perf_counter() - t) * 1000)
                    sizes.append(r.tokens)
                p50, floor = statistics.median(times), statistics.median(floors)
                print(
                    f"{mode:<8}{budget:>8}{p50:>9.2f}{pct(times, 0.95):>9.2f}{floor:>10.3f}"
                    f"{p50 / max(floor, 1e-9):>11.1f}{statistics.mean(sizes):>8.0f}"
                    f"{statistics.median(first):>14.2f} / {pct(first, 0.95):.1f}"
                )


if __name__ == "__main__":
    main()
