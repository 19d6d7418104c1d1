"""The LLM-built baselines as methods of the fact-recall harness: ``method(ctx, question, budget)``.

Each memory is built once per history (its model tokens counted as ``llm_tokens["build"]``) and
rendered within the same allowance as every other method; a question's own model calls (ReadAgent's
pick) count as ``llm_tokens["read"]``. The model is ``ctx.extra["baseline_model"]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flexamem import InvalidInputError
from flexamem_bench.baselines.ledger import Ledger
from flexamem_bench.baselines.memories import AFM, AMem, MemGAS, ReadAgent, Summary
from flexamem_bench.baselines.sculptor import Fragments, manage, with_tools
from flexamem_bench.methods import MethodContext, Output, fit_units, raw_units

SUMMARY_WORDS = 400  # the running summary's length (guess; cut to its share of the allowance at read time)
SUMMARY_SHARE = 0.5  # readers: the summary takes half the allowance and lends what it does not use
AFM_THRESHOLDS = (0.30, 0.15)  # full / compressed: the paper's calibration on LoCoMo (its own values 0.45 / 0.25)
AFM_HALF_LIFE = 20.0  # units (guess)


def _ledger(ctx: MethodContext) -> Ledger:
    ledger = ctx.extra.get("baseline_ledger")
    if ledger is None:
        model = ctx.extra.get("baseline_model")
        if model is None:
            raise InvalidInputError("the LLM-built baselines need a model (an endpoint, or --stand-in for tests)")
        ledger = ctx.extra["baseline_ledger"] = Ledger(model)  # type: ignore[arg-type]
    return ledger  # type: ignore[return-value]


def _built(ctx: MethodContext, name: str, make: Callable[[Ledger], Any]) -> tuple[Any, int]:
    """The memory ``name`` of this history (built on first use) and the model tokens its build took."""
    if name not in ctx.extra:
        ledger = _ledger(ctx)
        before = ledger.tokens["build"]
        ctx.extra[name] = make(ledger)
        ctx.extra[f"{name}:tokens"] = ledger.tokens["build"] - before
    return ctx.extra[name], int(ctx.extra[f"{name}:tokens"])  # type: ignore[call-overload]


def _amem(ctx: MethodContext) -> tuple[AMem, int]:
    return _built(ctx, "amem", lambda ledger: AMem(ctx.mem.embedder).build(ctx.mem.notes(), ledger))


def _fits(ctx: MethodContext, lines: list[str], allowance: int) -> Output:
    """Join ``lines``; drop the oldest while the text is over the allowance (a last guard)."""
    text = "\n".join(lines)
    while lines and ctx.mem.counter.count(text) > allowance:
        lines = lines[1:]
        text = "\n".join(lines)
    tokens = ctx.mem.counter.count(text)
    return Output(text, tokens, True, {"baseline": tokens})


def a_mem(ctx: MethodContext, question: str, budget: int) -> Output:
    """A-Mem: raw notes taken in its search order while they fit, shown in time order."""
    amem, cost = _amem(ctx)
    order = amem.order(ctx.query_vector(question), ctx.spans())
    out = raw_units(ctx, fit_units(ctx, order, ctx.allowance(budget, question)))
    return Output(out.text, out.tokens, True, out.composition, {"build": cost, "read": 0})


def a_mem_fod(ctx: MethodContext, question: str, budget: int) -> Output:
    """A-Mem's search order rendered by FlexA-Mem's unit recovery (timeline + fit-or-degrade)."""
    amem, cost = _amem(ctx)
    notes = ctx.mem.notes()
    order = [notes[s].unit_id for s in amem.order(ctx.query_vector(question), ctx.spans())]
    r = ctx.mem.render(question, budget, mode="units", prompt=ctx.prompt, order=order)
    return Output(r.text, r.tokens, True, dict(r.composition), {"build": cost, "read": 0})


def summary_a_mem(ctx: MethodContext, question: str, budget: int) -> Output:
    """Summary+A-Mem: a running summary in up to half the allowance, A-Mem's raw notes in the rest."""
    amem, amem_cost = _amem(ctx)
    summary, cost = _built(ctx, "summary", lambda ledger: Summary(SUMMARY_WORDS).build(ctx.mem.notes(), ledger))
    counter, allowance = ctx.mem.counter, ctx.allowance(budget, question)
    head = f"[summary of the history] {summary.text}"
    ids = counter.encode(head)[: int(SUMMARY_SHARE * allowance)]
    head = counter.decode(ids).rstrip("\ufffd") if ids else ""
    used = counter.count(head) + 1 if head else 0
    order = amem.order(ctx.query_vector(question), ctx.spans())
    raw = raw_units(ctx, fit_units(ctx, order, allowance - used))
    lines = ([head] if head else []) + ([raw.text] if raw.text else [])
    out = _fits(ctx, lines, allowance)
    return Output(out.text, out.tokens, True, out.composition, {"build": amem_cost + cost, "read": 0})


def afm(ctx: MethodContext, question: str, budget: int, thresholds: tuple[float, float] = AFM_THRESHOLDS) -> Output:
    """AFM: each unit full, compressed or a placeholder by its score, packed oldest first, each falling
    back to the next form when it does not fit."""
    memory, cost = _built(ctx, "afm", lambda ledger: AFM().build(ctx.mem.notes(), ledger))
    counter, allowance, notes = ctx.mem.counter, ctx.allowance(budget, question), ctx.mem.notes()
    scores = memory.scores(ctx.query_vector(question), ctx.spans(), AFM_HALF_LIFE)
    shown = memory.pack(notes, scores, thresholds, allowance, counter)
    lines = [shown[i] for i in sorted(shown)]
    out = _fits(ctx, lines, allowance)
    return Output(out.text, out.tokens, True, out.composition, {"build": cost, "read": 0})


def readagent(ctx: MethodContext, question: str, budget: int) -> Output:
    """ReadAgent: every unit's gist in time order; the pages one LLM call picks are shown raw instead,
    in the order picked, while they fit (when the gists alone do not fit, the newest that fit stay)."""
    memory, cost = _built(ctx, "readagent", lambda ledger: ReadAgent().build(ctx.mem.notes(), ledger))
    ledger = _ledger(ctx)
    before = ledger.tokens["read"]
    picked = memory.pick(question, ledger)
    read = ledger.tokens["read"] - before
    counter, allowance, notes = ctx.mem.counter, ctx.allowance(budget, question), ctx.mem.notes()
    shown = memory.pack(notes, picked, allowance, counter)
    out = _fits(ctx, [shown[i] for i in sorted(shown)], allowance)
    return Output(out.text, out.tokens, True, out.composition, {"build": cost, "read": read})


def memgas(ctx: MethodContext, question: str, budget: int) -> Output:
    """MemGAS: units by personalized PageRank over GMM links from granularity-weighted similarities,
    filtered by one LLM call; raw notes taken in that order while they fit, shown in time order."""
    memory, cost = _built(ctx, "memgas", lambda ledger: MemGAS(ctx.mem.embedder).build(ctx.mem.notes(), ledger))
    ledger = _ledger(ctx)
    before = ledger.tokens["read"]
    order = memory.filter(memory.rank(ctx.query_vector(question), ctx.spans()), question, ledger)
    read = ledger.tokens["read"] - before
    out = raw_units(ctx, fit_units(ctx, order, ctx.allowance(budget, question)))
    return Output(out.text, out.tokens, True, out.composition, {"build": cost, "read": read})


def sculptor(ctx: MethodContext, question: str, budget: int) -> Output:
    """Sculptor: every unit a fragment, the newest full while they fit and the rest folded; the model
    restores, folds, summarizes and searches through tools (a few rounds per question) before the
    reader sees what it left. The tool schemas count against the allowance (with less than twice their
    size, it runs without them: the newest fragments full, the rest folded, no model call)."""
    ledger, counter = _ledger(ctx), ctx.mem.counter
    summaries = ctx.extra.setdefault("sculptor:summaries", {})  # written once per unit, kept for the history
    fragments = Fragments(counter, summaries)  # type: ignore[arg-type]
    fragments.add(ctx.mem.notes())
    allowance, schemas = with_tools(ctx.allowance(budget, question), counter)
    before = ledger.tokens["read"]
    if schemas:
        manage(fragments, ledger, f"answer this question: {question}", allowance)
    text = "\n".join(line for _, line in fragments.fit(allowance))
    tokens = counter.count(text)
    read = ledger.tokens["read"] - before
    return Output(
        text, tokens + schemas, True, {"fragments": tokens, "tool schemas": schemas}, {"build": 0, "read": read}
    )


BASELINE_METHODS = {
    "a-mem": a_mem,
    "a-mem-fod": a_mem_fod,
    "summary-a-mem": summary_a_mem,
    "afm": afm,
    "readagent": readagent,
    "memgas": memgas,
    "sculptor": sculptor,
}
