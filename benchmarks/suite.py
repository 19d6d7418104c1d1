"""The performance suite (``make bench``; prints tables, asserts nothing; ``--smoke`` runs in CI).

Sections, each with its baseline measured in the same run:

* **ingest**: the LoCoMo dev conversations written with the rule writer, tokens/s and units/s, with and
  without piece vectors, for each MiniLM runtime installed (onnxruntime, numpy).
* **render**: histories of 20k, 100k, 1M (and, when asked, 10M) tokens of *varied* text: the LoCoMo dev
  sessions as they are, then again and again with their words shuffled across all sessions (so pieces
  do not tie the way a repeated conversation's do), built once and cached as SQLite files. For each:
  open-to-first-render and the RSS of the open memory (a fresh process, models already loaded),
  render p50/p95 per mode at 4k and 16k (query embedding excluded, reported on its own), the floor
  (tokenizing the rendered text once), and ``bm25s`` over the same pieces beside FlexA-Mem's BM25.
  Bench histories are written without piece vectors to keep their build minutes, not hours: render
  cost is the same (``auto`` scores a full piece matrix either way; a piece without its own vector
  has its note's).
* **agent**: ``AgentSession.context()`` on tau-bench airline dev trajectories at a 4k history budget,
  after a new step and repeated, beside the tokenize-once floor of the context.

    python benchmarks/suite.py [--sizes 20000,100000,1000000,10000000] [--queries 40] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

import flexamem as fm
from flexamem.text import content_words
from flexamem.write.default_embed import default_embedder
from flexamem_bench.conversation_data import Conversation, default_path, load_locomo
from flexamem_bench.trajectories import load_trajectories

CACHE = Path(os.environ.get("FLEXAMEM_BENCH_CACHE", Path.home() / ".cache" / "flexamem" / "bench"))
TRAJECTORIES = "agent_trajectories/tau_bench/gpt-4o-airline-dev.json"
VERSION = 1  # bump when the way bench histories are made changes


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[float, Any]:
    """(milliseconds, result) of one call."""
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return (time.perf_counter() - start) * 1000, out


# -- varied histories -----------------------------------------------------------------------------------
def varied_sessions(conversations: list[Conversation], seed: int) -> Iterator[dict[str, Any]]:
    """The dev sessions as they are, then endlessly again with every turn's words drawn from one
    shuffled stream of all the sessions' words (turn lengths, speakers and dates kept)."""
    sessions = [(c.sample_id, s) for c in conversations for s in c.sessions]
    for cid, s in sessions:
        yield {"turns": s.turns, "session_id": f"{cid}/{s.session_id}", "date": s.date}
    pool = [w for _, s in sessions for t in s.turns for w in t["text"].split()]
    rng = random.Random(seed)
    rep = 1
    while True:
        rng.shuffle(pool)
        at = 0
        for cid, s in sessions:
            turns = []
            for t in s.turns:
                n = len(t["text"].split())
                turns.append({"speaker": t["speaker"], "text": " ".join(pool[at : at + n])})
                at += n
            yield {"turns": turns, "session_id": f"{cid}/r{rep}/{s.session_id}", "date": s.date}
        rep += 1


BENCH_SETTINGS = fm.Settings(one_unit_per_session=True, piece_vectors=False)  # how bench histories are written


def bench_history(conversations: list[Conversation], size: int) -> tuple[Path, dict[str, Any]]:
    """The cached SQLite file of a ~``size``-token varied history, built when missing."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"varied-{size}-v{VERSION}.sqlite"
    marker = path.with_suffix(".json")
    if path.exists() and marker.exists():
        return path, json.loads(marker.read_text())
    path.unlink(missing_ok=True)
    mem = fm.Memory(path, settings=BENCH_SETTINGS)
    counter, source = fm.counter(), varied_sessions(conversations, seed=size)
    tokens, units, start = 0, 0, time.perf_counter()
    while tokens < size:
        batch, planned = [], tokens  # up to 20 sessions a write, stopping near the size
        while planned < size and len(batch) < 20:
            batch.append(next(source))
            planned += counter.count("\n".join(t["text"] for t in batch[-1]["turns"]))
        ids = mem.add_sessions(batch)
        new = [mem.note(u) for session in ids for u in session]
        tokens += sum(n.raw_tokens for n in new)
        units += len(new)
        print(f"  building {path.name}: {tokens:,} tokens", end="\r", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    built = time.perf_counter() - start
    mem.close()
    info = {"tokens": tokens, "units": units, "build_s": built}
    marker.write_text(json.dumps(info))
    return path, info


# -- sections -------------------------------------------------------------------------------------------
def section_ingest(conversations: list[Conversation], smoke: bool) -> None:
    from flexamem.write.embed import MiniLMEmbedder

    runtimes: list[tuple[str, Callable[[], fm.Embedder]]] = []
    try:
        from flexamem.write.onnx_embed import OnnxMiniLMEmbedder

        runtimes.append(("onnxruntime", OnnxMiniLMEmbedder))
    except ImportError:
        pass
    runtimes.append(("numpy", MiniLMEmbedder))
    convs = conversations[:1] if smoke else conversations
    print(f"\n## Ingest (rule writer, {len(convs)} LoCoMo dev conversation(s), one unit per session)\n")
    print("| embedder | piece vectors | tokens | units | seconds | tokens/s | units/s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, make in runtimes[:1] if smoke else runtimes:
        embedder = make()
        embedder.embed(["warm up"])
        for vectors in (False, True):
            tokens = units = 0
            start = time.perf_counter()
            for conv in convs:
                mem = fm.Memory(":memory:", embedder=embedder, settings=fm.Settings(piece_vectors=vectors))
                for s in conv.sessions:
                    mem.add_session(s.turns, session_id=s.session_id, date=s.date)
                notes = mem.notes()
                tokens += sum(n.raw_tokens for n in notes)
                units += len(notes)
            took = time.perf_counter() - start
            print(
                f"| {name} | {'yes' if vectors else 'no'} | {tokens:,} | {units} | {took:.1f} | "
                f"{tokens / took:,.0f} | {units / took:.1f} |"
            )


def open_probe(path: str, question: str) -> None:
    """In a fresh process: models loaded first, then the time from opening to the first render, and
    the RSS the open memory adds."""
    default_embedder().embed(["warm up"])
    fm.counter().count("warm up")
    before = rss_mb()
    start = time.perf_counter()
    mem = fm.Memory(path, read_only=True)
    mem.notes()  # the store is opened lazily: this reads and indexes the history
    opened = time.perf_counter()
    mem.render(question, 4096)
    done = time.perf_counter()
    print(json.dumps({"open_s": opened - start, "first_s": done - start, "rss_mb": rss_mb() - before}))


def section_render(conversations: list[Conversation], sizes: list[int], n_queries: int) -> None:
    questions = [q.question for c in conversations for q in c.questions if 1 <= q.category <= 4][:n_queries]
    print(f"\n## Render ({len(questions)} LoCoMo questions; varied histories; query embedding excluded)\n")
    summary: list[str] = []
    for size in sizes:
        summary += render_size(conversations, size, questions)
    print("\n### Summary at a 4k budget\n\n| tokens | mode | p50 ms | p95 ms |\n|---:|---|---:|---:|")
    print("\n".join(summary))


def render_size(conversations: list[Conversation], size: int, questions: list[str]) -> list[str]:
    """Print one history size's tables; return its summary rows."""
    path, info = bench_history(conversations, size)
    with fm.Memory(path) as mem:  # as after a user's first questions: the merged records are stored
        for mode in ("auto", "pieces", "units"):
            for budget in (4096, 16384):
                mem.render("what happened first?", budget, mode=mode)
    probe = subprocess.run(
        [sys.executable, __file__, "--open-probe", str(path), questions[0]], capture_output=True, text=True, check=True
    )
    opened = json.loads(probe.stdout.strip().splitlines()[-1])
    mem = fm.Memory(path, read_only=True)
    pieces = [p.text for n in mem.notes() for p in n.pieces]
    embed_ms, vectors = timed(lambda: [mem.embedder.embed([q])[0] for q in questions])
    print(
        f"### ~{size:,} tokens: {info['tokens']:,} tokens, {info['units']:,} units, {len(pieces):,} pieces "
        f"(built at {info['tokens'] / info['build_s']:,.0f} tokens/s, no piece vectors)\n"
    )
    print(
        f"open to first render {opened['first_s']:.2f} s (reading and indexing the history {opened['open_s']:.2f} s); "
        f"RSS of the open memory {opened['rss_mb']:,.0f} MB; query embedding "
        f"{embed_ms / len(questions):.1f} ms/query\n"
    )
    print("| mode | budget | p50 ms | p95 ms | first sight p50 ms | floor ms | p50/floor | tokens |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    counter, summary = fm.counter(), []
    for mode in ("auto", "pieces", "units"):
        for budget in (4096, 16384):
            pairs = list(zip(questions, vectors, strict=True))
            first = [timed(mem.render, q, budget, mode=mode, query_vector=v)[0] for q, v in pairs]
            times, floors, toks = [], [], []
            for q, v in pairs:
                ms, r = timed(mem.render, q, budget, mode=mode, query_vector=v)
                times.append(ms)
                floors.append(timed(counter.count, r.text)[0])
                toks.append(r.tokens)
            p50, p95, floor = statistics.median(times), pct(times, 0.95), statistics.median(floors)
            print(
                f"| {mode} | {budget} | {p50:.2f} | {p95:.2f} | {statistics.median(first):.2f} | "
                f"{floor:.2f} | {p50 / max(floor, 1e-9):.1f} | {statistics.mean(toks):.0f} |"
            )
            if budget == 4096:
                summary.append(f"| {size:,} | {mode} | {p50:.2f} | {p95:.2f} |")
    after, again = after_write(path, conversations, list(zip(questions, vectors, strict=True))[:10])
    print(
        f"\nauto at 4k right after a write of one session (a copy of the history, {len(after)} rounds): "
        f"p50 {statistics.median(after):.2f} ms; the same render again: {statistics.median(again):.2f} ms"
    )
    # BM25 piece ranking beside bm25s over the same pieces, the same words, top 100
    import bm25s

    corpus = [content_words(p) for p in pieces]
    index_ms, retriever = timed(_bm25s_index, bm25s, corpus)
    k = min(100, len(corpus))
    queries = [content_words(q) or ["_"] for q in questions]
    theirs = statistics.median(timed(retriever.retrieve, [q], k=k, show_progress=False)[0] for q in queries)
    ours = statistics.median(timed(_top, mem, q, k)[0] for q in queries)
    print(
        f"\nBM25 top-{k} piece ranking, p50 per query: FlexA-Mem {ours:.2f} ms, bm25s {theirs:.2f} ms "
        f"(bm25s / FlexA-Mem = {theirs / ours:.1f}x; bm25s indexing {index_ms / 1000:.1f} s)\n"
    )
    mem.close()
    return summary


def after_write(
    path: Path, conversations: list[Conversation], pairs: list[tuple[str, np.ndarray]]
) -> tuple[list[float], list[float]]:
    """On a copy of the history: per question, one session written (not timed), then ``auto`` at 4k
    rendered twice: the first render after the write (the timeline and the doc arrays take the new
    note) and the same render again (ms each)."""
    import shutil
    import tempfile

    after, again = [], []
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / path.name
        shutil.copyfile(path, copy)
        with fm.Memory(copy, settings=BENCH_SETTINGS) as mem:
            sessions = varied_sessions(conversations, seed=len(pairs))
            mem.render(pairs[0][0], 4096, query_vector=pairs[0][1])  # opened and read
            for i, (q, v) in enumerate(pairs):
                mem.add_sessions([dict(next(sessions), session_id=f"after-write/{i}")])
                after.append(timed(mem.render, q, 4096, query_vector=v)[0])
                again.append(timed(mem.render, q, 4096, query_vector=v)[0])
    return after, again


def _bm25s_index(bm25s: Any, corpus: list[list[str]]) -> Any:
    retriever = bm25s.BM25()
    retriever.index(corpus, show_progress=False)
    return retriever


def _top(mem: fm.Memory, terms: list[str], k: int) -> np.ndarray:
    docs, scores = mem.history.index.search(terms)
    if len(docs) <= k:
        return np.asarray(docs[np.argsort(-scores)])
    best = np.argpartition(-scores, k)[:k]
    return np.asarray(docs[best[np.argsort(-scores[best])]])


def section_agent(data_dir: Path, n_trajectories: int) -> None:
    path = data_dir / TRAJECTORIES
    trajectories = load_trajectories(path)
    if n_trajectories < len(trajectories):  # a short run takes the longest ones: memory is active there
        trajectories = sorted(trajectories, key=lambda t: -sum(len(str(s)) for s in t.steps))[:n_trajectories]
    counter = fm.counter()
    after, repeated, floors = [], [], []
    for tr in trajectories:
        task = tr.task or "task"
        budget = 4096 + counter.count(tr.system) + counter.count(task)
        session = fm.Memory(":memory:").agent(task=task, budget=budget, system=tr.system)
        for st in tr.steps:
            session.step(action=st.action, observation=st.observation, messages=st.messages)
            ms, ctx = timed(session.context)
            if ctx.pass_through:
                continue
            after.append(ms)
            repeated.append(timed(session.context)[0])
            text = "\n".join(str(m.get("content") or "") for m in ctx.messages)
            floors.append(timed(lambda text=text: counter.count(text))[0])
    print(f"\n## Agent calls ({len(trajectories)} tau-bench airline dev trajectories, 4k history budget, auto)\n")
    if not after:
        print("no call had memory active")
        return
    floor = statistics.median(floors)
    print("| call | n | p50 ms | p95 ms | floor ms | p50/floor |\n|---|---:|---:|---:|---:|---:|")
    for name, values in (("after a new step", after), ("repeated", repeated)):
        p50 = statistics.median(values)
        print(f"| {name} | {len(values)} | {p50:.2f} | {pct(values, 0.95):.2f} | {floor:.2f} | {p50 / floor:.1f} |")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--open-probe":
        open_probe(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(default_path()), help="LoCoMo dev JSON")
    parser.add_argument("--sizes", default="20000,100000,1000000", help="history sizes in tokens (add 10000000)")
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--trajectories", type=int, default=12)
    parser.add_argument("--sections", default="ingest,render,agent")
    parser.add_argument("--smoke", action="store_true", help="a quick run of every section (CI)")
    args = parser.parse_args()
    conversations = load_locomo(args.data)
    sizes = [20000] if args.smoke else [int(s) for s in args.sizes.split(",")]
    print(
        f"# FlexA-Mem performance suite: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}, "
        f"embedder {type(default_embedder()).__name__}, {time.strftime('%Y-%m-%d %H:%M')}"
    )
    sections = args.sections.split(",")
    if "ingest" in sections:
        section_ingest(conversations, args.smoke)
    if "render" in sections:
        section_render(conversations, sizes, 5 if args.smoke else args.queries)
    if "agent" in sections:
        section_agent(Path(args.data).resolve().parents[1], 2 if args.smoke else args.trajectories)


if __name__ == "__main__":
    main()
