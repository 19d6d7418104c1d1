"""A soak of deletion: several processes write, render, step agents and drop the same histories for a
bounded time; afterwards every history left verifies, is numbered without gaps, and renders within
its budget (issue 21). On SQLite and on a real PostgreSQL server (``store_path``)."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import time
import traceback
from typing import Any

import pytest

import flexamem as fm

pytestmark = pytest.mark.integration

SECONDS = float(os.environ.get("FLEXAMEM_SOAK_SECONDS", "20"))
WORKERS = 3
HISTORIES = 3


def worker(path: str, prefix: str, k: int, seconds: float, out: Any) -> None:
    """One process's mixed load until the deadline; reports its counts and any unexpected error."""
    rng = random.Random(k)
    counts = {"writes": 0, "renders": 0, "drops": 0, "steps": 0, "refused": 0}
    bad: list[str] = []
    mems = [fm.Memory(path, history=f"{prefix}-{h}") for h in range(HISTORIES)]
    agents: dict[int, fm.AgentSession] = {}
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        h = rng.randrange(HISTORIES)
        mem, roll, i = mems[h], rng.random(), i + 1
        try:
            if roll < 0.45:
                mem.add_session([{"speaker": f"W{k}", "text": f"worker {k} note {i}: crate {i * 7} to dock {h}"}])
                counts["writes"] += 1
            elif roll < 0.8:
                r = mem.render(
                    f"crate {i * 7 - 7}",
                    budget=rng.choice([200, 600, 2000]),
                    mode=rng.choice(["auto", "units", "pieces"]),
                )
                assert r.tokens <= r.allowance
                counts["renders"] += 1
            elif roll < 0.95:
                agent = agents.get(h)
                if agent is None:
                    agent = agents[h] = mem.agent(task=f"task {k}", budget=500, session_id=f"a{k}")
                agent.step(action=f"look {i}", observation=f"crate {i} " * 15)
                ctx = agent.context()
                assert ctx.tokens <= ctx.ceiling
                counts["steps"] += 1
            else:
                mem.drop()
                counts["drops"] += 1
        except fm.HistoryDroppedError:
            agents.pop(h, None)  # the session was deleted: start another next time
            counts["refused"] += 1
        except fm.ConcurrentWriteError:
            counts["refused"] += 1
        except Exception:  # anything else is a failure of the promise
            bad.append(traceback.format_exc(limit=-4))
    out.put((k, counts, bad))


@pytest.fixture(autouse=True)
def one_blas_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "FLEXAMEM_THREADS"):
        monkeypatch.setenv(var, "1")


def test_writes_renders_and_drops_from_many_processes(store_path: str, tenant: str) -> None:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(store_path, tenant, k, SECONDS, out)) for k in range(WORKERS)]
    for p in procs:
        p.start()
    results = [out.get(timeout=SECONDS + 180) for _ in procs]
    for p in procs:
        p.join(60)
    totals = {key: sum(r[1][key] for r in results) for key in results[0][1]}
    print(f"soak {SECONDS:.0f}s x {WORKERS} processes: {totals}")
    assert [b for r in results for b in r[2]] == []
    assert totals["writes"] > 10 and totals["renders"] > 10 and totals["drops"] > 0
    store = fm.Memory(store_path, history=f"{tenant}-0").store
    left = [h for h, _ in store.histories() if h.startswith(tenant)]
    for hid in left:
        if "/agent:" in hid:  # an agent session: checked as a store history (no Memory takes its name)
            assert store.verify(hid) == [], hid
            seqs = [n.seq for n in store.load_notes(hid)]
            assert seqs == list(range(len(seqs))), hid
            continue
        mem = fm.Memory(store_path, history=hid)
        assert mem.verify() == [], hid
        assert [n.seq for n in mem.notes()] == list(range(len(mem))), hid
        r = mem.render("crate", budget=600)
        assert r.tokens <= r.allowance
