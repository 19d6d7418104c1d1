"""Many processes and threads opening the same new SQLite files at once: each file is migrated once and
every open succeeds (issue 21: "table histories already exists" in a third of such opens)."""

from __future__ import annotations

import multiprocessing
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from flexamem.store.schema import SCHEMA_VERSION
from flexamem.store.sqlite import SQLiteStore


def open_all(paths: list[str], start_at: float) -> list[str]:
    """Open (and write to) every file, starting at the same moment as the other workers."""
    time.sleep(max(0.0, start_at - time.time()))
    failures = []
    for p in paths:
        try:
            store = SQLiteStore(p)
            store.ensure_history("h", "conversation")
            store.close()
        except Exception as exc:  # every failure is counted, whatever its type
            failures.append(f"{p}: {exc!r}")
    return failures


def check(paths: list[str]) -> None:
    for p in paths:
        store = SQLiteStore(p)
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.histories() == [("h", "conversation")]
        store.close()


def test_running_processes_open_new_files_together(tmp_path: Path) -> None:
    paths = [str(tmp_path / f"p{i}.db") for i in range(40)]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(4, mp_context=ctx) as pool:
        list(pool.map(time.sleep, [0.0] * 4))  # the workers are up before the clock starts
        start = time.time() + 0.5
        results = list(pool.map(open_all, [paths] * 4, [start] * 4))
    assert [f for r in results for f in r] == []
    check(paths)


def test_threads_open_new_files_together(tmp_path: Path) -> None:
    paths = [str(tmp_path / f"t{i}.db") for i in range(30)]
    start = time.time() + 0.2
    results: list[list[str]] = []
    threads = [threading.Thread(target=lambda: results.append(open_all(paths, start))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 8 and [f for r in results for f in r] == []
    check(paths)
