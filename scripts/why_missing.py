"""Why an evidence turn that a plain turn retrieval shows is missing from ``auto``'s memory (issue 30).

For every LongMemEval dev question (dev + dev2) at one budget (4k by default), each evidence turn that
dense-turns or hybrid-turns shows whole and ``auto`` does not is put in one class, by what the
renderer did with it:

- ``ranked below the cut``: auto's ranking (``Memory.search``) puts it after the last turn the memory
  shows; ``... (neighbours)`` when it would be inside the cut with neighbours off;
- ``skipped: did not fit``: ranked above the last shown turn, but its whole text did not fit the room
  left (long turns above it took it);
- ``shown in part``: some of its pieces are shown, not all.

It also reports what the memory spent its room on in those questions (the timeline, turns over 300
tokens) and how many sessions their evidence spans. Uses the stores ``scripts/crossfold.py`` or
``flexamem eval --keep`` kept.

    python scripts/why_missing.py --data ../shared/data --stores results/stores [--budget 4096]
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import flexamem as fm
from flexamem.render.result import UnitView
from flexamem_bench.datasets import longmemeval_histories
from flexamem_bench.harness import close_context, open_context
from flexamem_bench.methods import METHODS
from flexamem_bench.reader import READER_PROMPT

LONG = 300  # tokens: a turn this long is "long"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--stores", default="results/stores")
    parser.add_argument("--budget", type=int, default=4096)
    parser.add_argument("--files", default="longmemeval-s-dev.json,longmemeval-s-dev2.json")
    args = parser.parse_args(argv)
    lme = Path(args.data) / "longmemeval"
    causes: Counter[str] = Counter()
    by_type: Counter[tuple[str, str]] = Counter()
    spent: Counter[str] = Counter()
    questions = missed_questions = 0
    for f in args.files.split(","):
        for h in longmemeval_histories(lme / f):
            ctx = open_context(h, None, keep=Path(args.stores))
            mem = ctx.mem
            for q in h.questions:
                questions += 1
                vector = mem.embedder.embed([q.question])[0]
                ctx.query_vectors[q.question] = vector
                auto = mem.render(q.question, args.budget, prompt=READER_PROMPT, query_vector=vector)
                shown = auto.verbatim_turns
                partial = {t for v in auto.shown for t in _turns_of(mem, v)}
                plain = set()
                for m in ("dense-turns", "hybrid-turns"):
                    text = METHODS[m](ctx, q.question, args.budget).text
                    plain |= {t for t in q.evidence if f"[{t}] " in text}
                missing = [t for t in q.evidence if t in plain and t not in shown]
                if not missing:
                    continue
                missed_questions += 1
                ranked = [h_.turn_id for h_ in mem.search(q.question, limit=2000, query_vector=vector)]
                rank = {t: i for i, t in enumerate(ranked) if t}
                cut = max((rank.get(t, -1) for t in shown), default=-1)
                base = mem.settings
                mem.settings = base.with_values(auto_neighbour=1e-9)  # neighbours off (must be > 0)
                plain_rank = {t: i for i, h_ in enumerate(mem.search(q.question, limit=2000, query_vector=vector))
                              for t in [h_.turn_id] if t}  # fmt: skip
                mem.settings = base
                for t in missing:
                    if t in partial:
                        cause = "shown in part"
                    elif rank.get(t, 10**9) > cut:
                        cause = "ranked below the cut"
                        if plain_rank.get(t, 10**9) < cut:
                            cause += " (neighbours)"
                    else:
                        cause = "skipped: did not fit"
                    causes[cause] += 1
                    by_type[(q.category, cause)] += 1
                spent["timeline"] += auto.composition.get("records", 0) + auto.composition.get("merged", 0)
                spent["pieces"] += auto.composition.get("pieces", 0)
                for v in auto.shown:
                    note = mem.history.notes[v.seq]
                    for b in {note.pieces[i].block for i in v.pieces}:
                        size = sum(p.tokens for p in note.pieces if p.block == b)
                        spent["long turns"] += size if size > LONG else 0
                spent["evidence sessions"] += len({t.rsplit(":", 1)[0] for t in q.evidence})
            close_context(ctx)
    print(f"{questions} questions at {args.budget}; {missed_questions} miss an evidence turn a turn retrieval shows")
    print("| cause | turns |\n|---|---:|")
    for cause, n in causes.most_common():
        print(f"| {cause} | {n} |")
    print("\n| question type | cause | turns |\n|---|---|---:|")
    for (kind, cause), n in sorted(by_type.items()):
        print(f"| {kind} | {cause} | {n} |")
    if missed_questions:
        print(f"\nper such question: timeline {spent['timeline'] / missed_questions:.0f} tokens, pieces "
              f"{spent['pieces'] / missed_questions:.0f}, of which turns over {LONG} tokens "
              f"{spent['long turns'] / missed_questions:.0f}; evidence spans "
              f"{spent['evidence sessions'] / missed_questions:.1f} sessions")  # fmt: skip
    return 0


def _turns_of(mem: fm.Memory, view: UnitView) -> set[str]:
    """Turn ids with at least one piece shown in a unit view."""
    note = mem.history.notes[view.seq]
    return {sid for i in view.pieces if (sid := note.pieces[i].source_id)}


if __name__ == "__main__":
    raise SystemExit(main())
