"""Write a small store with FlexA-Mem as it was at a past commit: an upgrade fixture (issue 48).

    .venv/bin/python scripts/make_store_fixtures.py 6c61580                  # a SQLite store
    .venv/bin/python scripts/make_store_fixtures.py 6b149de --postgres URL   # a PostgreSQL dump too

The commit is checked out in a throwaway worktree (``/tmp/wt-<rev>``, removed afterwards) and run with
this checkout's virtualenv python (``PYTHONPATH=/tmp/wt-<rev>/src``). With its public API it writes one
conversation history (``conv``, three sessions) and, if the commit had agent sessions, two of them
(``a1``, ``a2``) started and stepped from that history's memory, with a context after every step
so that their memory starts and their state is stored. Into ``tests/fixtures/stores/`` go:

- ``v<schema>-<rev>.db``: the SQLite file (VACUUMed into 1 KB pages, journal mode DELETE so the file stands alone);
- with ``--postgres URL`` (a server where the URL's user may create databases) also
  ``pg-v<schema>-<rev>.sql``: a ``pg_dump --inserts`` of a database the commit wrote (``<schema>`` in
  the shared numbering of ``flexamem/store/schema.py``);
- beside each, ``<name>.json``: what was written (every note's unit id and raw text per stored history,
  each agent session's stored history and its steps, the schema version, the number of state rows, a
  render's text at a fixed query and budget as that commit rendered it, and the merged records a
  tighter render stored).

tests/store/test_upgrade.py opens each fixture with today's code and checks it against its JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "stores"
LEGACY_POSTGRES = {1: 3, 2: 4, 3: 5}  # PostgreSQL's own numbering before the shared list (store/schema.py)

HISTORY = "conv"
SESSIONS = [
    ("s1", "8 May 2023", [
        ("Ann", "I adopted a cat named Miso from the Riverside shelter last week."),
        ("Bob", "What colour is Miso?"),
        ("Ann", "Orange, with one white paw. She sleeps on the piano all day."),
    ]),
    ("s2", "14 June 2023", [
        ("Bob", "My sister Carla moved to Lisbon for a job at the aquarium."),
        ("Ann", "Lisbon! Did she find a flat near the river?"),
        ("Bob", "Yes, in Alfama; the rent is 900 euros a month."),
    ]),
    ("s3", "2 July 2023", [
        ("Ann", "I started learning the cello. My teacher is called Mr Okafor."),
        ("Bob", "How often are the lessons?"),
        ("Ann", "Every Thursday at six, at the music school on Harbour Street."),
    ]),
]  # fmt: skip
AGENTS = [  # (session id, task, budget, steps): enough steps that units leave the window and memory starts
    ("a1", "Find the booking reference of the Lisbon hotel", 600, 9),
    ("a2", "Count the cello lessons booked in July", 800, 10),
]
QUERY, RENDER_BUDGET, RENDER_MODE = "Where did Carla move, and what is the rent?", 300, "pieces"
TIGHT_BUDGET = 120  # a render of the three notes at this budget merges two of their records


def step_text(session: str, i: int) -> tuple[str, str]:
    """Step ``i`` of an agent session (the same at every commit)."""
    if session == "a1":
        return (f"search_bookings(page={i})",
                f"page {i}: " + ", ".join(f"booking B-{i}{j} (city {j})" for j in range(12)))  # fmt: skip
    return (f"list_lessons(week={i})",
            f"week {i}: " + ", ".join(f"lesson L{i}{j} room {j} teacher Okafor" for j in range(10)))  # fmt: skip


# Run by the old code (PYTHONPATH is the worktree's src): writes the store, prints what it did as JSON.
WRITER = r"""
import json, sys
import flexamem as fm
spec = json.loads(sys.argv[1])
mem = fm.Memory(spec["path"], history=spec["history"])
out = {"units": {}, "agents": {}, "render": None}
for sid, date, turns in spec["sessions"]:
    out["units"][sid] = mem.add_session([{"speaker": s, "text": t} for s, t in turns], session_id=sid, date=date)
if hasattr(mem, "agent"):
    for sid, task, budget, steps in spec["agents"]:
        agent = mem.agent(task=task, budget=budget, session_id=sid)
        for action, observation in steps:
            agent.step(action=action, observation=observation)
            agent.context()
        out["agents"][sid] = {"task": task, "budget": budget, "steps": len(agent.steps)}
if hasattr(mem, "render"):
    q, budget, mode = spec["render"]
    out["render"] = {"query": q, "budget": budget, "mode": mode, "text": mem.render(q, budget, mode=mode).text}
    mem.render(q, spec["tight"], mode="units")  # a timeline that must merge: a merged record is stored
mem.close()
print(json.dumps(out))
"""


def run_commit(rev: str, path: str) -> dict[str, Any]:
    """Check ``rev`` out in /tmp/wt-<rev>, run WRITER with it on ``path``, remove the worktree."""
    worktree = Path(f"/tmp/wt-{rev}")
    if worktree.exists():
        raise SystemExit(f"{worktree} exists: remove it (git worktree remove --force {worktree})")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), rev], check=True,
                   capture_output=True)  # fmt: skip
    try:
        spec = {
            "path": path,
            "history": HISTORY,
            "sessions": SESSIONS,
            "agents": [(sid, task, budget, [step_text(sid, i) for i in range(n)]) for sid, task, budget, n in AGENTS],
            "render": (QUERY, RENDER_BUDGET, RENDER_MODE),
            "tight": TIGHT_BUDGET,
        }
        env = {**os.environ, "PYTHONPATH": str(worktree / "src")}
        done = subprocess.run([sys.executable, "-c", WRITER, json.dumps(spec)], env=env, check=True,
                              capture_output=True, text=True)  # fmt: skip
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)], check=True)


def manifest(rev: str, written: dict[str, Any], rows: Any, schema: dict[str, int], state_rows: int) -> dict[str, Any]:
    """What the fixture holds, from the rows the old code stored (``rows(sql)`` -> list of tuples)."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", rev], check=True, capture_output=True, text=True)
    histories: dict[str, Any] = {}
    for hid, kind in rows("SELECT id, kind FROM histories ORDER BY created_at, id"):
        notes = rows(f"SELECT unit_id, raw FROM notes WHERE history_id = '{hid}' ORDER BY seq")
        merged = rows(f"SELECT first_seq, last_seq, level, text FROM merged WHERE history_id = '{hid}'"
                      " ORDER BY first_seq, level")  # fmt: skip
        histories[hid] = {"kind": kind, "notes": [{"unit_id": u, "raw": r} for u, r in notes],
                          "merged": [list(m) for m in merged]}  # fmt: skip
    agents = {}
    for sid, info in written["agents"].items():
        hid = next(h for h in histories if h.endswith(f"agent:{sid}"))
        agents[sid] = {**info, "stored_as": hid, "actions": [step_text(sid, i)[0] for i in range(info["steps"])]}
    return {
        "commit": commit.stdout.strip(),
        "schema": schema,
        "history": HISTORY,
        "sessions": {sid: {"date": date, "unit_ids": written["units"][sid]} for sid, date, _ in SESSIONS},
        "histories": histories,
        "agents": agents,
        "state_rows": state_rows,
        "render": written["render"],
    }


def sqlite_fixture(rev: str) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.db"
        written = run_commit(rev, str(path))
        db = sqlite3.connect(path)
        db.execute("PRAGMA journal_mode = DELETE")
        db.execute("PRAGMA page_size = 1024")  # small tables: the file's size is mostly their first pages
        db.execute("VACUUM")
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        info = manifest(rev, written, lambda sql: db.execute(sql).fetchall(), {"sqlite": version},
                        db.execute("SELECT count(*) FROM state").fetchone()[0])  # fmt: skip
        db.close()
        target = OUT / f"v{version}-{rev}.db"
        shutil.copyfile(path, target)
    target.with_suffix(".json").write_text(json.dumps(info, indent=1, ensure_ascii=False) + "\n")
    return target


def postgres_fixture(rev: str, url: str) -> Path:
    import psycopg

    name = f"fixture_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    db_url = url.rsplit("/", 1)[0] + "/" + name
    try:
        written = run_commit(rev, db_url)
        with psycopg.connect(db_url) as conn:

            def rows(sql: str) -> list[tuple[Any, ...]]:
                return conn.execute(sql).fetchall()

            def version(table: str) -> int | None:
                found = rows(f"SELECT to_regclass('{table}') IS NOT NULL")[0][0]
                got = rows(f"SELECT version FROM {table}") if found else []
                return int(got[0][0]) if got else None

            own, shared = version("flexamem_schema"), version("flexamem_migrations")
            schema = {"postgres": shared if shared is not None else LEGACY_POSTGRES[own or 0]}
            if own is not None:
                schema["postgres_own_numbering"] = own
            info = manifest(rev, written, rows, schema, rows("SELECT count(*) FROM state")[0][0])
        dump = subprocess.run(["pg_dump", "--inserts", "--no-owner", "--no-privileges", "--no-comments", db_url],
                              check=True, capture_output=True, text=True).stdout  # fmt: skip
        lines = [line for line in dump.splitlines() if not line.startswith("\\")]  # psql meta-commands
        target = OUT / f"pg-v{schema['postgres']}-{rev}.sql"
        target.write_text("\n".join(lines) + "\n")
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    target.with_suffix(".json").write_text(json.dumps(info, indent=1, ensure_ascii=False) + "\n")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commit", help="the commit whose code writes the store (abbreviated as given)")
    parser.add_argument("--postgres", metavar="URL", help="also (or only, with --no-sqlite) a PostgreSQL dump")
    parser.add_argument("--no-sqlite", action="store_true", help="write no SQLite fixture")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    made = [] if args.no_sqlite else [sqlite_fixture(args.commit)]
    if args.postgres:
        made.append(postgres_fixture(args.commit, args.postgres))
    for path in made:
        print(f"{path.relative_to(ROOT)}: {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
