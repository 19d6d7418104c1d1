"""The trajectory harness: every method x budget x step, resumable, with the same outputs as the
fact-recall harness (``per_question.jsonl`` rows are steps here; ``item`` is ``<trajectory>#<t>``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from flexamem.baselines.agent import AGENT_BASELINES
from flexamem.errors import FlexaMemError, InvalidInputError
from flexamem.eval.harness import Progress, load_rows, summarise
from flexamem.eval.replay import AGENT_METHODS, effective_budget, measure_step, replay
from flexamem.eval.trajectories import Trajectory
from flexamem.llm.client import ChatModel
from flexamem.tokens import counter

AGENT_MEASURES = ("detail_recall", "trace_coverage", "repeat_visible", "tokens", "latency_ms")


def run_trajectories(
    trajs: Sequence[Trajectory],
    methods: Sequence[str],
    budgets: Sequence[int],
    out: Path,
    *,
    part: str = "context",
    progress: bool = True,
    baseline_model: ChatModel | None = None,
) -> Path:
    """Replay every trajectory through every method at every budget (resumable); the LLM-built
    baselines build their memories with ``baseline_model`` and their rows carry ``llm_tokens``."""
    known = {*AGENT_METHODS, *AGENT_BASELINES}
    unknown = [m for m in methods if m not in known]
    if unknown:
        raise InvalidInputError(f"unknown method(s) {unknown}; known: {sorted(known)}")
    if part not in ("context", "history"):
        raise InvalidInputError("budget part must be 'context' or 'history'")
    out.mkdir(parents=True, exist_ok=True)
    done = {(r["group"], r["method"], r["budget"]) for r in _finished(out)}
    _drop_unfinished(out, done)
    todo = [(t, m, b) for t in trajs for m in methods for b in budgets if (t.traj_id, m, b) not in done]
    bar = Progress(len(todo)) if progress else None
    with (
        (out / "per_question.jsonl").open("a") as rows,
        (out / "errors.jsonl").open("a") as errors,
        (out / "finished.jsonl").open("a") as finished,
    ):
        for t in trajs:
            for problem in t.problems:
                errors.write(json.dumps({"trajectory": t.traj_id, "error": problem}) + "\n")
        for traj, method, budget in todo:
            try:
                if not traj.steps:
                    raise InvalidInputError(f"trajectory {traj.traj_id} has no steps")
                b = effective_budget(traj, budget, part, counter())
                read_so_far = 0
                for step, ctx, m, latency in replay(traj, method, b, baseline_model):
                    if ctx is None:
                        continue
                    bill = getattr(m, "ledger", None)
                    row = {
                        "item": f"{traj.traj_id}#{step}",
                        "group": traj.traj_id,
                        "category": part,
                        "method": method,
                        "budget": budget,
                        **measure_step(traj, step, ctx, m),
                        "latency_ms": latency,
                    }
                    if bill is not None:  # the trajectory's build so far, and this call's reads
                        row["llm_tokens"] = {"build": bill.tokens["build"], "read": bill.tokens["read"] - read_so_far}
                        read_so_far = bill.tokens["read"]
                    rows.write(json.dumps(row) + "\n")
                finished.write(json.dumps({"group": traj.traj_id, "method": method, "budget": budget}) + "\n")
            except FlexaMemError as exc:  # one bad trajectory is reported, never fatal
                errors.write(
                    json.dumps({"trajectory": traj.traj_id, "method": method, "budget": budget, "error": str(exc)})
                    + "\n"
                )
            rows.flush()
            finished.flush()
            if bar:
                bar.step(f"{traj.traj_id} {method} {budget}")
    return out / "per_question.jsonl"


def _drop_unfinished(out: Path, done: set[tuple[object, object, object]]) -> None:
    """Rows of a replay that was interrupted are dropped; that replay runs again whole."""
    rows = load_rows(out)
    kept = [r for r in rows if (r["group"], r["method"], r["budget"]) in done]
    if len(kept) != len(rows):
        (out / "per_question.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept))


def _finished(out: Path) -> list[dict[str, object]]:
    path = out / "finished.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def summarise_trajectories(out: Path, resamples: int = 10_000) -> None:
    summarise(out, by_group=True, resamples=resamples, measures=AGENT_MEASURES, binary=(), paired="detail_recall")
