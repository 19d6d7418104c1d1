"""Out-of-fold calibration of ``auto``'s settings (issue 30): is each default one that holds on questions
it was not chosen on?

Data: the development files only: LoCoMo dev (4 conversations, 581 questions; 2k / 4k / 8k) and
LongMemEval ``_s`` dev + dev2 (120 questions; 4k / 8k / 16k / 32k). Folds: ``--folds`` (4) folds, each
one LoCoMo conversation plus a quarter of the LongMemEval questions dealt out by question type (so each
fold holds every type). Measure: ``evidence_verbatim`` per question (the harness's own), averaged over
a data set's budgets; the objective gives the two data sets equal weight.

For every setting (each varied alone around the defaults, as docs/CALIBRATION.md did) and every fold:
the value that scores best on the other folds is chosen, then scored on the held fold. The report puts
side by side the in-fold figure (the value chosen on all folds, scored on all of them: what tuning on
the dev files shows) and the out-of-fold figure (every question scored by the value chosen without it:
what carries to unseen questions), each against the default's. Render settings only, so every history
is stored once (``--stores``, kept between runs) and rendered under each value.

    python scripts/crossfold.py --data ../shared/data --stores results/stores --out results/crossfold.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import flexamem as fm
from flexamem.config import knob_grids
from flexamem.render.renderer import AUTO_ABLATIONS
from flexamem_bench.datasets import QAHistory, locomo_histories, longmemeval_histories
from flexamem_bench.folds import Choice, candidates, deal, narrowed, report, table
from flexamem_bench.harness import close_context, measure, open_context, turn_pieces
from flexamem_bench.methods import METHODS
from flexamem_bench.reader import READER_PROMPT

BUDGETS = {"locomo": (2048, 4096, 8192), "longmemeval": (4096, 8192, 16384, 32768)}
# every readers' setting with a grid on its field (flexamem.knobs.knob): the signals' and auto_rho, auto_long_turn
GRID: dict[str, list[Any]] = {name: list(values) for name, values in knob_grids().items() if name.startswith("auto_")}
VARIANTS = tuple(AUTO_ABLATIONS)  # auto and each of its switches turned off, as the harness's methods

Scores = dict[tuple[str, int], float]  # (item, budget) -> evidence_verbatim (or --measure)


def histories(data: Path) -> dict[str, list[QAHistory]]:
    lme = data / "longmemeval"
    return {
        "locomo": locomo_histories(data / "locomo" / "locomo-dev.json"),
        "longmemeval": [  # dev2 first: a concurrent `flexamem eval --keep` of dev may still be storing dev
            h for f in ("longmemeval-s-dev2.json", "longmemeval-s-dev.json") for h in longmemeval_histories(lme / f)
        ],
    }


def folds(sets: dict[str, list[QAHistory]], k: int) -> dict[str, int]:
    """item -> fold: a LoCoMo conversation per fold; LongMemEval questions dealt by type."""
    out = {q.item_id: i % k for i, h in enumerate(sets["locomo"]) for q in h.questions}
    by_type: dict[str, list[str]] = defaultdict(list)
    for h in sets["longmemeval"]:
        for q in h.questions:
            by_type[str(q.category)].append(q.item_id)
    return {**out, **deal(by_type, k)}


def score_all(
    sets: dict[str, list[QAHistory]],
    stores: Path,
    grid: dict[str, list[Any]],
    variants: Sequence[str],
    measure_name: str = "evidence_verbatim",
) -> dict[str, dict[str, Scores]]:
    """setting=value -> data set -> scores (``measure_name`` of the harness's measures, per question and
    budget), for every value of ``grid`` and every variant."""
    results: dict[str, dict[str, Scores]] = defaultdict(lambda: defaultdict(dict))
    for name, hs in sets.items():
        for n, h in enumerate(hs):
            start = time.perf_counter()
            ctx = open_context(h, None, keep=stores)
            base = ctx.mem.settings
            turns, pieces = h.turn_texts(), turn_pieces(ctx.mem)
            questions = [q.question for q in h.questions]
            ctx.query_vectors.update(zip(questions, ctx.mem.embedder.embed(questions), strict=True))
            prompt = {q.item_id: ctx.mem.counter.count(READER_PROMPT) + ctx.mem.counter.count(q.question)
                      for q in h.questions}  # fmt: skip
            runs: list[tuple[str, fm.Settings, str]] = [(v, base, v) for v in variants]
            runs += [(f"{s}={v}", base.with_values({s: v}), "auto") for s, vs in grid.items() for v in vs]
            for key, settings, method in runs:
                ctx.mem.settings = settings
                for q in h.questions:
                    for b in BUDGETS[name]:
                        out = METHODS[method](ctx, q.question, b)
                        row = measure(out, q, turns, pieces, prompt[q.item_id], b)
                        assert row["within_budget"], (key, q.item_id, b)
                        results[key][name][(q.item_id, b)] = float(row[measure_name])
            ctx.mem.settings = base
            close_context(ctx)
            print(f"{name} {n + 1}/{len(hs)} {h.history_id}: {time.perf_counter() - start:.1f} s", flush=True)
    return results


def means(scores: dict[str, Scores], items: set[str]) -> dict[str, list[float]]:
    """Per data set, the mean evidence_verbatim at each of its budgets over the given questions."""
    out = {}
    for name, s in scores.items():
        per_budget = [[v for (i, bb), v in s.items() if bb == b and i in items] for b in BUDGETS[name]]
        out[name] = [sum(v) / len(v) if v else 0.0 for v in per_budget]
    return out


def objective(scores: dict[str, Scores], items: set[str]) -> float:
    """Equal weight per data set: each the mean over its budgets of the mean over the given questions."""
    per_set = [sum(m) / len(m) for m in means(scores, items).values()]
    return sum(per_set) / len(per_set)


def figures(scores: dict[str, Scores], items: set[str]) -> dict[str, list[float]]:
    """:func:`means` in %, rounded for the report."""
    return {name: [round(100 * v, 1) for v in m] for name, m in means(scores, items).items()}


def crossfold(results: dict[str, dict[str, Scores]], fold_of: dict[str, int], k: int) -> list[dict[str, Any]]:
    everyone = set(fold_of)

    def held(choice: Choice) -> dict[str, Scores]:  # every question scored by the value chosen without its fold
        base = results[choice.default]
        return {name: {ib: results[choice.held(fold_of[ib[0]])][name][ib] for ib in base[name]} for name in BUDGETS}

    settings = candidates(results, VARIANTS, GRID, fm.Settings())
    return report(results, settings, fold_of, k, objective, held, lambda scores: figures(scores, everyone))


def unflatten(raw: dict[str, dict[str, list[list[Any]]]]) -> dict[str, dict[str, Scores]]:
    """Scores as a scores file holds them (``[item, budget, value]`` rows) back into dictionaries."""
    return {key: {name: {(i, int(b)): v for i, b, v in rows} for name, rows in by.items()} for key, by in raw.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="../shared/data", help="the shared data folder")
    parser.add_argument("--stores", default="results/stores", help="kept stores (one ingest per history)")
    parser.add_argument("--out", default="results/crossfold.json")
    parser.add_argument("--folds", type=int, default=4)
    parser.add_argument("--scores", help="a scores file written by an earlier run: only the fold analysis")
    parser.add_argument(
        "--settings",
        help="score only these settings (comma-separated; and auto itself), adding them to the saved scores",
    )
    parser.add_argument(
        "--measure",
        default="evidence_verbatim",
        choices=["evidence_verbatim", "answer_contained"],
        help="what each question scores (answer_contained: the answer string is in the memory)",
    )
    args = parser.parse_args(argv)
    sets = histories(Path(args.data))
    fold_of = folds(sets, args.folds)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    scores_path = Path(args.scores) if args.scores else out.with_suffix(".scores.json")
    if args.scores:
        results = unflatten(json.loads(scores_path.read_text()))
    else:
        try:
            grid, variants = narrowed(args.settings, GRID, VARIANTS)
        except ValueError as exc:
            parser.error(str(exc))
        results = score_all(sets, Path(args.stores), grid, variants, args.measure)
        if args.settings and scores_path.exists():  # the other settings' scores from the earlier run stay
            results = {**unflatten(json.loads(scores_path.read_text())), **results}
        flat = {key: {name: [[i, b, v] for (i, b), v in s.items()] for name, s in by.items()}
                for key, by in results.items()}  # fmt: skip
        scores_path.write_text(json.dumps(flat))
    report_rows = crossfold(results, fold_of, args.folds)
    out.write_text(json.dumps(report_rows, indent=1))
    print(table(report_rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
