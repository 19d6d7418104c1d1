"""LLM-writer benchmark with the real local model (prints figures; not a test).

Starts the llama.cpp server from ``scripts/setup_local_llm.sh`` (Qwen2.5-Coder-0.5B, 2 CPU cores)
and reports, with the response cache off so every call is real:

1. seconds per record (one call at a time) and records/s with ``--concurrency`` calls in flight;
2. LLM tokens spent on memory construction for one LoCoMo conversation (records, repairs, and the
   merged records its questions need at 2k/4k/8k), like the paper's Table 14;
3. that conversation's evidence-turn figures (piece and unit recovery) with LLM records against rule
   records, at 2k/4k/8k.

    python benchmarks/llm_writer.py [--data PATH/locomo-dev.json] [--conversation 0] [--concurrency 2]
"""

from __future__ import annotations

import argparse
import time
from statistics import mean

import flexamem as fm
from flexamem.llm.local import LocalServer, local_model_path
from flexamem.write.units import cut_session, parse_turns
from flexamem_bench.conversation_data import default_path
from flexamem_bench.datasets import locomo_histories
from flexamem_bench.harness import measure, open_context, turn_pieces
from flexamem_bench.methods import METHODS
from flexamem_bench.reader import READER_PROMPT

BUDGETS = (2048, 4096, 8192)
METHOD_NAMES = ("piece-recovery", "unit-recovery")


def evidence(ctx, history) -> dict[tuple[str, int], float]:  # type: ignore[no-untyped-def]
    turns, pieces = history.turn_texts(), turn_pieces(ctx.mem)
    out = {}
    for m in METHOD_NAMES:
        for b in BUDGETS:
            values = []
            for q in history.questions:
                prompt = ctx.mem.counter.count(READER_PROMPT) + ctx.mem.counter.count(q.question)
                values.append(measure(METHODS[m](ctx, q.question, b), q, turns, pieces, prompt, b)["evidence_verbatim"])
            out[(m, b)] = 100 * mean(values)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default=str(default_path()))
    parser.add_argument("--conversation", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--speed-units", type=int, default=4, help="units for the speed figures")
    parser.add_argument("--speed-only", action="store_true", help="only the speed figures (part 1)")
    args = parser.parse_args()
    history = locomo_histories(args.data)[args.conversation]
    counter = fm.counter()
    drafts = [
        d
        for s in history.sessions
        for d in cut_session(
            parse_turns(s.turns),
            counter,
            session_id=s.session_id,
            date=s.date,
            max_unit_tokens=2000,
            one_unit=True,
        )
    ][: args.speed_units]

    with LocalServer(local_model_path()) as server:
        print(f"local server: {server.base_url} (model {local_model_path().name}, {server.threads} threads)")
        llm = server.client("qwen2.5-coder-0.5b", concurrency=1)
        llm.complete([{"role": "user", "content": "Say OK."}], max_tokens=4)  # warm up
        writer = fm.LLMWriter(llm, concurrency=1)
        start = time.perf_counter()
        records = writer.write_records(drafts)
        one = (time.perf_counter() - start) / len(drafts)
        print(
            f"1. one at a time: {one:.1f} s per record ({len(drafts)} LoCoMo sessions, "
            f"{mean(d.raw.count(' ') for d in drafts):.0f} words each; {sum(r.flagged for r in records)} flagged)"
        )
        # other prompts (the cache is off, but the server may reuse its prompt cache): shift the unit ids
        par = fm.LLMWriter(server.client("qwen2.5-coder-0.5b", concurrency=args.concurrency))
        start = time.perf_counter()
        par.write_records(
            [fm.UnitDraft(d.unit_id, d.kind, d.raw + " ", d.blocks, d.session_id, d.date) for d in drafts]
        )
        rate = len(drafts) / (time.perf_counter() - start)
        print(
            f"   {args.concurrency} in flight: {rate:.3f} records/s (llama-cpp-python's server answers one "
            f"request at a time, so concurrency pays only on servers that batch: vLLM, llama.cpp --parallel)"
        )

        if args.speed_only:
            return
        start = time.perf_counter()
        ctx = open_context(history, None, fm.LLMWriter(llm, concurrency=1))
        built = time.perf_counter() - start
        llm_figures = evidence(ctx, history)  # renders write the merged records the questions need
        usage = ctx.mem.llm_usage()
        calls = ctx.mem.store.llm_calls(ctx.mem.history_id)
        by_purpose = {p: sum(1 for c in calls if c.purpose == p) for p in ("record", "repair", "merge")}
        flagged = sum(n.flagged for n in ctx.mem.notes())
        print(
            f"2. {history.history_id}: {len(ctx.mem)} units written in {built:.0f} s; memory construction "
            f"{usage['prompt_tokens'] + usage['completion_tokens']:,} LLM tokens ({usage['prompt_tokens']:,} prompt + "
            f"{usage['completion_tokens']:,} completion) in {usage['calls']} calls {by_purpose}; {flagged} flagged"
        )
    rule_figures = evidence(open_context(history, None), history)
    print(f"3. evidence turns shown verbatim, {len(history.questions)} questions (LLM records / rule records):")
    for m in METHOD_NAMES:
        cells = "  ".join(f"{b}: {llm_figures[(m, b)]:.1f} / {rule_figures[(m, b)]:.1f}" for b in BUDGETS)
        print(f"   {m:15s} {cells}")


if __name__ == "__main__":
    main()
