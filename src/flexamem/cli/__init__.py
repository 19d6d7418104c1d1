"""Command line: ``flexamem init|add|render|histories|notes|show|drop|erase|erasures|scrub|head|verify|export|import|
backup|demo|ingest|eval|replay|flagged|usage|serve|embed-serve|mcp``.

Plain argparse (no extra dependency); every command works offline on the embedded default.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from flexamem.agent import AgentContext, AgentSession
from flexamem.cli.demo import DEMO_AGENT_BUDGET, DEMO_AGENT_STEPS, DEMO_TASK
from flexamem.cli.embeddings import add_embedding_commands
from flexamem.cli.llm import (
    add_commands,
)
from flexamem.cli.store import add_store_commands, print_note
from flexamem.errors import FlexaMemError, InvalidInputError
from flexamem.memory import Memory
from flexamem.render.result import Rendering

DEMO_QUESTION = "Which card should the hotel refund go to?"
DEMO_BUDGET = 260


def cmd_demo(args: argparse.Namespace) -> int:
    from flexamem.cli.demo import DEMO_SESSIONS

    db = args.db or str(Path(tempfile.mkdtemp(prefix="flexamem-demo-")) / "demo.db")
    start = time.perf_counter()
    with Memory(db) as mem:
        if len(mem) == 0:
            for sid, date, turns in DEMO_SESSIONS:
                mem.add_session(turns, session_id=sid, date=date)
        lines = [f"FlexA-Mem demo: {len(mem)} notes written to {db} ({time.perf_counter() - start:.2f} s)", ""]
        for note in mem.notes():
            print_note(note, lines)
        r = mem.render(DEMO_QUESTION, DEMO_BUDGET)
        lines += [
            "",
            f"--- render({DEMO_QUESTION!r}, budget={DEMO_BUDGET}): mode {r.mode!r}, "
            f"{r.tokens} tokens of the {r.allowance} left after the question ---",
            r.text,
            "",
            "--- what it shows, and why ---",
            *_explain(mem, r),
        ]
        agent = mem.agent(task=DEMO_TASK, budget=DEMO_AGENT_BUDGET)
        for action, observation in DEMO_AGENT_STEPS:
            agent.step(action=action, observation=observation)
        ctx = agent.context()
        lines += [
            "",
            f"--- agent: {len(DEMO_AGENT_STEPS)} steps, budget {DEMO_AGENT_BUDGET}; the next call's context: "
            f"{len(ctx.messages)} messages, {ctx.tokens} tokens (ceiling {ctx.ceiling}) ---",
            *(f"[{m['role']}] {m['content']}" for m in ctx.messages),
            "",
            _agent_why(agent, ctx),
        ]
    lines += [
        "",
        f"Database: {db}",
        f'Render from the command line: flexamem render --db {db} "{DEMO_QUESTION}" --budget {DEMO_BUDGET}',
    ]
    print("\n".join(lines))
    return 0


def _agent_why(agent: AgentSession, ctx: AgentContext) -> str:
    """One line on why the answer to the demo task is in the context (computed, not claimed)."""
    from flexamem.cli.demo import DEMO_REFERENCE

    units = agent.units()
    window = [agent.steps[i].number for k in ctx.window_units for i in units[k]]
    shown = ctx.memory.verbatim_turns if ctx.memory is not None else set()
    found = [s for s in agent.steps if DEMO_REFERENCE in s.observation]
    if not found or not any(DEMO_REFERENCE in str(m["content"]) for m in ctx.messages):
        return f"the answer ({DEMO_REFERENCE}) is not in this context"
    step = found[0]
    if step.number in window:
        return f"the answer ({DEMO_REFERENCE}) is in the recent window (step {step.number}), kept raw"
    task_words = {w for w in re.findall(r"[a-z]+", agent.task.lower()) if len(w) > 3}
    shared = sorted(task_words & set(re.findall(r"[a-z]+", f"{step.action} {step.observation}".lower())))
    return (
        f"why step {step.number} is there: it left the recent window (steps {window[0]}-{window[-1]} are sent raw); "
        f"auto ranked the past steps' pieces by stemmed BM25 against the task and the newest step, its output "
        f"shares {', '.join(repr(w) for w in shared)} with the task, so it is shown "
        f"{'verbatim' if f'step {step.number}' in shown else 'in part'}: {DEMO_REFERENCE}"
    )


def _explain(mem: Memory, r: Rendering) -> list[str]:
    """A few lines on what a rendering holds and why."""
    if r.pass_through:
        return ["the whole history fits the allowance, so it is shown raw (pass-through)"]
    out = []
    notes = mem.history.notes
    verbatim = [f"{len(v.pieces)} of {len(notes[v.seq].pieces)} from {v.unit_id}" for v in r.shown if v.pieces]
    if verbatim:
        out.append("verbatim pieces: " + ", ".join(verbatim))
        out.append("  ranked by stemmed BM25 fused with piece vectors; whole turns, then neighbours, while room lasts")
    by_resolution: dict[str, list[str]] = {}
    for v in r.shown:
        by_resolution.setdefault(v.resolution, []).append(v.unit_id)
    if by_resolution.get("hidden"):
        out.append(f"timeline: {', '.join(by_resolution['hidden'])} hidden for this call (no room left for records)")
    for resolution in ("record", "merged"):
        if by_resolution.get(resolution):
            out.append(f"timeline: {', '.join(by_resolution[resolution])} as {resolution} records")
    out.append(f"tokens by part: {dict(r.composition)}")
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flexamem", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="ingest a small built-in history and print its notes")
    p.add_argument("--db", help="SQLite file to write (default: a new temporary file)")
    p.set_defaults(func=cmd_demo)
    add_store_commands(sub)
    add_commands(sub)
    add_embedding_commands(sub)
    add_bench_verbs(sub)
    return parser


BENCH_VERBS = ("ingest", "eval", "replay")


def add_bench_verbs(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The bench's verbs (``ingest``, ``eval``, ``replay``) when it is installed; otherwise verbs that say
    how to get it. The product never imports the bench: it is found by name, as a plug-in."""
    try:
        bench = importlib.import_module("flexamem_bench.cli")
    except ImportError as exc:
        why = str(exc)

        def missing(args: argparse.Namespace) -> int:
            raise InvalidInputError(f"'flexamem {args.command}' needs the evaluation bench (flexamem_bench): {why}")

        for verb in BENCH_VERBS:
            p = sub.add_parser(verb, help="(needs the evaluation bench, flexamem_bench)", add_help=False)
            p.add_argument("rest", nargs=argparse.REMAINDER)
            p.set_defaults(func=missing)
        return
    bench.add_bench_commands(sub)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Exit codes: 0 done, 1 the store, a model or a server failed, 2 bad input."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except InvalidInputError as exc:  # budgets included
        print(f"flexamem: error: {exc}", file=sys.stderr)
        return 2
    except FlexaMemError as exc:
        print(f"flexamem: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("flexamem: interrupted (what was stored stays stored)", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (``flexamem export | head``): stop quietly, as cat does
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - so the interpreter's last flush cannot fail
        return 141
