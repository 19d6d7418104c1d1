"""What serving a render over HTTP costs beyond the render itself (prints a table; figures, not a test).

Writes H LoCoMo dev conversations into a SQLite store, then times the same warm renders two ways:

- **in this process** (the floor): ``Memory.render`` for each question, its CPU time (the query's forward
  plus the library's render), after one pass that warms the views;
- **through ``flexamem serve --workers 1``**: one client sends the same renders one after the other over
  one kept-alive connection; the server's CPU per request is read from ``/proc/PID/stat`` (its one
  serving process; the embedding processes take no part in a render) before and after the timed pass.

The difference is what the HTTP path adds per render (the event loop, HTTP parsing, the middleware,
validation and JSON, the hop to a worker thread and back). Rounds alternate the two ways.

``--store postgres`` writes the histories into the local PostgreSQL of the test suite (as server_load.py
takes it) under a fresh tenant; the CPU its processes spend over each pass (every ``postgres`` process on
the machine, read from /proc) is shown beside each way, since there a render's reads cost the database's
processes too.

    python benchmarks/http_overhead.py [--store postgres] [--histories 4] [--rounds 3] [--budget 4096]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

# a sibling script (as many_histories.py takes it): the server as a user starts it, the test suite's PostgreSQL
from server_load import Server, postgres_url

import flexamem as fm
from flexamem.server import KeyFile
from flexamem_bench.conversation_data import default_path
from flexamem_bench.datasets import locomo_histories

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` (its own threads, not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def database_cpu() -> float:
    """CPU seconds of every ``postgres`` process now running (0 with none: SQLite)."""
    total = 0.0
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "comm").read_text().strip() == "postgres":
                total += cpu_seconds(int(proc.name))
        except OSError:  # gone meanwhile
            continue
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--data", default=str(default_path()), help="LoCoMo dev file")
    parser.add_argument("--histories", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=int, default=4096)
    parser.add_argument("--serve-args", default="", help="more flexamem serve options")
    args = parser.parse_args()
    os.environ.setdefault("FLEXAMEM_THREADS", "1")  # as the server embeds (its default: one thread)

    work = Path(tempfile.mkdtemp(prefix="flexamem-http-"))
    db = str(work / "h.db") if args.store == "sqlite" else postgres_url()
    keys, tenant = work / "keys.json", "http" + uuid.uuid4().hex[:6]  # a fresh tenant on a shared PostgreSQL
    key = KeyFile(str(keys)).add_key(tenant)
    data = locomo_histories(args.data)[: args.histories]
    asks: list[tuple[str, str]] = []
    for i, h in enumerate(data):
        mem = fm.Memory(db, history=f"{tenant}/h{i}")
        turns = [[{"speaker": t["speaker"], "text": t["text"]} for t in s.turns] for s in h.sessions]
        mem.add_sessions([{"turns": t} for t in turns])
        mem.close()
        asks += [(f"h{i}", q.question) for q in h.questions]
    print(f"# {args.store}: {len(data)} histories, {len(asks)} questions, budget {args.budget}", file=sys.stderr)

    mems = {f"h{i}": fm.Memory(db, history=f"{tenant}/h{i}") for i in range(len(data))}
    for name, q in asks:  # warm: views built, counts cached
        mems[name].render(q, args.budget)
    server = Server(db, keys, 1, args.serve_args.split())
    rows: list[tuple[float, float, float, float, float]] = []
    try:
        server.wait()
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:

            def over_http() -> None:
                for name, q in asks:
                    r = client.post(f"/v1/histories/{name}/render", json={"query": q, "budget": args.budget})
                    r.raise_for_status()

            over_http()  # warm the server's views
            for _ in range(args.rounds):
                start, db_start = time.process_time(), database_cpu()
                for name, q in asks:
                    mems[name].render(q, args.budget)
                floor = (time.process_time() - start) / len(asks)
                floor_db = (database_cpu() - db_start) / len(asks)
                before, db_start, wall = cpu_seconds(server.proc.pid), database_cpu(), time.perf_counter()
                over_http()
                wall = (time.perf_counter() - wall) / len(asks)
                served = (cpu_seconds(server.proc.pid) - before) / len(asks)
                rows.append((floor, floor_db, served, (database_cpu() - db_start) / len(asks), wall))
    finally:
        server.stop()
        for m in mems.values():
            m.close()
    print("| round | render in this process, CPU (database) | served over HTTP: server CPU (database) "
          "| wall per request | HTTP adds |")  # fmt: skip
    print("|---|---:|---:|---:|---:|")
    for i, (floor, floor_db, served, served_db, wall) in enumerate(rows, 1):
        print(f"| {i} | {1000 * floor:.2f} ms ({1000 * floor_db:.2f}) | "
              f"{1000 * served:.2f} ms ({1000 * served_db:.2f}) | {1000 * wall:.2f} ms | "
              f"{1000 * (served - floor):.2f} ms ({served / floor:.2f}x) |")  # fmt: skip
    f, s = statistics.median(r[0] for r in rows), statistics.median(r[2] for r in rows)
    fd, sd = statistics.median(r[1] for r in rows), statistics.median(r[3] for r in rows)
    print(f"| median | {1000 * f:.2f} ms ({1000 * fd:.2f}) | {1000 * s:.2f} ms ({1000 * sd:.2f}) | "
          f"| {1000 * (s - f):.2f} ms ({s / f:.2f}x) |")  # fmt: skip


if __name__ == "__main__":
    main()
