"""The trajectory harness: every method x budget x step, resumable, with the same outputs as the
fact-recall harness (``per_question.jsonl`` rows are steps here; ``item`` is ``<trajectory>#<t>``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from flexamem import FlexaMemError, InvalidInputError
from flexamem.llm.client import ChatModel
from flexamem.render.messages import messages_tokens
from flexamem.tokens import counter
from flexamem_bench.baselines.agent import AGENT_BASELINES
from flexamem_bench.harness import Progress, claim_folder, load_rows, summarise
from flexamem_bench.replay import AGENT_METHODS, Full, Method, StepContext, effective_budget, measure_step
from flexamem_bench.trajectories import Trajectory

AGENT_MEASURES = (
    "detail_recall",
    "detail_recall_json",
    "file_shown",
    "trace_coverage",
    "repeat_visible",
    "tokens",
    "latency_ms",
)


def replay(
    traj: Trajectory, method: str, budget: int, model: Any = None
) -> Iterator[tuple[int, StepContext | None, Method, float]]:
    """Yield (t, context before step t or None when memory is off, the method, latency ms). The
    LLM-built baselines (``flexamem_bench.baselines.agent``) build their memories with ``model``."""
    if method in AGENT_METHODS:
        m = AGENT_METHODS[method](traj, budget)
    else:
        if method not in AGENT_BASELINES:
            raise InvalidInputError(f"unknown method {method!r}")
        if model is None:
            raise InvalidInputError(f"{method} needs a model (an endpoint, or --stand-in for tests)")
        m = AGENT_BASELINES[method](traj, budget, model)
    yield from replay_method(traj, m, budget)


def replay_method(traj: Trajectory, m: Method, budget: int) -> Iterator[tuple[int, StepContext | None, Method, float]]:
    """:func:`replay` of a method already built (``budget``: the one it was built with)."""
    full_tokens = messages_tokens(m.session.fixed_messages(), m.session.counter)
    ceiling = m.session.core.ceiling(budget)
    for t, step in enumerate(traj.steps):
        if t > 0 and full_tokens > ceiling:
            start = time.perf_counter()
            ctx = m.context()
            if ctx.tokens > ceiling and not isinstance(m, Full):  # the newest unit alone is too big:
                cut = m.session.cut_newest(m.session.fixed_messages(), ceiling, 0)  # every method cuts it alike
                ctx = StepContext(cut.messages, cut.tokens, {len(m.session.units()) - 1})
            yield t, ctx, m, (time.perf_counter() - start) * 1000
        elif t > 0:
            yield t, None, m, 0.0
        m.feed(step)
        full_tokens += sum(messages_tokens([x], m.session.counter) - 3 for x in step.messages)


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
    claim_folder(out)
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
                bar.step()
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
