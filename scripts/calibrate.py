"""Calibrate rho, lambda, k, E and kappa on the LoCoMo development split, with no LLM.

Measure: the share of evidence turns (QA categories 1-4) shown verbatim, averaged over the budgets
2k, 4k and 8k, per recovery mode. Coordinate search around the defaults: each setting is varied
alone, and the values and figures are printed as a Markdown table (copied into docs/CALIBRATION.md).

    python scripts/calibrate.py [--data PATH/locomo-dev.json] [--out results/calibration.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import flexamem as fm
from flexamem_bench.conversation_data import default_path, load_locomo
from flexamem_bench.measures import evidence_verbatim

BUDGETS = (2048, 4096, 8192)
GRID = {
    "rho": [0.1, 0.25, 0.5, 0.75],
    "lam": [0.5, 0.7, 0.9],
    "k": [2, 3, 5],
    "excerpt_tokens": [128, 256, 512],
    "kappa": [64, 128, 256],
}
MODE_SETTINGS = {"pieces": {"rho", "kappa"}, "units": {"rho", "lam", "k", "excerpt_tokens", "kappa"}}


def evaluate(
    conversations,
    settings: fm.Settings,
    mode: str,
    memories: dict,  # type: ignore[no-untyped-def]
    options: fm.RenderOptions | None = None,
) -> dict[int, float]:
    """Evidence-verbatim share per budget for one setting."""
    hits = {b: 0 for b in BUDGETS}
    total = {b: 0 for b in BUDGETS}
    for conv in conversations:
        key = (conv.sample_id, settings.kappa)
        if key not in memories:
            mem = fm.Memory(":memory:", settings=fm.Settings(kappa=settings.kappa, one_unit_per_session=True))
            for s in conv.sessions:
                mem.add_session(s.turns, session_id=s.session_id, date=s.date)
            questions = [q for q in conv.questions if 1 <= q.category <= 4 and q.evidence]
            vectors = mem.embedder.embed([q.question for q in questions])
            memories[key] = (mem, questions, vectors)
        base, questions, vectors = memories[key]
        mem = fm.Memory(store=base.store, settings=settings)  # same notes, other render settings
        for q, v in zip(questions, vectors, strict=True):
            for b in BUDGETS:
                r = mem.render(q.question, b, mode=mode, query_vector=v, options=options)
                h, n = evidence_verbatim(r, q.evidence)
                hits[b] += h
                total[b] += n
    return {b: hits[b] / max(total[b], 1) for b in BUDGETS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default=str(default_path()))
    parser.add_argument("--out", default="results/calibration.json")
    args = parser.parse_args()
    conversations = load_locomo(args.data)
    memories: dict = {}  # type: ignore[type-arg]
    rows = []
    default = fm.Settings()
    retrieval = fm.RenderOptions(timeline=False)
    shares = evaluate(conversations, default, "pieces", memories, retrieval)
    print("reference: pieces without a timeline (piece retrieval)", *(f"{shares[b]:.3f}" for b in BUDGETS))
    rows.append(
        {
            "mode": "pieces",
            "setting": "no timeline",
            "value": None,
            **{str(b): s for b, s in shares.items()},
            "mean": sum(shares.values()) / len(shares),
        }
    )
    for mode in ("pieces", "units"):
        for name in GRID:
            if name not in MODE_SETTINGS[mode]:
                continue
            for value in GRID[name]:
                settings = dataclasses.replace(default, **{name: value})
                start = time.perf_counter()
                shares = evaluate(conversations, settings, mode, memories)
                mean = sum(shares.values()) / len(shares)
                rows.append(
                    {
                        "mode": mode,
                        "setting": name,
                        "value": value,
                        **{str(b): s for b, s in shares.items()},
                        "mean": mean,
                    }
                )
                print(
                    f"{mode:<7}{name:<15}{value!s:<6}"
                    + "".join(f"{shares[b]:8.3f}" for b in BUDGETS)
                    + f"{mean:8.3f}   ({time.perf_counter() - start:.0f} s)",
                    flush=True,
                )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
