"""Warm renders of a history that has answered other questions already, as a server's open history
does (prints figures; run it on an idle machine).

For each history (LoCoMo dev conversations, one unit per session; LongMemEval dev haystacks), stored
once under ``--work`` and reopened: its own questions, then LoCoMo questions asked of it, are split
in two; the first half is rendered to warm the memory (its kept line counts, its postings), then the
second half is timed, in each mode at ``--budget``, ``--rounds`` times (the median of each round's
median is printed). Every render's ``tokens`` is checked against a whole count of its text, and a
digest of every text is printed, so two codes can be compared for the same renders.

    python benchmarks/warm_renders.py [--data ../shared/data] [--work /tmp/warm-renders] [--budget 4096]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from pathlib import Path

import flexamem as fm
from flexamem_bench.datasets import QAHistory, locomo_histories, longmemeval_histories

MODES = ("auto", "pieces", "units")


def stored(history: QAHistory, db: Path) -> Path:
    """``db``, the history written into it the first time."""
    if not db.exists():
        mem = fm.Memory(str(db), history="h", settings=fm.Settings(one_unit_per_session=history.one_unit_per_session))
        mem.add_sessions([{"turns": s.turns, "session_id": s.session_id, "date": s.date} for s in history.sessions])
        mem.close()
    return db


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--work", default="/tmp/warm-renders", help="where the histories are stored (kept)")
    parser.add_argument("--budget", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--haystacks", type=int, default=4, help="LongMemEval dev haystacks")
    args = parser.parse_args()
    data, work = Path(args.data), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    locomo = locomo_histories(data / "locomo" / "locomo-dev.json")
    others = [q.question for h in locomo for q in h.questions][:60]
    sets = {
        "LoCoMo dev": locomo,
        "LongMemEval dev": longmemeval_histories(data / "longmemeval" / "longmemeval-s-dev.json")[: args.haystacks],
    }
    digest = hashlib.sha256()
    print(f"| data | mode | warm render, median ms (rounds of {args.rounds}) |\n|---|---|---|")
    for name, histories in sets.items():
        dbs = [stored(h, work / f"{name.split()[0].lower()}-{i}.db") for i, h in enumerate(histories)]
        questions = [[q.question for q in h.questions] + others for h in histories]
        for mode in MODES:
            rounds = []
            for _ in range(args.rounds):
                timed: list[float] = []
                for db, qs in zip(dbs, questions, strict=True):
                    mem = fm.Memory(str(db), history="h")  # a fresh view: warmed by the first half only
                    for i, q in enumerate(qs):
                        start = time.perf_counter()
                        out = mem.render(q, budget=args.budget, mode=mode)
                        seconds = time.perf_counter() - start
                        if i >= len(qs) // 2:
                            timed.append(seconds)
                        if out.tokens != fm.count(out.text):
                            raise SystemExit(f"{name} {mode}: {out.tokens} tokens said, {fm.count(out.text)} counted")
                        digest.update(out.text.encode())
                    mem.close()
                rounds.append(statistics.median(timed) * 1000)
            print(f"| {name} | {mode} | {statistics.median(rounds):.2f} ({', '.join(f'{r:.2f}' for r in rounds)}) |",
                  flush=True)  # fmt: skip
    print(f"\ndigest of every rendered text: {digest.hexdigest()[:16]}")


if __name__ == "__main__":
    main()
