"""Ingest benchmark (prints figures; not a test).

For each LoCoMo development conversation: ingest time cold (first in the process, model loads
included) and warm (models loaded), units/s, pieces, tokens, and the process's peak memory.
Target on the 2-core machine: a ~20k-token conversation in under 3 s warm with the rule writer.

    python benchmarks/ingest.py [--data PATH/locomo-dev.json]
"""

from __future__ import annotations

import argparse
import resource
import time

import flexamem as fm
from flexamem.eval.conversation_data import default_path, load_locomo


def ingest(conv, settings: fm.Settings) -> tuple[float, fm.Memory]:  # type: ignore[no-untyped-def]
    mem = fm.Memory(":memory:", settings=settings)
    start = time.perf_counter()
    for s in conv.sessions:
        mem.add_session(s.turns, session_id=s.session_id, date=s.date)
    return time.perf_counter() - start, mem


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default=str(default_path()))
    parser.add_argument("--split-sessions", action="store_true", help="cut sessions into ~2k-token spans")
    args = parser.parse_args()
    conversations = load_locomo(args.data)
    settings = fm.Settings(one_unit_per_session=not args.split_sessions)

    start = time.perf_counter()
    cold, _ = ingest(conversations[0], settings)
    cold_total = time.perf_counter() - start
    print(
        f"cold (first conversation, tokenizer + MiniLM load included): {cold_total:.2f} s"
        f" (of which ingest {cold:.2f} s)"
    )
    print(f"{'conversation':<14}{'sessions':>9}{'units':>7}{'tokens':>9}{'pieces':>8}{'warm s':>9}{'units/s':>9}")
    for conv in conversations:
        best = float("inf")
        for _ in range(2):
            elapsed, mem = ingest(conv, settings)
            best = min(best, elapsed)
        notes = mem.notes()
        tokens = sum(n.raw_tokens for n in notes)
        pieces = sum(len(n.pieces) for n in notes)
        print(
            f"{conv.sample_id:<14}{len(conv.sessions):>9}{len(notes):>7}{tokens:>9}{pieces:>8}"
            f"{best:>9.2f}{len(notes) / best:>9.1f}"
        )
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory (max RSS): {peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
