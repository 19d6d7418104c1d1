"""The bench's command-line verbs, registered into ``flexamem``'s parser when the bench is installed:
``flexamem ingest`` (LoCoMo conversations into a store), ``flexamem eval`` (LoCoMo, LongMemEval, agent
trajectories) and ``flexamem replay`` (the context an agent would have seen)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from flexamem import FlexaMemError, InvalidInputError, Memory
from flexamem.cli.embeddings import add_embedder_arguments, use_embedder_arguments
from flexamem.cli.llm import add_writer_arguments, required_model, writer_from_args
from flexamem.cli.progress import Progress, progress_wanted
from flexamem.render.renderer import AUTO_ABLATIONS
from flexamem.tokens import counter
from flexamem_bench.baselines.reader import BASELINE_METHODS
from flexamem_bench.replay import AGENT_AUTO_ABLATIONS

if TYPE_CHECKING:
    from flexamem.llm.client import ChatModel
    from flexamem_bench.reader import LLMReader

QA_METHODS = (
    "auto,unit-recovery,piece-recovery,piece-retrieval,unit-retrieval,dense-turns,hybrid-turns,truncation,"
    "timeline-only,full"
)
AGENT_METHODS = (
    "auto,unit-recovery,piece-recovery,timeline-only,truncation,masking,masking-rule-log,piece-retrieval,"
    "unit-retrieval,dense-retrieval,hybrid-retrieval"
)


def reader_from_args(args: argparse.Namespace) -> LLMReader | None:
    """The LLM reader and judge of ``eval --reader`` (the configured endpoint is required)."""
    if not getattr(args, "reader", False):
        return None
    from flexamem_bench.reader import LLMReader

    protocol = getattr(args, "protocol", None) or ("longmemeval" if args.dataset == "longmemeval" else "project")
    return LLMReader(required_model(args, "--reader (the reader and judge)"), protocol=protocol)


def baseline_model_from_args(args: argparse.Namespace, methods: Sequence[str]) -> ChatModel | None:
    """The model that builds the LLM-built baselines: the stand-in (``--stand-in``), or the endpoint."""
    from flexamem_bench.baselines.reader import BASELINE_METHODS

    wanted = sorted(set(methods) & set(BASELINE_METHODS))
    if not wanted:
        return None
    if args.stand_in:
        from flexamem_bench.baselines import StandInModel

        return StandInModel()
    return required_model(args, f"the LLM-built baselines {wanted}", ", or --stand-in")


def cmd_ingest(args: argparse.Namespace) -> int:
    """Each conversation into its own history (sessions already there are skipped: a rerun resumes); with
    progress over the whole import (sessions, and the time left by the text embedded so far) on stderr
    on a terminal or with ``--progress``."""
    from flexamem import Settings
    from flexamem_bench.conversation_data import load_locomo

    conversations = load_locomo(args.data)
    missing = sorted(set(args.sample or ()) - {c.sample_id for c in conversations})
    if missing:
        known = ", ".join(c.sample_id for c in conversations[:8])
        raise InvalidInputError(f"no conversation {', '.join(missing)} in {args.data} (there: {known}...)")
    use_embedder_arguments(args)
    settings = Settings(one_unit_per_session=True)
    writer = writer_from_args(args)
    chosen = [c for c in conversations if not args.sample or c.sample_id in args.sample]
    plans = []  # (conversation, the sessions still to write, their characters)
    for conv in chosen:
        with Memory(args.db, history=conv.sample_id, settings=settings, writer=writer) as mem:
            done = {n.session_id for n in mem.history.notes}
        todo = [s for s in conv.sessions if s.session_id not in done]
        plans.append((conv, todo, [sum(len(t["text"]) for t in s.turns) for s in todo]))
    meter = None
    if progress_wanted(args.quiet, args.progress):
        total = sum(len(todo) for _, todo, _ in plans)
        weight = sum(sum(chars) for _, _, chars in plans)
        meter = Progress("ingest", total, weight, unit=f"sessions of {len(plans)} conversations")
    items, chars_done = 0, 0
    for conv, todo, chars in plans:
        with Memory(args.db, history=conv.sample_id, settings=settings, writer=writer) as mem:
            start = time.perf_counter()
            sessions = [{"turns": s.turns, "session_id": s.session_id, "date": s.date} for s in todo]
            if meter is not None and sessions:
                meter.update(items, chars_done)
            mem.add_sessions(sessions, progress=_stored(meter, items, chars_done, chars) if sessions else None)
            items, chars_done = items + len(todo), chars_done + sum(chars)
            if meter is not None:
                meter.clear()
            print(
                f"{conv.sample_id}: {len(mem)} notes, {mem.history.pieces_count} pieces "
                f"({time.perf_counter() - start:.2f} s)",
                flush=True,
            )
    if meter is not None:
        meter.update(items, chars_done)
    return 0


def _stored(meter: Progress | None, items: int, chars_done: int, chars: list[int]) -> Callable[[int, int], None] | None:
    """``add_sessions``' progress (records written, then units stored: one unit per session here) as the
    import's: the sessions stored so far and their characters."""
    if meter is None:
        return None
    total = len(chars)

    def show(done: int, doubled: int) -> None:
        stored = min(max(done - doubled // 2, 0), total)
        meter.update(items + stored, chars_done + sum(chars[:stored]))

    return show


def cmd_eval(args: argparse.Namespace) -> int:
    from flexamem_bench.datasets import locomo_histories, longmemeval_histories
    from flexamem_bench.harness import MEASURES, load_rows, run, summarise
    from flexamem_bench.plots import plot_composition, plot_measures

    if args.dataset == "trajectories":
        return cmd_eval_trajectories(args)
    out = Path(args.out)
    budgets = [int(b) for b in (args.budgets or "2048,4096,8192").split(",")]
    methods = [m.strip() for m in (args.methods or QA_METHODS).split(",") if m.strip()]
    if args.dataset == "locomo":
        categories = tuple(int(c) for c in args.categories.split(","))
        histories = locomo_histories(args.data, categories)
    else:
        histories = longmemeval_histories(args.data)
    by_group = args.ci_over == "conversations"
    if args.limit:
        histories = histories[: args.limit]
    if args.questions:
        histories = [dataclasses.replace(h, questions=h.questions[: args.questions]) for h in histories]
    problems = [p for h in histories for p in h.problems]
    for p in problems:
        print(f"flexamem: skipped {p}", file=sys.stderr)
    writer, reader = writer_from_args(args), reader_from_args(args)
    baseline_model = baseline_model_from_args(args, methods)
    run(
        histories, methods, budgets, out, progress=not args.quiet, writer=writer, reader=reader,
        baseline_model=baseline_model, keep=Path(args.keep) if args.keep else None,
    )  # fmt: skip
    results = summarise(out, by_group=by_group, resamples=args.resamples)
    try:
        plot_measures(results, out, MEASURES)
        plot_composition(load_rows(out), out, ("unit-recovery", "piece-recovery"))
    except FlexaMemError as exc:
        print(f"flexamem: no plots: {exc}", file=sys.stderr)
    print((out / "results.md").read_text())
    print(f"{len(problems)} item(s) skipped; outputs in {out}")
    return 0


def cmd_eval_trajectories(args: argparse.Namespace) -> int:
    from flexamem_bench.agent_harness import AGENT_MEASURES, run_trajectories, summarise_trajectories
    from flexamem_bench.harness import load_rows
    from flexamem_bench.plots import plot_composition, plot_measures
    from flexamem_bench.trajectories import load_trajectories

    out = Path(args.out)
    trajs = load_trajectories(args.data, args.format)
    if args.limit:
        trajs = trajs[: args.limit]
    methods = [m.strip() for m in (args.methods or AGENT_METHODS).split(",") if m.strip()]
    budgets = [int(b) for b in (args.budgets or "2048,3072,4096").split(",")]
    model = baseline_model_from_args(args, methods)
    run_trajectories(trajs, methods, budgets, out, part=args.budget_part, progress=not args.quiet, baseline_model=model)
    summarise_trajectories(out, resamples=args.resamples)
    import json

    try:
        plot_measures(json.loads((out / "results.json").read_text()), out, AGENT_MEASURES)
        plot_composition(load_rows(out), out, ("unit-recovery", "piece-recovery"))
    except FlexaMemError as exc:
        print(f"flexamem: no plots: {exc}", file=sys.stderr)
    print((out / "results.md").read_text())
    problems = sum(len(t.problems) for t in trajs)
    print(f"{len(trajs)} trajectories, {problems} problem(s) reported in errors.jsonl; outputs in {out}")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from flexamem_bench.agent_harness import replay
    from flexamem_bench.replay import effective_budget
    from flexamem_bench.trajectories import load_trajectories

    trajs = load_trajectories(args.file, args.format)
    traj = next((t for t in trajs if t.traj_id == args.trajectory), None) if args.trajectory else trajs[0]
    if traj is None:
        raise InvalidInputError(f"no trajectory {args.trajectory!r}; first ids: {[t.traj_id for t in trajs[:5]]}")
    if not 1 <= args.step < len(traj.steps) + 1:
        raise InvalidInputError(f"step must be 1..{len(traj.steps)} for {traj.traj_id}")
    budget = effective_budget(traj, args.budget, args.budget_part, counter())
    for t, ctx, m, _ in replay(traj, args.method, budget):
        if t == args.step - 1:
            if ctx is not None:
                messages = ctx.messages
            else:  # memory is off: the history passes through unchanged
                messages = m.session.fixed_messages() + m.session.step_messages(range(len(m.session.steps)))
            print(f"# {traj.traj_id}: context before step {args.step} ({args.method}, budget {budget})")
            for msg in messages:
                print(f"[{msg.get('role')}] {msg.get('content') or ''}")
                if msg.get("tool_calls"):
                    print(f"  tool_calls: {msg['tool_calls']}")
            return 0
    return 0


def add_bench_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``ingest``, ``eval`` and ``replay``."""
    p = sub.add_parser("ingest", help="ingest LoCoMo conversations (one unit per session)")
    p.add_argument("--data", required=True, help="path to a LoCoMo JSON file")
    p.add_argument("--db", required=True, help="SQLite file; one history per conversation")
    p.add_argument("--sample", action="append", help="only this sample id (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no progress")
    p.add_argument(
        "--progress", action="store_true", help="progress and the time left on stderr even when it is not a terminal"
    )
    add_writer_arguments(p)
    add_embedder_arguments(p)
    p.set_defaults(func=cmd_ingest)
    p = sub.add_parser(
        "eval",
        help="fact recall on conversations, or agent memory on trajectories",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="methods by dataset (--methods):\n"
        f"  locomo, longmemeval: {QA_METHODS.replace(',', ', ')}\n"
        f"  trajectories:        {AGENT_METHODS.replace(',', ', ')}\n"
        f"  LLM-built baselines (every dataset; an endpoint or --stand-in): {', '.join(BASELINE_METHODS)}",
    )
    p.add_argument("dataset", choices=["locomo", "longmemeval", "trajectories"])
    p.add_argument("--data", required=True, help="path to the data file")
    p.add_argument("--budgets", help="default: 2048,4096,8192 (trajectories: 2048,3072,4096)")
    p.add_argument(
        "--methods",
        help=f"default: {QA_METHODS} (trajectories: {AGENT_METHODS}); LLM-built baselines (every "
        f"dataset; they need an endpoint or --stand-in): {','.join(BASELINE_METHODS)}; auto's ablations: "
        + ",".join(n for n in AUTO_ABLATIONS if n != "auto")
        + " (trajectories: "
        + ",".join(n for n in AGENT_AUTO_ABLATIONS if n != "auto")
        + ")",
    )
    p.add_argument(
        "--format",
        default="auto",
        choices=["auto", "tau", "tau2", "openai", "mini-swe-agent", "swe-agent"],
        help="trajectories: the file format",
    )
    p.add_argument(
        "--budget-part",
        choices=["context", "history"],
        default="context",
        help="trajectories: 'context' = the budget holds policy + task + history; 'history' = the budget "
        "is for the history, the fixed prompt comes on top",
    )
    p.add_argument(
        "--out", required=True, help="results folder (a rerun resumes it, with the embedder its run.json records)"
    )
    p.add_argument(
        "--categories",
        default="1,2,3,4",
        help="LoCoMo categories (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial)",
    )
    p.add_argument("--limit", type=int, default=0, help="only the first N histories")
    p.add_argument("--questions", type=int, default=0, help="locomo/longmemeval: only the first N questions of each")
    p.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples")
    p.add_argument(
        "--ci-over", choices=["questions", "conversations"], default="questions", help="what the bootstrap resamples"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--keep",
        help="locomo/longmemeval: a folder where each history is stored once (SQLite, and the turn baselines' "
        "vectors); a later run with other methods or budgets ingests nothing",
    )
    p.add_argument(
        "--reader",
        action="store_true",
        help="locomo/longmemeval: also answer each question with the configured LLM and judge it (accuracy)",
    )
    p.add_argument(
        "--protocol",
        choices=["project", "longmemeval"],
        help="--reader: the reading and judging prompts (default: longmemeval's protocol for longmemeval, "
        "the project's for locomo; docs/EVALUATION.md)",
    )
    p.add_argument(
        "--stand-in",
        action="store_true",
        help="build the LLM-built baselines with the deterministic stand-in model (tests; no endpoint)",
    )
    add_writer_arguments(p, default="rule")
    p.set_defaults(func=cmd_eval)
    p = sub.add_parser("replay", help="print the context an agent would have seen before step N")
    p.add_argument("file")
    p.add_argument("--format", default="auto", choices=["auto", "tau", "tau2", "openai", "mini-swe-agent", "swe-agent"])
    p.add_argument("--trajectory", help="trajectory id (default: the first)")
    p.add_argument("--step", type=int, required=True)
    p.add_argument("--budget", type=int, required=True)
    p.add_argument("--budget-part", choices=["context", "history"], default="context")
    p.add_argument(
        "--method",
        default="auto",
        choices=sorted(set(AGENT_METHODS.split(",")) | set(AGENT_AUTO_ABLATIONS)),
        help="the memory whose context is printed (default: auto)",
    )
    p.set_defaults(func=cmd_replay)
