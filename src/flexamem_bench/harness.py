"""The fact-recall harness: every method x budget x question, measured without an LLM, resumable.

``per_question.jsonl`` gets one row per (item, method, budget) as soon as it is measured, so an
interrupted run resumes where it stopped. One bad item is reported (``errors.jsonl``) and counted,
never fatal. ``summarise`` turns the rows into ``results.json`` (one row per method x budget x
measure, with bootstrap CIs), paired comparisons (exact McNemar, Holm) and a Markdown table.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flexamem import FlexaMemError, InvalidInputError, Memory, Settings
from flexamem.budget import ceiling
from flexamem.cli.store import progress_bar
from flexamem.config import write_setting_names
from flexamem.llm.client import ChatModel
from flexamem.render import format as fmt
from flexamem.store.sqlite import SQLiteStore
from flexamem.write.default_embed import default_embedder
from flexamem.write.records import RecordWriter, RuleWriter
from flexamem_bench.baselines.reader import BASELINE_METHODS
from flexamem_bench.datasets import QAHistory, QAItem
from flexamem_bench.measures import RETRIEVAL, answer_contained, normalise, retrieval_measures
from flexamem_bench.methods import METHODS, RANKINGS, MethodContext, Output, writer_tokens
from flexamem_bench.reader import READER_PROMPT, LLMReader
from flexamem_bench.stats import bootstrap_ci, holm, mcnemar_exact, paired_bootstrap_diff

ALL_METHODS = {**METHODS, **BASELINE_METHODS}  # the no-LLM methods and the LLM-built baselines

MEASURES = (
    "evidence_verbatim",
    "evidence_partial",
    "all_evidence",
    "session_recall",
    "answer_contained",
    "accuracy",  # only with an LLM reader and judge
    "tokens",
    "latency_ms",
)
BINARY = ("all_evidence", "answer_contained", "accuracy")
PER_CATEGORY = ("evidence_verbatim", "accuracy")  # also reported per question category
NO_ANSWER = "(none: the history does not say)"


class Progress:
    """Progress of a run, drawn by the CLI's one progress bar (``flexamem.cli.store.progress_bar``)."""

    def __init__(self, total: int, label: str = "eval") -> None:
        self.total, self.done = total, 0
        self.show = progress_bar(label)

    def step(self, n: int = 1) -> None:
        self.done += n
        self.show(self.done, self.total)


def measure(
    output: Output, item: QAItem, turns: dict[str, str], pieces: dict[str, list[str]], prompt_tokens: int, budget: int
) -> dict[str, Any]:
    """The LLM-free measures of one rendering for one question (text containment, any method): a turn
    counts as shown when its text is in the rendering as a render shows stored text (``format.body``:
    its further lines behind the continuation mark; every method shows raw text so)."""
    text = output.text
    verbatim = [t for t in item.evidence if turns[t].strip() and fmt.body(turns[t].strip()) in text]
    partial = [t for t in item.evidence if any(fmt.body(p) in text for p in pieces.get(t, []))]
    n = len(item.evidence)
    sessions = {_session_of(t) for t in item.evidence}
    return {
        "evidence_verbatim": len(verbatim) / n,
        "evidence_partial": len(partial) / n,
        "all_evidence": float(len(verbatim) == n),
        "session_recall": len({_session_of(t) for t in verbatim}) / len(sessions),
        "answer_contained": float(answer_contained(text, item.answer)),
        "tokens": output.tokens,
        "within_budget": (not output.budgeted) or prompt_tokens + output.tokens <= ceiling(budget),
    }


def _session_of(turn_id: str) -> str:
    """The session a turn id belongs to (``D1:3`` -> ``D1``, LongMemEval ``<session>:<turn>``)."""
    return turn_id.rsplit(":", 1)[0]


def run(
    histories: Sequence[QAHistory],
    methods: Sequence[str],
    budgets: Sequence[int],
    out: Path,
    *,
    settings: Settings | None = None,
    progress: bool = True,
    writer: RecordWriter | None = None,
    reader: LLMReader | None = None,
    baseline_model: ChatModel | None = None,
    keep: Path | None = None,
) -> Path:
    """Render every question with every method at every budget; append one row per outcome to
    ``per_question.jsonl`` (rows already there are skipped: a rerun resumes). ``writer`` writes the
    records (rule writer by default); ``reader`` adds the LLM-judged ``accuracy`` of each row;
    ``baseline_model`` builds the LLM-built baselines' memories (their rows carry ``llm_tokens``).
    ``keep``: a folder where each history is stored once (a SQLite file per history and settings, and
    the turn baselines' vectors), so a later run with other methods or budgets ingests nothing."""
    unknown = [m for m in methods if m not in ALL_METHODS]
    if unknown:
        raise InvalidInputError(f"unknown method(s) {unknown}; known: {sorted(ALL_METHODS)}")
    claim_folder(out)
    rows_path, errors_path = out / "per_question.jsonl", out / "errors.jsonl"
    done = set()
    if rows_path.exists():
        for line in rows_path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                done.add((r["item"], r["method"], r["budget"]))
    total = sum(len(h.questions) for h in histories) * len(methods) * len(budgets)
    bar = Progress(total) if progress else None
    if bar:
        bar.done = len(done)
    with rows_path.open("a") as rows, errors_path.open("a") as errors:
        for h in histories:
            for problem in h.problems:
                errors.write(json.dumps({"history": h.history_id, "error": problem}) + "\n")
            todo = [(q, m, b) for q in h.questions for m in methods for b in budgets if (q.item_id, m, b) not in done]
            if not todo:
                continue
            try:
                ctx = open_context(h, settings, writer, keep)
                if baseline_model is not None:
                    ctx.extra["baseline_model"] = baseline_model
            except FlexaMemError as exc:
                errors.write(json.dumps({"history": h.history_id, "error": f"ingest failed: {exc}"}) + "\n")
                if bar:
                    bar.step(len(todo))
                continue
            turns = h.turn_texts()
            pieces = turn_pieces(ctx.mem)
            vectors = dict(
                zip(
                    [q.question for q in h.questions],
                    ctx.mem.embedder.embed([q.question for q in h.questions]),
                    strict=True,
                )
            )
            ctx.query_vectors.update(vectors)
            prompt_tokens = {
                q.item_id: ctx.mem.counter.count(READER_PROMPT) + ctx.mem.counter.count(q.question) for q in h.questions
            }
            corpus = h.retrieval_corpus  # the turns the benchmark's retrieval ranks, with their sessions
            session_of = {
                t["id"]: s.session_id
                for s in h.sessions
                for t in s.turns
                if "id" in t and (corpus is None or t["id"] in corpus)
            }
            ranked: dict[tuple[str, str], dict[str, float]] = {}  # (item, method): budget-free measures
            for q, m, b in todo:
                try:
                    start = time.perf_counter()
                    output = ALL_METHODS[m](ctx, q.question, b)
                    latency = (time.perf_counter() - start) * 1000
                    row = {
                        "item": q.item_id,
                        "group": q.group,
                        "category": q.category,
                        "method": m,
                        "budget": b,
                        **measure(output, q, turns, pieces, prompt_tokens[q.item_id], b),
                        "latency_ms": latency,
                        "composition": output.composition,
                    }
                    gold = q.evidence if q.retrieval_gold is None else q.retrieval_gold
                    if m in RANKINGS and gold:  # a question the benchmark's retrieval scores
                        if (q.item_id, m) not in ranked:
                            ranked[(q.item_id, m)] = retrieval_measures(RANKINGS[m](ctx, q.question), gold, session_of)
                        row.update(ranked[(q.item_id, m)])
                    if output.llm_tokens:
                        row["llm_tokens"] = output.llm_tokens
                    if reader is not None:
                        judged = reader(
                            output.text, q.question, q.answer or NO_ANSWER, category=q.category, date=q.date
                        )
                        row.update(reader_answer=judged.answer, accuracy=float(judged.correct))
                    rows.write(json.dumps(row) + "\n")
                except FlexaMemError as exc:
                    errors.write(json.dumps({"item": q.item_id, "method": m, "budget": b, "error": str(exc)}) + "\n")
                if bar:
                    bar.step()
            rows.flush()
            close_context(ctx)
    return rows_path


def open_context(
    h: QAHistory, settings: Settings | None, writer: RecordWriter | None = None, keep: Path | None = None
) -> MethodContext:
    """The history's memory, ready for the methods: ingested now, or opened from ``keep`` when an earlier
    run stored it under the same write-time settings (``write_setting_names()``) and record writer (any other
    setting may differ: ``Memory.settings`` can be changed for render-time settings)."""
    base = settings or Settings()
    s = base.with_values(one_unit_per_session=h.one_unit_per_session)
    path = _kept_path(h, s, writer, keep)
    if path is not None and path.with_suffix(".done").exists():
        mem = Memory(path, settings=s, writer=writer)  # stored by an earlier run: nothing to ingest
    else:
        if path is not None:
            for stale in (path, path.with_suffix(".done"), path.with_suffix(".turns.npy")):
                stale.unlink(missing_ok=True)  # an ingest that did not finish: start again
        mem = Memory(path or ":memory:", settings=s, writer=writer)
        mem.add_sessions([{"turns": x.turns, "session_id": x.session_id, "date": x.date} for x in h.sessions])
        if path is not None:
            path.with_suffix(".done").write_text(str(len(mem)))
    ctx = MethodContext(mem, READER_PROMPT)
    ctx.extra["writer_tokens"] = writer_tokens(mem)  # the LLM record writer's bill (0 with the rule writer)
    turn_file = _turns_path(ctx)
    if turn_file is not None and turn_file.exists():
        ctx.extra["turn_vectors"] = np.load(turn_file)  # the turn baselines' vectors, from an earlier run
    return ctx


def close_context(ctx: MethodContext) -> None:
    """Close the history's memory; a kept history also keeps the turn baselines' vectors computed for it
    (the next run of any harness or script loads them in :func:`open_context`)."""
    turn_file = _turns_path(ctx)
    if turn_file is not None and "turns" in ctx.extra and not turn_file.exists():
        np.save(turn_file, ctx.turns()[1])
    ctx.mem.close()


def claim_folder(out: Path) -> None:
    """Make ``out`` and record in its ``run.json`` the embedder this process's vectors come from
    (``FLEXAMEM_EMBEDDER``); a folder whose rows another embedder computed is refused, since resuming
    there would mix two models' rows in one table (a folder from before the record is claimed as is)."""
    out.mkdir(parents=True, exist_ok=True)
    name, path = default_embedder().name, out / "run.json"
    try:
        recorded = json.loads(path.read_text()).get("embedder") if path.exists() else None
    except (ValueError, AttributeError):
        raise InvalidInputError(f"{path} cannot be read: remove it or choose another --out") from None
    if recorded is not None and recorded != name:
        raise InvalidInputError(
            f"{out} holds rows computed with the embedder {recorded!r}, this run embeds with {name!r} "
            "(FLEXAMEM_EMBEDDER): choose another --out, or the same embedder to resume"
        )
    if recorded is None:
        path.write_text(json.dumps({"embedder": name}) + "\n")


def _kept_path(h: QAHistory, s: Settings, writer: RecordWriter | None, keep: Path | None) -> Path | None:
    """Where ``keep`` stores this history under these settings and this record writer (None: nowhere)."""
    if keep is None:
        return None
    keep.mkdir(parents=True, exist_ok=True)
    stored = sorted((name, getattr(s, name)) for name in write_setting_names())  # render-time settings share a store
    embedder = default_embedder().name  # the vectors' model (FLEXAMEM_EMBEDDER): int8 and fp32 stores apart
    writer_name = type(writer).__name__ if writer else RuleWriter.__name__  # no writer: the rule writer's records
    key = json.dumps([h.history_id, stored, writer_name, embedder])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return keep / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', h.history_id)[:80]}-{digest}.db"


def _turns_path(ctx: MethodContext) -> Path | None:
    """Where a kept history's turn vectors live (beside its store; None for a history in memory)."""
    store = ctx.mem.store
    if not isinstance(store, SQLiteStore) or store.path == ":memory:":
        return None
    return Path(store.path).with_suffix(".turns.npy")


def turn_pieces(mem: Memory) -> dict[str, list[str]]:
    """The text of each turn's pieces, by turn id (what ``evidence_partial`` looks for)."""
    out: dict[str, list[str]] = defaultdict(list)
    for note in mem.history.notes:
        for p in note.pieces:
            if p.source_id is not None:
                out[p.source_id].append(p.text)
    return out


def load_rows(out: Path) -> list[dict[str, Any]]:
    path = out / "per_question.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def summarise(
    out: Path,
    *,
    by_group: bool = False,
    resamples: int = 10_000,
    measures: Sequence[str] = MEASURES,
    binary: Sequence[str] = BINARY,
    paired: str = "evidence_verbatim",
) -> list[dict[str, Any]]:
    """Write results.json, comparisons.json and results.md from per_question.jsonl.

    A measure that is ``None`` for an item (e.g. no detail to recall at that step) leaves the item out
    of that measure's mean.
    """
    rows = load_rows(out)
    measures = [*measures, *(name for name in RETRIEVAL if name not in measures and any(name in r for r in rows))]
    cells: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        cells[(r["method"], r["budget"])].append(r)
    results = []
    for (method, budget), rs in sorted(cells.items()):
        for name in measures:
            kept = [r for r in rs if r.get(name) is not None]
            if not kept:
                continue
            values = [float(r[name]) for r in kept]
            groups = [r["group"] for r in kept] if by_group else None
            lo, hi = bootstrap_ci(values, groups, resamples=resamples)
            results.append(
                {
                    "method": method,
                    "budget": budget,
                    "measure": name,
                    "value": sum(values) / len(values),
                    "n": len(values),
                    "ci_low": lo,
                    "ci_high": hi,
                }
            )
        for per in PER_CATEGORY:  # e.g. accuracy:single-hop, evidence_verbatim:temporal
            judged = [r for r in rs if r.get(per) is not None and r.get("category")]
            for category in sorted({str(r["category"]) for r in judged}):
                values = [float(r[per]) for r in judged if str(r["category"]) == category]
                lo, hi = bootstrap_ci(values, None, resamples=resamples)
                results.append(
                    {
                        "method": method,
                        "budget": budget,
                        "measure": f"{per}:{category}",
                        "value": sum(values) / len(values),
                        "n": len(values),
                        "ci_low": lo,
                        "ci_high": hi,
                    }
                )
        billed = [r["llm_tokens"] for r in rs if r.get("llm_tokens")]
        if billed:  # LLM-built baselines: model tokens to build a history's memory, and per question
            builds = {r["group"]: r["llm_tokens"]["build"] for r in rs if r.get("llm_tokens")}
            for name, value in (
                ("llm_build_tokens_per_history", sum(builds.values()) / len(builds)),
                ("llm_read_tokens_per_question", sum(b["read"] for b in billed) / len(billed)),
            ):
                results.append(
                    {"method": method, "budget": budget, "measure": name, "value": value, "n": len(billed),
                     "ci_low": None, "ci_high": None}
                )  # fmt: skip
        results.append(
            {
                "method": method,
                "budget": budget,
                "measure": "budget_violations",
                "value": sum(1 for r in rs if not r["within_budget"]),
                "n": len(rs),
                "ci_low": None,
                "ci_high": None,
            }
        )
    (out / "results.json").write_text(json.dumps(results, indent=1))
    comparisons = _comparisons(rows, resamples, binary, paired)
    (out / "comparisons.json").write_text(json.dumps(comparisons, indent=1))
    names = {str(r["measure"]) for r in results}
    shown = [*measures, *sorted(n for n in names if n.split(":")[0] in PER_CATEGORY and ":" in n)]
    shown += [n for n in ("llm_build_tokens_per_history", "llm_read_tokens_per_question") if n in names]
    (out / "results.md").write_text(markdown(results, comparisons, shown, paired))
    return results


def _both_measured(
    table: dict[tuple[str, str, int], dict[str, Any]], items: Sequence[str], a: str, b: str, budget: int, name: str
) -> list[str]:
    """Items where both methods have a value of ``name`` at this budget (the pairs a paired test uses)."""
    return [
        i
        for i in items
        if table.get((i, a, budget), {}).get(name) is not None and table.get((i, b, budget), {}).get(name) is not None
    ]


def _comparisons(
    rows: list[dict[str, Any]],
    resamples: int = 10_000,
    binary: Sequence[str] = BINARY,
    paired: str = "evidence_verbatim",
) -> list[dict[str, Any]]:
    """Piece recovery and unit recovery against every other method, per budget: exact McNemar on the
    binary measures, and a paired bootstrap CI of the difference in the ``paired`` measure."""
    table = {(r["item"], r["method"], r["budget"]): r for r in rows}
    methods = sorted({r["method"] for r in rows})
    budgets = sorted({r["budget"] for r in rows})
    items = sorted({r["item"] for r in rows})
    out = []
    for ours in ("auto", "piece-recovery", "unit-recovery"):
        for other in methods:
            if other == ours or ours not in methods:
                continue
            for b in budgets:
                shared = _both_measured(table, items, ours, other, b, paired)
                if shared:
                    diff, lo, hi = paired_bootstrap_diff(
                        [table[(i, ours, b)][paired] for i in shared],
                        [table[(i, other, b)][paired] for i in shared],
                        resamples=resamples,
                    )
                    out.append(
                        {
                            "method": ours,
                            "against": other,
                            "budget": b,
                            "measure": paired,
                            "difference": diff,
                            "ci_low": lo,
                            "ci_high": hi,
                            "n": len(shared),
                        }
                    )
                for name in binary:
                    pairs = [
                        (table[(i, ours, b)][name] > 0, table[(i, other, b)][name] > 0)
                        for i in _both_measured(table, items, ours, other, b, name)
                    ]
                    if pairs:
                        only_a, only_b, p = mcnemar_exact([a for a, _ in pairs], [b_ for _, b_ in pairs])
                        out.append(
                            {
                                "method": ours,
                                "against": other,
                                "budget": b,
                                "measure": name,
                                "only_method": only_a,
                                "only_against": only_b,
                                "n": len(pairs),
                                "p": p,
                            }
                        )
    for name in binary:
        family = [c for c in out if c["measure"] == name and "p" in c]
        for c, adj in zip(family, holm([c["p"] for c in family]), strict=True):
            c["p_holm"] = adj
    return out


def markdown(
    results: list[dict[str, Any]],
    comparisons: list[dict[str, Any]],
    measures: Sequence[str] = MEASURES,
    paired: str = "evidence_verbatim",
) -> str:
    budgets = sorted({r["budget"] for r in results})
    methods = sorted({r["method"] for r in results})
    value = {(r["method"], r["budget"], r["measure"]): r for r in results}
    lines = []
    present = {r["measure"] for r in results}
    retrieval = [name for name in RETRIEVAL if name in present]
    for name in measures:
        if name not in present or name in retrieval:
            continue
        lines += [
            f"### {name}",
            "",
            "| method | " + " | ".join(f"{b:,}" for b in budgets) + " |",
            "|---|" + "---:|" * len(budgets),
        ]
        for m in methods:
            cells = []
            for b in budgets:
                r = value.get((m, b, name))
                if r is None:
                    cells.append("")
                elif name in ("tokens", "latency_ms") or r["ci_low"] is None:
                    cells.append(f"{r['value']:,.1f}")
                else:
                    cells.append(f"{100 * r['value']:.1f} [{100 * r['ci_low']:.1f}, {100 * r['ci_high']:.1f}]")
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        lines.append("")
    if retrieval:  # budget-free: one row per method (the first budget's rows; every budget has the same)
        short = [n.replace("recall_", "R_").replace("ndcg_any", "nDCG") for n in retrieval]
        lines += [
            "### retrieval (LongMemEval's measures of each method's turn ranking, no budget; %)",
            "",
            "| method | " + " | ".join(short) + " |",
            "|---|" + "---:|" * len(retrieval),
        ]
        for m in methods:
            found = [value.get((m, budgets[0], n)) for n in retrieval]
            if any(found):
                shown = [f"{100 * c['value']:.1f}" if c else "" for c in found]
                lines.append(f"| {m} | " + " | ".join(shown) + " |")
        lines.append("")
    diffs = [c for c in comparisons if "difference" in c]
    if diffs:
        lines += [
            f"### paired differences in {paired} (bootstrap 95% CI, points)",
            "",
            "| method | against | budget | difference | CI |",
            "|---|---|---:|---:|---|",
        ]
        for c in diffs:
            lines.append(
                f"| {c['method']} | {c['against']} | {c['budget']} | {100 * c['difference']:+.1f} "
                f"| [{100 * c['ci_low']:+.1f}, {100 * c['ci_high']:+.1f}] |"
            )
        lines.append("")
    comparisons = [c for c in comparisons if "p" in c]
    if comparisons:
        lines += [
            "### paired comparisons (exact McNemar, Holm-adjusted per measure)",
            "",
            "| method | against | budget | measure | only method | only against | p (Holm) |",
            "|---|---|---:|---|---:|---:|---:|",
        ]
        for c in comparisons:
            lines.append(
                f"| {c['method']} | {c['against']} | {c['budget']} | {c['measure']} | {c['only_method']} "
                f"| {c['only_against']} | {c['p_holm']:.3g} |"
            )
    return "\n".join(lines) + "\n"


__all__ = [
    "MEASURES",
    "Progress",
    "close_context",
    "load_rows",
    "measure",
    "normalise",
    "open_context",
    "run",
    "summarise",
    "turn_pieces",
]
