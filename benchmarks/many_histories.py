"""Many histories, most of them cold: the HTTP server over N histories of realistic sizes, requests
drawn with a skewed (Zipf) popularity, ``--max-open`` well below N (issue 52 part 3; figures, not a test).

Histories are copies of a few base histories written from the dev data (their vectors made once):
small (the first 3 sessions of a LoCoMo dev conversation, ~2-4k tokens), medium (a whole LoCoMo
conversation, ~15-25k tokens) and large (a LongMemEval ``_s`` haystack, ~100-115k tokens), in the
shares ``--mix`` gives (70/25/5 by default). Each copy is an export of its base imported under a new name
(``flexamem.import_history``: checked, the vectors kept), so a copy is a real history with its own
digests. Then:

1. **open time by size**, in this process, for histories never opened: the time to the first render
   (open, read, index, render at the budget) beside its floor, reading the history's rows from the store
   (``load_notes`` and ``load_links``), a warm render of the same history, and the first render of a
   view made afresh after those (the history opened before elsewhere: another worker, a restart; its
   first load kept the words of its pieces counted, ``flexamem/recover/load_cache.py``); every history
   is opened over one store made once, as a server's worker keeps its connection (or pool) open;
2. **the server under load**: ``flexamem serve --workers W --max-open M``, C clients sending renders to
   histories drawn by Zipf rank (exponent ``--zipf``; rank 1 the most requested), for D seconds: render
   p50 / p99 over all requests and over the first request to each history (certainly a cold open on the
   worker that took it), the share of first requests, and each worker's RSS at the end.

    python benchmarks/many_histories.py [--store sqlite|postgres] [--histories 1000] [--max-open 64]
        [--clients 16] [--duration 30] [--zipf 1.1]

Run it at 1,000 and at 10,000 histories to see how each figure grows. ``--store postgres`` uses
``FLEXAMEM_TEST_POSTGRES`` or starts the test suite's local server (scripts/start_postgres.sh).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from server_load import CLIENTS, TRANSPORT_ERRORS, Server, percentile, poster, postgres_url

import flexamem as fm
from flexamem.server import KeyFile
from flexamem_bench.conversation_data import default_path
from flexamem_bench.datasets import locomo_histories, longmemeval_histories

TENANT = "bench"
SIZES = ("small", "medium", "large")


def as_sessions(sessions: list[Any]) -> list[dict[str, Any]]:
    """A data set's sessions as ``add_sessions`` takes them."""
    out = []
    for s in sessions:
        turns = [{"speaker": t["speaker"], "text": t["text"]} for t in s.turns]
        out.append({"turns": turns, "session_id": s.session_id, "date": s.date})
    return out


def base_exports(locomo: Path, lme: Path, large: int) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The base histories, written once in memory: size -> their exports (JSON Lines text), and base
    name -> its questions."""
    mem_db = tempfile.NamedTemporaryFile(suffix=".db", delete=False).name  # noqa: SIM115
    exports: dict[str, list[str]] = {s: [] for s in SIZES}
    questions: dict[str, list[str]] = {}
    bases = []
    for i, h in enumerate(locomo_histories(locomo)):
        sessions = as_sessions(h.sessions)
        bases.append(("small", f"s{i}", sessions[:3], [q.question for q in h.questions]))
        bases.append(("medium", f"m{i}", sessions, [q.question for q in h.questions]))
    for i, h in enumerate(longmemeval_histories(lme)[:large]):
        sessions = as_sessions(h.sessions)
        bases.append(("large", f"l{i}", sessions, [q.question for q in h.questions]))
    start = time.perf_counter()
    for size, name, sessions, asked in bases:
        with fm.Memory(mem_db, history=name) as mem:
            mem.add_sessions(sessions)
            out = io.StringIO()
            mem.export(out)
        exports[size].append(out.getvalue())
        questions[f"{size}:{len(exports[size]) - 1}"] = asked
    print(f"# {len(bases)} base histories written in {time.perf_counter() - start:.0f} s "
          f"({', '.join(f'{len(v)} {k}' for k, v in exports.items())})", file=sys.stderr)  # fmt: skip
    Path(mem_db).unlink(missing_ok=True)
    return exports, questions


def copies(db: str, n: int, exports: dict[str, list[str]], mix: list[float], seed: int) -> list[tuple[str, str]]:
    """``n`` histories imported into ``db`` as copies of the bases: (name, its base key)."""
    rng = random.Random(seed)
    store = fm.Memory(db).store  # one connection for every import
    out = []
    start = time.perf_counter()
    for k in range(n):
        size = rng.choices(SIZES, weights=mix)[0]
        b = rng.randrange(len(exports[size]))
        name = f"h{k}"
        fm.import_history(io.StringIO(exports[size][b]), store, history=f"{TENANT}/{name}")
        out.append((name, f"{size}:{b}"))
        if (k + 1) % 500 == 0:
            print(f"# {k + 1} histories imported ({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    return out


def open_times(db: str, histories: list[tuple[str, str]], questions: dict[str, list[str]], budget: int) -> list[str]:
    """Per size, histories never opened: first render, its floor (reading the rows), a warm render; every
    history is opened over one store (a connection made once, not counted in any open)."""
    rows = []
    store = fm.Memory(db).store  # one connection for every read, as a server's worker keeps one
    for size in SIZES:
        picked = [(n, b) for n, b in histories if b.startswith(size + ":")][:8]
        first, floor, warm, again, tokens = [], [], [], [], []
        for name, base in picked:
            hid = f"{TENANT}/{name}"
            t0 = time.perf_counter()
            notes = store.load_notes(hid, 0)
            store.load_links(hid, 0)
            floor.append(time.perf_counter() - t0)
            q = questions[base][0]
            t0 = time.perf_counter()
            mem = fm.Memory(history=hid, store=store)  # the store open already, as in a server's worker
            mem.render(q, budget)
            first.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            asked = questions[base]  # another question than the first (a LongMemEval haystack has one)
            mem.render(asked[1] if len(asked) > 1 else "What did we talk about last time?", budget)
            warm.append(time.perf_counter() - t0)
            t0 = time.perf_counter()  # opened before, by another view (another worker, a restart): its load kept
            fm.Memory(history=hid, store=store).render(q, budget)
            again.append(time.perf_counter() - t0)
            tokens.append(sum(n.raw_tokens for n in notes))
        if picked:
            f, fl, w, a = (1000 * statistics_median(x) for x in (first, floor, warm, again))
            rows.append(f"| {size} | {len(picked)} | {statistics_median(tokens):,.0f} | {f:.0f} ms ({f / fl:.1f}x) | "
                        f"{a:.0f} ms ({a / fl:.1f}x) | {fl:.0f} ms | {w:.1f} ms |")  # fmt: skip
    return rows


def statistics_median(values: list[float]) -> float:
    return float(np.median(values)) if values else float("nan")


async def load(url: str, key: str, names: list[str], bases: dict[str, str], questions: dict[str, list[str]],
               args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    """C clients sending renders by Zipf rank for ``duration`` seconds."""
    rng = np.random.default_rng(args.seed)
    ranks = 1.0 / np.arange(1, len(names) + 1) ** args.zipf
    order = list(names)
    random.Random(args.seed).shuffle(order)  # rank -> history: popularity not tied to size
    weights = ranks / ranks.sum()
    seen: set[str] = set()
    all_ms: list[float] = []
    first_ms: list[float] = []
    statuses: dict[str, int] = {}
    headers = {"Authorization": f"Bearer {key}"}
    async with poster(args.client, url, headers, connections=args.clients) as post:
        end = time.perf_counter() + args.duration

        async def one() -> None:
            while time.perf_counter() < end:
                name = order[int(rng.choice(len(order), p=weights))]
                first = name not in seen
                seen.add(name)
                q = random.choice(questions[bases[name]])
                start = time.perf_counter()
                try:
                    r = await post(f"/v1/histories/{name}/render", {"query": q, "budget": args.budget})
                    status = str(r.status_code)
                except TRANSPORT_ERRORS as exc:
                    status = type(exc).__name__
                statuses[status] = statuses.get(status, 0) + 1
                if status == "200":
                    ms = 1000 * (time.perf_counter() - start)
                    all_ms.append(ms)
                    if first:
                        first_ms.append(ms)

        began = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(args.clients)))
        seconds = time.perf_counter() - began
    return {"all": all_ms, "first": first_ms, "statuses": statuses, "seconds": seconds, "distinct": len(seen)}


def worker_rss(server: Server) -> list[float]:
    """RSS in MB of the ``serve`` process's children: its workers (and uvicorn's small helper processes;
    the embedding processes are the workers' children, not counted)."""
    out = subprocess.run(["ps", "-o", "pid=,ppid=,rss=", "-A"], capture_output=True, text=True, check=True).stdout
    table = [tuple(int(x) for x in line.split()) for line in out.splitlines() if line.strip()]
    return [rss / 1024 for pid, ppid, rss in table if ppid == server.proc.pid]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default="sqlite", choices=("sqlite", "postgres"))
    parser.add_argument("--data", default=str(default_path()), help="LoCoMo dev file")
    parser.add_argument("--lme", default=str(default_path().parent.parent / "longmemeval" / "longmemeval-s-dev.json"))
    parser.add_argument("--large-bases", type=int, default=3, help="LongMemEval haystacks among the bases")
    parser.add_argument("--histories", type=int, default=1000)
    parser.add_argument("--mix", default="70,25,5", help="percent small, medium, large")
    parser.add_argument("--max-open", type=int, default=64)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument(
        "--client", choices=CLIENTS, default="aiohttp", help="the generator's HTTP client (server_load.poster)"
    )
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--zipf", type=float, default=1.1)
    parser.add_argument("--budget", type=int, default=4096)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    mix = [float(x) for x in args.mix.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        db = str(work / "many.db") if args.store == "sqlite" else postgres_url()
        if args.store == "postgres":
            global TENANT
            TENANT = "bench" + uuid.uuid4().hex[:6]  # a fresh tenant on a shared server
        exports, questions = base_exports(Path(args.data), Path(args.lme), args.large_bases)
        start = time.perf_counter()
        histories = copies(db, args.histories, exports, mix, args.seed)
        print(f"# {args.store}: {args.histories} histories imported in {time.perf_counter() - start:.0f} s",
              file=sys.stderr)  # fmt: skip
        print(f"# {args.store}, {args.histories} histories (mix {args.mix}), budget {args.budget}")
        print("| size | histories opened | tokens (median) | first render, never opened (ratio to the floor) | "
              "first render, opened before (ratio) | floor: reading its rows | warm render |")  # fmt: skip
        print("|---|---:|---:|---|---|---|---|")
        for row in open_times(db, histories, questions, args.budget):
            print(row, flush=True)
        keys = work / "keys.json"
        key = KeyFile(str(keys)).add_key(TENANT)
        server = Server(db, keys, args.workers, ["--max-open", str(args.max_open)])
        try:
            server.wait()
            names = [n for n, _ in histories]
            bases = dict(histories)
            result = asyncio.run(load(server.url, key, names, bases, questions, args))
            rss = worker_rss(server)
        finally:
            server.stop()
    a, f = result["all"], result["first"]
    print(f"\n# the server: {args.workers} workers, --max-open {args.max_open}, {args.clients} {args.client} clients, "
          f"Zipf {args.zipf}, {args.duration:.0f} s")  # fmt: skip
    print("| histories | renders/s | render p50 / p99 (all) | first request to a history: share, p50 / p99 | "
          "distinct histories requested | worker RSS | statuses |")  # fmt: skip
    print("|---:|---:|---|---|---:|---|---|")
    print(f"| {args.histories:,} | {len(a) / result['seconds']:.0f} | {percentile(a, 0.5):.0f} / "
          f"{percentile(a, 0.99):.0f} ms | {len(f) / max(1, len(a)):.0%}, {percentile(f, 0.5):.0f} / "
          f"{percentile(f, 0.99):.0f} ms | {result['distinct']:,} | "
          f"{', '.join(f'{x:,.0f}' for x in rss)} MB | {json.dumps(result['statuses'], sort_keys=True)} |")  # fmt: skip


if __name__ == "__main__":
    main()
