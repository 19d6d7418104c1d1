"""Out-of-fold calibration of ``auto`` in agent sessions (issue 30): does each agent setting's default
hold on trajectories it was not chosen on?

Data: every tau-bench / tau2-bench development trajectory (tau airline 100; tau2 airline 20, retail
40, telecom 40, telecom without a user 40), history-part budgets 2k / 3k / 4k, as
docs/EVALUATION_AGENTS.md runs them. Folds: ``--folds`` (4), trajectories dealt out file by file (so
each fold holds every file). Measure: ``detail_recall`` per measured step (the harness's own), pooled
over a fold's steps at each budget and averaged over the budgets; ``trace_coverage`` is reported beside.

Each trajectory is replayed under every value of every setting (each varied alone around the
defaults) and with each of ``auto``'s switches turned off, at each budget, every replay a session of
its own (a session's merged timeline carries from call to call); a text is embedded once per
trajectory. For each setting and fold, the value best on the
other folds is chosen and scored on the held fold; the report puts the default's, the in-fold (chosen
on every fold) and the out-of-fold figures side by side, as scripts/crossfold.py does for readers.

    python scripts/crossfold_agents.py --data ../shared/data --out results/crossfold-agents.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

import flexamem as fm
from flexamem.config import knob_grids
from flexamem.tokens import counter
from flexamem.write.default_embed import default_embedder
from flexamem_bench.agent_harness import replay_method
from flexamem_bench.folds import Choice, candidates, deal, narrowed, report, table
from flexamem_bench.replay import AGENT_AUTO_ABLATIONS, FlexaMem, effective_budget, measure_step
from flexamem_bench.trajectories import Trajectory, load_trajectories

BUDGETS = (2048, 3072, 4096)
FILES = (
    "tau_bench/gpt-4o-airline-dev.json",
    "tau2_bench/gpt-4.1_airline_default_gpt-4.1_1trials.json",
    "tau2_bench/gpt-4.1_retail_defautl_gpt-4.1_1trials.json",
    "tau2_bench/gpt-4.1_telecom_default_gpt-4.1_1trials.json",
    "tau2_bench/gpt-4.1_telecom_no-user_gpt-4.1_1trials.json",
)
# every agent setting with a grid on its field (flexamem.knobs.knob): the agent's ranking's, agent_auto_rho, the trace
GRID: dict[str, list[Any]] = {name: list(values) for name, values in knob_grids().items() if name.startswith("agent_")}
# auto and each switch of a tool-call agent's auto turned off (auto-pieces concerns shell agents only;
# the readers' dense weight is the agent_auto_alpha grid)
VARIANTS = tuple(v for v in AGENT_AUTO_ABLATIONS if v not in ("auto-pieces", "auto-dense-half"))

MEASURES = ("detail_recall", "trace_coverage")  # the two columns of a row
Row = tuple[float | None, float]  # (detail_recall or None where no detail is needed, trace_coverage)
Scores = dict[tuple[str, int, int], Row]  # (trajectory, step, budget) -> row


def runs(grid: dict[str, list[Any]], variants: Sequence[str]) -> list[tuple[str, fm.RenderOptions, fm.Settings]]:
    """Every rendering scored at each call: (key, options, settings)."""
    base = fm.Settings()
    out = [(v, AGENT_AUTO_ABLATIONS[v][0], AGENT_AUTO_ABLATIONS[v][1] or base) for v in variants]
    out += [(f"{s}={v}", fm.RenderOptions(), base.with_values({s: v})) for s, vs in grid.items() for v in vs]
    return out


class Remembered:
    """The process's embedder, each text embedded once: every rendering replays the same steps."""

    def __init__(self, inner: fm.Embedder) -> None:
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        self.vectors: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        new = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if new:
            self.vectors.update(zip(new, self.inner.embed(new), strict=True))
        return np.stack([self.vectors[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)


def score_trajectory(
    traj: Trajectory, budget: int, embedder: fm.Embedder, rendering: list[tuple[str, fm.RenderOptions, fm.Settings]]
) -> dict[str, Scores]:
    """key -> scores of one trajectory at one budget: each rendering in a replay of its own (a session
    keeps its merged timeline from call to call, so renderings may not share one)."""
    out: dict[str, Scores] = defaultdict(dict)
    b = effective_budget(traj, budget, "history", counter())
    for key, options, settings in rendering:
        method = FlexaMem(traj, b, "auto", options, settings, embedder)
        for t, ctx, m, _ in replay_method(traj, method, b):
            if ctx is not None:
                row = measure_step(traj, t, ctx, m)
                assert row["within_budget"], (key, traj.traj_id, t, budget)
                out[key][(traj.traj_id, t, budget)] = (row["detail_recall"], row["trace_coverage"])
    return out


def score_all(trajs: Sequence[Trajectory], grid: dict[str, list[Any]], variants: Sequence[str]) -> dict[str, Scores]:
    rendering = runs(grid, variants)
    results: dict[str, Scores] = defaultdict(dict)
    for n, traj in enumerate(trajs):
        start = time.perf_counter()
        embedder = Remembered(default_embedder())
        for budget in BUDGETS:
            for key, scores in score_trajectory(traj, budget, embedder, rendering).items():
                results[key].update(scores)
        print(f"{n + 1}/{len(trajs)} {traj.traj_id}: {time.perf_counter() - start:.1f} s", flush=True)
    return results


def folds(by_file: dict[str, list[Trajectory]], k: int) -> dict[str, int]:
    """trajectory -> fold, dealt out file by file."""
    return deal({name: [t.traj_id for t in ts] for name, ts in by_file.items()}, k)


def means(scores: Scores, trajs: set[str], column: int = 0) -> list[float]:
    """Per budget, the mean over the measured steps of the given trajectories (column 0: detail_recall,
    1: trace_coverage)."""
    out = []
    for b in BUDGETS:
        values = [row[column] for (traj, _, bb), row in scores.items() if bb == b and traj in trajs]
        kept = [v for v in values if v is not None]
        out.append(sum(kept) / len(kept) if kept else 0.0)
    return out


def objective(scores: Scores, trajs: set[str]) -> float:
    per_budget = means(scores, trajs)
    return sum(per_budget) / len(per_budget)


def crossfold(results: dict[str, Scores], fold_of: dict[str, int], k: int) -> list[dict[str, Any]]:
    everyone = set(fold_of)

    def held(choice: Choice) -> Scores:  # every step scored by the value chosen without its trajectory's fold
        return {r: results[choice.held(fold_of[r[0]])][r] for r in results[choice.default]}

    def figures(scores: Scores) -> dict[str, list[float]]:
        return {m: [round(100 * v, 1) for v in means(scores, everyone, c)] for c, m in enumerate(MEASURES)}

    settings = candidates(results, VARIANTS, GRID, fm.Settings())
    return report(results, settings, fold_of, k, objective, held, figures)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="../shared/data", help="the shared data folder")
    parser.add_argument("--out", default="results/crossfold-agents.json")
    parser.add_argument("--folds", type=int, default=4)
    parser.add_argument("--limit", type=int, help="only the first N trajectories of each file (a quick look)")
    parser.add_argument("--scores", help="a scores file written by an earlier run: only the fold analysis")
    parser.add_argument("--settings", help="score only these settings (comma-separated; and auto itself)")
    args = parser.parse_args(argv)
    root = Path(args.data) / "agent_trajectories"
    by_file = {name: load_trajectories(root / name)[: args.limit] for name in FILES}
    trajs = [t for ts in by_file.values() for t in ts]
    fold_of = folds(by_file, args.folds)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    scores_path = Path(args.scores) if args.scores else out.with_suffix(".scores.json")
    if args.scores:
        raw = json.loads(scores_path.read_text())
        results = {key: {(i, int(t), int(b)): (d, c) for i, t, b, d, c in rows} for key, rows in raw.items()}
    else:
        try:
            grid, variants = narrowed(args.settings, GRID, VARIANTS)
        except ValueError as exc:
            parser.error(str(exc))
        results = score_all(trajs, grid, variants)
        scores_path.write_text(json.dumps({key: [[*k, *v] for k, v in s.items()] for key, s in results.items()}))
    report_rows = crossfold(results, fold_of, args.folds)
    out.write_text(json.dumps(report_rows, indent=1))

    def trace(r: dict[str, Any]) -> str:
        default, held = r["default_figures"]["trace_coverage"], r["out_of_fold_figures"]["trace_coverage"]
        return f"{' / '.join(map(str, default))} -> {' / '.join(map(str, held))}"

    print(table(report_rows, ("trace, default -> out of fold", trace)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
