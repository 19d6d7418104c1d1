"""A history's kept load against counting its pieces' words again (issue 52 part 3; figures, not a test).

Copies of one LongMemEval ``_s`` haystack (~103k tokens, ~1,200 pieces) are imported into one SQLite
store and rendered once (their merged records stored, as a history that was used before). Then, for
each copy in turn and in interleaved order, the first render of a view made afresh over the same
store (open, read, index, render at 4k; the embedder already loaded):

- **kept**: the copy's kept load is read (``flexamem/recover/load_cache.py``);
- **count**: the words are counted as before it existed (``MIN_PIECES`` set past the history's size);
- **count + keep**: no kept load is stored yet (its row deleted first): counted, then stored;
- **floor**: reading the copy's rows alone (``load_notes``, ``load_links``).

Also the parts, on one copy: the content words of every piece, counting them, encoding, storing,
reading and decoding the kept load.

    python benchmarks/kept_load.py [--copies 20] [--rounds 3] [--lme PATH]
"""

from __future__ import annotations

import argparse
import io
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from many_histories import as_sessions

import flexamem as fm
from flexamem.recover import load_cache
from flexamem.store.base import KeptLoad
from flexamem.text import content_words
from flexamem_bench.conversation_data import default_path
from flexamem_bench.datasets import longmemeval_histories


def ms(values: list[float]) -> str:
    return f"{1000 * statistics.median(values):.1f} ms (min {1000 * min(values):.1f})"


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lme", default=str(default_path().parent.parent / "longmemeval" / "longmemeval-s-dev.json"))
    parser.add_argument("--copies", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=int, default=4096)
    args = parser.parse_args()
    h = longmemeval_histories(Path(args.lme))[0]
    question = h.questions[0].question
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "kept.db")
        with fm.Memory(str(Path(tmp) / "base.db"), history="base") as mem:
            mem.add_sessions(as_sessions(h.sessions))
            out = io.StringIO()
            mem.export(out)
        store = fm.Memory(db).store
        names = [f"c{k}" for k in range(args.copies)]
        for name in names:
            fm.import_history(io.StringIO(out.getvalue()), store, history=name)
            fm.Memory(history=name, store=store).render(question, args.budget)  # merged records stored, load kept
        raw = sqlite3.connect(db)
        times: dict[str, list[float]] = {"kept": [], "count": [], "count + keep": [], "floor": []}
        minimum = load_cache.MIN_PIECES
        for _ in range(args.rounds):
            for name in names:
                times["floor"].append(timed(lambda n=name: (store.load_notes(n), store.load_links(n))))
                for case in ("kept", "count", "count + keep"):
                    if case == "count":
                        load_cache.MIN_PIECES = 10**9
                    if case == "count + keep":
                        raw.execute("DELETE FROM load_cache WHERE history_id = ?", (name,))
                        raw.commit()
                    times[case].append(
                        timed(lambda n=name: fm.Memory(history=n, store=store).render(question, args.budget))
                    )
                    load_cache.MIN_PIECES = minimum
        notes = store.load_notes(names[0])
        pieces = [p.text for n in notes for p in n.pieces]
        docs = [content_words(t) for t in pieces]
        words = load_cache.count_words(docs)
        data = load_cache.encode(words)
        kept = store.get_kept_load(names[0])
        assert kept is not None
        parts: dict[str, list[float]] = {k: [] for k in ("content words", "count", "encode", "store", "read", "decode")}
        for _ in range(10):
            parts["content words"].append(timed(lambda: [content_words(t) for t in pieces]))
            parts["count"].append(timed(lambda: load_cache.count_words(docs)))
            parts["encode"].append(timed(lambda: load_cache.encode(words)))
            parts["store"].append(timed(lambda: store.put_kept_load(names[0], KeptLoad(
                kept.epoch, kept.erasures, kept.notes, kept.digest, kept.version, data))))  # fmt: skip
            parts["read"].append(timed(lambda: store.get_kept_load(names[0])))
            parts["decode"].append(timed(lambda: load_cache.decode(data, len(docs))))
        store.close()
    tokens = sum(n.raw_tokens for n in notes)
    print(f"# {args.copies} copies of a {tokens:,}-token history ({len(pieces):,} pieces), {args.rounds} rounds, "
          f"kept load {len(data) / 1e6:.2f} MB; first render at {args.budget:,}, median (min)")  # fmt: skip
    print("| case | first render of a new view | ratio to the floor |")
    print("|---|---|---:|")
    floor = statistics.median(times["floor"])
    for case, values in times.items():
        print(f"| {case} | {ms(values)} | {statistics.median(values) / floor:.1f}x |")
    print("\n| part | median (min) |")
    print("|---|---|")
    for part, values in parts.items():
        print(f"| {part} | {ms(values)} |")


if __name__ == "__main__":
    main()
