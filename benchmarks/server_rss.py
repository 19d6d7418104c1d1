"""A server worker's memory with 1,000 histories touched (prints a table; figures, not a test).

Writes H histories of S LoCoMo dev sessions each into one SQLite store (once), then, for each
``--max-open`` setting, a fresh process plays one server worker: the app's own history cache
(:class:`flexamem.server.app.Memories`) opens every history in turn and renders from it, and the
process's resident memory (VmRSS) is read every 100 histories.

    python benchmarks/server_rss.py [--histories 1000] [--sessions 2] [--max-open 32,128,1000]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import flexamem as fm
from flexamem_bench.conversation_data import default_path
from flexamem_bench.datasets import locomo_histories


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def worker(db: str, histories: int, max_open: int) -> None:
    """One process: the worker's history cache touching every history; prints JSON figures."""
    from flexamem.server.app import Memories

    memories = Memories(db, max_open=max_open)
    memories.get("t", "h0").render("warm up", 1024)  # the embedder and tokenizer loaded
    start, marks = rss_mb(), []
    began = time.perf_counter()
    for i in range(histories):
        memories.get("t", f"h{i}").render("What did they talk about?", 1024)
        if (i + 1) % 100 == 0:
            marks.append(round(rss_mb()))
    print(json.dumps({"start": round(start), "marks": marks, "open": memories.open_count,
                      "seconds": round(time.perf_counter() - began, 1)}))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--histories", type=int, default=1000)
    parser.add_argument("--sessions", type=int, default=2)
    parser.add_argument("--max-open", default="32,128,1000")
    parser.add_argument("--data", default=str(default_path()))
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), int(args.worker[2]))
        return
    sessions = [[{"speaker": t["speaker"], "text": t["text"]} for t in s.turns]
                for h in locomo_histories(args.data) for s in h.sessions]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "rss.db")
        began = time.perf_counter()
        for i in range(args.histories):
            mem = fm.Memory(db, history=f"t/h{i}")
            picked = random.Random(i).sample(sessions, args.sessions)
            mem.add_sessions([{"turns": turns, "session_id": f"s{k}"} for k, turns in enumerate(picked)])
            mem.close()
        size = Path(db).stat().st_size / 2**20
        print(f"# {args.histories} histories x {args.sessions} LoCoMo sessions ({size:.0f} MB store) written in "
              f"{time.perf_counter() - began:.0f} s")  # fmt: skip
        print("| max_open | RSS before | RSS after 100 / 500 / all histories | open at the end | seconds |")
        print("|---:|---:|---|---:|---:|")
        for max_open in (int(x) for x in args.max_open.split(",")):
            out = subprocess.run([sys.executable, __file__, "--worker", db, str(args.histories), str(max_open)],
                                 capture_output=True, text=True, check=True)  # fmt: skip
            r = json.loads(out.stdout.strip().splitlines()[-1])
            m = r["marks"]
            mid = m[min(4, len(m) - 1)] if m else 0
            print(f"| {max_open} | {r['start']} MB | {m[0] if m else 0} / {mid} / {m[-1] if m else 0} MB | "
                  f"{r['open']} | {r['seconds']} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
