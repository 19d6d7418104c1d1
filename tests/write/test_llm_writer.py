"""The LLM writer through a real local HTTP server: records, fields, limits, repair, fallback and
flags, accounting, merged records, batch and async writing, and a killed writer."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import flexamem as fm
from flexamem.cli.demo import DEMO_SESSIONS
from flexamem.llm import OpenAICompatible, RetryPolicy
from flexamem.write.llm_writer import LLMWriter
from tests.llm.fake_server import FakeOpenAI

FAST = RetryPolicy(max_retries=2, base_delay=0.01, max_delay=0.02)


@pytest.fixture()
def server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as s:
        yield s


def memory(server: FakeOpenAI, path: str | Path = ":memory:", **kw: object) -> fm.Memory:
    llm = OpenAICompatible(server.url, "fake", retry=FAST, timeout=5)
    return fm.Memory(path, writer=LLMWriter(llm), **kw)  # type: ignore[arg-type]


def add_demo(mem: fm.Memory, n: int = 3) -> None:
    for sid, date, turns in DEMO_SESSIONS[:n]:
        mem.add_session(turns, session_id=sid, date=date)


def test_records_and_fields_come_from_the_model(server: FakeOpenAI) -> None:
    mem = memory(server)
    add_demo(mem)
    notes = mem.notes()
    assert [n.writer for n in notes] == ["llm:fake"] * len(notes)
    assert not any(n.flagged for n in notes)
    first = notes[0]
    assert first.record == " ".join(first.raw.split()[:40])
    assert first.fields.tags == ("fake",) and first.fields.description.startswith("Written by the fake server")
    prompt = server.requests[0]["body"]["messages"][0]["content"]
    assert "conversation between" in prompt and "2 March 2024" in prompt and first.raw in prompt
    assert server.requests[0]["body"]["response_format"] == {"type": "json_object"}
    calls = mem.store.llm_calls(mem.history_id)
    assert [(c.purpose, c.seq) for c in calls] == [("record", i) for i in range(len(notes))]
    usage = mem.llm_usage()
    assert usage["calls"] == len(notes) and usage["prompt_tokens"] == sum(c.prompt_tokens for c in calls)


def test_limits_are_enforced_after_the_call(server: FakeOpenAI) -> None:
    server.faults.append("long")
    mem = memory(server)
    add_demo(mem, 1)
    note = mem.notes()[0]
    assert len(note.record.split()) == 80 and note.record.endswith("…")
    assert len(note.fields.description.split()) <= 30


def test_one_repair_then_fallback_with_a_flag(server: FakeOpenAI) -> None:
    server.faults.extend(["badjson"])  # first unit: repaired by the second call
    mem = memory(server)
    add_demo(mem, 1)
    assert not mem.notes()[0].flagged
    assert [c.purpose for c in mem.store.llm_calls(mem.history_id)] == ["record", "repair"]
    server.faults.extend(["badjson", "badjson"])  # second unit: the repair fails too
    sid, date, turns = DEMO_SESSIONS[1]
    mem.add_session(turns, session_id=sid, date=date)
    note = mem.notes()[1]
    assert note.flagged and note.writer == "rule" and "JSON" in (note.flag_reason or "")
    assert note.record == fm.RuleWriter().write_record(_draft(mem, 1)).text


def _draft(mem: fm.Memory, seq: int) -> fm.UnitDraft:
    n = mem.notes()[seq]
    return fm.UnitDraft(n.unit_id, n.kind, n.raw, n.blocks, n.session_id, n.date, n.steps)


@pytest.mark.parametrize("fault", ["500", "cut", "badbody", "429"])
def test_a_dead_model_loses_nothing(server: FakeOpenAI, fault: str, tmp_path: Path) -> None:
    server.always = fault
    mem = memory(server, tmp_path / "m.db")
    add_demo(mem)
    notes = fm.Memory(tmp_path / "m.db").notes()
    assert len(notes) == 3 and all(n.flagged and n.writer == "rule" for n in notes)
    assert all(n.flag_reason and "failed after 3 attempts" in n.flag_reason for n in notes)
    assert len(server.requests) == 3 * 3
    server.always = None  # the model comes back: rendering works, nothing is rewritten
    assert mem.render("What did Ana say?", 2048).tokens > 0
    assert [n.record for n in mem.notes()] == [n.record for n in notes]


def test_merged_records_by_the_model_are_cut_cached_and_accounted(server: FakeOpenAI, tmp_path: Path) -> None:
    mem = memory(server, tmp_path / "m.db")
    for i in range(16):
        text = f"Day {i}: we met Bruno in Porto and paid {100 + i} euros for the tickets to the museum. " * 3
        mem.add_session([{"speaker": "Ana", "text": text}])
    no_pass = fm.RenderOptions(pass_through=False)
    mem.render("Where did we meet Bruno?", 600, options=no_pass)
    merged = mem.store.load_merged(mem.history_id)
    assert merged and all(m.writer == "llm:fake" and not m.flagged for m in merged)
    assert all(len(m.text.split()) <= 150 for m in merged)
    merges = [c for c in mem.store.llm_calls(mem.history_id) if c.purpose == "merge"]
    assert len(merges) == len(merged)
    before = len(server.requests)
    again = memory(server, tmp_path / "m.db")
    again.render("Where did we meet Bruno?", 600, options=no_pass)
    assert len(server.requests) == before  # stored merged records are reused, not rewritten


def test_batch_writing_is_parallel_with_progress(server: FakeOpenAI) -> None:
    server.delay_s = 0.1
    llm = OpenAICompatible(server.url, "fake", retry=FAST, concurrency=3)
    mem = fm.Memory(writer=LLMWriter(llm))
    seen: list[tuple[int, int]] = []
    sessions = [{"turns": turns, "session_id": sid, "date": date} for sid, date, turns in DEMO_SESSIONS] * 1
    ids = mem.add_sessions(sessions, progress=lambda done, total: seen.append((done, total)))
    total = sum(len(x) for x in ids)
    # each unit counts once when its record is written and once when it is stored
    assert seen[-1] == (2 * total, 2 * total) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert len(seen) == total + len(sessions)
    assert 1 < server.max_in_flight <= 3
    assert [n.session_id for n in mem.notes()] == [
        s for s, x in zip([s["session_id"] for s in sessions], ids, strict=True) for _ in x
    ]
    with pytest.raises(fm.InvalidInputError):  # a bad session stops the batch before any call
        mem.add_sessions([{"turns": [{"speaker": "A", "text": "new"}], "session_id": "new"}, {"session_id": "x"}])
    assert len(mem.notes()) == total


def test_async_api_writes_the_same_notes(server: FakeOpenAI) -> None:
    sync_mem, async_mem = memory(server), memory(server)
    add_demo(sync_mem)

    async def run() -> None:
        for sid, date, turns in DEMO_SESSIONS[:3]:
            await async_mem.aadd_session(turns, session_id=sid, date=date)

    asyncio.run(run())
    a, b = sync_mem.notes(), async_mem.notes()
    assert [(n.unit_id, n.record, n.fields, n.writer, n.links) for n in a] == [
        (n.unit_id, n.record, n.fields, n.writer, n.links) for n in b
    ]
    assert all(np.allclose(x.embedding, y.embedding) for x, y in zip(a, b, strict=True))
    assert asyncio.run(async_mem.arender("Ana", 2048)).text == sync_mem.render("Ana", 2048).text


def test_async_agent_steps_match_sync_steps(server: FakeOpenAI) -> None:
    def steps() -> list[tuple[str, str]]:
        return [
            (f"lookup(order_id='#W{i:04d}')", f'{{"order": "#W{i:04d}", "total": {i * 37}.5}}' * 6) for i in range(25)
        ]

    sync_agent = memory(server).agent(task="Refund order #W0007", budget=2048)
    for action, obs in steps():
        sync_agent.step(action, obs)
    async_agent = memory(server).agent(task="Refund order #W0007", budget=2048)

    async def run() -> fm.AgentContext:
        for action, obs in steps():
            await async_agent.astep(action, obs)
        return await async_agent.acontext()

    ctx = asyncio.run(run())
    assert [n.record for n in sync_agent.core.notes()] == [n.record for n in async_agent.core.notes()]
    assert len(async_agent.core.notes()) > 2 and async_agent.core.notes()[0].writer == "llm:fake"
    assert ctx.messages == sync_agent.context().messages


KILLED = """
import sys, flexamem as fm
from flexamem.cli.demo import DEMO_SESSIONS
from flexamem.llm import OpenAICompatible
from flexamem.write.llm_writer import LLMWriter
mem = fm.Memory(sys.argv[1], writer=LLMWriter(OpenAICompatible(sys.argv[2], "fake", timeout=60)))
sid, date, turns = DEMO_SESSIONS[0]
mem.add_session(turns, session_id=sid, date=date)
print("first done", flush=True)
sys.stdin.readline()
sid, date, turns = DEMO_SESSIONS[1]
mem.add_session(turns, session_id=sid, date=date)
"""


def test_a_killed_writer_leaves_no_half_written_unit(server: FakeOpenAI, tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(db), server.url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "first done"
    first = len(server.requests)
    server.always, server.slow_s = "slow", 30.0
    proc.stdin.write("go\n")
    proc.stdin.flush()
    deadline = time.time() + 30
    while len(server.requests) == first and time.time() < deadline:
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    server.always = None
    mem = memory(server, db)
    assert {n.session_id for n in mem.notes()} == {"s1"}
    sid, date, turns = DEMO_SESSIONS[1]
    mem.add_session(turns, session_id=sid, date=date)  # the same session lands whole afterwards
    assert {n.session_id for n in mem.notes()} == {"s1", "s2"}


def test_renders_do_not_wait_for_the_model(server: FakeOpenAI) -> None:
    import threading

    mem = memory(server)
    add_demo(mem, 1)
    server.delay_s = 1.5  # every model call now takes 1.5 s
    sid, date, turns = DEMO_SESSIONS[1]
    writer = threading.Thread(target=mem.add_session, args=(turns,), kwargs={"session_id": sid, "date": date})
    writer.start()
    wait_for(lambda: server.in_flight > 0)
    mem.render("Lisbon flight", 2048)  # the store lock is free while the model writes
    assert writer.is_alive()  # the render finished while the model was still writing the record
    writer.join()
    assert len(mem.notes()) == 2


def wait_for(condition: Callable[[], bool], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def test_no_lock_is_held_while_a_model_writes_a_merged_record(server: FakeOpenAI, tmp_path: Path) -> None:
    """A render that needs a merged record from a slow endpoint does not stall the other renders and
    writes of the same history: the model is called with the history's lock released."""
    import threading

    mem = memory(server, tmp_path / "slow.db")
    for i in range(16):
        text = f"Day {i}: we met Bruno in Porto and paid {100 + i} euros for the tickets to the museum. " * 3
        mem.add_session([{"speaker": "Ana", "text": text}])
    server.delay_s = 1.0  # every model call now takes a second
    no_pass = fm.RenderOptions(pass_through=False)
    result: list[fm.Rendering] = []
    slow = threading.Thread(
        target=lambda: result.append(mem.render("Where did we meet Bruno?", 600, mode="units", options=no_pass))
    )
    slow.start()
    wait_for(lambda: server.in_flight > 0)  # the slow render is waiting for its merged record
    quick = mem.render("museum tickets", 60_000)  # the same Memory, the same history: no merge needed
    assert "Bruno" in quick.text and len(mem.notes()) == 16
    rule_writer = fm.Memory(tmp_path / "slow.db")  # a write through another object, same history
    rule_writer.add_session([{"speaker": "Ana", "text": "A new day in Braga."}], session_id="braga")
    assert len(mem) == 17  # this Memory caught up with the write: its lock was free
    assert slow.is_alive()  # all of that happened while the model was still writing
    slow.join()
    (r,) = result
    assert r.merges_written > 0 and "merged]" in r.text
    merged = mem.store.load_merged(mem.history_id)
    assert merged and all(m.writer == "llm:fake" for m in merged)
